"""Diagonal AGOP metric update: M <- NormClip((1 - beta) M + beta diag(mean grad grad^T))."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def agop_diagonal(grads: jax.Array, valid: jax.Array) -> jax.Array:
    """G_k = mean over valid rows of grad_k^2, for grads of shape (n, F)."""
    sq = jnp.where(valid[:, None], grads * grads, jnp.zeros_like(grads))
    count = jnp.maximum(jnp.sum(valid), 1).astype(grads.dtype)
    return jnp.sum(sq, axis=0) / count


def norm_clip(v: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """Clip each entry to [lo, hi], then divide by the mean so the mean is 1."""
    clipped = jnp.clip(v, lo, hi)
    return clipped / jnp.mean(clipped)


def update_metric(metric: jax.Array, G: jax.Array, beta_m: jax.Array, m_min: jax.Array, m_max: jax.Array) -> jax.Array:
    return norm_clip((1 - beta_m) * metric + beta_m * G, m_min, m_max)
