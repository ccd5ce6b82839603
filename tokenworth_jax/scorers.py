"""How pair scores over the bank are computed: the :class:`Scorer` interface and its two values.

A scorer is a ``NamedTuple`` of pure functions over its own state, as an
``optax.GradientTransformation`` pairs ``init`` with ``update``, plus what it declares about itself
(``name``, ``shapes``, ``hparams``, ``features``: as a :class:`~tokenworth_jax.modes.Mode` does).
The controller is built from a scorer and a mode (``tw.controller``); ``tw.preset(..., scorer=
"incremental")`` or ``Spec(scorer=tw.scorers.incremental())`` picks the incremental one.

* :func:`full` scores every pair from scratch; it keeps no state (:class:`~tokenworth_jax.pytree.Empty`).
* :func:`incremental` keeps a :class:`~tokenworth_jax.worth_cache.WorthCache` of the
  D-dimensional part of the KRR distances and maintains it at each event that moves it (the
  query at selection, a write to the bank, the end of a task, a KRR fit). Same decisions;
  per task (B + P + 1) N D instead of (P + 1)(B + 1) N D (details in that module).

Shapes: K candidates, B bank slots, P+1 probes, D dim, F = D + 5, N support rows.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, NamedTuple, TypeVar

import jax
import jax.numpy as jnp

from . import _doc, worth_cache
from .bank import Bank, Recall
from .batching import gated
from .config import HParams, Schema
from .features import MemoryStats, append, base_features, residual_features, take
from .inputs import Feature
from .krr import Predictor
from .pytree import Empty
from .scoring import ScoreModel, score_pairs
from .worth_cache import WorthCache


class CandidateScores(NamedTuple):
    """The recalled candidates' scores and the features the learners train on."""

    score: jax.Array
    base: jax.Array
    phi: jax.Array
    z: jax.Array


_doc.fields(
    CandidateScores,
    score="(K,) float: the score s of each candidate.",
    base="(K,) float: its base score s_base.",
    phi="(K, 4) float: its base features [cos, u, rel, rec].",
    z="(K, F) float: its residual features ``[|e_q - e_m|, cos, u, rel, rec, freq]``.",
)


class ProbeScores(NamedTuple):
    """Every probe against every bank slot and the offered memory (last column)."""

    score: jax.Array
    base: jax.Array
    cos: jax.Array


_doc.fields(
    ProbeScores,
    score="(P+1, B+1) float: the score s of each (probe, memory) pair.",
    base="(P+1, B+1) float: the base score s_base of each pair.",
    cos="(P+1, B+1) float: the cosine of each pair.",
)


S = TypeVar("S")  # the scorer's own state
C = TypeVar("C")  # what it keeps of an offered memory until it is written


class Scorer(NamedTuple, Generic[S, C]):
    """How pair scores over the bank are computed: a NamedTuple of pure functions over the scorer's own state
    ``S``, plus what it declares about itself (as a :class:`~tokenworth_jax.Mode` does).

    ``C`` is what the scorer keeps of an offered memory between computing its worth and writing it
    to the bank. The values: :func:`full` and :func:`incremental` (same decisions). Shapes: K
    candidates, B bank slots, P + 1 probes, D = ``spec.dim``, F = D + 5.
    """

    name: str
    init: Callable[[Any, HParams], S]
    candidates: Callable[[S, jax.Array, Bank, Recall, MemoryStats, ScoreModel], tuple[S, CandidateScores]]
    column: Callable[[S, jax.Array, jax.Array, ScoreModel], C]
    probes: Callable[[S, jax.Array, jax.Array, jax.Array, MemoryStats, MemoryStats, ScoreModel, int, C], ProbeScores]
    write: Callable[[S, jax.Array, C, jax.Array], S]
    end_task: Callable[[S, jax.Array, jax.Array], S]
    refit: Callable[[S, jax.Array, jax.Array, jax.Array, Predictor, jax.Array], S]
    shapes: Any = Empty()
    hparams: Schema | None = None
    features: tuple[Feature, ...] = ()


