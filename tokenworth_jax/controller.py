"""The controller: its parts composed into pure functions of one configuration.

Each part owns its state and the functions that update it: the :mod:`~tokenworth_jax.bank`, the
:mod:`~tokenworth_jax.base_scorer`, the :mod:`~tokenworth_jax.residual` RFM, the
:mod:`~tokenworth_jax.probes`, the pair :mod:`~tokenworth_jax.scorers` (full, or incremental with
its worth cache) and the :mod:`~tokenworth_jax.modes` (the paper's, or TokenWorth+). This
module only composes them; the phase order of a task is written once, in :func:`step`::

    select -> observe -> offer (only after a success) -> end_task

:func:`finish_task` fuses the last three, :func:`advance` closes one task and selects the next
(the host :class:`~tokenworth_jax.Controller`'s call), :func:`run` scans :func:`step` over a
pre-featurised stream. ``spec`` is static; ``hp`` is traced, so new values never recompile.

Batching is a transform: ``jax.vmap`` of any of these functions runs C configurations stacked
on axis 0, and refits and admissions still run only when some configuration needs them
(:func:`tokenworth_jax.batching.gated`). :func:`run_batched` is a thin convenience over that.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from . import bank as bank_lib
from . import base_scorer, lifecycle, probes, residual, schedule
from .bank import Bank
from .base_scorer import BaseScorer
from .batching import Strategy, gated, over_configs
from .config import HParams, Spec, check_matches
from .features import new_memory_stats
from .inputs import MemoryText, Query, as_memory, as_query
from .lifecycle import Decision, Worth
from .modes import Candidates, Feedback, Mode, paper
from .plus.mode import PlusState, plus
from .pytree import Empty
from .residual import Residual
from .ring import Ring
from .scorers import ProbeScores, Scorer
from .scorers import from_spec as scorer_from_spec
from .scoring import ScoreModel
from .worth_cache import WorthCache


class Pending(NamedTuple):
    """What the open task remembers between select, observe and offer."""

    query: Query  # the open task's query
    retrieved: jax.Array  # bool: the bank was non-empty at select
    selected: jax.Array  # bool: a memory was chosen
    slot: jax.Array  # int32 chosen bank slot (-1 if none)
    phi: jax.Array  # (4,) phi* at selection time
    z: jax.Array  # (F,) z* at selection time
    s_base: jax.Array  # scalar s_base* at selection time
    reward: jax.Array  # int32 reward once observed (-1 before)


class Clock(NamedTuple):
    t: jax.Array  # int32 current task index
    n_feedback: jax.Array  # int32 feedback examples seen (tasks with an injected memory)


class State(NamedTuple):
    """The controller's state: one field per part, each written only by its own module."""

    bank: Bank
    base: BaseScorer
    residual: Residual
    probes: Ring  # data = the last P probe queries (a stacked Query)
    scorer: WorthCache | Empty  # Spec.incremental
    mode: PlusState | Empty  # Spec.plus
    pending: Pending
    clock: Clock


class Selection(NamedTuple):
    candidates: jax.Array  # (K,) int32 bank slots in recall-rank order, -1 where invalid
    candidate_ids: jax.Array  # (K,) int32 memory ids, -1 where invalid
    scores: jax.Array  # (K,) s = s_base + eta f, -inf where invalid
    base_scores: jax.Array  # (K,) s_base
    relevance: jax.Array  # (K,) recall cosine
    chosen: jax.Array  # int32 index into candidates, -1 if nothing was selected
    slot: jax.Array  # int32 chosen bank slot, -1 if none
    memory_id: jax.Array  # int32 chosen memory id, -1 if none
    p0: jax.Array  # the mode's success probability without a memory (NaN in paper mode)
    advantage: jax.Array  # its predicted gain of its best candidate (NaN in paper mode, or no candidate)
    abstained: jax.Array  # bool: candidates existed but the mode injected nothing
    gains: jax.Array  # (K,) the mode's predicted gain of each candidate (NaN in paper mode)
    affinity: jax.Array  # (K,) the mode's learned query-memory affinity of each candidate (NaN in paper mode)


class Event(NamedTuple):
    """One task of a pre-featurised stream, for :func:`step` / :func:`run`."""

    query: jax.Array | Query  # (D,), or a Query (TokenWorth+ reads its words too)
    reward: jax.Array  # int32 0/1 (ignored when a reward_fn is given)
    memory: jax.Array | MemoryText  # (D,) the memory this task would offer on success, or a MemoryText
    memory_id: jax.Array  # int32 id of that memory


class StepOutput(NamedTuple):
    selection: Selection
    reward: jax.Array
    decision: Decision


