"""Worth-guided bank lifecycle (spec §5): probe-averaged worth and the admission rules.

Pure rules over arrays: :func:`probe_worth` turns per-probe scores into worth, :func:`decide`
applies the admission rules to a bank and returns a :class:`Decision`; the controller then has
each part write what the decision says (the bank its slot, the scorer its cache column, the mode
its statistics).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .bank import Bank


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
    scores: jax.Array  # (P+1, B+1) the per-probe worth; last column is the candidate
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


def probe_worth(scores: jax.Array, probe_valid: jax.Array) -> Worth:
    """V(m) = mean over valid probes of the per-probe worth ``scores`` (P+1, B+1)."""
    f = scores.dtype
    weight = probe_valid.astype(f) / jnp.sum(probe_valid).astype(f)
    V = weight @ scores
    rho = weight @ (scores[:, -1] > 0).astype(f)
    return Worth(bank=V[:-1], new=V[-1], rho_pos=rho, scores=scores, probe_valid=probe_valid)


def decide(bank: Bank, e_new: jax.Array, V: Worth, tau_nov: jax.Array, delta_write: jax.Array,
           tau_pos: jax.Array, tau_util: jax.Array, delta_rep: jax.Array) -> Decision:
    """The admission rules for a memory (D,) offered to ``bank``, given the worth ``V``."""
    f = bank.u.dtype
    B = bank.valid.shape[0]
    i32 = jnp.int32
    cos = jnp.where(bank.valid, bank.emb @ e_new, -jnp.inf)
    any_valid = jnp.any(bank.valid)
    near = jnp.argmax(cos).astype(i32)
    novelty = jnp.where(any_valid, 1 - cos[near], jnp.ones((), f))
    full = jnp.sum(bank.valid) >= B

    v_bank_max = jnp.max(jnp.where(bank.valid, V.bank, -jnp.inf))
    novel = novelty > tau_nov
    worthy = (V.new > v_bank_max + delta_write) & (V.rho_pos >= tau_pos)
    gate = novel | worthy
    evict = jnp.argmin(jnp.concatenate([jnp.where(bank.valid, V.bank, jnp.inf), V.new[None]])).astype(i32)
    v_near = V.bank[near]
    replace = any_valid & (bank.u[near] < tau_util) & (V.new > v_near + delta_rep)
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
    evicted_id = jnp.where(writes & (code != i32(Admission.ADMITTED_ROOM)), bank.ids[jnp.maximum(slot, 0)], i32(-1))
    return Decision(code=code, slot=slot, evicted_id=evicted_id, novelty=novelty,
                    near_slot=jnp.where(any_valid, near, i32(-1)), v_new=V.new, v_max_bank=v_bank_max, v_near=v_near,
                    rho_pos=V.rho_pos)


def not_offered(dtype: jnp.dtype) -> Decision:
    """The decision of a task that offered nothing (it failed, or had no memory)."""
    nan = jnp.full((), jnp.nan, dtype)
    m1 = jnp.full((), -1, jnp.int32)
    return Decision(code=jnp.int32(Admission.NOT_OFFERED), slot=m1, evicted_id=m1, novelty=nan, near_slot=m1,
                    v_new=nan, v_max_bank=nan, v_near=nan, rho_pos=nan)
