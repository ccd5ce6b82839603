"""Worth-guided bank lifecycle (spec §5): probe-averaged worth and the admission rules.

Pure rules over arrays: :func:`probe_worth` turns per-probe scores into worth, :func:`decide`
applies the admission rules to a bank and returns a :class:`Decision`; the controller then has
each part write what the decision says (the bank its slot, the scorer its cache column, the mode
its statistics).
"""

from __future__ import annotations

import enum
import functools
import operator
from typing import NamedTuple

import jax
import jax.numpy as jnp

from . import _doc
from .bank import Bank
from .inputs import MemoryText


class Admission(enum.IntEnum):
    """What happened to an offered memory: the code a :class:`Decision` stores as int32.

    ``Admission(int(decision.code)).name`` reads it on the host. The codes, in the order the rules
    are tried: 0 ``NOT_OFFERED`` (the task failed or offered nothing; the bank is untouched),
    1 ``ADMITTED_ROOM`` (the bank had a free slot), 2 ``ADMITTED_NOVEL`` (full; the memory is novel,
    novelty > tau_nov, and took the slot of the lowest-worth memory), 3 ``ADMITTED_WORTH`` (full;
    the worth gate passed and the lowest-worth memory was evicted), 4 ``SELF_EVICTED`` (a gate
    passed but the offered memory had the lowest worth itself: bank unchanged), 5
    ``REPLACED_NEAREST`` (no gate passed; the weak nearest neighbour was replaced), 6 ``REJECTED``
    (no rule applied), and, before any rule, 7 ``INVALID_MEMORY`` (a judged success offered a memory
    that can never be admitted: a non-finite entry in its vector or features, or an id below 0; the
    state is unchanged, so the task may offer a valid memory instead; ``tw.checked`` and the host
    ``Controller`` raise on it). Codes are never renumbered: a new one takes the next number.
    """

    NOT_OFFERED = 0  #: the task failed or offered nothing: bank untouched
    ADMITTED_ROOM = 1  #: the bank was not full: written into the lowest free slot
    ADMITTED_NOVEL = 2  #: full; novelty > tau_nov: the lowest-worth memory was evicted
    ADMITTED_WORTH = 3  #: full; the worth gate passed: the lowest-worth memory was evicted
    SELF_EVICTED = 4  #: a gate passed but the offered memory itself had the lowest worth: bank unchanged
    REPLACED_NEAREST = 5  #: no gate passed; the weak nearest neighbour was replaced
    REJECTED = 6  #: no rule applied: bank unchanged
    INVALID_MEMORY = 7  #: a non-finite memory or an id below 0, never admitted: state unchanged


class Worth(NamedTuple):
    """The worth V(m) of every bank slot and of an offered memory, as :func:`tokenworth_jax.worth` returns it.

    V(m) is the mean over the valid probes (the current query and up to ``n_probes`` earlier ones)
    of the mode's per-probe worth; for the paper's mode that is the score s(q, m). B =
    ``spec.capacity``, P + 1 = ``spec.n_probes + 1`` probe rows. Floats have the spec's dtype.
    """

    bank: jax.Array
    new: jax.Array
    rho_pos: jax.Array
    scores: jax.Array
    probe_valid: jax.Array


_doc.fields(
    Worth,
    bank="(B,) float: V(m) of the memory in each slot (meaningless on empty slots).",
    new="() float: V of the offered memory.",
    rho_pos="() float in [0, 1]: the fraction of valid probes on which the offered memory's worth is > 0.",
    scores="(P+1, B+1) float: the per-probe worth; row i is probe i, the last column the offered memory.",
    probe_valid="(P+1,) bool: which probe rows hold a query (row 0, the current query, always does).",
)


class Decision(NamedTuple):
    """What the lifecycle did with an offered memory (:func:`tokenworth_jax.offer`).

    ``-1`` in an integer field means "none"; a task that offered nothing (``NOT_OFFERED``) or an
    inadmissible memory (``INVALID_MEMORY``) has ``-1`` slots and NaN values. Floats have the spec's dtype.
    """

    code: jax.Array
    slot: jax.Array
    evicted_id: jax.Array
    novelty: jax.Array
    near_slot: jax.Array
    v_new: jax.Array
    v_max_bank: jax.Array
    v_near: jax.Array
    rho_pos: jax.Array


_doc.fields(
    Decision,
    code="() int32: an :class:`Admission` code (``Admission(int(code)).name``).",
    slot="() int32: the bank slot the memory was written to; -1 when it was not written.",
    evicted_id="() int32: the id of the memory that left the bank to make room; -1 when none did.",
    novelty="() float in [0, 2]: 1 - the highest cosine to a memory in the bank (1 for an empty bank); NaN "
            "when nothing was offered.",
    near_slot="() int32: the bank slot of the nearest memory (highest cosine); -1 for an empty bank or when "
              "nothing was offered.",
    v_new="() float: V of the offered memory; NaN when nothing was offered.",
    v_max_bank="() float: the highest V over the bank's memories (-inf for an empty bank); NaN when nothing "
               "was offered.",
    v_near="() float: V of the nearest memory; NaN when nothing was offered.",
    rho_pos="() float: the fraction of valid probes on which the offered memory's worth is > 0; NaN when "
            "nothing was offered.",
)


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


#: Why a memory is ``INVALID_MEMORY`` (also the message of ``tw.checked`` and the host ``Controller``).
ADMISSIBLE_RULE = "an offered memory needs finite entries (its vector and features) and a memory id >= 0"


def admissible(memory: MemoryText, memory_id: jax.Array) -> jax.Array:
    """() bool: ``memory`` can be admitted at all (:data:`ADMISSIBLE_RULE`). A NaN would spread into every score
    and worth it meets, and an id of -1 reads as "nothing injected" once selected, so neither may enter the bank."""
    finite = [jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(memory)]
    return functools.reduce(operator.and_, finite, jnp.asarray(memory_id) >= 0)


def not_offered(dtype: jnp.dtype) -> Decision:
    """The decision of a task that offered nothing (it failed, or had no memory)."""
    nan = jnp.full((), jnp.nan, dtype)
    m1 = jnp.full((), -1, jnp.int32)
    return Decision(code=jnp.int32(Admission.NOT_OFFERED), slot=m1, evicted_id=m1, novelty=nan, near_slot=m1,
                    v_new=nan, v_max_bank=nan, v_near=nan, rho_pos=nan)
