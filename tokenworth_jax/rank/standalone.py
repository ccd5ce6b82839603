"""A minimal memory controller around the learned ranker: FIFO bank, cosine recall, learned choice.

This is the prototype that the research loop (``bench/rank``) and the ``tokenworth-rank``
policy run. Wired into the TokenWorth controller as a component, that controller's bank, recall
and lifecycle replace :class:`Bank`; the ranker's interface stays
(:func:`~tokenworth_jax.rank.model.choose` on the recall set,
:func:`~tokenworth_jax.rank.model.learn_reward` after the grader,
:func:`~tokenworth_jax.rank.model.learn_memory` on every offered memory), and each bank slot
needs its memory's action vector beside its recall vector.

Per task: :func:`select` (recall the ``k_candidates`` most cosine-similar memories; the ranker
picks one or none), then :func:`update` with the reward and, after a success, the task's own
memory (its recall vector, word vector, action vector and id): the action model learns from it
and it enters the bank, the oldest leaving when the bank is full.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from . import model as M


class Dims(NamedTuple):
    """Static sizes."""

    rank: M.RankDims = M.RankDims()
    capacity: int = 64  # B_max
    k_candidates: int = 12  # K_c


def params(**rank: object) -> M.RankParams:
    """The ranker's hyperparameters (:func:`tokenworth_jax.rank.model.rank_params`)."""
    return M.rank_params(**rank)


class Bank(NamedTuple):
    keys: jax.Array  # (B, D) recall vectors
    acts: jax.Array  # (B, Da) action vectors
    ids: jax.Array  # (B,) int32 memory ids, −1 for an empty slot
    next: jax.Array  # int32 FIFO write count


class State(NamedTuple):
    bank: Bank
    rank: M.RankState


class Selection(NamedTuple):
    memory_id: jax.Array  # int32 injected memory id, −1 for none
    slot: jax.Array  # int32 its bank slot (−1)
    recall: jax.Array  # (B,) bool: the slots the ranker saw
    cos: jax.Array  # (B,) cosine per slot (−inf for empty slots)
    s: jax.Array  # (B,) ŝ per slot
    gain: jax.Array  # (B,) posterior-mean Â per slot (−inf outside the recall set)
    p0: jax.Array


def init(dims: Dims, hp: M.RankParams) -> State:
    f = jnp.float32
    B, r = dims.capacity, dims.rank
    bank = Bank(keys=jnp.zeros((B, r.key_dim), f), acts=jnp.zeros((B, r.action_dim), f),
                ids=jnp.full((B,), -1, jnp.int32), next=jnp.zeros((), jnp.int32))
    return State(bank=bank, rank=M.init(dims.rank, hp))


def recall_mask(cos: jax.Array, valid: jax.Array, k: int) -> jax.Array:
    """The ``k`` most similar valid slots (all valid slots when fewer)."""
    _, top = jax.lax.top_k(jnp.where(valid, cos, -jnp.inf), min(k, cos.shape[0]))
    return jnp.zeros(cos.shape, bool).at[top].set(True) & valid


def select(state: State, key_vec: jax.Array, x: jax.Array, hp: M.RankParams, dims: Dims) -> tuple[State, Selection]:
    bank = state.bank
    valid = bank.ids >= 0
    cos = bank.keys @ key_vec
    seen = recall_mask(cos, valid, dims.k_candidates)
    rank, choice = M.choose(state.rank, hp, key_vec, x, cos, bank.acts, seen)
    slot = choice.index
    sel = Selection(memory_id=jnp.where(slot >= 0, bank.ids[jnp.maximum(slot, 0)], -1), slot=slot, recall=seen,
                    cos=jnp.where(valid, cos, -jnp.inf), s=choice.s, gain=choice.gain, p0=choice.p0)
    return state._replace(rank=rank), sel


def update(state: State, key_vec: jax.Array, x: jax.Array, reward: jax.Array, offer: jax.Array, a: jax.Array,
           memory_id: jax.Array, hp: M.RankParams) -> State:
    """The reward of the open task; with ``offer`` (a success that wrote a memory) its memory enters."""
    rank = M.learn_reward(state.rank, hp, key_vec, reward)
    offer = jnp.asarray(offer, bool)
    rank = M.learn_memory(rank, x, a, offer)
    bank = state.bank
    w = bank.next % bank.ids.shape[0]

    def put(buf: jax.Array, value: jax.Array) -> jax.Array:
        return buf.at[w].set(jnp.where(offer, jnp.asarray(value, buf.dtype), buf[w]))

    bank = Bank(keys=put(bank.keys, key_vec), acts=put(bank.acts, a), ids=put(bank.ids, memory_id),
                next=bank.next + offer.astype(jnp.int32))
    return State(bank=bank, rank=rank)


class Stream(NamedTuple):
    """One task per row: recall vector, word vector, action vector (of the memory a success writes)."""

    keys: jax.Array  # (T, D)
    words: jax.Array  # (T, Dq)
    acts: jax.Array  # (T, Da)


def run(state: State, stream: Stream, hp: M.RankParams, dims: Dims,
        reward_fn: Callable[[jax.Array, jax.Array], jax.Array]) -> tuple[State, Selection, jax.Array]:
    """The stream in one ``lax.scan``; task t's memory has id t. ``reward_fn(t, memory_id)`` is the
    environment (−1: nothing injected). Returns the final state, each task's selection and rewards."""
    T = stream.keys.shape[0]

    def body(st: State, t: jax.Array) -> tuple[State, tuple[Selection, jax.Array]]:
        st, sel = select(st, stream.keys[t], stream.words[t], hp, dims)
        r = reward_fn(t, sel.memory_id)
        st = update(st, stream.keys[t], stream.words[t], r, r > 0, stream.acts[t], t, hp)
        return st, (sel, r)

    state, (sel, rewards) = jax.lax.scan(body, state, jnp.arange(T, dtype=jnp.int32))
    return state, sel, rewards
