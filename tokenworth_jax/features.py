"""Pair features: phi(q,m) for the base scorer and z(q,m) for the residual RFM (spec §2)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp

if TYPE_CHECKING:  # state.py imports this module (through the worth cache)
    from .state import Bank


class MemoryStats(NamedTuple):
    """Per-memory statistics as the feature maps need them, at step t."""

    u: jax.Array
    rel: jax.Array
    rec: jax.Array
    freq: jax.Array


def memory_stats(bank: Bank, t: jax.Array, kappa: jax.Array) -> MemoryStats:
    """rel = (h+1)/(h+d+2), rec = exp(-kappa (t - last)), freq = c / max(1, t - tau + 1)."""
    f = bank.u.dtype
    age = (t - bank.last).astype(f)
    span = jnp.maximum(1, t - bank.tau + 1).astype(f)
    return MemoryStats(
        u=bank.u,
        rel=(bank.h + 1) / (bank.h + bank.d + 2),
        rec=jnp.exp(-jnp.asarray(kappa, f) * age),
        freq=bank.c / span,
    )


def new_memory_stats(t: jax.Array, u_init: jax.Array, dtype: jnp.dtype) -> MemoryStats:
    """A candidate's statistics: u = u_init, h = d = c = 0, last = tau = t."""
    del t  # rec = exp(0) and freq = 0 whatever t is
    one = jnp.ones((), dtype)
    return MemoryStats(u=jnp.asarray(u_init, dtype), rel=one / 2, rec=one, freq=jnp.zeros((), dtype))


def base_features(cos: jax.Array, stats: MemoryStats) -> jax.Array:
    """phi = [cos, u, rel, rec]; inputs broadcast, output adds a trailing axis of 4."""
    parts = jnp.broadcast_arrays(cos, stats.u, stats.rel, stats.rec)
    return jnp.stack(parts, axis=-1)


def residual_features(abs_diff: jax.Array, cos: jax.Array, stats: MemoryStats) -> jax.Array:
    """z = [|e_q - e_m| (D), cos, u, rel, rec, freq] -> (..., D+5)."""
    tail = jnp.stack(jnp.broadcast_arrays(cos, stats.u, stats.rel, stats.rec, stats.freq), axis=-1)
    return jnp.concatenate([abs_diff, jnp.broadcast_to(tail, abs_diff.shape[:-1] + tail.shape[-1:])], axis=-1)
