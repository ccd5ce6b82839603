"""The memory bank: B_max fixed slots with validity masks and per-memory statistics.

This module owns :class:`Bank`: nothing else writes its fields. Shapes: B = ``Spec.capacity``,
D = ``Spec.dim``, K = the recall size.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from . import _doc
from .features import MemoryStats


class Bank(NamedTuple):
    """The memory bank, ``State.bank``: B = ``spec.capacity`` fixed slots. Empty slots have ``valid == False`` and
    ``ids == -1``. Floats have the spec's dtype."""

    emb: jax.Array
    valid: jax.Array
    ids: jax.Array
    u: jax.Array
    h: jax.Array
    d: jax.Array
    c: jax.Array
    last: jax.Array
    tau: jax.Array


_doc.fields(
    Bank,
    emb="(B, D) float: each memory's unit-norm recall vector (zeros in empty slots).",
    valid="(B,) bool: the slot holds a memory.",
    ids="(B,) int32: the caller's id of each memory (the ``memory_id`` it was offered with); -1 in empty slots.",
    u="(B,) float: utility, raised by u_success after a success and lowered by u_failure after a failure while "
      "injected, clipped to [u_min, u_max]; a new memory starts at u_init.",
    h="(B,) float: successes while injected.",
    d="(B,) float: failures while injected.",
    c="(B,) float: how often the memory was injected.",
    last="(B,) int32: the task index of its last injection (its creation when never injected).",
    tau="(B,) int32: the task index at which it entered the bank.",
)


class Recall(NamedTuple):
    """The K most query-similar valid slots, best first (ties: lower slot first)."""

    slots: jax.Array  # (K,) int32 bank slots
    relevance: jax.Array  # (K,) cosine to the query, -inf where invalid
    valid: jax.Array  # (K,) bool


def init(capacity: int, dim: int, dtype: jnp.dtype) -> Bank:
    B = capacity
    return Bank(emb=jnp.zeros((B, dim), dtype), valid=jnp.zeros((B,), bool), ids=jnp.full((B,), -1, jnp.int32),
                u=jnp.zeros((B,), dtype), h=jnp.zeros((B,), dtype), d=jnp.zeros((B,), dtype),
                c=jnp.zeros((B,), dtype), last=jnp.zeros((B,), jnp.int32), tau=jnp.zeros((B,), jnp.int32))


def stats(bank: Bank, t: jax.Array, kappa: jax.Array) -> MemoryStats:
    """(B,) each: rel = (h+1)/(h+d+2), rec = exp(-kappa (t - last)), freq = c / max(1, t - tau + 1)."""
    f = bank.u.dtype
    age = (t - bank.last).astype(f)
    span = jnp.maximum(1, t - bank.tau + 1).astype(f)
    return MemoryStats(u=bank.u, rel=(bank.h + 1) / (bank.h + bank.d + 2),
                       rec=jnp.exp(-jnp.asarray(kappa, f) * age), freq=bank.c / span)


def recall(bank: Bank, query: jax.Array, k: int) -> Recall:
    """The top-``k`` valid slots by cosine to ``query`` (D,)."""
    relevance = jnp.where(bank.valid, bank.emb @ query, -jnp.inf)
    top_rel, top = jax.lax.top_k(relevance, k)
    top = top.astype(jnp.int32)
    return Recall(slots=top, relevance=top_rel, valid=bank.valid[top])


def credit(bank: Bank, slot: jax.Array, enabled: jax.Array, reward: jax.Array, t: jax.Array,
           u_success: jax.Array, u_failure: jax.Array, u_min: jax.Array, u_max: jax.Array) -> Bank:
    """The selected memory's feedback: utility step, success/failure and access counts, last use."""
    f = bank.u.dtype
    r = reward.astype(f)
    slot = jnp.maximum(slot, 0)

    def bump(arr: jax.Array, value: jax.Array) -> jax.Array:
        return arr.at[slot].set(jnp.where(enabled, value, arr[slot]))

    u_new = jnp.clip(bank.u[slot] + jnp.where(reward == 1, u_success, -u_failure), u_min, u_max)
    return bank._replace(u=bump(bank.u, u_new), h=bump(bank.h, bank.h[slot] + r), d=bump(bank.d, bank.d[slot] + (1 - r)),
                         c=bump(bank.c, bank.c[slot] + 1), last=bump(bank.last, t))


def write(bank: Bank, slot: jax.Array, enabled: jax.Array, emb: jax.Array, memory_id: jax.Array, t: jax.Array,
          u_init: jax.Array) -> Bank:
    """A new memory (D,) in ``slot`` with fresh statistics, where ``enabled``."""
    f = bank.u.dtype
    slot = jnp.maximum(slot, 0)

    def put(arr: jax.Array, value: ArrayLike) -> jax.Array:
        return arr.at[slot].set(jnp.where(enabled, jnp.asarray(value, arr.dtype), arr[slot]))

    zero = jnp.zeros((), f)
    return Bank(emb=bank.emb.at[slot].set(jnp.where(enabled, emb, bank.emb[slot])), valid=put(bank.valid, True),
                ids=put(bank.ids, memory_id), u=put(bank.u, jnp.asarray(u_init, f)), h=put(bank.h, zero),
                d=put(bank.d, zero), c=put(bank.c, zero), last=put(bank.last, t), tau=put(bank.tau, t))
