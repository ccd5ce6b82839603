"""Scores s(q,m) = w^T phi(q,m) + eta f(z(q,m)) for every (query, memory) pair at once."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from . import krr
from .config import HParams
from .features import MemoryStats, base_features, residual_features
from .state import State


class PairScores(NamedTuple):
    score: jax.Array  # (P, N) s = s_base + eta f
    base: jax.Array  # (P, N) s_base = w^T phi
    phi: jax.Array  # (P, N, 4)
    z: jax.Array  # (P, N, D+5)


def eta(state: State, hp: HParams) -> jax.Array:
    """eta_t = eta_max * min(1, n_krr_fits / 3): the residual ramps in over three fits."""
    f = state.w.dtype
    ramp = jnp.minimum(jnp.ones((), f), state.counters.n_krr_fits.astype(f) / 3)
    return jnp.asarray(hp.eta_max, f) * ramp


def score_pairs(queries: jax.Array, emb: jax.Array, stats: MemoryStats, state: State, hp: HParams) -> PairScores:
    """Scores of P queries (P, D) against N memories (N, D) with their statistics (N,)."""
    P, D = queries.shape
    N = emb.shape[0]
    cos = queries @ emb.T  # (P, N); vectors are unit-norm (or zero)
    stats_pn = MemoryStats(*(jnp.broadcast_to(s[None, :], (P, N)) for s in stats))
    phi = base_features(cos, stats_pn)
    abs_diff = jnp.abs(queries[:, None, :] - emb[None, :, :])
    z = residual_features(abs_diff, cos, stats_pn)
    s_base = phi @ state.w
    f = krr.predict(z.reshape(P * N, -1), state.predictor, state.metric, jnp.asarray(hp.gamma, z.dtype)).reshape(P, N)
    return PairScores(score=s_base + eta(state, hp) * f, base=s_base, phi=phi, z=z)
