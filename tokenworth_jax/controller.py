"""The controller's pure functions: select, observe, offer, end_task, and the fused step.

Every function takes the state pytree and returns a new one; nothing is kept on the host.
``spec`` is static; ``hp`` is traced, so ``jax.vmap`` over stacked hyperparameters (and
states) runs many configurations in one call, and new values never recompile.

A task is ``select -> observe -> offer (only after a success) -> end_task``; ``step`` fuses
them for ``jax.lax.scan`` over a pre-featurised stream (see :func:`run`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from . import krr
from .agop import agop_diagonal, update_metric
from .base_scorer import newton_fit, refit_weights
from .config import HParams, Spec
from .features import MemoryStats, memory_stats
from .lifecycle import Decision, offer as _offer
from .ring import ring_push, ring_valid
from .scoring import score_pairs
from .state import Pending, State, init as _init
from . import plus as _plus


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


def _select(state: State, query: jax.Array, hp: HParams, spec: Spec) -> tuple[State, Selection]:
    bank = state.bank
    i32 = jnp.int32
    k = min(spec.k_candidates, spec.capacity)
    relevance = jnp.where(bank.valid, bank.emb @ query, -jnp.inf)
    top_rel, top = jax.lax.top_k(relevance, k)  # ties: lower slot first
    top = top.astype(i32)
    cand_valid = bank.valid[top]
    stats = MemoryStats(*(s[top] for s in memory_stats(bank, state.counters.t, hp.kappa)))
    ps = score_pairs(query[None, :], bank.emb[top], stats, state, hp)
    score = jnp.where(cand_valid, ps.score[0], -jnp.inf)
    retrieved = jnp.any(bank.valid)
    chosen = jnp.where(retrieved, jnp.argmax(score).astype(i32), i32(-1))
    if state.plus is not None:  # TokenWorth+ hook: rank by predicted advantage, maybe abstain (chosen = -1)
        state, chosen = _plus.choose(state, query, top, top_rel, cand_valid, score, ps.base[0], chosen, hp)
    selected = chosen >= 0  # the paper: == retrieved
    c = jnp.maximum(chosen, 0)
    slot = jnp.where(selected, top[c], i32(-1))
    pending = Pending(
        query=query,
        retrieved=retrieved,
        selected=selected,
        slot=slot,
        phi=ps.phi[0, c],
        z=ps.z[0, c],
        s_base=ps.base[0, c],
        reward=i32(-1),
    )
    selection = Selection(
        candidates=jnp.where(cand_valid, top, i32(-1)),
        candidate_ids=jnp.where(cand_valid, bank.ids[top], i32(-1)),
        scores=score,
        base_scores=jnp.where(cand_valid, ps.base[0], -jnp.inf),
        relevance=top_rel,
        chosen=chosen,
        slot=slot,
        memory_id=jnp.where(selected, bank.ids[jnp.maximum(slot, 0)], i32(-1)),
    )
    return state._replace(pending=pending), selection


def _fit_krr(state: State, hp: HParams) -> State:
    (z, delta) = state.fast_ring.data
    predictor = krr.fit(z, ring_valid(state.fast_ring), delta, state.metric, jnp.asarray(hp.gamma, z.dtype),
                        jnp.asarray(hp.lambda_krr, z.dtype))
    counters = state.counters._replace(n_krr_fits=state.counters.n_krr_fits + 1)
    return state._replace(predictor=predictor, counters=counters)


def _fit_base(state: State, hp: HParams) -> State:
    phi, y = state.base_ring.data
    f = phi.dtype
    w_fit, _ = newton_fit(phi, y, ring_valid(state.base_ring), state.w, jnp.asarray(hp.w0, f),
                          jnp.asarray(hp.lambda_w, f))
    w = refit_weights(state.w, w_fit, jnp.asarray(hp.beta_w, f), jnp.asarray(hp.w_min, f), jnp.asarray(hp.w_max, f))
    return state._replace(w=w, counters=state.counters._replace(n_base_fits=state.counters.n_base_fits + 1))


def _agop(state: State, hp: HParams) -> State:
    z, _ = state.slow_ring.data
    f = z.dtype
    grads = krr.grad(z, state.predictor, state.metric, jnp.asarray(hp.gamma, f))
    G = agop_diagonal(grads, ring_valid(state.slow_ring))
    metric = update_metric(state.metric, G, jnp.asarray(hp.beta_m, f), jnp.asarray(hp.m_min, f),
                           jnp.asarray(hp.m_max, f))
    state = state._replace(metric=metric, counters=state.counters._replace(n_agop=state.counters.n_agop + 1))
    return _fit_krr(state, hp)  # refit immediately with the new metric


def _when(pred: jax.Array, fn: Callable[[State], State], state: State) -> State:
    return jax.lax.cond(pred, fn, lambda s: s, state)


def schedule(n_feedback: jax.Array, hp: HParams) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Which refits are due at feedback count ``n_feedback``: (base, krr, agop-if-fitted)."""
    n = n_feedback
    base_due = (n > 0) & (n % hp.base_interval == 0)
    krr_due = (n == hp.warmup) | ((n > hp.warmup) & (n % hp.krr_interval == 0))
    agop_due = (n > 0) & (n % hp.agop_interval == 0)
    return base_due, krr_due, agop_due


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