RewardFn = Callable[[Event, Selection], jax.Array]


class Parts(NamedTuple):
    """The implementations ``Spec`` chooses, once: how pairs are scored, how memories are chosen."""

    scorer: Scorer
    mode: Mode


@functools.lru_cache(maxsize=None)
def parts(spec: Spec) -> Parts:
    return Parts(scorer=scorer_from_spec(spec), mode=plus() if spec.plus else paper())


def _parts(spec: Spec, hp: HParams) -> Parts:
    check_matches(spec, hp)  # structure only: free under jit
    return parts(spec)


def _model(state: State, hp: HParams) -> ScoreModel:
    res = state.residual
    return ScoreModel(w=state.base.w, predictor=res.predictor, metric=res.metric, gamma=hp.gamma,
                      eta=residual.eta(res, hp.eta_max))


def _no_pending(spec: Spec) -> Pending:
    f = spec.float_dtype
    words = jnp.zeros((spec.word_dim,), f) if spec.plus else Empty()
    return Pending(query=Query(key=jnp.zeros((spec.dim,), f), words=words), retrieved=jnp.zeros((), bool),
                   selected=jnp.zeros((), bool),
                   slot=jnp.full((), -1, jnp.int32), phi=jnp.zeros((4,), f), z=jnp.zeros((spec.feature_dim,), f),
                   s_base=jnp.zeros((), f), reward=jnp.full((), -1, jnp.int32))


def _init(spec: Spec, hp: HParams) -> State:
    """A fresh controller: empty bank and windows, w = w0, M = I, no KRR fit yet."""
    p = _parts(spec, hp)
    f = spec.float_dtype
    zero = jnp.zeros((), jnp.int32)
    return State(bank=bank_lib.init(spec.capacity, spec.dim, f),
                 base=base_scorer.init(spec.base_window, hp.w0, f),
                 residual=residual.init(spec.fast_window, spec.slow_window, spec.feature_dim, hp.lambda_krr, f),
                 probes=probes.init(spec.n_probes, spec.dim, spec.word_dim if spec.plus else None, f),
                 scorer=p.scorer.init(spec), mode=p.mode.init(spec, hp), pending=_no_pending(spec),
                 clock=Clock(t=zero, n_feedback=zero))


def _select(state: State, query: ArrayLike | Query, hp: HParams, spec: Spec) -> tuple[State, Selection]:
    """Recall K candidates for ``query`` ((D,) or a Query), score them, and let the mode choose at most one."""
    p = _parts(spec, hp)
    query = as_query(query, spec)
    i32 = jnp.int32
    bank = state.bank
    recall = bank_lib.recall(bank, query.key, min(spec.k_candidates, spec.capacity))
    stats = bank_lib.stats(bank, state.clock.t, hp.kappa)
    scorer, cs = p.scorer.candidates(state.scorer, query.key, bank, recall, stats, _model(state, hp))
    score = jnp.where(recall.valid, cs.score, -jnp.inf)
    mode, choice = p.mode.choose(state.mode, Candidates(query=query, slots=recall.slots, relevance=recall.relevance,
                                                        valid=recall.valid, score=score, base=cs.base), hp)
    selected = choice.index >= 0
    c = jnp.maximum(choice.index, 0)
    slot = jnp.where(selected, recall.slots[c], i32(-1))
    pending = Pending(query=query, retrieved=jnp.any(bank.valid), selected=selected, slot=slot, phi=cs.phi[c],
                      z=cs.z[c], s_base=cs.base[c], reward=i32(-1))
    selection = Selection(
        candidates=jnp.where(recall.valid, recall.slots, i32(-1)),
        candidate_ids=jnp.where(recall.valid, bank.ids[recall.slots], i32(-1)),
        scores=score, base_scores=jnp.where(recall.valid, cs.base, -jnp.inf), relevance=recall.relevance,
        chosen=choice.index, slot=slot, memory_id=jnp.where(selected, bank.ids[jnp.maximum(slot, 0)], i32(-1)),
        p0=choice.p0, advantage=choice.advantage, abstained=choice.abstained, gains=choice.gains,
        affinity=choice.affinity)
    return state._replace(scorer=scorer, mode=mode, pending=pending), selection


def _fit_base(base: BaseScorer, hp: HParams) -> BaseScorer:
    return base_scorer.fit(base, hp.w0, hp.lambda_w, hp.beta_w, hp.w_min, hp.w_max)


def _fit_krr(res: Residual, hp: HParams) -> Residual:
    return residual.fit(res, hp.gamma, hp.lambda_krr)


