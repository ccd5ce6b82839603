"""Worth-guided bank lifecycle (spec §5): probe-averaged worth and the admission rules."""

from __future__ import annotations

import enum
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .batching import gated
from .config import HParams, Spec
from .features import MemoryStats, memory_stats, new_memory_stats
from .ring import ring_valid
from .scoring import eta_schedule, score_pairs
from .state import Bank, State
from . import plus as _plus
from . import worth_cache


class Admission(enum.IntEnum):
    """What happened to a candidate memory. Stored as int32 in :class:`Decision`."""

    NOT_OFFERED = 0  # the task failed: no candidate, bank untouched
    ADMITTED_ROOM = 1  # bank not full
    ADMITTED_NOVEL = 2  # full; novelty > tau_nov; the lowest-worth memory was evicted
    ADMITTED_WORTH = 3  # full; worth gate passed; the lowest-worth memory was evicted
    SELF_EVICTED = 4  # gate passed but the candidate itself had the lowest worth
    REPLACED_NEAREST = 5  # gate failed; the weak nearest neighbour was replaced
    REJECTED = 6  # nothing applied


class Worth(NamedTuple):
    bank: jax.Array  # (B,) V(m) for every slot (meaningless on invalid slots)
    new: jax.Array  # V(m_new)
    rho_pos: jax.Array  # fraction of probes with s(q, m_new) > 0
    scores: jax.Array  # (P+1, B+1) the score matrix; last column is the candidate
    probe_valid: jax.Array  # (P+1,)


class Decision(NamedTuple):
    code: jax.Array  # int32 Admission
    slot: jax.Array  # int32 bank slot written, -1 if none
    evicted_id: jax.Array  # int32 id removed from the bank, -1 if none
    novelty: jax.Array
    near_slot: jax.Array  # int32 nearest valid bank slot, -1 for an empty bank
    v_new: jax.Array
    v_max_bank: jax.Array
    v_near: jax.Array
    rho_pos: jax.Array


def probes(state: State) -> tuple[jax.Array, jax.Array]:
    """(P+1, D) probe queries (current first, then the ring) and their (P+1,) validity."""
    return worth_cache.probes(state.pending.query, state.probe_ring)


def _concat_stats(a: MemoryStats, b: MemoryStats) -> MemoryStats:
    return MemoryStats(*(jnp.concatenate([x, y[None]]) for x, y in zip(a, b)))


def _scores_chunked(queries: jax.Array, emb: jax.Array, stats: MemoryStats, state: State, hp: HParams,
                    chunk: int) -> jax.Array:
    """(Q, N) scores, computed ``chunk`` memories at a time when ``chunk`` > 0 (bounds memory)."""
    n = emb.shape[0]
    f = state.w.dtype
    eta = eta_schedule(state.counters.n_krr_fits, hp.eta_max, f)

    def scores(e: jax.Array, st: MemoryStats) -> jax.Array:
        return score_pairs(queries, e, st, state.w, state.predictor, state.metric, hp.gamma, eta).score

    if chunk <= 0 or n <= chunk:
        return scores(emb, stats)
    pad = (-n) % chunk
    emb_p = jnp.pad(emb, ((0, pad), (0, 0)))
    stats_p = MemoryStats(*(jnp.pad(s, (0, pad)) for s in stats))
    blocks = (emb_p.reshape(-1, chunk, emb.shape[1]), MemoryStats(*(s.reshape(-1, chunk) for s in stats_p)))
    out = jax.lax.map(lambda blk: scores(*blk), blocks)  # (n_blocks, Q, chunk)
    return jnp.moveaxis(out, 0, 1).reshape(queries.shape[0], -1)[:, :n]


class _Column(NamedTuple):
    """The candidate's cached quantities, written into the slot it fills (incremental worth)."""

    dpart: jax.Array  # (P+1, N)
    cos: jax.Array  # (P+1,)


