"""Incremental worth (the ``incremental`` scorer): the D-dimensional part of the KRR distances, cached.

Scores need ``r2 = ||z(q, m) - s_j||^2_M`` for every probe q, memory m and KRR support row
s_j, with z = [|q - m| (D), cos, u, rel, rec, freq]. With M diagonal it splits exactly into

* a D part, ``sum_d M_d (|q_d - m_d| - s_jd)^2``, that depends only on the probe, the memory,
  the support and M, and
* a 5-feature statistics part, which changes every task (u, rel, rec, freq move with t).

Both are evaluated in the centred Gram form of :func:`tokenworth_jax.kernels.sqdist_gram`
(centred at the support mean, summed, clamped at 0), so the sum equals the full-width form up
to rounding. The cache holds the D part (and the cosines) for the P+1 probes (row 0 = the
current query, row 1+k = probe-ring slot k) against every bank slot:

* ``select`` computes row 0 for the new query over the whole bank (it also scores the K
  candidates from it);
* an admission computes the candidate's column for all probes (needed for its worth anyway)
  and writes it into the slot it fills;
* ``end_task`` copies row 0 into the ring slot the query enters;
* every KRR fit (support and/or M changed) recomputes everything.

Per task this costs (B + P + 1) N D instead of the full worth's (P + 1)(B + 1) N D.
Memory: (P + 1) B (N + 1) floats (printed by bench/tokenworth_bench/controller/bank_scaling.py).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .features import MemoryStats, base_features
from .krr import Predictor, predict_from_sqdist, support_center
from .scoring import ScoreModel


class Geometry(NamedTuple):
    """The support side of the centred Gram form, fixed between KRR fits (shapes N x k)."""

    center: jax.Array  # (F,) support mean (the centring point of krr.predict)
    support_m: jax.Array  # (N, F) (s_j - center) * M
    b2: jax.Array  # (2, N) |s_j - center|^2_M over the D part (row 0) and the statistics part (row 1)


class WorthCache(NamedTuple):
    dpart: jax.Array  # (P+1, B, N) D part of the centred squared distances
    cos: jax.Array  # (P+1, B) probe-memory cosines
    geometry: Geometry


def geometry(predictor: Predictor, metric: jax.Array) -> Geometry:
    D = metric.shape[0] - 5
    c = support_center(predictor)
    S = predictor.support - c[None, :]
    Sm = S * metric[None, :]
    b2 = jnp.stack([jnp.sum(Sm[:, :D] * S[:, :D], axis=-1), jnp.sum(Sm[:, D:] * S[:, D:], axis=-1)])
    return Geometry(center=c, support_m=Sm, b2=b2)


def init(n_rows: int, capacity: int, n_support: int, dim: int, dtype: jnp.dtype) -> WorthCache:
    B, N, F = capacity, n_support, dim + 5
    geo = Geometry(center=jnp.zeros((F,), dtype), support_m=jnp.zeros((N, F), dtype), b2=jnp.zeros((2, N), dtype))
    return WorthCache(dpart=jnp.zeros((n_rows, B, N), dtype), cos=jnp.zeros((n_rows, B), dtype), geometry=geo)


def _gram(X: jax.Array, Sm: jax.Array, b2: jax.Array, m: jax.Array) -> jax.Array:
    """(Q, M, N) |x|^2_m + |s|^2_m - 2 x^T diag(m) s for X (Q, M, k), Sm = S diag(m) (N, k)."""
    Q, M, k = X.shape
    a2 = jnp.sum(m[None, None, :] * X * X, axis=-1)  # (Q, M)
    cross = (X.reshape(Q * M, k) @ Sm.T).reshape(Q, M, Sm.shape[0])  # one plain GEMM
    return a2[:, :, None] + b2[None, None, :] - 2 * cross


def dpart(queries: jax.Array, emb: jax.Array, geo: Geometry, metric: jax.Array) -> jax.Array:
    """(Q, M, N) centred D part for Q queries (Q, D) against M memories (M, D)."""
    D = queries.shape[-1]
    X = jnp.abs(queries[:, None, :] - emb[None, :, :]) - geo.center[None, None, :D]  # (Q, M, D)
    return _gram(X, geo.support_m[:, :D], geo.b2[0], metric[:D])


def dpart_rows(queries: jax.Array, emb: jax.Array, geo: Geometry, metric: jax.Array) -> jax.Array:
    """:func:`dpart` one query at a time (bounds the (M, D) temporary for large banks)."""
    return jax.lax.map(lambda q: dpart(q[None, :], emb, geo, metric)[0], queries)


def _stats_like(cos: jax.Array, stats: MemoryStats) -> MemoryStats:
    """Per-memory statistics (M,) broadcast to the (Q, M) shape of ``cos``."""
    return MemoryStats(*(jnp.broadcast_to(s[None, :], cos.shape) for s in stats))


def tail(cos: jax.Array, stats: MemoryStats) -> jax.Array:
    """(Q, M, 5) statistics features [cos, u, rel, rec, freq] for cosines (Q, M) and stats (M,)."""
    st = _stats_like(cos, stats)
    return jnp.stack([cos, st.u, st.rel, st.rec, st.freq], axis=-1)


def scores(dp: jax.Array, cos: jax.Array, stats: MemoryStats, model: ScoreModel,
           geo: Geometry) -> tuple[jax.Array, jax.Array]:
    """(score, s_base), each (Q, M), from the cached D part ``dp`` (Q, M, N) and cosines (Q, M)."""
    metric = model.metric
    D = metric.shape[0] - 5
    T = tail(cos, stats) - geo.center[None, None, D:]  # (Q, M, 5)
    r2 = jnp.maximum(dp + _gram(T, geo.support_m[:, D:], geo.b2[1], metric[D:]), jnp.zeros((), dp.dtype))
    f = predict_from_sqdist(r2, model.predictor, jnp.asarray(model.gamma, dp.dtype))
    s_base = base_features(cos, _stats_like(cos, stats)) @ model.w
    return s_base + model.eta * f, s_base


def refresh(queries: jax.Array, emb: jax.Array, predictor: Predictor, metric: jax.Array) -> WorthCache:
    """Everything recomputed for the (P+1, D) probe queries (after a KRR fit: new support and/or metric)."""
    geo = geometry(predictor, metric)
    return WorthCache(dpart=dpart_rows(queries, emb, geo, metric), cos=queries @ emb.T, geometry=geo)


def set_query_row(cache: WorthCache, row: jax.Array, cos: jax.Array) -> WorthCache:
    """Row 0 (the current query): (B, N) D part and (B,) cosines."""
    return cache._replace(dpart=cache.dpart.at[0].set(row), cos=cache.cos.at[0].set(cos))


def write_column(cache: WorthCache, slot: jax.Array, column: jax.Array, cos: jax.Array,
                 enabled_: jax.Array) -> WorthCache:
    """Bank ``slot`` now holds the candidate: its (P+1, N) D part and (P+1,) cosines, if ``enabled_``."""
    return cache._replace(dpart=cache.dpart.at[:, slot].set(jnp.where(enabled_, column, cache.dpart[:, slot])),
                          cos=cache.cos.at[:, slot].set(jnp.where(enabled_, cos, cache.cos[:, slot])))


def push_query(cache: WorthCache, ring_idx: jax.Array, enabled_: jax.Array) -> WorthCache:
    """The current query enters probe-ring slot ``ring_idx``: copy row 0 to row 1 + ring_idx."""
    r = ring_idx + 1
    return cache._replace(dpart=cache.dpart.at[r].set(jnp.where(enabled_, cache.dpart[0], cache.dpart[r])),
                          cos=cache.cos.at[r].set(jnp.where(enabled_, cache.cos[0], cache.cos[r])))
