"""The controller, built from the parts it is given.

:func:`controller` takes a scorer (:mod:`~tokenworth_jax.scorers`) and a mode
(:mod:`~tokenworth_jax.modes`) and returns :class:`ControllerFunctions`, a NamedTuple of pure,
jit-compiled functions, as optax builds a transformation from its parts. The paper's method is
the pair (``full``, ``paper``); the preset table names it and the other pairs (``tw.preset``). This module only composes the parts: the bank, the base scorer, the residual RFM,
the probes, and the scorer and the mode, each owning its state and its pure functions. The phase
order of a task is written once, in ``_step``::

    select -> observe -> offer (only after a success) -> end_task

``finish_task`` fuses the last three, ``advance`` closes one task and selects the next, ``run``
scans ``step`` over a pre-featurised stream. The open task's :class:`~tokenworth_jax.protocol.Progress`
(phase, judged reward, offered) is part of the state; each function advances it.

:class:`Spec` is the static configuration: the shape fields and the two parts. It is a static
jit argument; ``hp`` is traced, so new values never recompile. The module-level ``tw.select(state,
q, hp, spec)`` etc. are ``controller(spec.scorer, spec.mode).select(...)``.

Batching is a transform: ``jax.vmap`` of any of these functions runs C configurations stacked
on axis 0, and refits and admissions still run only when some configuration needs them
(:func:`tokenworth_jax.batching.gated`). ``run_batched`` is a thin convenience over that.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from . import bank as bank_lib
from . import base_scorer, inputs, lifecycle, probes, protocol, residual, schedule
from .bank import Bank
from .base_scorer import BaseScorer
from .batching import Strategy, gated, over_configs
from .config import N_STAT_FEATURES, PART_SLOTS, HParams, check_dtype, check_parts, check_shapes
from .features import new_memory_stats
from .featurize import DIM
from .inputs import MemoryText, Query
from .lifecycle import Decision, Worth
from .modes import Candidates, Feedback, Mode, paper
from .protocol import Progress
from .residual import Residual
from .ring import Ring
from .scorers import ProbeScores, Scorer, full
from .scoring import ScoreModel


# ----- the static configuration -----------------------------------------------------------------
SHAPE_MINIMUM = dict(dim=1, capacity=1, base_window=1, fast_window=1, slow_window=1, k_candidates=1, n_probes=1,
                     worth_chunk=0)


class _SpecFields(NamedTuple):
    dim: int = DIM  # D, the hashed text vectors (tokenworth_jax.featurize)
    capacity: int = 64  # B_max
    base_window: int = 256
    fast_window: int = 128
    slow_window: int = 256
    k_candidates: int = 12
    n_probes: int = 8  # earlier queries kept as probes; |P| <= n_probes + 1
    dtype: str = "float32"
    # Worth is computed over the bank in chunks of this many memories (0 = all at once).
    # Bounds peak memory for very large banks; decisions are identical, values equal to
    # rounding (XLA blocks the smaller matmuls differently; tests/test_transforms.py).
    worth_chunk: int = 0
    scorer: Scorer = full()  # how pairs are scored: full() or incremental() (tokenworth_jax.scorers)
    mode: Mode = paper()  # how a memory is chosen and credited (tokenworth_jax.modes; any Mode value)


class Spec(_SpecFields):
    """Static settings: the shape fields and the two parts. Hashable, so it is a static jit argument.

    Every field is checked when a Spec is made (also by ``_replace``): a ValueError names the
    field, its value and the allowed range. The parts bring their own shape fields
    (``spec.mode.shapes``), hyperparameters (``hp.mode``) and inputs (``spec.mode.features``).
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "Spec":
        self = super().__new__(cls, *args, **kwargs)
        check_shapes("Spec", self._asdict(), SHAPE_MINIMUM)
        check_dtype("Spec", self.dtype)
        if not isinstance(self.scorer, Scorer):
            raise ValueError(f"Spec.scorer must be a tokenworth_jax.scorers.Scorer, got {type(self.scorer).__name__}")
        if not isinstance(self.mode, Mode):
            raise ValueError(f"Spec.mode must be a tokenworth_jax.modes.Mode, got {type(self.mode).__name__}")
        for side in ("query", "memory"):
            inputs.declared(self.parts.values(), side)  # no feature declared twice
        return self

    def _replace(self, **changes: Any) -> "Spec":
        return type(self)(**{**self._asdict(), **changes})

    @property
    def parts(self) -> dict[str, Any]:
        """``{"scorer": ..., "mode": ...}`` (the HParams slots of the same names hold their hyperparameters)."""
        return {slot: getattr(self, slot) for slot in PART_SLOTS}

    @property
    def feature_dim(self) -> int:
        return self.dim + N_STAT_FEATURES

    @property
    def float_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)