def _worth(state: State, e_new: jax.Array, hp: HParams, spec: Spec) -> tuple[Worth, _Column | None]:
    f = state.w.dtype
    t = state.counters.t
    queries, pvalid = probes(state)
    weight = pvalid.astype(f) / jnp.sum(pvalid).astype(f)
    bank_stats = memory_stats(state.bank, t, hp.kappa)
    new_stats = new_memory_stats(t, hp.u_init, f)
    if worth_cache.enabled(state.cache):
        eta = eta_schedule(state.counters.n_krr_fits, hp.eta_max, f)
        col = _Column(dpart=worth_cache.dpart(queries, e_new[None, :], state.cache.geometry, state.metric)[:, 0],
                      cos=queries @ e_new)

        def score(dp: jax.Array, cos: jax.Array, stats: MemoryStats) -> jax.Array:
            return worth_cache.scores(dp, cos, stats, state.w, state.predictor, state.cache.geometry, state.metric, hp.gamma,
                                      eta)[0]

        s_bank = score(state.cache.dpart, state.cache.cos, bank_stats)  # (P+1, B)
        s_new = score(col.dpart[:, None, :], col.cos[:, None], MemoryStats(*(x[None] for x in new_stats)))
        scores = jnp.concatenate([s_bank, s_new], axis=1)
    else:
        col = None
        emb = jnp.concatenate([state.bank.emb, e_new[None, :]], axis=0)
        scores = _scores_chunked(queries, emb, _concat_stats(bank_stats, new_stats), state, hp,
                                 spec.worth_chunk)  # (P+1, B+1)
    if state.plus is not None:  # TokenWorth+ hook: worth = predicted advantage over p0(q), either path
        cos = (queries @ emb.T if col is None  # (P+1, B+1); incremental: the cached cosines
               else jnp.concatenate([state.cache.cos, col.cos[:, None]], axis=1))
        scores = _plus.worth_scores(state, queries, cos, _concat_stats(bank_stats, new_stats), scores, hp)
    V = weight @ scores
    rho = weight @ (scores[:, -1] > 0).astype(f)
    return Worth(bank=V[:-1], new=V[-1], rho_pos=rho, scores=scores, probe_valid=pvalid), col


def worth(state: State, e_new: jax.Array, hp: HParams, spec: Spec) -> Worth:
    """V(m) = mean over valid probes of s_t(q, m), for the whole bank and the candidate at once."""
    return _worth(state, e_new, hp, spec)[0]


def _write_memory(bank: Bank, slot: jax.Array, enabled: jax.Array, e_new: jax.Array, new_id: jax.Array,
                  t: jax.Array, hp: HParams) -> Bank:
    f = bank.u.dtype

    def put(arr: jax.Array, value: jax.Array) -> jax.Array:
        return arr.at[slot].set(jnp.where(enabled, jnp.asarray(value, arr.dtype), arr[slot]))

    zero = jnp.zeros((), f)
    return Bank(
        emb=bank.emb.at[slot].set(jnp.where(enabled, e_new, bank.emb[slot])),
        valid=put(bank.valid, True),
        ids=put(bank.ids, new_id),
        u=put(bank.u, jnp.asarray(hp.u_init, f)),
        h=put(bank.h, zero),
        d=put(bank.d, zero),
        c=put(bank.c, zero),
        last=put(bank.last, t),
        tau=put(bank.tau, t),
    )