_doc.fields(
    Scorer,
    name="str: how presets, checkpoints and messages name the scorer.",
    init="``(spec, hp) -> S``: its fresh state (its own shape fields are ``spec.scorer.shapes``).",
    candidates="``(state, query (D,), bank, recall, bank stats (B,), model) -> (state, CandidateScores)``: the "
               "scores and features of the K recalled candidates.",
    column="``(state, probes (P+1, D), offered emb (D,), model) -> C``: what ``write`` stores of the offered "
           "memory.",
    probes="``(state, probes (P+1, D), bank emb (B, D), offered emb (D,), bank stats (B,), offered stats, model, "
           "chunk, column) -> ProbeScores``: every probe against every bank slot and the offered memory.",
    write="``(state, slot, column, writes) -> state``: the offered memory entered ``slot`` where ``writes``.",
    end_task="``(state, probe ring index, pushed) -> state``: the task ended; its query joined the probes where "
             "``pushed``.",
    refit="``(state, fitted, probes (P+1, D), bank emb (B, D), predictor, metric) -> state``: the residual was "
          "refitted where ``fitted``.",
    shapes="A hashable NamedTuple of the scorer's static shape fields (default ``Empty()``).",
    hparams="Schema or None: its traced hyperparameters (``hp.scorer``); None when it has none.",
    features="tuple[Feature, ...]: the inputs it reads beyond the recall keys (default: none).",
)


# ----- full --------------------------------------------------------------------------------------
def _full_candidates(state: Empty, query: jax.Array, bank: Bank, recall: Recall, stats: MemoryStats,
                     model: ScoreModel) -> tuple[Empty, CandidateScores]:
    ps = score_pairs(query[None, :], bank.emb[recall.slots], take(stats, recall.slots), model)
    return state, CandidateScores(score=ps.score[0], base=ps.base[0], phi=ps.phi[0], z=ps.z[0])


def _full_probes(state: Empty, queries: jax.Array, emb: jax.Array, e_new: jax.Array, stats: MemoryStats,
                 new: MemoryStats, model: ScoreModel, chunk: int, column: None) -> ProbeScores:
    emb = jnp.concatenate([emb, e_new[None, :]], axis=0)
    stats = append(stats, new)

    def block(e: jax.Array, st: MemoryStats) -> tuple[jax.Array, jax.Array, jax.Array]:
        ps = score_pairs(queries, e, st, model)
        return ps.score, ps.base, ps.phi[..., 0]

    n = emb.shape[0]
    if chunk <= 0 or n <= chunk:
        return ProbeScores(*block(emb, stats))
    # ``chunk`` memories at a time (bounds the (P+1, chunk, F) temporaries for large banks)
    pad = (-n) % chunk
    emb_p = jnp.pad(emb, ((0, pad), (0, 0)))
    stats_p = MemoryStats(*(jnp.pad(s, (0, pad)) for s in stats))
    blocks = (emb_p.reshape(-1, chunk, emb.shape[1]), MemoryStats(*(s.reshape(-1, chunk) for s in stats_p)))
    out = jax.lax.map(lambda blk: block(*blk), blocks)  # each (n_blocks, P+1, chunk)
    Q = queries.shape[0]
    return ProbeScores(*(jnp.moveaxis(x, 0, 1).reshape(Q, -1)[:, :n] for x in out))


def _no_state(spec: Any, hp: HParams) -> Empty:
    return Empty()


def _no_column(state: Empty, queries: jax.Array, e_new: jax.Array, model: ScoreModel) -> None:
    return None


def _same_write(state: Empty, slot: jax.Array, column: None, writes: jax.Array) -> Empty:
    return state


def _same_end(state: Empty, idx: jax.Array, pushed: jax.Array) -> Empty:
    return state


def _same_refit(state: Empty, fitted: jax.Array, probes: jax.Array, emb: jax.Array, predictor: Predictor,
                metric: jax.Array) -> Empty:
    return state


FULL: Scorer[Empty, None] = Scorer(name="full", init=_no_state, candidates=_full_candidates, column=_no_column,
                                   probes=_full_probes, write=_same_write, end_task=_same_end, refit=_same_refit)