def refits_due(state: State, hp: HParams) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(base, krr, agop) refits due right after this task's feedback was recorded."""
    base_due, krr_due, agop_due = schedule(state.counters.n_feedback, hp)
    sel = state.pending.selected
    return sel & base_due, sel & krr_due, sel & agop_due


def _refit(state: State, hp: HParams) -> State:
    """Run the due refits in order: base, KRR, then AGOP (needs a fitted KRR) and its KRR refit."""
    base_due, krr_due, agop_due = refits_due(state, hp)
    state = _when(base_due, lambda s: _fit_base(s, hp), state)
    state = _when(krr_due, lambda s: _fit_krr(s, hp), state)
    return _when(agop_due & (state.counters.n_krr_fits > 0), lambda s: _agop(s, hp), state)


def _observe(state: State, reward: jax.Array, hp: HParams, spec: Spec) -> State:
    return _refit(_record_feedback(state, reward, hp), hp)


def _end_task(state: State, spec: Spec) -> State:
    p = state.pending
    i32 = jnp.int32
    return state._replace(
        probe_ring=ring_push(state.probe_ring, p.query, p.retrieved),
        counters=state.counters._replace(t=state.counters.t + 1),
        pending=p._replace(retrieved=jnp.zeros((), bool), selected=jnp.zeros((), bool), slot=i32(-1),
                           reward=i32(-1)),
    )


