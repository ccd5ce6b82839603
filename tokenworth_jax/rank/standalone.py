"""A minimal memory controller around the learned ranker: FIFO bank, cosine recall, learned choice.

This is the prototype the research loop (``bench/rank``) and the ``tokenworth-rank`` policy run.
When the ranker is wired into the TokenWorth controller as a component, that controller's bank,
recall and lifecycle replace :class:`Bank`; the ranker's interface is the same
(:func:`~tokenworth_jax.rank.model.choose` on the recall set, :func:`~tokenworth_jax.rank.model.learn_reward`
after the grader, :func:`~tokenworth_jax.rank.model.learn_memory` on every offered memory).

Per task: :func:`select` (recall the ``k_candidates`` most cosine-similar memories, or the whole
bank with ``recall_all``; the ranker picks one or none), then :func:`update` with the reward
and, after a success, the task's own memory (its recall vector, word vector, action vector and
id): the action model learns from it and it enters the bank, the oldest leaving when full.
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


class Params(NamedTuple):
    rank: M.RankParams
    recall_all: jax.Array  # 0/1: the ranker sees the whole bank instead of the K_c most similar


def params(recall_all: float = 0.0, **rank: object) -> Params:
    return Params(rank=M.rank_params(**rank), recall_all=jnp.asarray(recall_all, jnp.float32))


class Bank(NamedTuple):
    keys: jax.Array  # (B, D) recall vectors
    words: jax.Array  # (B, Dq) the source questions' word vectors
    acts: jax.Array  # (B, Da) action vectors
    ids: jax.Array  # (B,) int32 memory ids, −1 for an empty slot
    adv_sum: jax.Array  # (B,) Σ (y − p̂₀) over the memory's uses
    adv_n: jax.Array  # (B,) uses
    next: jax.Array  # int32 FIFO write position


class State(NamedTuple):
    bank: Bank
    rank: M.RankState
    slot: jax.Array  # int32 bank slot injected in the open task, −1 for none
    seen: jax.Array  # (B,) bool: the open task's recall set


class Selection(NamedTuple):
    memory_id: jax.Array  # int32 injected memory id, −1 for none
    slot: jax.Array  # int32 its bank slot
    recall: jax.Array  # (B,) bool: the slots the ranker saw
    cos: jax.Array  # (B,) cosine per slot (−inf for empty slots)
    s: jax.Array  # (B,) ŝ per slot
    gain: jax.Array  # (B,) Â per slot (−inf outside the recall set)
    p0: jax.Array


def init(dims: Dims, hp: Params) -> State:
    f = jnp.float32
    B, r = dims.capacity, dims.rank
    bank = Bank(keys=jnp.zeros((B, r.key_dim), f), words=jnp.zeros((B, r.query_dim), f),
                acts=jnp.zeros((B, r.action_dim), f), ids=jnp.full((B,), -1, jnp.int32), adv_sum=jnp.zeros((B,), f),
                adv_n=jnp.zeros((B,), f), next=jnp.zeros((), jnp.int32))
    return State(bank=bank, rank=M.init(dims.rank, hp.rank), slot=jnp.full((), -1, jnp.int32),
                 seen=jnp.zeros((B,), bool))


def recall_mask(cos: jax.Array, valid: jax.Array, k: int) -> jax.Array:
    """The ``k`` most similar valid slots (all valid slots when fewer)."""
    masked = jnp.where(valid, cos, -jnp.inf)
    _, top = jax.lax.top_k(masked, min(k, cos.shape[0]))
    return jnp.zeros(cos.shape, bool).at[top].set(True) & valid


def select(state: State, key_vec: jax.Array, x: jax.Array, hp: Params, dims: Dims) -> tuple[State, Selection]:
    bank = state.bank
    valid = bank.ids >= 0
    cos = bank.keys @ key_vec
    relevance = cos + hp.rank.recall_s * M.pair_scores(state.rank.actions, x, bank.acts, hp.rank)
    seen = jnp.where(hp.recall_all > 0.5, valid, recall_mask(relevance, valid, dims.k_candidates))
    adv = bank.adv_sum / (bank.adv_n + 1)
    rank, choice = M.choose(state.rank, hp.rank, key_vec, x, cos, bank.acts, adv, seen)
    slot = choice.index
    sel = Selection(memory_id=jnp.where(slot >= 0, bank.ids[jnp.maximum(slot, 0)], -1), slot=slot, recall=seen,
                    cos=jnp.where(valid, cos, -jnp.inf), s=choice.s, gain=choice.gain, p0=choice.p0)
    return state._replace(rank=rank, slot=slot, seen=seen), sel


def update(state: State, key_vec: jax.Array, x: jax.Array, reward: jax.Array, offer: jax.Array, a: jax.Array,
           memory_id: jax.Array, hp: Params) -> State:
    """The reward of the open task; with ``offer`` (a success that wrote a memory) its memory enters."""
    bank = state.bank
    used = state.slot >= 0
    slot = jnp.maximum(state.slot, 0)
    pend, r = state.rank.pending, jnp.asarray(reward, bank.adv_sum.dtype)
    p_pred = jax.nn.sigmoid(M.logit(pend.p0) + pend.psi @ state.rank.theta)
    actions = M.reward_update(state.rank.actions, x, bank.acts[slot], r, p_pred, state.rank.theta[2], hp.rank, used)
    rank = M.learn_reward(state.rank._replace(actions=actions), hp.rank, key_vec, reward)
    credit = r - jnp.where(hp.rank.adv_net > 0.5, pend.p0, 0.5)
    bank = bank._replace(adv_sum=bank.adv_sum.at[slot].add(jnp.where(used, credit, 0.0)),
                         adv_n=bank.adv_n.at[slot].add(jnp.where(used, 1.0, 0.0)))
    offer = jnp.asarray(offer, bool)
    listwise = M.listwise_update(rank.actions, x, a, bank.acts, state.seen & offer, hp.rank)
    rank = M.learn_memory(rank._replace(actions=listwise), x, a, offer)
    w = bank.next % bank.ids.shape[0]

    def put(buf: jax.Array, value: jax.Array) -> jax.Array:
        return buf.at[w].set(jnp.where(offer, jnp.asarray(value, buf.dtype), buf[w]))

    bank = Bank(keys=put(bank.keys, key_vec), words=put(bank.words, x), acts=put(bank.acts, a),
                ids=put(bank.ids, memory_id), adv_sum=put(bank.adv_sum, 0.0), adv_n=put(bank.adv_n, 0.0),
                next=bank.next + offer.astype(jnp.int32))
    return State(bank=bank, rank=rank, slot=jnp.full((), -1, jnp.int32), seen=jnp.zeros_like(state.seen))


class Stream(NamedTuple):
    """One task per row: recall vector, word vector, action vector (of the memory a success writes)."""

    keys: jax.Array  # (T, D)
    words: jax.Array  # (T, Dq)
    acts: jax.Array  # (T, Da)


def run(state: State, stream: Stream, hp: Params, dims: Dims,
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