def full() -> Scorer[Empty, None]:
    """Every pair scored from scratch: stateless.

    Returns:
        Scorer: the full scorer, named ``"full"`` (the preset table's value).
    """
    return FULL


# ----- incremental -------------------------------------------------------------------------------
class _Column(NamedTuple):
    """The offered memory's cached quantities, written into the slot it fills."""

    dpart: jax.Array  # (P+1, N)
    cos: jax.Array  # (P+1,)


def _inc_init(spec: Any, hp: HParams) -> WorthCache:
    return worth_cache.init(spec.n_probes + 1, spec.capacity, spec.fast_window, spec.dim, spec.float_dtype)


def _inc_candidates(cache: WorthCache, query: jax.Array, bank: Bank, recall: Recall, stats: MemoryStats,
                    model: ScoreModel) -> tuple[WorthCache, CandidateScores]:
    # the query's row over the whole bank: the candidates' scores now, the lifecycle's worth later
    row = worth_cache.dpart(query[None, :], bank.emb, cache.geometry, model.metric)  # (1, B, N)
    cos = bank.emb @ query
    cache = worth_cache.set_query_row(cache, row[0], cos)
    top = recall.slots
    stats_k = take(stats, top)
    score, base = worth_cache.scores(row[:, top], cos[top][None, :], stats_k, model, cache.geometry)
    z = residual_features(jnp.abs(query[None, :] - bank.emb[top]), cos[top], stats_k)
    return cache, CandidateScores(score=score[0], base=base[0], phi=base_features(cos[top], stats_k), z=z)


def _inc_column(cache: WorthCache, queries: jax.Array, e_new: jax.Array, model: ScoreModel) -> _Column:
    return _Column(dpart=worth_cache.dpart(queries, e_new[None, :], cache.geometry, model.metric)[:, 0],
                   cos=queries @ e_new)


def _inc_probes(cache: WorthCache, queries: jax.Array, emb: jax.Array, e_new: jax.Array, stats: MemoryStats,
                new: MemoryStats, model: ScoreModel, chunk: int, col: _Column) -> ProbeScores:
    del emb, e_new, chunk  # the bank's part is cached, the offered memory's is the column; chunking does not apply
    s_bank, b_bank = worth_cache.scores(cache.dpart, cache.cos, stats, model, cache.geometry)  # (P+1, B)
    s_new, b_new = worth_cache.scores(col.dpart[:, None, :], col.cos[:, None], MemoryStats(*(x[None] for x in new)),
                                      model, cache.geometry)
    cat = lambda a, b: jnp.concatenate([a, b], axis=1)  # noqa: E731
    return ProbeScores(score=cat(s_bank, s_new), base=cat(b_bank, b_new), cos=cat(cache.cos, col.cos[:, None]))


def _inc_write(cache: WorthCache, slot: jax.Array, column: _Column, writes: jax.Array) -> WorthCache:
    return worth_cache.write_column(cache, jnp.maximum(slot, 0), column.dpart, column.cos, writes)


def _inc_refit(cache: WorthCache, fitted: jax.Array, queries: jax.Array, emb: jax.Array, predictor: Predictor,
               metric: jax.Array) -> WorthCache:
    # a new support and/or metric moves every cached distance
    return gated(fitted, lambda c, q, e, p, m: worth_cache.refresh(q, e, p, m), lambda c, q, e, p, m: c, cache, queries,
                 emb, predictor, metric)


INCREMENTAL: Scorer[WorthCache, _Column] = Scorer(
    name="incremental", init=_inc_init, candidates=_inc_candidates, column=_inc_column, probes=_inc_probes,
    write=_inc_write, end_task=worth_cache.push_query, refit=_inc_refit)


def incremental() -> Scorer[WorthCache, _Column]:
    """The D part of the KRR distances cached and maintained (see :mod:`tokenworth_jax.worth_cache`).

    Returns:
        Scorer: the incremental scorer, named ``"incremental"`` (the preset table's value): the full scorer's
        decisions at a lower cost per task.
    """
    return INCREMENTAL