# ----- the state --------------------------------------------------------------------------------
class OpenTask(NamedTuple):
    """The open task: where it stands in the protocol, and what select left for observe and offer."""

    progress: Progress  # phase, judged reward (-1 before), offered (tokenworth_jax.protocol)
    query: Query  # the open task's query
    retrieved: jax.Array  # bool: the bank was non-empty at select
    selected: jax.Array  # bool: a memory was chosen
    slot: jax.Array  # int32 chosen bank slot (-1 if none)
    phi: jax.Array  # (4,) phi* at selection time
    z: jax.Array  # (F,) z* at selection time
    s_base: jax.Array  # scalar s_base* at selection time


class Clock(NamedTuple):
    t: jax.Array  # int32 current task index
    n_feedback: jax.Array  # int32 feedback examples seen (tasks with an injected memory)


class State(NamedTuple):
    """The controller's state: one field per part, each written only by its own module."""

    bank: Bank
    base: BaseScorer
    residual: Residual
    probes: Ring  # data = the last P probe queries (a stacked Query)
    scorer: Any  # the scorer's own state (Empty for the full scorer)
    mode: Any  # the mode's own state (Empty for the paper's)
    task: OpenTask
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
    p0: jax.Array  # the mode's success probability without a memory (NaN: it has no estimate)
    advantage: jax.Array  # its predicted gain of its best candidate (NaN: none, or no candidate)
    abstained: jax.Array  # bool: candidates existed but the mode injected nothing
    mode_scores: dict[str, jax.Array]  # the mode's own per-candidate scores by name, each (K,) ({} for the paper's)


class Event(NamedTuple):
    """One task of a pre-featurised stream, for ``step`` / ``run``."""

    query: jax.Array | Query  # (D,), or a Query (with the features the parts read)
    reward: jax.Array  # int32 0/1 (ignored when a reward_fn is given)
    memory: jax.Array | MemoryText  # (D,) the memory this task would offer on success, or a MemoryText
    memory_id: jax.Array  # int32 id of that memory


class StepOutput(NamedTuple):
    selection: Selection
    reward: jax.Array
    decision: Decision


RewardFn = Callable[[Event, Selection], jax.Array]


class Parts(NamedTuple):
    """The two values a controller is built from."""

    scorer: Scorer
    mode: Mode


def with_progress(state: State, progress: Progress) -> State:
    """``state`` with the open task's progress replaced (the host writes its copy of the progress,
    which its deferred ``observe`` and ``end_task`` move, into the states it hands out)."""
    return state._replace(task=state.task._replace(progress=progress))


# ----- the composition (each function takes its parts first; controller() binds them) ----------
def _check(p: Parts, spec: Spec, hp: HParams) -> None:
    """The spec names these parts and ``hp`` is built for them (structure only: free under jit)."""
    if not isinstance(spec, Spec):
        raise TypeError(f"spec must be a tokenworth_jax.Spec, got {type(spec).__name__}")
    if (spec.scorer, spec.mode) != tuple(p):
        raise ValueError(f"this controller is built from scorer {p.scorer.name!r} and mode {p.mode.name!r}, but the "
                         f"spec names {spec.scorer.name!r} and {spec.mode.name!r}")
    check_parts(hp, spec.parts)


def _model(state: State, hp: HParams) -> ScoreModel:
    res = state.residual
    return ScoreModel(w=state.base.w, predictor=res.predictor, metric=res.metric, gamma=hp.gamma,
                      eta=residual.eta(res, hp.eta_max))


def _as_query(query: ArrayLike | Query, spec: Spec) -> Query:
    return inputs.as_query(query, spec.dim, inputs.declared(spec.parts.values(), "query"))


def _as_memory(memory: ArrayLike | MemoryText, spec: Spec) -> MemoryText:
    return inputs.as_memory(memory, spec.dim, inputs.declared(spec.parts.values(), "memory"))