def _step(state: State, event: Event, hp: HParams, spec: Spec,
          reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    state, selection = _select(state, event.query, hp, spec)
    reward = jnp.asarray(event.reward if reward_fn is None else reward_fn(event, selection), jnp.int32)
    state = _observe(state, reward, hp, spec)
    state, decision = _offer(state, event.memory, event.memory_id, hp, spec)
    state = _end_task(state, spec)
    return state, StepOutput(selection=selection, reward=reward, decision=decision)


def _run(state: State, events: Event, hp: HParams, spec: Spec,
         reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    """``lax.scan`` of :func:`step` over a stream of events stacked on axis 0."""
    return jax.lax.scan(lambda s, e: _step(s, e, hp, spec, reward_fn), state, events)


# ----- many configurations at once ---------------------------------------------------------
# Two strategies, chosen by the static ``strategy`` argument:
#
# * ``"vmap"`` batches every array op over the configurations. Under a plain ``jax.vmap`` a
#   ``lax.cond`` with a per-configuration predicate becomes a ``select``, so every refit would
#   run for every configuration at every step; here the refits stay outside the vmap, behind
#   one ``lax.cond`` on "any configuration due". Best where batched matmuls are cheap (GPU).
# * ``"map"`` loops over the configurations inside the compiled program (``lax.map``), so
#   each configuration's refits are real branches. On CPU, XLA's batched matmuls are slower
#   than a loop of plain ones (measured in bench/results), so this is the CPU default.
#
# ``"auto"`` picks ``"map"`` on the CPU backend and ``"vmap"`` elsewhere. Both give the same
# results as separate runs (tests/test_transforms.py).

Strategy = str  # "auto" | "vmap" | "map"


def _resolve(strategy: Strategy) -> str:
    if strategy == "auto":
        return "map" if jax.default_backend() == "cpu" else "vmap"
    if strategy not in ("vmap", "map"):
        raise ValueError(f"strategy must be 'auto', 'vmap' or 'map', got {strategy!r}")
    return strategy


def map_configs(fn: Callable[..., Any], *stacked: Any, strategy: Strategy = "auto") -> Any:
    """Apply a per-configuration function to arguments stacked on axis 0 (vmap or lax.map).

    Shared arguments go in ``fn``'s closure. Use it inside ``jax.jit``.
    """
    if _resolve(strategy) == "map":
        return jax.lax.map(lambda args: fn(*args), stacked)
    return jax.vmap(fn)(*stacked)


def _tree_where(mask: jax.Array, new: State, old: State) -> State:
    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree_util.tree_map(pick, new, old)


def _observe_batched(states: State, rewards: jax.Array, hps: HParams, spec: Spec, strategy: Strategy = "auto") -> State:
    """``observe`` for C stacked states and hyperparameters (leading axis C)."""
    if _resolve(strategy) == "map":
        return jax.lax.map(lambda x: _observe(x[0], x[1], x[2], spec), (states, rewards, hps))
    states = jax.vmap(_record_feedback)(states, rewards, hps)
    base_due, krr_due, _ = jax.vmap(refits_due)(states, hps)

    def gated(pred: jax.Array, fit: Callable[[State, HParams], State], s: State) -> State:
        return jax.lax.cond(jnp.any(pred), lambda x: _tree_where(pred, jax.vmap(fit)(x, hps), x), lambda x: x, s)

    states = gated(base_due, _fit_base, states)
    states = gated(krr_due, _fit_krr, states)
    _, _, agop_due = jax.vmap(refits_due)(states, hps)
    return gated(agop_due & (states.counters.n_krr_fits > 0), _agop, states)


def _step_batched(states: State, event: Event, hps: HParams, spec: Spec, reward_fn: Optional[RewardFn] = None,
                  strategy: Strategy = "auto") -> tuple[State, StepOutput]:
    """:func:`step` for C configurations on one shared event. Outputs have a leading axis C."""
    if _resolve(strategy) == "map":
        return jax.lax.map(lambda x: _step(x[0], event, x[1], spec, reward_fn), (states, hps))
    states, selection = jax.vmap(_select, in_axes=(0, None, 0, None))(states, event.query, hps, spec)
    if reward_fn is None:
        rewards = jnp.broadcast_to(jnp.asarray(event.reward, jnp.int32), states.counters.t.shape)
    else:
        rewards = jax.vmap(reward_fn, in_axes=(None, 0))(event, selection).astype(jnp.int32)
    states = _observe_batched(states, rewards, hps, spec, "vmap")
    states, decision = jax.vmap(_offer, in_axes=(0, None, None, 0, None))(states, event.memory, event.memory_id,
                                                                          hps, spec)
    states = jax.vmap(_end_task, in_axes=(0, None))(states, spec)
    return states, StepOutput(selection=selection, reward=rewards, decision=decision)


def _run_batched(states: State, events: Event, hps: HParams, spec: Spec, reward_fn: Optional[RewardFn] = None,
                 strategy: Strategy = "auto") -> tuple[State, StepOutput]:
    """C configurations (stacked states and hyperparameters) over one shared stream.

    Equal to ``jax.vmap(run)``, without its cost of running every refit at every step.
    Outputs have shape (C, T, ...).
    """
    if _resolve(strategy) == "map":
        return jax.lax.map(lambda x: _run(x[0], events, x[1], spec, reward_fn), (states, hps))
    states, out = jax.lax.scan(lambda s, e: _step_batched(s, e, hps, spec, reward_fn, "vmap"), states, events)
    return states, jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), out)


def init_batched(spec: Spec, hps: HParams) -> State:
    """C fresh states for stacked hyperparameters."""
    return jax.vmap(_init, in_axes=(None, 0))(spec, hps)


# Public, jit-compiled entry points. ``spec`` (and ``reward_fn``) are static.
init = jax.jit(_init, static_argnames=("spec",))
select = jax.jit(_select, static_argnames=("spec",))
observe = jax.jit(_observe, static_argnames=("spec",))
offer = jax.jit(_offer, static_argnames=("spec",))
end_task = jax.jit(_end_task, static_argnames=("spec",))
step = jax.jit(_step, static_argnames=("spec", "reward_fn"))
run = jax.jit(_run, static_argnames=("spec", "reward_fn"))
observe_batched = jax.jit(_observe_batched, static_argnames=("spec", "strategy"))
step_batched = jax.jit(_step_batched, static_argnames=("spec", "reward_fn", "strategy"))
run_batched = jax.jit(_run_batched, static_argnames=("spec", "reward_fn", "strategy"))

# Un-jitted versions, for composing inside a user's own jit / vmap / scan.
raw = dict(init=_init, select=_select, observe=_observe, offer=_offer, end_task=_end_task, step=_step, run=_run,
           observe_batched=_observe_batched, step_batched=_step_batched, run_batched=_run_batched)