def _agop(res: Residual, hp: HParams) -> Residual:
    return residual.agop(res, hp.gamma, hp.lambda_krr, hp.beta_m, hp.m_min, hp.m_max)


def _unchanged(x: object, hp: HParams) -> object:
    return x


def _observe(state: State, reward: ArrayLike, hp: HParams, spec: Spec) -> State:
    """Record the judged reward (0/1) of the open task, then run the refits it makes due."""
    p = _parts(spec, hp)
    pend = state.pending
    reward = jnp.asarray(reward, jnp.int32)
    sel = pend.selected
    y = 2 * reward.astype(pend.s_base.dtype) - 1
    clock = state.clock._replace(n_feedback=state.clock.n_feedback + sel.astype(jnp.int32))
    due = schedule.due(clock.n_feedback, hp)

    base = gated(sel & due.base, _fit_base, _unchanged, base_scorer.record(state.base, pend.phi, y, sel), hp)
    res = residual.record(state.residual, pend.z, p.mode.target(state.mode, y, pend.s_base, hp), sel)
    res = gated(sel & due.krr, _fit_krr, _unchanged, res, hp)
    run_agop = sel & due.agop & (res.n_fits > 0)  # AGOP needs a fitted KRR
    res = gated(run_agop, _agop, _unchanged, res, hp)
    queries, _ = probes.queries(state.probes, pend.query)
    scorer = p.scorer.refit(state.scorer, (sel & due.krr) | run_agop, queries.key, state.bank.emb, res.predictor,
                            res.metric)
    return State(bank=bank_lib.credit(state.bank, pend.slot, sel, reward, state.clock.t, hp.u_success, hp.u_failure,
                                      hp.u_min, hp.u_max),
                 base=base, residual=res, probes=state.probes, scorer=scorer,
                 mode=p.mode.update(state.mode, Feedback(query=pend.query, selected=sel, slot=pend.slot, reward=reward),
                                    hp),
                 pending=pend._replace(reward=reward), clock=clock)


def _probe_worth(state: State, memory: MemoryText, hp: HParams, spec: Spec) -> tuple[Worth, object]:
    """The lifecycle's worth of every bank slot and ``memory``, and the scorer's column of ``memory``.

    The paper's probe scores are handed to the mode as a function: a mode whose worth does not read
    them (TokenWorth+'s recency) never computes them."""
    p = parts(spec)
    queries, valid = probes.queries(state.probes, state.pending.query)
    model = _model(state, hp)
    column = p.scorer.column(state.scorer, queries.key, memory.key, model)

    def scores() -> ProbeScores:
        return p.scorer.probes(state.scorer, queries.key, state.bank.emb, memory.key,
                               bank_lib.stats(state.bank, state.clock.t, hp.kappa),
                               new_memory_stats(hp.u_init, spec.float_dtype), model, spec.worth_chunk, column)

    created = jnp.concatenate([state.bank.tau, state.clock.t[None]])  # (B+1,) the offered memory is created now
    return lifecycle.probe_worth(p.mode.worth(state.mode, queries, scores, memory, created, hp), valid), column


def _worth(state: State, memory: ArrayLike | MemoryText, hp: HParams, spec: Spec) -> Worth:
    """V(m) = mean over valid probes of the mode's per-probe worth, for the whole bank and ``memory``."""
    _parts(spec, hp)
    return _probe_worth(state, as_memory(memory, spec), hp, spec)[0]


def _assess(state: State, memory: MemoryText, hp: HParams, spec: Spec) -> tuple[Decision, object]:
    """The admission decision for ``memory``, and what the scorer keeps of it: reads the state only."""
    V, column = _probe_worth(state, memory, hp, spec)
    return lifecycle.decide(state.bank, memory.key, V, hp.tau_nov, hp.delta_write, hp.tau_pos, hp.tau_util,
                            hp.delta_rep), column


def _offer_if(state: State, memory: ArrayLike | MemoryText, memory_id: ArrayLike, offered: ArrayLike, hp: HParams,
              spec: Spec) -> tuple[State, Decision]:
    """The admission runs only for a judged success that ``offered`` a memory ((D,) or a MemoryText).

    Only the decision is computed under the condition (its inputs are read, its outputs small); each
    part then writes what the decision says with masked updates, so the conditional never carries
    the whole state in and out."""
    p = _parts(spec, hp)
    memory = as_memory(memory, spec)
    success = (state.pending.reward == 1) & jnp.asarray(offered, bool)
    assess = functools.partial(_assess, spec=spec)
    shapes = jax.eval_shape(assess, state, memory, hp)[1]  # static: the branches close over no tracer

    def skipped(s: State, m: MemoryText, h: HParams) -> tuple[Decision, object]:
        return (lifecycle.not_offered(spec.float_dtype),
                jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes))

    dec, column = gated(success, assess, skipped, state, memory, hp)
    writes = dec.slot >= 0
    memory_id = jnp.asarray(memory_id, jnp.int32)
    return state._replace(bank=bank_lib.write(state.bank, dec.slot, writes, memory.key, memory_id, state.clock.t,
                                              hp.u_init),
                          scorer=p.scorer.write(state.scorer, dec.slot, column, writes),
                          mode=p.mode.write(state.mode, dec.slot, writes, memory, success)), dec