def _init(p: Parts, spec: Spec, hp: HParams) -> State:
    """A fresh controller: empty bank and windows, w = w0, M = I, no KRR fit yet."""
    _check(p, spec, hp)
    f = spec.float_dtype
    zero = jnp.zeros((), jnp.int32)
    empty = inputs.zeros(spec.dim, inputs.declared(spec.parts.values(), "query"), f)
    task = OpenTask(progress=protocol.on_device(protocol.START), query=empty, retrieved=jnp.zeros((), bool),
                    selected=jnp.zeros((), bool), slot=jnp.full((), -1, jnp.int32), phi=jnp.zeros((4,), f),
                    z=jnp.zeros((spec.feature_dim,), f), s_base=jnp.zeros((), f))
    return State(bank=bank_lib.init(spec.capacity, spec.dim, f),
                 base=base_scorer.init(spec.base_window, hp.w0, f),
                 residual=residual.init(spec.fast_window, spec.slow_window, spec.feature_dim, hp.lambda_krr, f),
                 probes=probes.init(spec.n_probes, empty), scorer=p.scorer.init(spec, hp), mode=p.mode.init(spec, hp),
                 task=task, clock=Clock(t=zero, n_feedback=zero))


def _select(p: Parts, state: State, query: ArrayLike | Query, hp: HParams, spec: Spec) -> tuple[State, Selection]:
    """Recall K candidates for ``query`` ((D,) or a Query), score them, and let the mode choose at most one."""
    _check(p, spec, hp)
    query = _as_query(query, spec)
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
    task = OpenTask(progress=protocol.on_device(protocol.after(state.task.progress, "select")), query=query,
                    retrieved=jnp.any(bank.valid), selected=selected, slot=slot, phi=cs.phi[c], z=cs.z[c],
                    s_base=cs.base[c])
    selection = Selection(
        candidates=jnp.where(recall.valid, recall.slots, i32(-1)),
        candidate_ids=jnp.where(recall.valid, bank.ids[recall.slots], i32(-1)),
        scores=score, base_scores=jnp.where(recall.valid, cs.base, -jnp.inf), relevance=recall.relevance,
        chosen=choice.index, slot=slot, memory_id=jnp.where(selected, bank.ids[jnp.maximum(slot, 0)], i32(-1)),
        p0=choice.p0, advantage=choice.advantage, abstained=choice.abstained, mode_scores=choice.scores)
    return state._replace(scorer=scorer, mode=mode, task=task), selection


def _fit_base(base: BaseScorer, hp: HParams) -> BaseScorer:
    return base_scorer.fit(base, hp.w0, hp.lambda_w, hp.beta_w, hp.w_min, hp.w_max)


def _fit_krr(res: Residual, hp: HParams) -> Residual:
    return residual.fit(res, hp.gamma, hp.lambda_krr)


def _agop(res: Residual, hp: HParams) -> Residual:
    return residual.agop(res, hp.gamma, hp.lambda_krr, hp.beta_m, hp.m_min, hp.m_max)


def _unchanged(x: object, hp: HParams) -> object:
    return x


def _observe(p: Parts, state: State, reward: ArrayLike, hp: HParams, spec: Spec) -> State:
    """Record the judged reward (0/1) of the open task, then run the refits it makes due."""
    _check(p, spec, hp)
    task = state.task
    reward = jnp.asarray(reward, jnp.int32)
    sel = task.selected
    y = 2 * reward.astype(task.s_base.dtype) - 1
    clock = state.clock._replace(n_feedback=state.clock.n_feedback + sel.astype(jnp.int32))
    due = schedule.due(clock.n_feedback, hp)

    base = gated(sel & due.base, _fit_base, _unchanged, base_scorer.record(state.base, task.phi, y, sel), hp)
    res = residual.record(state.residual, task.z, p.mode.target(state.mode, y, task.s_base, hp), sel)
    res = gated(sel & due.krr, _fit_krr, _unchanged, res, hp)
    run_agop = sel & due.agop & (res.n_fits > 0)  # AGOP needs a fitted KRR
    res = gated(run_agop, _agop, _unchanged, res, hp)
    queries, _ = probes.queries(state.probes, task.query)
    scorer = p.scorer.refit(state.scorer, (sel & due.krr) | run_agop, queries.key, state.bank.emb, res.predictor,
                            res.metric)
    return State(bank=bank_lib.credit(state.bank, task.slot, sel, reward, state.clock.t, hp.u_success, hp.u_failure,
                                      hp.u_min, hp.u_max),
                 base=base, residual=res, probes=state.probes, scorer=scorer,
                 mode=p.mode.update(state.mode, Feedback(query=task.query, selected=sel, slot=task.slot, reward=reward),
                                    hp),
                 task=task._replace(progress=protocol.on_device(protocol.after(task.progress, "observe", reward))),
                 clock=clock)