def _admit(state: State, e_new: jax.Array, new_id: jax.Array, hp: HParams, spec: Spec) -> tuple[State, Decision]:
    bank = state.bank
    f = state.w.dtype
    B = spec.capacity
    i32 = jnp.int32
    V, column = _worth(state, e_new, hp, spec)

    cos = jnp.where(bank.valid, bank.emb @ e_new, -jnp.inf)
    any_valid = jnp.any(bank.valid)
    near = jnp.argmax(cos).astype(i32)
    novelty = jnp.where(any_valid, 1 - cos[near], jnp.ones((), f))
    full = jnp.sum(bank.valid) >= B

    v_bank_max = jnp.max(jnp.where(bank.valid, V.bank, -jnp.inf))
    novel = novelty > hp.tau_nov
    worthy = (V.new > v_bank_max + hp.delta_write) & (V.rho_pos >= hp.tau_pos)
    gate = novel | worthy
    evict = jnp.argmin(jnp.concatenate([jnp.where(bank.valid, V.bank, jnp.inf), V.new[None]])).astype(i32)
    v_near = V.bank[near]
    replace = any_valid & (bank.u[near] < hp.tau_util) & (V.new > v_near + hp.delta_rep)
    free_slot = jnp.argmin(bank.valid).astype(i32)  # first invalid slot

    code = jnp.where(
        ~full, i32(Admission.ADMITTED_ROOM),
        jnp.where(gate,
                  jnp.where(evict == B, i32(Admission.SELF_EVICTED),
                            jnp.where(novel, i32(Admission.ADMITTED_NOVEL), i32(Admission.ADMITTED_WORTH))),
                  jnp.where(replace, i32(Admission.REPLACED_NEAREST), i32(Admission.REJECTED))))
    slot = jnp.where(code == i32(Admission.ADMITTED_ROOM), free_slot,
                     jnp.where((code == i32(Admission.ADMITTED_NOVEL)) | (code == i32(Admission.ADMITTED_WORTH)), evict,
                               jnp.where(code == i32(Admission.REPLACED_NEAREST), near, i32(-1))))
    writes = slot >= 0
    safe_slot = jnp.maximum(slot, 0)
    evicted_id = jnp.where(writes & (code != i32(Admission.ADMITTED_ROOM)), bank.ids[safe_slot], i32(-1))
    new_bank = _write_memory(bank, safe_slot, writes, e_new, new_id, state.counters.t, hp)
    cache = state.cache
    if column is not None:
        cache = worth_cache.write_column(cache, safe_slot, column.dpart, column.cos, writes)
    if state.plus is not None:  # TokenWorth+ hook: a new memory's advantage statistics start at zero
        state = _plus.on_write(state, safe_slot, writes)
    decision = Decision(
        code=code, slot=slot, evicted_id=evicted_id, novelty=novelty,
        near_slot=jnp.where(any_valid, near, i32(-1)), v_new=V.new, v_max_bank=v_bank_max, v_near=v_near,
        rho_pos=V.rho_pos,
    )
    return state._replace(bank=new_bank, cache=cache), decision


def _not_offered(state: State, spec: Spec) -> Decision:
    f = state.w.dtype
    nan = jnp.full((), jnp.nan, f)
    m1 = jnp.full((), -1, jnp.int32)
    return Decision(code=jnp.int32(Admission.NOT_OFFERED), slot=m1, evicted_id=m1, novelty=nan, near_slot=m1,
                    v_new=nan, v_max_bank=nan, v_near=nan, rho_pos=nan)


def offer(state: State, e_new: jax.Array, new_id: jax.Array, hp: HParams, spec: Spec, *,
          enabled: jax.Array | bool = True, batched: bool = False) -> tuple[State, Decision]:
    """Offer the memory of the current task. Only a judged success can write (else NOT_OFFERED).

    ``enabled`` (bool, (C,) when batched) masks the offer off, e.g. for streams without a
    memory this task. Batched, the admission (and its worth computation) runs only when some
    configuration is enabled with a success (see :func:`tokenworth_jax.batching.gated`).
    """
    success = (state.pending.reward == 1) & jnp.asarray(enabled, bool)
    new_id = jnp.asarray(new_id, jnp.int32)
    return gated(success, lambda s, e, i, h: _admit(s, e, i, h, spec), lambda s, e, i, h: (s, _not_offered(s, spec)),
                 (state, e_new, new_id, hp), batched)