def _offer(state: State, memory: ArrayLike | MemoryText, memory_id: ArrayLike, hp: HParams,
           spec: Spec) -> tuple[State, Decision]:
    """Offer the memory of the current task. Only a judged success can write (else NOT_OFFERED)."""
    return _offer_if(state, memory, memory_id, True, hp, spec)


def _end_task(state: State, spec: Spec) -> State:
    """Close the task: its query joins the probes (if the bank was non-empty), the clock ticks."""
    p = parts(spec)
    pend = state.pending
    i32 = jnp.int32
    return state._replace(
        scorer=p.scorer.end_task(state.scorer, state.probes.idx, pend.retrieved),
        probes=probes.push(state.probes, pend.query, pend.retrieved),
        clock=state.clock._replace(t=state.clock.t + 1),
        pending=pend._replace(retrieved=jnp.zeros((), bool), selected=jnp.zeros((), bool), slot=i32(-1),
                              reward=i32(-1)))


def _finish_task(state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike,
                 offered: ArrayLike, hp: HParams, spec: Spec) -> tuple[State, Decision]:
    """observe + offer (where ``offered``) + end_task: the rest of a task in one call."""
    state = _observe(state, reward, hp, spec)
    state, decision = _offer_if(state, memory, memory_id, offered, hp, spec)
    return _end_task(state, spec), decision


def _advance(state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike,
             offered: ArrayLike, query: ArrayLike | Query, hp: HParams,
             spec: Spec) -> tuple[State, Decision, Selection]:
    """:func:`finish_task` of the open task, then :func:`select` for the next ``query``: one call."""
    state, decision = _finish_task(state, reward, memory, memory_id, offered, hp, spec)
    state, selection = _select(state, query, hp, spec)
    return state, decision, selection


def _step(state: State, event: Event, hp: HParams, spec: Spec,
          reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    """One whole task: select, the reward (the event's, or ``reward_fn`` of the selection), finish."""
    state, selection = _select(state, event.query, hp, spec)
    reward = jnp.asarray(event.reward if reward_fn is None else reward_fn(event, selection), jnp.int32)
    state, decision = _finish_task(state, reward, event.memory, event.memory_id, True, hp, spec)
    return state, StepOutput(selection=selection, reward=reward, decision=decision)


def _run(state: State, events: Event, hp: HParams, spec: Spec,
         reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    """``lax.scan`` of :func:`step` over a stream of events stacked on axis 0."""
    return jax.lax.scan(lambda s, e: _step(s, e, hp, spec, reward_fn), state, events)


def _run_batched(states: State, events: Event, hps: HParams, spec: Spec, reward_fn: Optional[RewardFn] = None,
                 strategy: Strategy = "auto") -> tuple[State, StepOutput]:
    """C configurations (stacked states and hyperparameters) over one shared stream: ``jax.vmap(run)``
    (or ``lax.map``, the CPU default). Outputs have shape (C, T, ...)."""
    return over_configs(lambda s, h: _run(s, events, h, spec, reward_fn), strategy)(states, hps)


# Public, jit-compiled entry points; ``spec``, ``reward_fn`` and ``strategy`` are static. They
# compose inside a user's own jit / vmap / scan (a jitted function called under jit is inlined).
init = jax.jit(_init, static_argnames=("spec",))
select = jax.jit(_select, static_argnames=("spec",))
observe = jax.jit(_observe, static_argnames=("spec",))
offer = jax.jit(_offer, static_argnames=("spec",))
end_task = jax.jit(_end_task, static_argnames=("spec",))
finish_task = jax.jit(_finish_task, static_argnames=("spec",))
advance = jax.jit(_advance, static_argnames=("spec",))
step = jax.jit(_step, static_argnames=("spec", "reward_fn"))
run = jax.jit(_run, static_argnames=("spec", "reward_fn"))
worth = jax.jit(_worth, static_argnames=("spec",))
run_batched = jax.jit(_run_batched, static_argnames=("spec", "reward_fn", "strategy"))