def _probe_worth(p: Parts, state: State, memory: MemoryText, hp: HParams, spec: Spec) -> tuple[Worth, object]:
    """The lifecycle's worth of every bank slot and ``memory``, and the scorer's column of ``memory``.

    The paper's probe scores are handed to the mode as a function: a mode whose worth does not read
    them (a recency-based worth) never computes them."""
    queries, valid = probes.queries(state.probes, state.task.query)
    model = _model(state, hp)
    column = p.scorer.column(state.scorer, queries.key, memory.key, model)

    def scores() -> ProbeScores:
        return p.scorer.probes(state.scorer, queries.key, state.bank.emb, memory.key,
                               bank_lib.stats(state.bank, state.clock.t, hp.kappa),
                               new_memory_stats(hp.u_init, spec.float_dtype), model, spec.worth_chunk, column)

    created = jnp.concatenate([state.bank.tau, state.clock.t[None]])  # (B+1,) the offered memory is created now
    return lifecycle.probe_worth(p.mode.worth(state.mode, queries, scores, memory, created, hp), valid), column


def _worth(p: Parts, state: State, memory: ArrayLike | MemoryText, hp: HParams, spec: Spec) -> Worth:
    """V(m) = mean over valid probes of the mode's per-probe worth, for the whole bank and ``memory``."""
    _check(p, spec, hp)
    return _probe_worth(p, state, _as_memory(memory, spec), hp, spec)[0]


def _assess(p: Parts, state: State, memory: MemoryText, hp: HParams, spec: Spec) -> tuple[Decision, object]:
    """The admission decision for ``memory``, and what the scorer keeps of it: reads the state only."""
    V, column = _probe_worth(p, state, memory, hp, spec)
    return lifecycle.decide(state.bank, memory.key, V, hp.tau_nov, hp.delta_write, hp.tau_pos, hp.tau_util,
                            hp.delta_rep), column


def _offer_if(p: Parts, state: State, memory: ArrayLike | MemoryText, memory_id: ArrayLike, offered: ArrayLike,
              hp: HParams, spec: Spec) -> tuple[State, Decision]:
    """The admission runs only for a judged success that ``offered`` a memory ((D,) or a MemoryText).

    Only the decision is computed under the condition (its inputs are read, its outputs small); each
    part then writes what the decision says with masked updates, so the conditional never carries
    the whole state in and out."""
    _check(p, spec, hp)
    memory = _as_memory(memory, spec)
    progress = state.task.progress
    success = (progress.reward == 1) & jnp.asarray(offered, bool)
    assess = functools.partial(_assess, p, spec=spec)
    shapes = jax.eval_shape(assess, state, memory, hp)[1]  # static: the branches close over no tracer

    def skipped(s: State, m: MemoryText, h: HParams) -> tuple[Decision, object]:
        return (lifecycle.not_offered(spec.float_dtype),
                jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes))

    dec, column = gated(success, assess, skipped, state, memory, hp)
    writes = dec.slot >= 0
    memory_id = jnp.asarray(memory_id, jnp.int32)
    task = state.task._replace(progress=protocol.on_device(
        protocol.after(progress, "offer", jnp.asarray(progress.offered, bool) | success)))
    return state._replace(bank=bank_lib.write(state.bank, dec.slot, writes, memory.key, memory_id, state.clock.t,
                                              hp.u_init),
                          scorer=p.scorer.write(state.scorer, dec.slot, column, writes),
                          mode=p.mode.write(state.mode, dec.slot, writes, memory, success), task=task), dec


def _offer(p: Parts, state: State, memory: ArrayLike | MemoryText, memory_id: ArrayLike, hp: HParams,
           spec: Spec) -> tuple[State, Decision]:
    """Offer the memory of the current task. Only a judged success can write (else NOT_OFFERED)."""
    return _offer_if(p, state, memory, memory_id, True, hp, spec)


def _end_task(p: Parts, state: State, spec: Spec) -> State:
    """Close the task: its query joins the probes (if the bank was non-empty), the clock ticks."""
    task = state.task
    i32 = jnp.int32
    return state._replace(
        scorer=p.scorer.end_task(state.scorer, state.probes.idx, task.retrieved),
        probes=probes.push(state.probes, task.query, task.retrieved),
        clock=state.clock._replace(t=state.clock.t + 1),
        task=task._replace(progress=protocol.on_device(protocol.after(task.progress, "end_task")),
                           retrieved=jnp.zeros((), bool), selected=jnp.zeros((), bool), slot=i32(-1)))


