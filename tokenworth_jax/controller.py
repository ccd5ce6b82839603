"""The controller's pure functions: select, observe, offer, end_task, and the fused step.

Every function takes the state pytree and returns a new one; nothing is kept on the host.
``spec`` is static; ``hp`` is traced, so new values never recompile.

A task is ``select -> observe -> offer (only after a success) -> end_task``. Each phase is
written once, for one configuration; :func:`finish_task` fuses observe + offer + end_task
(one device call for the host :class:`~tokenworth_jax.Controller`), :func:`step` fuses the
whole task for ``jax.lax.scan`` over a pre-featurised stream (:func:`run`).

The ``*_batched`` entry points run C configurations stacked on axis 0 with the same code,
lifted by :mod:`tokenworth_jax.batching` (``strategy`` ``"vmap"`` or ``"map"``); each takes an
optional (C,) ``mask`` of the configurations that take part (the others keep their state).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from .batching import Strategy, lift, resolve, tree_where
from .config import HParams, Spec
from .features import MemoryStats, memory_stats
from .lifecycle import Decision, offer as _offer
from .refit import refit
from .ring import ring_push
from .scoring import eta_schedule, score_pairs
from .state import Pending, State, init as _init
from . import plus as _plus
from . import worth_cache
from .features import base_features, residual_features


class Selection(NamedTuple):
    candidates: jax.Array  # (K,) int32 bank slots in recall-rank order, -1 where invalid
    candidate_ids: jax.Array  # (K,) int32 memory ids, -1 where invalid
    scores: jax.Array  # (K,) s = s_base + eta f, -inf where invalid
    base_scores: jax.Array  # (K,) s_base
    relevance: jax.Array  # (K,) recall cosine
    chosen: jax.Array  # int32 index into candidates, -1 if nothing was selected
    slot: jax.Array  # int32 chosen bank slot, -1 if none
    memory_id: jax.Array  # int32 chosen memory id, -1 if none


class Event(NamedTuple):
    """One task of a pre-featurised stream, for :func:`step` / :func:`run`."""

    query: jax.Array  # (D,)
    reward: jax.Array  # int32 0/1 (ignored when a reward_fn is given)
    memory: jax.Array  # (D,) the vector of the memory this task would offer on success
    memory_id: jax.Array  # int32 id of that memory


class StepOutput(NamedTuple):
    selection: Selection
    reward: jax.Array
    decision: Decision


RewardFn = Callable[[Event, Selection], jax.Array]


# ----- one configuration -------------------------------------------------------------------
def _select(state: State, query: jax.Array, hp: HParams, spec: Spec) -> tuple[State, Selection]:
    bank = state.bank
    i32 = jnp.int32
    f = state.w.dtype
    k = min(spec.k_candidates, spec.capacity)
    relevance = jnp.where(bank.valid, bank.emb @ query, -jnp.inf)
    top_rel, top = jax.lax.top_k(relevance, k)  # ties: lower slot first
    top = top.astype(i32)
    cand_valid = bank.valid[top]
    stats = MemoryStats(*(s[top] for s in memory_stats(bank, state.counters.t, hp.kappa)))
    eta = eta_schedule(state.counters.n_krr_fits, hp.eta_max, f)
    cache = state.cache
    if worth_cache.enabled(cache):  # the query's row over the whole bank: scores now, worth later
        row = worth_cache.dpart(query[None, :], bank.emb, cache.geometry, state.metric)  # (1, B, N)
        cos = bank.emb @ query
        cache = worth_cache.set_query_row(cache, row[0], cos)
        score_k, base_k = worth_cache.scores(row[:, top], cos[top][None, :], stats, state.w, state.predictor,
                                             cache.geometry, state.metric, hp.gamma, eta)
        phi_k = base_features(cos[top], stats)  # (K, 4)
    else:
        ps = score_pairs(query[None, :], bank.emb[top], stats, state.w, state.predictor, state.metric, hp.gamma, eta)
        score_k, base_k, phi_k = ps.score, ps.base, ps.phi[0]
    score = jnp.where(cand_valid, score_k[0], -jnp.inf)
    retrieved = jnp.any(bank.valid)
    chosen = jnp.where(retrieved, jnp.argmax(score).astype(i32), i32(-1))
    if state.plus is not None:  # TokenWorth+ hook: rank by predicted advantage, maybe abstain (chosen = -1)
        state, chosen = _plus.choose(state, query, top, top_rel, cand_valid, score, base_k[0], chosen, hp)
    selected = chosen >= 0  # the paper: == retrieved
    c = jnp.maximum(chosen, 0)
    slot = jnp.where(selected, top[c], i32(-1))
    if worth_cache.enabled(cache):
        stats_c = MemoryStats(*(s[c] for s in stats))
        z_c = residual_features(jnp.abs(query - bank.emb[top[c]]), phi_k[c, 0], stats_c)
    else:
        z_c = ps.z[0, c]
    pending = Pending(
        query=query,
        retrieved=retrieved,
        selected=selected,
        slot=slot,
        phi=phi_k[c],
        z=z_c,
        s_base=base_k[0, c],
        reward=i32(-1),
    )
    selection = Selection(
        candidates=jnp.where(cand_valid, top, i32(-1)),
        candidate_ids=jnp.where(cand_valid, bank.ids[top], i32(-1)),
        scores=score,
        base_scores=jnp.where(cand_valid, base_k[0], -jnp.inf),
        relevance=top_rel,
        chosen=chosen,
        slot=slot,
        memory_id=jnp.where(selected, bank.ids[jnp.maximum(slot, 0)], i32(-1)),
    )
    return state._replace(pending=pending, cache=cache), selection


def _record_feedback(state: State, reward: jax.Array, hp: HParams) -> State:
    """Feedback for the selected pair without the refits: windows, memory stats, counters."""
    p = state.pending
    f = state.w.dtype
    reward = jnp.asarray(reward, jnp.int32)
    sel = p.selected
    r = reward.astype(f)
    y = 2 * r - 1
    delta = y - (2 * jax.nn.sigmoid(p.s_base) - 1)
    if state.plus is not None:  # TokenWorth+ hook: advantage credit y - (2 p0(q) - 1)
        delta = _plus.residual_target(state, y, delta, hp)

    bank = state.bank
    slot = jnp.maximum(p.slot, 0)

    def bump(arr: jax.Array, value: jax.Array) -> jax.Array:
        return arr.at[slot].set(jnp.where(sel, value, arr[slot]))

    u_new = jnp.clip(bank.u[slot] + jnp.where(reward == 1, hp.u_success, -hp.u_failure), hp.u_min, hp.u_max)
    bank = bank._replace(
        u=bump(bank.u, u_new),
        h=bump(bank.h, bank.h[slot] + r),
        d=bump(bank.d, bank.d[slot] + (1 - r)),
        c=bump(bank.c, bank.c[slot] + 1),
        last=bump(bank.last, state.counters.t),
    )
    state = state._replace(
        bank=bank,
        base_ring=ring_push(state.base_ring, (p.phi, y), sel),
        fast_ring=ring_push(state.fast_ring, (p.z, delta), sel),
        slow_ring=ring_push(state.slow_ring, (p.z, delta), sel),
        counters=state.counters._replace(n_feedback=state.counters.n_feedback + sel.astype(jnp.int32)),
        pending=p._replace(reward=reward),
    )
    if state.plus is not None:  # TokenWorth+ hook: p0 ring, lift refit, per-memory advantage
        state = _plus.record(state, hp)
    return state


def _observe(state: State, reward: jax.Array, hp: HParams, spec: Spec, *, batched: bool = False) -> State:
    """Record the judged reward, then run the refits it makes due."""
    del spec
    return refit(lift(_record_feedback, batched)(state, reward, hp), hp, batched)


def _end_task_one(state: State) -> State:
    p = state.pending
    i32 = jnp.int32
    cache = state.cache
    if worth_cache.enabled(cache):
        cache = worth_cache.push_query(cache, state.probe_ring.idx, p.retrieved)
    return state._replace(
        cache=cache,
        probe_ring=ring_push(state.probe_ring, p.query, p.retrieved),
        counters=state.counters._replace(t=state.counters.t + 1),
        pending=p._replace(retrieved=jnp.zeros((), bool), selected=jnp.zeros((), bool), slot=i32(-1),
                           reward=i32(-1)),
    )


def _end_task(state: State, spec: Spec, *, batched: bool = False) -> State:
    del spec
    return lift(_end_task_one, batched)(state)


def _finish_task(state: State, reward: jax.Array, memory: jax.Array, memory_id: jax.Array, offered: jax.Array,
                 hp: HParams, spec: Spec, *, batched: bool = False) -> tuple[State, Decision]:
    """observe + offer (where ``offered``) + end_task: the rest of a task in one call."""
    state = _observe(state, reward, hp, spec, batched=batched)
    state, decision = _offer(state, memory, memory_id, hp, spec, enabled=offered, batched=batched)
    return _end_task(state, spec, batched=batched), decision


def _step(state: State, event: Event, hp: HParams, spec: Spec,
          reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    state, selection = _select(state, event.query, hp, spec)
    reward = jnp.asarray(event.reward if reward_fn is None else reward_fn(event, selection), jnp.int32)
    state, decision = _finish_task(state, reward, event.memory, event.memory_id, jnp.ones((), bool), hp, spec)
    return state, StepOutput(selection=selection, reward=reward, decision=decision)


def _run(state: State, events: Event, hp: HParams, spec: Spec,
         reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    """``lax.scan`` of :func:`step` over a stream of events stacked on axis 0."""
    return jax.lax.scan(lambda s, e: _step(s, e, hp, spec, reward_fn), state, events)


def _close_and_select(state: State, reward: jax.Array, memory: jax.Array, memory_id: jax.Array, offered: jax.Array,
                      query: jax.Array, hp: HParams, spec: Spec) -> tuple[State, Decision, Selection]:
    """:func:`finish_task` of the open task, then :func:`select` of the next: one device call."""
    state, decision = _finish_task(state, reward, memory, memory_id, offered, hp, spec)
    state, selection = _select(state, query, hp, spec)
    return state, decision, selection


# ----- C configurations stacked on axis 0 -----------------------------------------------------
def _configs(states: State) -> int:
    return states.counters.t.shape[0]


def _mask(mask: Optional[jax.Array], C: int) -> jax.Array:
    return jnp.ones((C,), bool) if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), (C,))


def _per_config(x: jax.Array, C: int, ndim: int) -> jax.Array:
    """Broadcast an argument shared by all configurations (rank ``ndim``) to a leading axis C."""
    x = jnp.asarray(x)
    return x if x.ndim > ndim else jnp.broadcast_to(x, (C,) + x.shape)


def _select_batched(states: State, queries: jax.Array, hps: HParams, spec: Spec, mask: Optional[jax.Array] = None,
                    strategy: Strategy = "auto") -> tuple[State, Selection]:
    """:func:`select` for C configurations; ``queries`` is (D,) shared or (C, D)."""
    C = _configs(states)
    q, m = _per_config(queries, C, 1), _mask(mask, C)

    def one(s: State, qq: jax.Array, hp: HParams) -> tuple[State, Selection]:
        return _select(s, qq, hp, spec)

    if resolve(strategy) == "map":
        new, sel = jax.lax.map(lambda a: one(*a), (states, q, hps))
    else:
        new, sel = jax.vmap(one)(states, q, hps)
    return tree_where(m, new, states), sel


def _observe_batched(states: State, rewards: jax.Array, hps: HParams, spec: Spec,
                     strategy: Strategy = "auto") -> State:
    """:func:`observe` for C configurations; ``rewards`` is (C,) (or one shared reward)."""
    r = _per_config(jnp.asarray(rewards, jnp.int32), _configs(states), 0)
    if resolve(strategy) == "map":
        return jax.lax.map(lambda a: _observe(a[0], a[1], a[2], spec), (states, r, hps))
    return _observe(states, r, hps, spec, batched=True)


def _offer_batched(states: State, memories: jax.Array, memory_ids: jax.Array, hps: HParams, spec: Spec,
                   mask: Optional[jax.Array] = None, strategy: Strategy = "auto") -> tuple[State, Decision]:
    """:func:`offer` for C configurations; the admission runs only if some masked-in one succeeded."""
    C = _configs(states)
    e, ids, m = _per_config(memories, C, 1), _per_config(jnp.asarray(memory_ids, jnp.int32), C, 0), _mask(mask, C)
    if resolve(strategy) == "map":
        return jax.lax.map(lambda a: _offer(a[0], a[1], a[2], a[3], spec, enabled=a[4]), (states, e, ids, hps, m))
    return _offer(states, e, ids, hps, spec, enabled=m, batched=True)


def _end_task_batched(states: State, spec: Spec, mask: Optional[jax.Array] = None,
                      strategy: Strategy = "auto") -> State:
    """:func:`end_task` for C configurations (cheap: always vmapped)."""
    del strategy
    return tree_where(_mask(mask, _configs(states)), _end_task(states, spec, batched=True), states)


def _finish_task_batched(states: State, rewards: jax.Array, memories: jax.Array, memory_ids: jax.Array,
                         offered: jax.Array, hps: HParams, spec: Spec,
                         strategy: Strategy = "auto") -> tuple[State, Decision]:
    """:func:`finish_task` for C configurations (``offered`` is the (C,) offer mask)."""
    C = _configs(states)
    args = (_per_config(jnp.asarray(rewards, jnp.int32), C, 0), _per_config(memories, C, 1),
            _per_config(jnp.asarray(memory_ids, jnp.int32), C, 0), _mask(offered, C))
    if resolve(strategy) == "map":
        return jax.lax.map(lambda a: _finish_task(a[0], *a[1], a[2], spec), (states, args, hps))
    return _finish_task(states, *args, hps, spec, batched=True)


def _step_batched(states: State, event: Event, hps: HParams, spec: Spec, reward_fn: Optional[RewardFn] = None,
                  strategy: Strategy = "auto") -> tuple[State, StepOutput]:
    """:func:`step` for C configurations on one shared event. Outputs have a leading axis C."""
    if resolve(strategy) == "map":
        return jax.lax.map(lambda x: _step(x[0], event, x[1], spec, reward_fn), (states, hps))
    states, selection = _select_batched(states, event.query, hps, spec, strategy="vmap")
    if reward_fn is None:
        rewards = jnp.broadcast_to(jnp.asarray(event.reward, jnp.int32), states.counters.t.shape)
    else:
        rewards = jax.vmap(reward_fn, in_axes=(None, 0))(event, selection).astype(jnp.int32)
    states, decision = _finish_task_batched(states, rewards, event.memory, event.memory_id, None, hps, spec, "vmap")
    return states, StepOutput(selection=selection, reward=rewards, decision=decision)


def _run_batched(states: State, events: Event, hps: HParams, spec: Spec, reward_fn: Optional[RewardFn] = None,
                 strategy: Strategy = "auto") -> tuple[State, StepOutput]:
    """C configurations (stacked states and hyperparameters) over one shared stream.

    Equal to ``jax.vmap(run)``, without its cost of running every refit and every admission
    at every step. Outputs have shape (C, T, ...).
    """
    if resolve(strategy) == "map":
        return jax.lax.map(lambda x: _run(x[0], events, x[1], spec, reward_fn), (states, hps))
    states, out = jax.lax.scan(lambda s, e: _step_batched(s, e, hps, spec, reward_fn, "vmap"), states, events)
    return states, jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), out)


def _init_batched(spec: Spec, hps: HParams) -> State:
    """C fresh states for stacked hyperparameters."""
    return jax.vmap(_init, in_axes=(None, 0))(spec, hps)


# Public, jit-compiled entry points. ``spec``, ``reward_fn`` and ``strategy`` are static. They
# compose inside a user's own jit / vmap / scan (a jitted function called under jit is inlined).
init = jax.jit(_init, static_argnames=("spec",))
select = jax.jit(_select, static_argnames=("spec",))
observe = jax.jit(_observe, static_argnames=("spec", "batched"))
offer = jax.jit(_offer, static_argnames=("spec", "batched"))
end_task = jax.jit(_end_task, static_argnames=("spec", "batched"))
finish_task = jax.jit(_finish_task, static_argnames=("spec", "batched"))
close_and_select = jax.jit(_close_and_select, static_argnames=("spec",))
step = jax.jit(_step, static_argnames=("spec", "reward_fn"))
run = jax.jit(_run, static_argnames=("spec", "reward_fn"))

init_batched = jax.jit(_init_batched, static_argnames=("spec",))
select_batched = jax.jit(_select_batched, static_argnames=("spec", "strategy"))
observe_batched = jax.jit(_observe_batched, static_argnames=("spec", "strategy"))
offer_batched = jax.jit(_offer_batched, static_argnames=("spec", "strategy"))
end_task_batched = jax.jit(_end_task_batched, static_argnames=("spec", "strategy"))
finish_task_batched = jax.jit(_finish_task_batched, static_argnames=("spec", "strategy"))
step_batched = jax.jit(_step_batched, static_argnames=("spec", "reward_fn", "strategy"))
run_batched = jax.jit(_run_batched, static_argnames=("spec", "reward_fn", "strategy"))
