"""Pair features: phi(q,m) for the base scorer and z(q,m) for the residual RFM (spec §2)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class MemoryStats(NamedTuple):
    """Per-memory statistics as the feature maps need them, at step t (see :func:`tokenworth_jax.bank.stats`)."""

    u: jax.Array
    rel: jax.Array
    rec: jax.Array
    freq: jax.Array


def new_memory_stats(u_init: jax.Array, dtype: jnp.dtype) -> MemoryStats:
    """A candidate's statistics: u = u_init, h = d = c = 0, last = tau = t (so rec = 1, freq = 0)."""
    one = jnp.ones((), dtype)
    return MemoryStats(u=jnp.asarray(u_init, dtype), rel=one / 2, rec=one, freq=jnp.zeros((), dtype))


def take(stats: MemoryStats, idx: jax.Array) -> MemoryStats:
    """The statistics of the memories at ``idx``."""
    return MemoryStats(*(s[idx] for s in stats))


def append(stats: MemoryStats, extra: MemoryStats) -> MemoryStats:
    """(N,) statistics followed by one more memory's scalars: (N + 1,)."""
    return MemoryStats(*(jnp.concatenate([x, y[None]]) for x, y in zip(stats, extra)))


def base_features(cos: jax.Array, stats: MemoryStats) -> jax.Array:
    """phi = [cos, u, rel, rec]; inputs broadcast, output adds a trailing axis of 4."""
    parts = jnp.broadcast_arrays(cos, stats.u, stats.rel, stats.rec)
    return jnp.stack(parts, axis=-1)


def residual_features(abs_diff: jax.Array, cos: jax.Array, stats: MemoryStats) -> jax.Array:
    """z = [|e_q - e_m| (D), cos, u, rel, rec, freq] -> (..., D+5)."""
    tail = jnp.stack(jnp.broadcast_arrays(cos, stats.u, stats.rel, stats.rec, stats.freq), axis=-1)
    return jnp.concatenate([abs_diff, jnp.broadcast_to(tail, abs_diff.shape[:-1] + tail.shape[-1:])], axis=-1)