def _finish_task(p: Parts, state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike,
                 offered: ArrayLike, hp: HParams, spec: Spec) -> tuple[State, Decision]:
    """observe + offer (where ``offered``) + end_task: the rest of a task in one call."""
    state = _observe(p, state, reward, hp, spec)
    state, decision = _offer_if(p, state, memory, memory_id, offered, hp, spec)
    return _end_task(p, state, spec), decision


def _advance(p: Parts, state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike,
             offered: ArrayLike, query: ArrayLike | Query, hp: HParams,
             spec: Spec) -> tuple[State, Decision, Selection]:
    """``finish_task`` of the open task, then ``select`` for the next ``query``: one call."""
    state, decision = _finish_task(p, state, reward, memory, memory_id, offered, hp, spec)
    state, selection = _select(p, state, query, hp, spec)
    return state, decision, selection


def _step(p: Parts, state: State, event: Event, hp: HParams, spec: Spec,
          reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    """One whole task: select, the reward (the event's, or ``reward_fn`` of the selection), finish."""
    state, selection = _select(p, state, event.query, hp, spec)
    reward = jnp.asarray(event.reward if reward_fn is None else reward_fn(event, selection), jnp.int32)
    state, decision = _finish_task(p, state, reward, event.memory, event.memory_id, True, hp, spec)
    return state, StepOutput(selection=selection, reward=reward, decision=decision)


def _run(p: Parts, state: State, events: Event, hp: HParams, spec: Spec,
         reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    """``lax.scan`` of ``step`` over a stream of events stacked on axis 0."""
    return jax.lax.scan(lambda s, e: _step(p, s, e, hp, spec, reward_fn), state, events)


def _run_batched(p: Parts, states: State, events: Event, hps: HParams, spec: Spec,
                 reward_fn: Optional[RewardFn] = None, strategy: Strategy = "auto") -> tuple[State, StepOutput]:
    """C configurations (stacked states and hyperparameters) over one shared stream: ``jax.vmap(run)``
    (or ``lax.map``, the CPU default). Outputs have shape (C, T, ...)."""
    return over_configs(lambda s, h: _run(p, s, events, h, spec, reward_fn), strategy)(states, hps)


class ControllerFunctions(NamedTuple):
    """The pure functions of one controller (one scorer, one mode), each jit-compiled with ``spec``
    (and ``reward_fn``, ``strategy``) static. They compose inside a user's own jit / vmap / scan."""

    init: Callable[..., State]  # (spec, hp)
    select: Callable[..., tuple[State, Selection]]  # (state, query, hp, spec)
    observe: Callable[..., State]  # (state, reward, hp, spec)
    offer: Callable[..., tuple[State, Decision]]  # (state, memory, memory_id, hp, spec)
    end_task: Callable[..., State]  # (state, spec)
    finish_task: Callable[..., tuple[State, Decision]]  # (state, reward, memory, memory_id, offered, hp, spec)
    advance: Callable[..., tuple[State, Decision, Selection]]  # (..., offered, next query, hp, spec)
    step: Callable[..., tuple[State, StepOutput]]  # (state, event, hp, spec, reward_fn=None)
    run: Callable[..., tuple[State, StepOutput]]  # (state, events, hp, spec, reward_fn=None)
    run_batched: Callable[..., tuple[State, StepOutput]]  # (states, events, hps, spec, reward_fn=None, strategy)
    worth: Callable[..., Worth]  # (state, memory, hp, spec)


# Each function's composition and its static arguments (also what tw.checked derives its wrappers from).
COMPOSED: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "init": (_init, ("spec",)),
    "select": (_select, ("spec",)),
    "observe": (_observe, ("spec",)),
    "offer": (_offer, ("spec",)),
    "end_task": (_end_task, ("spec",)),
    "finish_task": (_finish_task, ("spec",)),
    "advance": (_advance, ("spec",)),
    "step": (_step, ("spec", "reward_fn")),
    "run": (_run, ("spec", "reward_fn")),
    "run_batched": (_run_batched, ("spec", "reward_fn", "strategy")),
    "worth": (_worth, ("spec",)),
}
assert tuple(COMPOSED) == ControllerFunctions._fields


@functools.lru_cache(maxsize=None)
def controller(scorer: Scorer, mode: Mode, *, donate: bool = False) -> ControllerFunctions:
    """The controller built from ``scorer`` and ``mode``: its pure functions, jit-compiled.

    Built once per pair (cached), so calling it again costs nothing and compiles nothing. The functions
    take a ``spec`` that names the same parts (its shape fields size the state). ``donate=True``: each
    function consumes the state it is given (its buffers are updated in place; the host ``Controller``
    calls these)."""
    p = Parts(scorer=scorer, mode=mode)
    return ControllerFunctions(**{
        name: jax.jit(_bind(fn, p), static_argnames=static,
                      donate_argnames=("state",) if donate and "state" in inspect.signature(fn).parameters else ())
        for name, (fn, static) in COMPOSED.items()})


def _bind(fn: Callable[..., Any], p: Parts) -> Callable[..., Any]:
    """``fn`` with its parts bound, named and documented as the public function (no ``__wrapped__``:
    jit reads the bound signature to place the static arguments)."""
    bound = functools.partial(fn, p)
    bound.__name__ = bound.__qualname__ = fn.__name__.lstrip("_")  # type: ignore[attr-defined]
    bound.__doc__ = fn.__doc__
    return bound


# ----- the module-level API: the controller that ``spec`` names ---------------------------------
def init(spec: Spec, hp: HParams) -> State:
    """A fresh state: empty bank and windows, w = w0, M = I, no KRR fit yet."""
    return controller(spec.scorer, spec.mode).init(spec, hp)


def select(state: State, query: ArrayLike | Query, hp: HParams, spec: Spec) -> tuple[State, Selection]:
    """Recall K candidates for ``query`` ((D,) or a Query), score them, and let the mode choose at most one."""
    return controller(spec.scorer, spec.mode).select(state, query, hp, spec)


def observe(state: State, reward: ArrayLike, hp: HParams, spec: Spec) -> State:
    """Record the judged reward (0/1) of the open task, then run the refits it makes due."""
    return controller(spec.scorer, spec.mode).observe(state, reward, hp, spec)


def offer(state: State, memory: ArrayLike | MemoryText, memory_id: ArrayLike, hp: HParams,
          spec: Spec) -> tuple[State, Decision]:
    """Offer the memory of the current task. Only a judged success can write (else NOT_OFFERED)."""
    return controller(spec.scorer, spec.mode).offer(state, memory, memory_id, hp, spec)


def end_task(state: State, spec: Spec) -> State:
    """Close the task: its query joins the probes (if the bank was non-empty), the clock ticks."""
    return controller(spec.scorer, spec.mode).end_task(state, spec)


def finish_task(state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike,
                offered: ArrayLike, hp: HParams, spec: Spec) -> tuple[State, Decision]:
    """observe + offer (where ``offered``) + end_task: the rest of a task in one call."""
    return controller(spec.scorer, spec.mode).finish_task(state, reward, memory, memory_id, offered, hp, spec)


def advance(state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike, offered: ArrayLike,
            query: ArrayLike | Query, hp: HParams, spec: Spec) -> tuple[State, Decision, Selection]:
    """``finish_task`` of the open task, then ``select`` for the next ``query``: one call."""
    return controller(spec.scorer, spec.mode).advance(state, reward, memory, memory_id, offered, query, hp, spec)


def step(state: State, event: Event, hp: HParams, spec: Spec,
         reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    """One whole task: select, the reward (the event's, or ``reward_fn`` of the selection), finish."""
    return controller(spec.scorer, spec.mode).step(state, event, hp, spec, reward_fn)


def run(state: State, events: Event, hp: HParams, spec: Spec,
        reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    """``lax.scan`` of ``step`` over a stream of events stacked on axis 0."""
    return controller(spec.scorer, spec.mode).run(state, events, hp, spec, reward_fn)


def run_batched(states: State, events: Event, hps: HParams, spec: Spec, reward_fn: Optional[RewardFn] = None,
                strategy: Strategy = "auto") -> tuple[State, StepOutput]:
    """C configurations (stacked states and hyperparameters) over one shared stream. Outputs (C, T, ...)."""
    return controller(spec.scorer, spec.mode).run_batched(states, events, hps, spec, reward_fn, strategy)


def worth(state: State, memory: ArrayLike | MemoryText, hp: HParams, spec: Spec) -> Worth:
    """V(m) = mean over valid probes of the mode's per-probe worth, for the whole bank and ``memory``."""
    return controller(spec.scorer, spec.mode).worth(state, memory, hp, spec)
