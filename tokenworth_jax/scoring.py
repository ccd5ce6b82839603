"""Scores s(q,m) = w^T phi(q,m) + eta f(z(q,m)) for every (query, memory) pair at once."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from . import krr
from .features import MemoryStats, base_features, residual_features
from .krr import Predictor


class ScoreModel(NamedTuple):
    """What a score needs from the learners, read from the base scorer and the residual."""

    w: jax.Array  # (4,)
    predictor: Predictor
    metric: jax.Array  # (F,)
    gamma: jax.Array
    eta: jax.Array


class PairScores(NamedTuple):
    score: jax.Array  # (Q, N) s = s_base + eta f
    base: jax.Array  # (Q, N) s_base = w^T phi
    phi: jax.Array  # (Q, N, 4)
    z: jax.Array  # (Q, N, F)


def score_pairs(queries: jax.Array, emb: jax.Array, stats: MemoryStats, model: ScoreModel) -> PairScores:
    """Scores of Q queries (Q, D) against N memories (N, D) with their statistics (N,)."""
    Q = queries.shape[0]
    N = emb.shape[0]
    cos = queries @ emb.T  # (Q, N); vectors are unit-norm (or zero)
    stats_qn = MemoryStats(*(jnp.broadcast_to(s[None, :], (Q, N)) for s in stats))
    phi = base_features(cos, stats_qn)
    abs_diff = jnp.abs(queries[:, None, :] - emb[None, :, :])
    z = residual_features(abs_diff, cos, stats_qn)
    s_base = phi @ model.w
    f = krr.predict(z.reshape(Q * N, -1), model.predictor, model.metric,
                    jnp.asarray(model.gamma, z.dtype)).reshape(Q, N)
    return PairScores(score=s_base + model.eta * f, base=s_base, phi=phi, z=z)
