"""Scores s(q,m) = w^T phi(q,m) + eta f(z(q,m)) for every (query, memory) pair at once."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from . import krr
from .features import MemoryStats, base_features, residual_features
from .krr import Predictor


class PairScores(NamedTuple):
    score: jax.Array  # (Q, N) s = s_base + eta f
    base: jax.Array  # (Q, N) s_base = w^T phi
    phi: jax.Array  # (Q, N, 4)
    z: jax.Array  # (Q, N, F)


def eta_schedule(n_krr_fits: jax.Array, eta_max: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """eta_t = eta_max * min(1, n_krr_fits / 3): the residual ramps in over three fits."""
    ramp = jnp.minimum(jnp.ones((), dtype), n_krr_fits.astype(dtype) / 3)
    return jnp.asarray(eta_max, dtype) * ramp


def score_pairs(queries: jax.Array, emb: jax.Array, stats: MemoryStats, w: jax.Array, predictor: Predictor,
                metric: jax.Array, gamma: jax.Array, eta: jax.Array) -> PairScores:
    """Scores of Q queries (Q, D) against N memories (N, D) with their statistics (N,)."""
    Q = queries.shape[0]
    N = emb.shape[0]
    cos = queries @ emb.T  # (Q, N); vectors are unit-norm (or zero)
    stats_qn = MemoryStats(*(jnp.broadcast_to(s[None, :], (Q, N)) for s in stats))
    phi = base_features(cos, stats_qn)
    abs_diff = jnp.abs(queries[:, None, :] - emb[None, :, :])
    z = residual_features(abs_diff, cos, stats_qn)
    s_base = phi @ w
    f = krr.predict(z.reshape(Q * N, -1), predictor, metric, jnp.asarray(gamma, z.dtype)).reshape(Q, N)
    return PairScores(score=s_base + eta * f, base=s_base, phi=phi, z=z)
