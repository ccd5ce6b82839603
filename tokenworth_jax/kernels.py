"""The Laplacian kernel with a diagonal metric, K_M(a,b) = exp(-gamma ||a-b||_M).

Following tinygp, the kernel evaluates one pair and is vmapped into matrices. The
metric norm is zero-safe (double ``where``), so gradients through it are never NaN.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def safe_sqrt(r2: jax.Array) -> jax.Array:
    """sqrt(r2) with value and gradient 0 at r2 == 0 (no NaN from d sqrt / dr at 0)."""
    positive = r2 > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, r2, jnp.ones_like(r2))), jnp.zeros_like(r2))


def metric_sqdist(a: jax.Array, b: jax.Array, metric: jax.Array) -> jax.Array:
    """(a-b)^T diag(metric) (a-b) for one pair of (F,) vectors, from exact differences."""
    diff = a - b
    return jnp.sum(metric * diff * diff)


def laplacian(a: jax.Array, b: jax.Array, metric: jax.Array, gamma: jax.Array) -> jax.Array:
    """K_M(a, b) for one pair."""
    return jnp.exp(-gamma * safe_sqrt(metric_sqdist(a, b, metric)))


def kernel_matrix(A: jax.Array, B: jax.Array, metric: jax.Array, gamma: jax.Array) -> jax.Array:
    """(n, m) kernel matrix from exact pairwise differences (diagonal exactly 1 for A is B)."""
    row = jax.vmap(laplacian, in_axes=(None, 0, None, None))
    return jax.vmap(row, in_axes=(0, None, None, None))(A, B, metric, gamma)


def sqdist_gram(A: jax.Array, B: jax.Array, metric: jax.Array, center: jax.Array) -> jax.Array:
    """(n, m) metric squared distances through one matmul, for large query batches.

    ||a-b||^2_M = |a|^2_M + |b|^2_M - 2 a^T M b, computed after subtracting ``center`` from
    both sides (the support mean) to keep the cancellation error small, and clamped at 0.
    Used for predictions over many pairs (selection, worth); the kernel matrix and the
    AGOP gradients use exact differences, where coincident points must give exactly 0.
    """
    A = A - center[None, :]
    B = B - center[None, :]
    a2 = jnp.sum(metric[None, :] * A * A, axis=-1)
    b2 = jnp.sum(metric[None, :] * B * B, axis=-1)
    cross = (A * metric[None, :]) @ B.T
    return jnp.maximum(a2[:, None] + b2[None, :] - 2 * cross, jnp.zeros((), A.dtype))
