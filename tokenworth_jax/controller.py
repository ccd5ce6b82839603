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
from typing import Any, Callable, NamedTuple, Optional, Protocol

import jax
import jax.numpy as jnp
from jax.experimental import checkify
from jax.typing import ArrayLike

from . import _doc
from . import bank as bank_lib
from . import base_scorer, inputs, lifecycle, probes, protocol, residual, schedule
from .bank import Bank
from .base_scorer import BaseScorer
from .batching import Strategy, gated, loop, over_configs, resolve
from .config import (N_STAT_FEATURES, PART_SLOTS, HParams, check_dtype, check_parts, check_shapes, check_x64,
                     hparams_shapes)
from .features import new_memory_stats
from .featurize import DIM
from .inputs import MemoryText, Query
from .lifecycle import Admission, Decision, Worth
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
    dim: int = DIM
    capacity: int = 64
    base_window: int = 256
    fast_window: int = 128
    slow_window: int = 256
    k_candidates: int = 12
    n_probes: int = 8
    dtype: str = "float32"
    worth_chunk: int = 0
    scorer: Scorer = full()
    mode: Mode = paper()


_doc.fields(
    _SpecFields,
    dim="int, default 512: D, the width of the hashed recall vectors of queries and memories "
        "(:func:`tokenworth_jax.featurize`).",
    capacity="int, default 64: B_max, the number of bank slots (the environment presets set it).",
    base_window="int, default 256: how many (phi, y) examples the base scorer's window keeps.",
    fast_window="int, default 128: how many (z, delta) examples the residual's fast window keeps; the KRR "
                "support set is a snapshot of it (N rows).",
    slow_window="int, default 256: how many (z, delta) examples the residual's slow window keeps for AGOP.",
    k_candidates="int, default 12: K, how many memories recall returns (at most ``capacity``).",
    n_probes="int, default 8: how many earlier queries are kept as probes of a memory's worth; with the "
             "current query, P + 1 <= n_probes + 1 probes.",
    dtype='str, ``"float32"`` (default) or ``"float64"``: the dtype of every float array of the state.',
    worth_chunk="int, default 0: the worth of the bank is computed in chunks of this many memories (0: all "
                "at once). It bounds peak memory for very large banks; decisions are the same, values equal "
                "to rounding.",
    scorer="Scorer, default :func:`tokenworth_jax.scorers.full`: how pair scores are computed "
           "(:func:`~tokenworth_jax.scorers.full` or :func:`~tokenworth_jax.scorers.incremental`).",
    mode="Mode, default :data:`tokenworth_jax.paper_mode` ``()``: how a memory is chosen, credited and "
         "valued (any :class:`~tokenworth_jax.Mode` value).",
)


class Spec(_SpecFields):
    """Static settings: the shape fields and the two parts. Hashable, and a static pytree node.

    Every field fixes an array shape or a program (the scorer and the mode), so a new value
    compiles anew; everything else is a traced leaf of :class:`~tokenworth_jax.HParams`. Every
    field is checked when a Spec is made (also by ``_replace``): a ValueError names the field, its
    value and the allowed range. The parts bring their own shape fields (``spec.mode.shapes``),
    hyperparameters (``hp.mode``) and inputs (``spec.mode.features``). Build one with
    :func:`tokenworth_jax.preset`, or directly: ``Spec(capacity=32, dim=256)``.

    A Spec is registered as a pytree with no leaves (``jax.tree_util.register_static``: the
    spec itself is the tree's auxiliary data, hashed and compared by value), as ``equinox``
    marks a static field. So a transformation passes it through unchanged and keys its cache on
    it: ``jax.jit(tw.select)(state, q, hp, spec)``, ``jax.vmap(tw.init, in_axes=(None, 0))(spec,
    hps)`` and ``jax.tree.map`` over ``(state, spec)`` work as written, an equal spec reuses the
    compiled program, and a new spec compiles anew. No ``static_argnames`` is needed.
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
        """F = D + 5: the width of the residual's pair features z (``|e_q - e_m|`` and five statistics)."""
        return self.dim + N_STAT_FEATURES

    @property
    def float_dtype(self) -> jnp.dtype:
        """``dtype`` as a NumPy dtype object."""
        return jnp.dtype(self.dtype)


# A leafless pytree node: jit, vmap and scan carry a Spec as static auxiliary data (compared by value), so a
# user's own jax.jit of a pure function needs no static_argnames, and a NamedTuple's default flattening (its
# fields as leaves: a str dtype, the parts' functions) never reaches a transformation.
jax.tree_util.register_static(Spec)


# ----- the state --------------------------------------------------------------------------------
class OpenTask(NamedTuple):
    """The open task: where it stands in the protocol, and what select left for observe and offer."""

    progress: Progress
    query: Query
    retrieved: jax.Array
    selected: jax.Array
    slot: jax.Array
    phi: jax.Array
    z: jax.Array
    s_base: jax.Array


_doc.fields(
    OpenTask,
    progress="Progress: the phase, the judged reward (-1 before ``observe``) and whether the task offered its "
             "memory (:mod:`tokenworth_jax.protocol`).",
    query="Query: the open task's query (zeros before the first ``select``).",
    retrieved="() bool: the bank held at least one memory at ``select`` (the query then becomes a probe).",
    selected="() bool: a memory was injected.",
    slot="() int32: the injected memory's bank slot; -1 when none.",
    phi="(4,) float: the base features phi* = [cos, u, rel, rec] of the injected pair.",
    z="(F,) float: the residual features z* of the injected pair (F = D + 5).",
    s_base="() float: the base score s_base* of the injected pair.",
)


class Clock(NamedTuple):
    """The controller's counters."""

    t: jax.Array
    n_feedback: jax.Array


_doc.fields(
    Clock,
    t="() int32: the index of the current task (0-based); ``end_task`` advances it.",
    n_feedback="() int32: feedback examples seen so far, one per task on which a memory was injected; the "
               "refit schedule counts them.",
)


class State(NamedTuple):
    """The controller's state, a pytree of arrays: one field per part, each written only by its own module.

    Make it with :func:`init`; every pure function takes it and returns the next one (the old one
    is left as it was). Under ``jax.vmap`` over configurations every leaf has a leading axis C.
    """

    bank: Bank
    base: BaseScorer
    residual: Residual
    probes: Ring
    scorer: Any
    mode: Any
    task: OpenTask
    clock: Clock


_doc.fields(
    State,
    bank="Bank: the B memory slots, their vectors, ids and statistics.",
    base="BaseScorer: the base scorer's weights w (4,) and its window of (phi, y) examples.",
    residual="Residual: the residual RFM: its fast and slow windows of (z, delta), the metric M (F,) and the "
             "fitted KRR predictor.",
    probes="Ring: the last ``n_probes`` queries on which retrieval happened (a stacked Query), the probes of a "
           "memory's worth.",
    scorer="The scorer's own state: :class:`~tokenworth_jax.Empty` for the full scorer, a ``WorthCache`` for "
           "the incremental one.",
    mode="The mode's own state (whatever its ``init`` returns): :class:`~tokenworth_jax.Empty` for the paper's "
         "mode.",
    task="OpenTask: the open task's protocol progress and what ``select`` kept for ``observe`` and ``offer``.",
    clock="Clock: the task index t and the feedback count.",
)


class Selection(NamedTuple):
    """What :func:`select` reports: the recalled candidates, their scores and the mode's choice.

    K = ``min(spec.k_candidates, spec.capacity)``. The candidates are in recall order (highest
    cosine first, ties to the lower slot). When the bank holds fewer than K memories the trailing
    entries are padding, marked ``-1`` in the integer fields and ``-inf`` in the float ones. ``-1``
    in ``chosen``, ``slot`` and ``memory_id`` means that nothing is injected (the bank was empty,
    or the mode abstained). Float fields have the spec's dtype. Under ``jax.vmap`` or
    :func:`run` every field gains the leading configuration or time axes.
    """

    candidates: jax.Array
    candidate_ids: jax.Array
    scores: jax.Array
    base_scores: jax.Array
    relevance: jax.Array
    chosen: jax.Array
    slot: jax.Array
    memory_id: jax.Array
    p0: jax.Array
    advantage: jax.Array
    abstained: jax.Array
    mode_scores: dict[str, jax.Array]


_doc.fields(
    Selection,
    candidates="(K,) int32: each candidate's bank slot, in recall order; -1 for padding.",
    candidate_ids="(K,) int32: each candidate's memory id (the ``memory_id`` it was offered with); -1 for "
                  "padding.",
    scores="(K,) float: each candidate's score s = s_base + eta f(z), the base score plus the residual RFM's "
           "correction; -inf for padding.",
    base_scores="(K,) float: each candidate's base score s_base = w . phi; -inf for padding.",
    relevance="(K,) float: the recall cosine between the query and each candidate; -inf for padding.",
    chosen="() int32: the index into the candidates of the memory to inject; -1 when nothing is injected.",
    slot="() int32: the bank slot of the memory to inject (``candidates[chosen]``); -1 when none.",
    memory_id="() int32: the id of the memory to inject (``candidate_ids[chosen]``); -1 when none.",
    p0="() float: the mode's estimate of the success probability without a memory; NaN when the mode makes "
       "none (the paper's mode).",
    advantage="() float: the mode's predicted gain in success probability from its best candidate; NaN when "
              "it predicts none or there is no candidate.",
    abstained="() bool: candidates existed but the mode injected nothing (always False for the paper's mode).",
    mode_scores="dict[str, (K,) float]: the mode's own per-candidate scores by name, NaN for padding; ``{}`` "
                "for the paper's mode.",
)


class Event(NamedTuple):
    """One task of a pre-featurised stream, for :func:`step` and :func:`run`.

    For :func:`run` every field is stacked on a leading time axis T: ``query`` (T, D),
    ``reward`` (T,), ``memory`` (T, D), ``memory_id`` (T,).
    """

    query: jax.Array | Query
    reward: jax.Array
    memory: jax.Array | MemoryText
    memory_id: jax.Array


_doc.fields(
    Event,
    query="(D,) float recall vector of the task's question, or a :class:`~tokenworth_jax.Query` with the "
          "features the parts read.",
    reward="() int 0 or 1 (any integer or bool dtype; a float is refused, see :func:`run`): the task's judged "
           "outcome (ignored when ``step`` is given a ``reward_fn``).",
    memory="(D,) float vector of the memory this task offers if it succeeds (its key text's recall vector), "
           "or a :class:`~tokenworth_jax.MemoryText`.",
    memory_id="() int: the id that memory gets in the bank (the caller's: any integer dtype, a value that fits int32; "
              "an id below 0, or a non-finite memory, is answered ``INVALID_MEMORY`` and never admitted; a float, a "
              "bool or an id beyond int32 is refused: see the sharp bits page).",
)


class StepOutput(NamedTuple):
    """What :func:`step` reports for one task (stacked on a time axis by :func:`run`)."""

    selection: Selection
    reward: jax.Array
    decision: Decision


_doc.fields(
    StepOutput,
    selection="Selection: the task's candidates and choice.",
    reward="() int32: the reward the task was credited with (the event's, or ``reward_fn``'s).",
    decision="Decision: what the lifecycle did with the offered memory (``NOT_OFFERED`` after a failure).",
)


#: ``reward_fn(event, selection) -> () int 0 or 1``: a task's reward given what was selected, for :func:`step`,
#: :func:`run` and :func:`run_batched` (an environment simulated inside the scan). A plain function, or a
#: ``jax.tree_util.Partial`` of one: ``Partial(fn, table)`` is called as ``fn(table, event, selection)``, its bound
#: arrays are traced (a new ``table`` compiles nothing), and it passes through your own ``jax.jit`` as an argument
#: (``jax.jit(tw.run)(state, events, hp, spec, Partial(fn, table))``). A plain function is not an array: the
#: controller's programs key on it (a new function compiles anew), and under your own ``jax.jit`` it is given as a
#: ``Partial``, closed over, or marked static (``static_argnames=("reward_fn",)``).
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
def _check(p: Parts, spec: Spec, hp: HParams, state: Optional[State] = None, name: str = "init") -> None:
    """The spec names these parts, ``hp`` is built for them, neither ``hp`` nor ``state`` is a batch of
    configurations, and ``state`` was made for this spec (:func:`check_state`; ``name``: the function, for its
    message). Structure and shapes only, at trace time: free under jit."""
    if not isinstance(spec, Spec):
        raise TypeError(f"spec must be a tokenworth_jax.Spec, got {type(spec).__name__}")
    if (spec.scorer, spec.mode) != tuple(p):
        raise ValueError(f"this controller is built from scorer {p.scorer.name!r} and mode {p.mode.name!r}, but the "
                         f"spec names {spec.scorer.name!r} and {spec.mode.name!r}")
    check_x64("Spec", spec.dtype)  # a float64 spec made under jax.enable_x64, used after it
    check_parts(hp, spec.parts)
    _one_configuration(hyperparameters=hp.gamma, state=None if state is None else state.clock.t)
    if state is not None:
        check_state(name, state, spec)


STATE_HOW = "make the state with tw.init(spec, hp) of the spec you pass, or pass the spec it was made with"


def check_state(name: str, state: Any, spec: Spec, *, batched: bool = False) -> None:
    """Refuse (one line, naming the first difference) a state that ``init(spec, hp)`` would not make: another
    structure (another mode's or scorer's state: TypeError for what is no State at all, else ValueError), or a leaf
    of another shape or dtype (a state of another capacity, dim, window or dtype: ValueError). Structure, shapes and
    dtypes are static, so the pure functions call this while they trace: under jit it costs nothing at run time.
    ``batched``: ``run_batched``'s states, every leaf with one leading axis C (:func:`_sweep` checks C); under a
    user's own ``jax.vmap`` a leaf has the shape of one configuration, so one state is what is checked there."""
    if not isinstance(spec, Spec):
        raise TypeError(f"spec must be a tokenworth_jax.Spec, got {type(spec).__name__}")
    if not isinstance(state, State):
        raise TypeError(f"{name}: the state must be a tokenworth_jax.State (made by tw.init(spec, hp)), got "
                        f"{type(state).__name__}")
    if not batched:
        _one_configuration(state=state.clock.t)  # a batch given to a function of one: pointed to jax.vmap
    want = expected_state(spec, jax.dtypes.canonicalize_dtype(jnp.int64) == jnp.int64)  # the 64-bit mode, as read now
    lead = tuple(jnp.shape(state.clock.t)[:1]) if batched else ()
    made = (f"where tw.init(spec, hp) makes {{}} for this spec (scorer {spec.scorer.name!r}, mode {spec.mode.name!r}, "
            f"capacity {spec.capacity}, dim {spec.dim}, dtype {spec.dtype})")
    for field in (*PART_SLOTS, *(f for f in State._fields if f not in PART_SLOTS)):  # the parts' own state first
        got, exp = getattr(state, field), getattr(want, field)
        if jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(exp):  # type: ignore[operator]
            continue
        if type(got) is not type(exp):
            what, wanted = f"state.{field} is {type(got).__name__}", type(exp).__name__
        else:
            paths = [{jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_leaves_with_path(t)} for t in (got, exp)]
            extra, missing = sorted(paths[0] - paths[1])[:3], sorted(paths[1] - paths[0])[:3]
            what = f"state.{field} " + " and ".join(
                [f"has the leaves {extra}"] * bool(extra) + [f"lacks {missing}"] * bool(missing) or ["differs"])
            wanted = "another structure"
        raise ValueError(f"{name}: this state was made for another spec: {what}, {made.format(wanted)}: {STATE_HOW}")
    for (path, leaf), exp in zip(jax.tree_util.tree_leaves_with_path(state), jax.tree_util.tree_leaves(want)):
        shape, dtype = tuple(jnp.shape(leaf)), jnp.result_type(leaf)
        if shape != lead + exp.shape or dtype != exp.dtype:
            raise ValueError(f"{name}: this state was made for another spec: state{jax.tree_util.keystr(path)} is "
                             f"{shape} {dtype}, {made.format(f'{lead + exp.shape} {exp.dtype}')}: {STATE_HOW}")


@functools.lru_cache(maxsize=None)
def expected_state(spec: Spec, x64: bool) -> State:
    """The structure, shapes and dtypes (``jax.ShapeDtypeStruct`` leaves) of ``init(spec, hp)``, which depend on the
    spec alone (``hp``'s shapes are its parts' schemas): traced once per spec (and 64-bit setting: ``x64``)."""
    p = Parts(scorer=spec.scorer, mode=spec.mode)
    return jax.eval_shape(functools.partial(_init, p, spec), hparams_shapes(spec.parts, spec.float_dtype))


def _one_configuration(**scalars: Any) -> None:
    """Refuse (ValueError, at trace time) a batch of configurations given to a function of one: each value is
    a leaf that is a scalar for one configuration (``hp.gamma``, ``state.clock.t``); None is skipped."""
    for what, leaf in scalars.items():
        if leaf is not None and jnp.ndim(leaf) != 0:
            raise ValueError(f"these {what} are a batch of configurations (a leading axis of {jnp.shape(leaf)[0]}), "
                             "but this function runs one configuration: map it with jax.vmap over the stacked states "
                             "and tw.stack_hparams(...) (e.g. jax.vmap(lambda s, h: tw.select(s, q, h, spec))(states, "
                             "hps)), or run a stream with tw.run_batched")


def _model(state: State, hp: HParams) -> ScoreModel:
    res = state.residual
    return ScoreModel(w=state.base.w, predictor=res.predictor, metric=res.metric, gamma=hp.gamma,
                      eta=residual.eta(res, hp.eta_max))


def _as_query(query: ArrayLike | Query, spec: Spec) -> Query:
    return inputs.as_query(query, spec.dim, inputs.declared(spec.parts.values(), "query"))


def _as_memory(memory: ArrayLike | MemoryText, spec: Spec) -> MemoryText:
    return inputs.as_memory(memory, spec.dim, inputs.declared(spec.parts.values(), "memory"))


def _init(p: Parts, spec: Spec, hp: HParams) -> State:
    """A fresh state: empty bank and windows, w = w0, M = I, no KRR fit yet.

    Args:
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).
        hp: the :class:`~tokenworth_jax.HParams` built for the spec's parts (``w0`` and ``lambda_krr`` set the
            first state).

    Returns:
        State: the fresh state, sized by ``spec`` (under ``jax.vmap`` over stacked ``hp``, every leaf with their
        leading axis C).
    """
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
    """Recall K candidates for ``query`` ((D,) or a Query), score them, and let the mode choose at most one.

    Out of the protocol's order (a task still open, or judged but not ended) the plain function replaces
    that task: it is abandoned without feedback, its query does not join the probes and the clock does not
    tick; ``tw.checked.select`` refuses it (call ``observe`` / ``end_task`` first). The query is cast to the
    spec's dtype before the jitted program (no new compile for a float64 or bfloat16 query); a batch of
    queries (a leading axis) is refused with a ValueError: map the call with ``jax.vmap``.

    Args:
        state: the controller's :class:`~tokenworth_jax.State` (from :func:`init`; under ``jax.vmap`` of C
            configurations, stacked ones).
        query: the question: its (D,) float recall vector (``tw.featurize(text, spec.dim)``), or a
            :class:`~tokenworth_jax.Query` with the features the parts declare; cast to the spec's dtype.
        hp: its :class:`~tokenworth_jax.HParams` (traced: new values compile nothing).
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).

    Returns:
        tuple[State, Selection]: the state with the task open (its query and candidates kept for ``observe`` and
        ``offer``), and the :class:`~tokenworth_jax.Selection`: the K candidates, their scores and the memory to
        inject (``memory_id`` -1 when none).
    """
    _check(p, spec, hp, state, "select")
    protocol.device_check(state.task.progress, "select")
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


def _same_base(base: BaseScorer, hp: HParams) -> BaseScorer:
    return base


def _observe(p: Parts, state: State, reward: ArrayLike, hp: HParams, spec: Spec) -> State:
    """Record the judged reward (0/1) of the open task, then run the refits it makes due.

    ``reward`` is 0 or 1, of an integer or bool dtype (cast to int32). A reward of a float dtype is refused
    at trace time (TypeError): a graded score is not a reward, threshold it yourself (``(score >=
    0.5).astype(jnp.int32)``). A concrete reward other than 0 or 1 (NumPy, Python, a ``jax.Array`` outside
    a transformation) is refused before the program runs (ValueError). A traced one (inside your own
    ``jax.jit``, ``vmap`` or ``scan``) cannot be read while tracing: there the plain function is a no-op,
    returning the state unchanged (nothing credited, recorded or refitted, the phase kept), as it is for a
    call out of the protocol's order (no task open, or a second observe of the same task);
    ``tw.checked.observe`` reports both, naming the problem. A host ``Controller``'s judged task (its
    feedback pending) takes its feedback here.

    Args:
        state: the controller's :class:`~tokenworth_jax.State` (from :func:`init`; under ``jax.vmap`` of C
            configurations, stacked ones).
        reward: the open task's judged outcome: a scalar 0 or 1 of an integer or bool dtype (a float dtype is
            refused).
        hp: its :class:`~tokenworth_jax.HParams` (traced: new values compile nothing).
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).

    Returns:
        State: the feedback recorded and the refits it made due run (the state unchanged where the call is the
        documented no-op).
    """
    _check(p, spec, hp, state, "observe")
    task = state.task
    if jnp.ndim(reward) != 0:
        raise ValueError(f"observe takes one reward (a scalar 0 or 1), got shape {jnp.shape(reward)}: map a batch of "
                         "tasks with jax.vmap, or run a stream with tw.run")
    reward = jnp.asarray(reward, jnp.int32)
    progress = task.progress
    protocol.device_check(progress, "observe")
    protocol.reward_check(reward)
    # Out of protocol (no open task, a second observe) or a reward other than 0/1: a no-op. Only the open task
    # (selected, or a host's judged task whose feedback is pending) takes a reward; the learners see `sel`.
    valid = (((progress.phase == protocol.SELECTED) | (progress.phase == protocol.JUDGED)
              | (progress.phase == protocol.ENDED)) & ((reward == 0) | (reward == 1)))
    sel = task.selected & valid
    y = 2 * reward.astype(task.s_base.dtype) - 1
    clock = state.clock._replace(n_feedback=state.clock.n_feedback + sel.astype(jnp.int32))
    due = schedule.due(clock.n_feedback, hp)

    base = gated(sel & due.base, _fit_base, _same_base, base_scorer.record(state.base, task.phi, y, sel), hp)
    res = residual.record(state.residual, task.z, p.mode.target(state.mode, y, task.s_base, hp), sel)
    res, run_agop = residual.refit(res, sel & due.krr, sel & due.agop, hp.gamma, hp.lambda_krr, hp.beta_m, hp.m_min,
                                   hp.m_max)
    queries, _ = probes.queries(state.probes, task.query)
    scorer = p.scorer.refit(state.scorer, (sel & due.krr) | run_agop, queries.key, state.bank.emb, res.predictor,
                            res.metric)
    feedback = Feedback(query=task.query, selected=sel, slot=task.slot, reward=reward)
    if jax.tree_util.tree_leaves(state.mode):  # a mode with state learns only from a valid observe
        mode = gated(valid, lambda m, fb, h: p.mode.update(m, fb, h), lambda m, fb, h: m, state.mode, feedback, hp)
    else:
        mode = p.mode.update(state.mode, feedback, hp)
    progress = jax.tree_util.tree_map(lambda new, old: jnp.where(valid, new, old),
                                      protocol.on_device(protocol.after(progress, "feedback", reward)), progress)
    return State(bank=bank_lib.credit(state.bank, task.slot, sel, reward, state.clock.t, hp.u_success, hp.u_failure,
                                      hp.u_min, hp.u_max),
                 base=base, residual=res, probes=state.probes, scorer=scorer, mode=mode,
                 task=task._replace(progress=progress), clock=clock)


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
    """V(m) = mean over valid probes of the mode's per-probe worth, for the whole bank and ``memory``.

    Args:
        state: the controller's :class:`~tokenworth_jax.State` (from :func:`init`; under ``jax.vmap`` of C
            configurations, stacked ones).
        memory: the memory to value, as :func:`offer` takes it.
        hp: its :class:`~tokenworth_jax.HParams` (traced: new values compile nothing).
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).

    Returns:
        Worth: V of every bank slot and of ``memory``, with the per-probe worth it averages (the state is not
        changed).
    """
    _check(p, spec, hp, state, "worth")
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
    _check(p, spec, hp, state, "offer")
    memory = _as_memory(memory, spec)
    if jnp.ndim(memory_id) != 0:
        raise ValueError(f"the offered memory_id must be one id (a scalar integer), got shape {jnp.shape(memory_id)}: "
                         "map a batch of tasks with jax.vmap, or run a stream with tw.run")
    memory_id = jnp.asarray(memory_id, jnp.int32)
    progress = state.task.progress
    offered = jnp.asarray(offered, bool)
    protocol.device_check(progress, "offer", offered)
    # only the task's first offer after its observe(1) (the eager walk's phase OBSERVED) can write, and only a memory
    # that can be admitted at all: an inadmissible one leaves the state as it was (INVALID_MEMORY)
    offering = ((progress.phase == protocol.OBSERVED) & (progress.reward == 1) & ~jnp.asarray(progress.offered, bool)
                & offered)
    invalid = offering & ~lifecycle.admissible(memory, memory_id)
    checkify.debug_check(~invalid, f"offer(): {lifecycle.ADMISSIBLE_RULE}; got memory id {{i}}", i=memory_id)
    success = offering & ~invalid
    assess = functools.partial(_assess, p, spec=spec)
    shapes = jax.eval_shape(assess, state, memory, hp)[1]  # static: the branches close over no tracer

    def skipped(s: State, m: MemoryText, h: HParams) -> tuple[Decision, object]:
        return (lifecycle.not_offered(spec.float_dtype),
                jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes))

    dec, column = gated(success, assess, skipped, state, memory, hp)
    dec = dec._replace(code=jnp.where(invalid, jnp.int32(Admission.INVALID_MEMORY), dec.code))
    writes = dec.slot >= 0
    task = state.task._replace(progress=protocol.on_device(
        protocol.after(progress, "offer", jnp.asarray(progress.offered, bool) | success)))
    return state._replace(bank=bank_lib.write(state.bank, dec.slot, writes, memory.key, memory_id, state.clock.t,
                                              hp.u_init),
                          scorer=p.scorer.write(state.scorer, dec.slot, column, writes),
                          mode=p.mode.write(state.mode, dec.slot, writes, memory, success), task=task), dec


def _offer(p: Parts, state: State, memory: ArrayLike | MemoryText, memory_id: ArrayLike, hp: HParams,
           spec: Spec) -> tuple[State, Decision]:
    """Offer the memory of the current task. Only a judged success can write (else NOT_OFFERED).

    Out of the protocol's order (before ``observe``, after a failure, a second offer of the same task)
    the plain function answers NOT_OFFERED with the state unchanged; ``tw.checked.offer`` refuses all but
    the failure's offer (NOT_OFFERED is its answer). A memory that can never be admitted (a non-finite
    entry in its vector or features, or ``memory_id`` below 0) is answered ``INVALID_MEMORY`` with the state
    unchanged (the task may offer a valid memory instead); ``tw.checked.offer`` refuses it. The memory is
    cast to the spec's dtype before the jitted program.

    Args:
        state: the controller's :class:`~tokenworth_jax.State` (from :func:`init`; under ``jax.vmap`` of C
            configurations, stacked ones).
        memory: the memory the task offers: the (D,) float recall vector of its key text, or a
            :class:`~tokenworth_jax.MemoryText` with the features the parts declare; cast to the spec's dtype.
        memory_id: the caller's id for the memory: a scalar integer >= 0 that fits int32, which the bank keeps
            and :class:`~tokenworth_jax.Selection` reports (an id below 0 is answered ``INVALID_MEMORY``).
        hp: its :class:`~tokenworth_jax.HParams` (traced: new values compile nothing).
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).

    Returns:
        tuple[State, Decision]: the state with the memory written where it was admitted, and the
        :class:`~tokenworth_jax.Decision` (``Admission(int(decision.code))`` names what happened).
    """
    return _offer_if(p, state, memory, memory_id, True, hp, spec)


def _end_task(p: Parts, state: State, spec: Spec) -> State:
    """Close the task: its query joins the probes (if the bank was non-empty), the clock ticks.

    Out of the protocol's order the plain function still closes: a selected task not yet judged is
    abandoned without feedback, and with no task open the clock ticks (an empty task);
    ``tw.checked.end_task`` refuses both.

    Args:
        state: the controller's :class:`~tokenworth_jax.State` (from :func:`init`; under ``jax.vmap`` of C
            configurations, stacked ones).
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).

    Returns:
        State: the task closed and the clock one task on.
    """
    _one_configuration(state=state.clock.t)
    check_state("end_task", state, spec)
    protocol.device_check(state.task.progress, "end_task")
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
    """observe + offer (where ``offered``) + end_task: the rest of a task in one call.

    Args:
        state: the controller's :class:`~tokenworth_jax.State` (from :func:`init`; under ``jax.vmap`` of C
            configurations, stacked ones).
        reward: the open task's judged outcome: a scalar 0 or 1 of an integer or bool dtype (a float dtype is
            refused).
        memory: the memory the task offers: the (D,) float recall vector of its key text, or a
            :class:`~tokenworth_jax.MemoryText` with the features the parts declare; cast to the spec's dtype.
        memory_id: the caller's id for the memory: a scalar integer >= 0 that fits int32, which the bank keeps
            and :class:`~tokenworth_jax.Selection` reports (an id below 0 is answered ``INVALID_MEMORY``).
        offered: a scalar bool: whether the task offers ``memory`` (False: the decision is ``NOT_OFFERED``).
        hp: its :class:`~tokenworth_jax.HParams` (traced: new values compile nothing).
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).

    Returns:
        tuple[State, Decision]: the state with the task closed, and the :class:`~tokenworth_jax.Decision` of the
        offer (``NOT_OFFERED`` where nothing was offered or the task failed).
    """
    _check(p, spec, hp, state, "finish_task")  # first, so that its message names this function
    state = _observe(p, state, reward, hp, spec)
    state, decision = _offer_if(p, state, memory, memory_id, offered, hp, spec)
    return _end_task(p, state, spec), decision


def _advance(p: Parts, state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike,
             offered: ArrayLike, query: ArrayLike | Query, hp: HParams,
             spec: Spec) -> tuple[State, Decision, Selection]:
    """``finish_task`` of the open task, then ``select`` for the next ``query``: one call.

    Args:
        state: the controller's :class:`~tokenworth_jax.State` (from :func:`init`; under ``jax.vmap`` of C
            configurations, stacked ones).
        reward: the open task's judged outcome: a scalar 0 or 1 of an integer or bool dtype (a float dtype is
            refused).
        memory: the memory the task offers: the (D,) float recall vector of its key text, or a
            :class:`~tokenworth_jax.MemoryText` with the features the parts declare; cast to the spec's dtype.
        memory_id: the caller's id for the memory: a scalar integer >= 0 that fits int32, which the bank keeps
            and :class:`~tokenworth_jax.Selection` reports (an id below 0 is answered ``INVALID_MEMORY``).
        offered: a scalar bool: whether the task offers ``memory`` (False: the decision is ``NOT_OFFERED``).
        query: the next task's question, as :func:`select` takes it.
        hp: its :class:`~tokenworth_jax.HParams` (traced: new values compile nothing).
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).

    Returns:
        tuple[State, Decision, Selection]: the state with the next task open, the
        :class:`~tokenworth_jax.Decision` of the task just finished, and the :class:`~tokenworth_jax.Selection`
        for ``query``.
    """
    _check(p, spec, hp, state, "advance")  # first, so that its message names this function
    state, decision = _finish_task(p, state, reward, memory, memory_id, offered, hp, spec)
    state, selection = _select(p, state, query, hp, spec)
    return state, decision, selection


def _step(p: Parts, state: State, event: Event, hp: HParams, spec: Spec,
          reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    """One whole task: select, the reward (the event's, or ``reward_fn`` of the selection), finish.

    ``reward_fn`` (:data:`~tokenworth_jax.controller.RewardFn`) is a function or a ``jax.tree_util.Partial`` of
    one; under your own ``jax.jit`` pass it as a ``Partial`` (its bound arrays are traced) or mark it static.
    The reward follows :func:`observe`'s rules: a float dtype (the event's or ``reward_fn``'s) is refused at
    trace time; the event's concrete reward other than 0 or 1 is refused before the program runs, and one
    that ``reward_fn`` returned after it (ValueError naming the first task; the outputs are the error's
    ``result``). Inside the program, and under your own ``jax.jit`` where nothing can be raised, a task whose
    reward is not 0 or 1 closes without feedback (nothing credited, nothing offered: ``NOT_OFFERED``), and
    ``tw.checked.step`` reports it.

    Args:
        state: the controller's :class:`~tokenworth_jax.State` (from :func:`init`; under ``jax.vmap`` of C
            configurations, stacked ones).
        event: one task's :class:`~tokenworth_jax.Event`: query (D,), reward (), memory (D,), memory_id ().
        hp: its :class:`~tokenworth_jax.HParams` (traced: new values compile nothing).
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).
        reward_fn: optional ``(event, selection) -> reward``: the task's reward computed from the selection
            (e.g. a simulated judge) instead of the event's; a function or a ``jax.tree_util.Partial`` of one
            (:data:`~tokenworth_jax.controller.RewardFn`), whose bound arrays are traced.

    Returns:
        tuple[State, StepOutput]: the state after the task, and its :class:`~tokenworth_jax.StepOutput` (the
        selection, the reward credited, the decision).
    """
    _check(p, spec, hp, state, "step")  # first, so that its message names this function
    state, selection = _select(p, state, event.query, hp, spec)
    reward = (jnp.asarray(event.reward, jnp.int32) if reward_fn is None
              else inputs.cast_reward(reward_fn(event, selection), "the reward that reward_fn returns"))
    state, decision = _finish_task(p, state, reward, event.memory, event.memory_id, True, hp, spec)
    return state, StepOutput(selection=selection, reward=reward, decision=decision)


def _run(p: Parts, state: State, events: Event, hp: HParams, spec: Spec,
         reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    """``lax.scan`` of ``step`` over a stream of events stacked on axis 0.

    Every field of ``events`` has the leading time axis T: query (T, D), reward (T,), memory (T, D),
    memory_id (T,); one task's event is refused at trace time (ValueError: use :func:`step`, or
    ``jax.tree.map(lambda x: x[None], event)``), and so is a batch of streams (map them with ``jax.vmap``).
    ``reward_fn`` as in :func:`step`. Rewards follow :func:`step`'s rules: a float dtype is refused (TypeError:
    threshold a graded score yourself), a reward other than 0 or 1 is refused naming the first such task
    (ValueError: an event's before the program, one that ``reward_fn`` returned after it), and under your own
    ``jax.jit`` such a task is closed without feedback (``tw.checked.run`` reports it).

    Args:
        state: the controller's :class:`~tokenworth_jax.State` (from :func:`init`; under ``jax.vmap`` of C
            configurations, stacked ones).
        events: a stream of tasks: an :class:`~tokenworth_jax.Event` whose every field has the leading time axis
            T (query (T, D), reward (T,), memory (T, D), memory_id (T,)).
        hp: its :class:`~tokenworth_jax.HParams` (traced: new values compile nothing).
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).
        reward_fn: optional ``(event, selection) -> reward``: the task's reward computed from the selection
            (e.g. a simulated judge) instead of the event's; a function or a ``jax.tree_util.Partial`` of one
            (:data:`~tokenworth_jax.controller.RewardFn`), whose bound arrays are traced.

    Returns:
        tuple[State, StepOutput]: the state after the last task, and the :class:`~tokenworth_jax.StepOutput` of
        every task, each field with the leading time axis T.
    """
    _check(p, spec, hp, state, "run")  # first, so that its message names this function
    _one_stream(events, "run")
    return jax.lax.scan(lambda s, e: _step(p, s, e, hp, spec, reward_fn), state, events)


def _one_stream(events: Event, name: str) -> None:
    """Refuse (ValueError, one line, at trace time) events that are not one stream: every field stacked on the same
    leading time axis T (one task's Event, given where a stream is expected, has none)."""
    if not isinstance(events, Event):
        raise TypeError(f"{name} takes its events as a tokenworth_jax.Event, got {type(events).__name__}")
    leaves = jax.tree_util.tree_leaves_with_path(events)
    T = jnp.shape(events.reward)[0] if jnp.ndim(events.reward) == 1 else None
    for path, leaf in leaves:
        want = 1 if getattr(path[0], "name", None) in ("reward", "memory_id") else 2  # vectors: (T, width)
        if T is None or jnp.ndim(leaf) != want or jnp.shape(leaf)[0] != T:
            if jnp.ndim(events.reward) == 2 and jnp.ndim(leaf) == want + 1:  # streams stacked on a leading axis
                hint = ("every configuration runs over one shared stream: for a stream per configuration map tw.run, "
                        "jax.vmap(lambda s, e, h: tw.run(s, e, h, spec))(states, events, hps)" if name == "run_batched"
                        else "for a batch of streams map it with jax.vmap, or sweep configurations over one stream "
                             "with tw.run_batched")
            else:
                hint = "for one task call tw.step, or make it a stream of one with jax.tree.map(lambda x: x[None], event)"
            raise ValueError(f"{name} takes a stream of events, every field stacked on a leading time axis T (query "
                             f"(T, D), reward (T,), memory (T, D), memory_id (T,)); got events{jax.tree_util.keystr(path)}"
                             f" of shape {jnp.shape(leaf)} and reward of shape {jnp.shape(events.reward)}: {hint}")


STACK_HOW = ("hps = tw.stack_hparams([...]) and states = jax.vmap(functools.partial(tw.init, spec))(hps)")


def _sweep(states: State, events: Event, hps: HParams, spec: Spec, name: str) -> int:
    """Refuse (one line, at trace time) what is not a sweep: C >= 1 configurations, ``states`` and ``hps`` stacked
    on one leading axis C (every leaf), over one stream (:func:`_one_stream`), the states made for ``spec``
    (:func:`check_state`). Returns C."""
    if not isinstance(states, State):
        raise TypeError(f"{name} takes the stacked states as a tokenworth_jax.State, got {type(states).__name__}")
    if not isinstance(hps, HParams):
        raise TypeError(f"{name} takes the stacked hyperparameters as a tokenworth_jax.HParams, got "
                        f"{type(hps).__name__}")
    for what, field, leaf in (("states", "clock.t", states.clock.t), ("hps", "gamma", hps.gamma)):
        if jnp.ndim(leaf) != 1:
            raise ValueError(f"{name} takes C configurations stacked on a leading axis, got {what} of one "
                             f"configuration ({what}.{field} has shape {jnp.shape(leaf)}): stack them, {STACK_HOW}; for "
                             "one configuration call tw.run")
    C = jnp.shape(states.clock.t)[0]
    if C == 0:
        raise ValueError(f"{name} needs at least one configuration, got C = 0 (states.clock.t has shape (0,))")
    for what, tree in (("states", states), ("hps", hps)):
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
            if jnp.ndim(leaf) == 0 or jnp.shape(leaf)[0] != C:
                raise ValueError(f"{name}: states hold {C} configurations (states.clock.t has shape ({C},)) but "
                                 f"{what}{jax.tree_util.keystr(path)} has shape {jnp.shape(leaf)}: stack one "
                                 f"hyperparameter set per state on the leading axis, {STACK_HOW}")
    _one_stream(events, name)
    check_state(name, states, spec, batched=True)
    return C


def _run_batched(p: Parts, states: State, events: Event, hps: HParams, spec: Spec,
                 reward_fn: Optional[RewardFn] = None, strategy: Strategy = "auto") -> tuple[State, StepOutput]:
    """C configurations (stacked states and hyperparameters) over one shared stream: the entry point of a sweep.
    Outputs (C, T, ...); a new grid of values compiles nothing.

    ``strategy="auto"`` takes the fastest way for where the states live (read from their arrays, not from
    ``jax.default_backend()``: :func:`tokenworth_jax.batching.resolve`): on the CPU ``"loop"``, the compiled
    program of :func:`run` called once per configuration (it compiles what one ``tw.run`` compiles and is never
    slower than a Python loop of ``tw.run``, which it is); elsewhere ``"vmap"``, one batched program whose
    refits and admissions run only when some configuration needs them. ``"map"`` (``lax.map``: the loop
    inside one program) is what ``"loop"`` becomes under a user's own ``jax.jit``.

    What each strategy gives against separate ``tw.run`` calls of the same configurations:

    * ``"loop"`` calls ``tw.run``'s own compiled program: ``tw.run``'s outputs, bit for bit, on every backend.
    * ``"map"`` and ``"vmap"`` are programs of their own, of the same operations. XLA may lower a product or a
      reduction in another program to another kernel (under ``vmap`` a batched matrix product where
      ``tw.run`` has a vector-matrix one), which rounds the last bits differently, and the fits carry such
      differences on (in float32, scores up to a few 1e-3 apart after 300 tasks). Every decision (the
      candidates, the memory injected, the reward, the admission) is ``tw.run``'s up to the first task where
      ``tw.run``'s own alternatives are that close (two candidates' scores, or a worth or a novelty at an
      admission threshold): such a near tie may break the other way, and that configuration's stream then
      continues from its own choice. On the CPU (jax 0.10) ``"map"`` is ``tw.run`` bit for bit too;
      ``"vmap"`` chose another memory in 10 of 57,600 selections over 12 streams measured, all in one
      configuration of one stream, from a task where two candidates' scores in ``tw.run`` were 2.4e-7 apart
      (bench/results/strategy_agreement/). Where decisions must be ``tw.run``'s exactly, sweep with ``"loop"``
      (outside your own ``jax.jit``).

      A near tie, in numbers: at a task where the two programs' values of a score differ by at most delta, only
      alternatives less than 2 delta apart in ``tw.run`` can come out the other way. delta is float32 rounding
      (eps = 1.19e-7 of the value, per operation) carried through the fits: on the 4 x 4 DB grid over 300
      tasks it stayed below 2.5e-3 up to the first differing choice (scores up to 4 in magnitude), so a
      choice differs only where tw.run's two candidates' scores are within 2 delta <= 5e-3 (absolute); the first
      differing choices measured came at gaps of 2.4e-7 (12 topics), 1.2e-4 and 4.3e-4 (8 topics: some
      2,000 and 3,600 eps of the score, where delta was 2.2e-4 and 4.5e-4). Recall is the same memories, but
      two whose recall cosines are a few eps apart (near-duplicate memories) may be listed in the other
      order (``Selection.candidates`` and ``chosen`` then differ, ``memory_id`` does not;
      ``tests/test_grid_sweep.py`` checks each bound).

    Under your own ``jax.jit``: ``strategy`` is static (a string picks the program): mark it,
    ``jax.jit(tw.run_batched, static_argnames=("strategy",))``, or bind it with ``functools.partial``; and pass a
    ``reward_fn`` as a ``jax.tree_util.Partial`` (:data:`~tokenworth_jax.controller.RewardFn`).

    Refused in one line before any configuration runs: ``states`` or ``hps`` of one configuration (stack them:
    ``tw.stack_hparams`` and ``jax.vmap(functools.partial(tw.init, spec))``), C = 0, a leaf whose leading axis
    differs from C, a stream per configuration ((C, T, ...) events: map ``tw.run`` with ``jax.vmap``), and
    :func:`run`'s bad rewards (one that ``reward_fn`` returned: after the program, naming the configuration and
    the task).

    Args:
        states: C configurations' :class:`~tokenworth_jax.State` stacked on axis 0
            (``jax.vmap(functools.partial(tw.init, spec))(hps)``).
        events: one stream shared by every configuration, as :func:`run` takes it (fields (T, ...)).
        hps: their :class:`~tokenworth_jax.HParams`, stacked on axis 0 (:func:`~tokenworth_jax.stack_hparams`).
        spec: the :class:`~tokenworth_jax.Spec` (a static pytree node: an equal spec reuses the compiled
            program, a new one compiles anew).
        reward_fn: optional ``(event, selection) -> reward``: the task's reward computed from the selection
            (e.g. a simulated judge) instead of the event's; a function or a ``jax.tree_util.Partial`` of one
            (:data:`~tokenworth_jax.controller.RewardFn`), whose bound arrays are traced.
        strategy: how the configurations are mapped: ``"auto"`` (the default), ``"vmap"``, ``"map"`` or
            ``"loop"`` (:data:`~tokenworth_jax.Strategy`); static under your own ``jax.jit``.

    Returns:
        tuple[State, StepOutput]: the C final states (stacked on axis 0) and the
        :class:`~tokenworth_jax.StepOutput` of every configuration and task, each field (C, T, ...).
    """
    _sweep(states, events, hps, spec, "run_batched")
    return over_configs(lambda s, h: _run(p, s, events, h, spec, reward_fn), strategy)(states, hps)


# ----- the signatures of the controller's functions (what a type checker sees of tw.controller(...)) ---------
class InitFn(Protocol):
    """The type of :func:`init`: ``(spec, hp) -> State``."""

    def __call__(self, spec: Spec, hp: HParams) -> State: ...


class SelectFn(Protocol):
    """The type of :func:`select`: ``(state, query, hp, spec) -> (State, Selection)``."""

    def __call__(self, state: State, query: ArrayLike | Query, hp: HParams,
                 spec: Spec) -> tuple[State, Selection]: ...


class ObserveFn(Protocol):
    """The type of :func:`observe`: ``(state, reward, hp, spec) -> State``."""

    def __call__(self, state: State, reward: ArrayLike, hp: HParams, spec: Spec) -> State: ...


class OfferFn(Protocol):
    """The type of :func:`offer`: ``(state, memory, memory_id, hp, spec) -> (State, Decision)``."""

    def __call__(self, state: State, memory: ArrayLike | MemoryText, memory_id: ArrayLike, hp: HParams,
                 spec: Spec) -> tuple[State, Decision]: ...


class EndTaskFn(Protocol):
    """The type of :func:`end_task`: ``(state, spec) -> State``."""

    def __call__(self, state: State, spec: Spec) -> State: ...


class FinishTaskFn(Protocol):
    """The type of :func:`finish_task`: ``(state, reward, memory, memory_id, offered, hp, spec) -> (State,
    Decision)``."""

    def __call__(self, state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike,
                 offered: ArrayLike, hp: HParams, spec: Spec) -> tuple[State, Decision]: ...


class AdvanceFn(Protocol):
    """The type of :func:`advance`: ``(state, reward, memory, memory_id, offered, query, hp, spec) -> (State,
    Decision, Selection)``."""

    def __call__(self, state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike,
                 offered: ArrayLike, query: ArrayLike | Query, hp: HParams,
                 spec: Spec) -> tuple[State, Decision, Selection]: ...


class StepFn(Protocol):
    """The type of :func:`step`: ``(state, event, hp, spec, reward_fn=None) -> (State, StepOutput)``."""

    def __call__(self, state: State, event: Event, hp: HParams, spec: Spec,
                 reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]: ...


class RunFn(Protocol):
    """The type of :func:`run`: ``(state, events, hp, spec, reward_fn=None) -> (State, StepOutput)``."""

    def __call__(self, state: State, events: Event, hp: HParams, spec: Spec,
                 reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]: ...


class RunBatchedFn(Protocol):
    """The type of :func:`run_batched`: ``(states, events, hps, spec, reward_fn=None, strategy="auto") ->
    (State, StepOutput)``."""

    def __call__(self, states: State, events: Event, hps: HParams, spec: Spec, reward_fn: Optional[RewardFn] = None,
                 strategy: Strategy = "auto") -> tuple[State, StepOutput]: ...


class WorthFn(Protocol):
    """The type of :func:`worth`: ``(state, memory, hp, spec) -> Worth``."""

    def __call__(self, state: State, memory: ArrayLike | MemoryText, hp: HParams, spec: Spec) -> Worth: ...


class ControllerFunctions(NamedTuple):
    """The pure functions of one controller (one scorer, one mode), as :func:`controller` returns them.

    Each is jit-compiled with ``spec`` (and ``run_batched``'s ``strategy``) static, and has the
    signature of the module-level function of the same name (``tw.select`` is
    ``tw.controller(spec.scorer, spec.mode).select``). They compose inside a user's own
    ``jax.jit``, ``jax.vmap`` and ``lax.scan``.
    """

    init: InitFn
    select: SelectFn
    observe: ObserveFn
    offer: OfferFn
    end_task: EndTaskFn
    finish_task: FinishTaskFn
    advance: AdvanceFn
    step: StepFn
    run: RunFn
    run_batched: RunBatchedFn
    worth: WorthFn


_doc.fields(ControllerFunctions, **{name: f"{name}{sig}: see :func:`tokenworth_jax.{name}`." for name, sig in dict(
    init="(spec, hp) -> State", select="(state, query, hp, spec) -> (State, Selection)",
    observe="(state, reward, hp, spec) -> State", offer="(state, memory, memory_id, hp, spec) -> (State, Decision)",
    end_task="(state, spec) -> State",
    finish_task="(state, reward, memory, memory_id, offered, hp, spec) -> (State, Decision)",
    advance="(state, reward, memory, memory_id, offered, query, hp, spec) -> (State, Decision, Selection)",
    step="(state, event, hp, spec, reward_fn=None) -> (State, StepOutput)",
    run="(state, events, hp, spec, reward_fn=None) -> (State, StepOutput)",
    run_batched='(states, events, hps, spec, reward_fn=None, strategy="auto") -> (State, StepOutput)',
    worth="(state, memory, hp, spec) -> Worth").items()})


# Each function's composition and its static arguments (also what tw.checked derives its wrappers from). A reward_fn
# is not static: it is a pytree argument, a jax.tree_util.Partial (cast_arguments wraps a plain function in one), so
# the function keys the cache through the Partial's tree structure and the arrays it binds are traced.
COMPOSED: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "init": (_init, ("spec",)),
    "select": (_select, ("spec",)),
    "observe": (_observe, ("spec",)),
    "offer": (_offer, ("spec",)),
    "end_task": (_end_task, ("spec",)),
    "finish_task": (_finish_task, ("spec",)),
    "advance": (_advance, ("spec",)),
    "step": (_step, ("spec",)),
    "run": (_run, ("spec",)),
    "run_batched": (_run_batched, ("spec", "strategy")),
    "worth": (_worth, ("spec",)),
}
assert tuple(COMPOSED) == ControllerFunctions._fields


def controller(scorer: Scorer, mode: Mode, *, donate: bool = False) -> ControllerFunctions:
    """The controller built from ``scorer`` and ``mode``: its pure functions, jit-compiled.

    Built once per pair (cached), so calling it again costs nothing and compiles nothing. The functions
    take a ``spec`` that names the same parts (its shape fields size the state). ``donate=True``: each
    function consumes the state it is given (its buffers are updated in place; the host ``Controller``
    calls these).

    Args:
        scorer: the :class:`~tokenworth_jax.Scorer` (``spec.scorer``).
        mode: the :class:`~tokenworth_jax.Mode` (``spec.mode``).
        donate: whether each function donates the state it is given (keyword-only).

    Returns:
        :class:`~tokenworth_jax.ControllerFunctions`: ``init``, ``select``, ``observe``, ``offer``,
        ``end_task``, ``finish_task``, ``advance``, ``step``, ``run``, ``run_batched`` and ``worth``, each with
        the signature of the module-level function of that name.
    """
    return _controller(scorer, mode, donate)


@functools.lru_cache(maxsize=None)
def _controller(scorer: Scorer, mode: Mode, donate: bool) -> ControllerFunctions:
    p = Parts(scorer=scorer, mode=mode)
    functions: dict[str, Any] = {}
    for name, (fn, static) in COMPOSED.items():  # run before run_batched: its "loop" strategy calls run
        functions[name] = _public(name, jax.jit(_bind(fn, p), static_argnames=static,
                                                donate_argnames=("state",) if donate and "state" in
                                                inspect.signature(fn).parameters else ()), functions.get("run"))
    return ControllerFunctions(**functions)


def signature(name: str) -> inspect.Signature:
    """The public signature of the controller function ``name``: its composition's, without the bound parts."""
    return inspect.Signature(list(inspect.signature(COMPOSED[name][0]).parameters.values())[1:])


def cast_arguments(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments of the controller function ``name`` (by parameter name, ``spec`` among them) with every
    input cast to what its program takes: queries and memories (a Query / MemoryText: each vector) to the
    spec's dtype, rewards and memory ids to int32, ``offered`` to bool (an Event's fields alike),
    ``strategy="auto"`` resolved by where the states live (:func:`tokenworth_jax.batching.resolve`), and a
    ``reward_fn`` as a ``jax.tree_util.Partial`` (:func:`as_reward_fn`). A reward
    of a float dtype is refused here (TypeError: :func:`tokenworth_jax.inputs.check_reward_dtype`), and so is a
    memory id that is not of an integer dtype (:func:`tokenworth_jax.inputs.check_id_dtype`).

    The public functions call this before their jitted programs, so an input of another dtype (a float64
    or bfloat16 query, a Python int) never compiles a program again and the outputs are of the spec's
    dtype; under a user's own jit / vmap / scan the casts are convert ops of their program."""
    spec = arguments.get("spec")
    f = spec.float_dtype if isinstance(spec, Spec) else None
    out = dict(arguments)
    for key, value in arguments.items():
        if key in ("query", "memory") and f is not None:
            out[key] = inputs.cast(value, f, Query if key == "query" else MemoryText)
        elif key == "reward":
            out[key] = inputs.cast_reward(value, f"{name}: input reward")
        elif key == "memory_id":
            out[key] = inputs.cast_index(value, f"{name}: input memory_id")
        elif key == "offered":
            out[key] = inputs.cast_flag(value)
        elif key in ("event", "events") and isinstance(value, Event) and f is not None:
            out[key] = Event(query=inputs.cast(value.query, f, Query),
                             reward=inputs.cast_reward(value.reward, f"{name}: input {key}.reward"),
                             memory=inputs.cast(value.memory, f, MemoryText),
                             memory_id=inputs.cast_index(value.memory_id, f"{name}: input {key}.memory_id"))
        elif key == "strategy":
            out[key] = resolve(value, arguments.get("states"))
        elif key == "reward_fn":
            out[key] = as_reward_fn(value, name)
    return out


def as_reward_fn(reward_fn: Any, name: str) -> Optional[jax.tree_util.Partial]:
    """``reward_fn`` as the programs take it: None, or a ``jax.tree_util.Partial`` (a pytree argument, not a static
    one). A plain function is wrapped in a ``Partial`` with nothing bound: the function is its tree structure, so it
    keys the compile cache as a static argument would; the arrays a user's ``Partial`` binds are traced leaves (a
    new value compiles nothing, and under the user's own ``jax.jit`` they may be tracers). Anything not callable is
    refused (TypeError, one line)."""
    if reward_fn is None or isinstance(reward_fn, jax.tree_util.Partial):
        return reward_fn
    if not callable(reward_fn):
        raise TypeError(f"{name}: reward_fn must be a function (event, selection) -> reward 0 or 1, or a "
                        f"jax.tree_util.Partial of one, got {type(reward_fn).__name__}")
    return jax.tree_util.Partial(reward_fn)


def check_rewards(name: str, arguments: dict[str, Any]) -> None:
    """Refuse (ValueError, one line) a concrete reward other than 0 or 1 given to the controller function ``name``
    (``arguments`` by parameter name, as given): ``reward``, or an Event's rewards unless a ``reward_fn`` replaces
    them. A traced reward is left to the program (:func:`tokenworth_jax.inputs.check_reward_values`)."""
    if "reward" in arguments:
        inputs.check_reward_values(arguments["reward"], f"{name}: input reward")
    for key in ("event", "events"):
        value = arguments.get(key)
        if isinstance(value, Event) and arguments.get("reward_fn") is None:
            inputs.check_reward_values(value.reward, f"{name}: input {key}.reward")


def check_ids(name: str, arguments: dict[str, Any]) -> None:
    """Refuse (ValueError, one line) a concrete memory id outside int32 given to the controller function ``name``
    (``arguments`` by parameter name, as given): ``memory_id``, or an Event's ids. A traced id is left to the
    program (:func:`tokenworth_jax.inputs.check_id_values`)."""
    if "memory_id" in arguments:
        inputs.check_id_values(arguments["memory_id"], f"{name}: input memory_id")
    for key in ("event", "events"):
        value = arguments.get(key)
        if isinstance(value, Event):
            inputs.check_id_values(value.memory_id, f"{name}: input {key}.memory_id")


def check_returned_rewards(name: str, out: tuple[State, StepOutput]) -> None:
    """Refuse (ValueError, one line) a reward other than 0 or 1 that the ``reward_fn`` given to ``name`` (``step``,
    ``run``, ``run_batched``) returned, naming the first (configuration and) task: read from the program's outputs,
    after it ran, as a concrete input reward is refused before. The outputs ride on the error as its ``result``
    (nothing is lost; a ``donate=True`` controller has consumed the state it was given). Under a user's own
    transformation the rewards are traced: such a task closes without feedback, and ``tw.checked`` reports it."""
    reward = out[1].reward
    if isinstance(reward, jax.core.Tracer):
        return
    axes = {0: (), 1: ("task",), 2: ("configuration", "task")}[jnp.ndim(reward)]
    try:
        inputs.check_reward_values(reward, f"{name}: the reward that reward_fn returned", axes)
    except ValueError as error:
        error.result = out  # type: ignore[attr-defined]
        raise


def _public(name: str, jitted: Any, run: Optional[Callable[..., Any]] = None) -> Callable[..., Any]:
    """The public function ``name``: casts its inputs (:func:`cast_arguments`) and checks concrete rewards
    (:func:`check_rewards`) and memory ids (:func:`check_ids`), then calls its jitted program (``jitted``; its
    ``_cache_size``, ``lower`` and ``eval_shape`` are the program's), and refuses a bad reward that a
    ``reward_fn`` returned (:func:`check_returned_rewards`). ``run_batched``'s ``"loop"`` strategy calls the
    compiled program of ``run`` (``run.jitted``) instead, once per configuration
    (:func:`tokenworth_jax.batching.loop`)."""
    sig = signature(name)
    params = tuple(sig.parameters)

    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != len(params):
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
        else:
            arguments = dict(zip(params, args))
        cast = cast_arguments(name, arguments)
        check_rewards(name, arguments)
        check_ids(name, arguments)
        if "states" in cast:  # run_batched: refused here, in one line, before any program or configuration runs
            _sweep(cast["states"], cast["events"], cast["hps"], cast["spec"], name)
        if cast.get("strategy") == "loop" and run is not None:  # run_batched on the CPU: run, once per configuration
            a, one = cast, run.jitted  # type: ignore[attr-defined]
            out = loop(lambda s, h: one(s, a["events"], h, a["spec"], a["reward_fn"]), a["states"], a["hps"])
        else:
            out = jitted(*cast.values())
        if cast.get("reward_fn") is not None:
            check_returned_rewards(name, out)
        return out

    call.__name__ = call.__qualname__ = name
    call.__doc__ = jitted.__doc__
    call.__signature__ = sig  # type: ignore[attr-defined]
    for attr in ("_cache_size", "lower", "eval_shape", "trace", "clear_cache"):
        if hasattr(jitted, attr):
            setattr(call, attr, getattr(jitted, attr))
    call.jitted = jitted  # type: ignore[attr-defined]
    return call


def _bind(fn: Callable[..., Any], p: Parts) -> Callable[..., Any]:
    """``fn`` with its parts bound, named and documented as the public function (no ``__wrapped__``:
    jit reads the bound signature to place the static arguments)."""
    bound = functools.partial(fn, p)
    bound.__name__ = bound.__qualname__ = fn.__name__.lstrip("_")  # type: ignore[attr-defined]
    bound.__doc__ = fn.__doc__
    return bound


# ----- the module-level API: the controller that ``spec`` names ---------------------------------
def init(spec: Spec, hp: HParams) -> State:
    return controller(spec.scorer, spec.mode).init(spec, hp)


def select(state: State, query: ArrayLike | Query, hp: HParams, spec: Spec) -> tuple[State, Selection]:
    return controller(spec.scorer, spec.mode).select(state, query, hp, spec)


def observe(state: State, reward: ArrayLike, hp: HParams, spec: Spec) -> State:
    return controller(spec.scorer, spec.mode).observe(state, reward, hp, spec)


def offer(state: State, memory: ArrayLike | MemoryText, memory_id: ArrayLike, hp: HParams,
          spec: Spec) -> tuple[State, Decision]:
    return controller(spec.scorer, spec.mode).offer(state, memory, memory_id, hp, spec)


def end_task(state: State, spec: Spec) -> State:
    return controller(spec.scorer, spec.mode).end_task(state, spec)


def finish_task(state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike,
                offered: ArrayLike, hp: HParams, spec: Spec) -> tuple[State, Decision]:
    return controller(spec.scorer, spec.mode).finish_task(state, reward, memory, memory_id, offered, hp, spec)


def advance(state: State, reward: ArrayLike, memory: ArrayLike | MemoryText, memory_id: ArrayLike, offered: ArrayLike,
            query: ArrayLike | Query, hp: HParams, spec: Spec) -> tuple[State, Decision, Selection]:
    return controller(spec.scorer, spec.mode).advance(state, reward, memory, memory_id, offered, query, hp, spec)


def step(state: State, event: Event, hp: HParams, spec: Spec,
         reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    return controller(spec.scorer, spec.mode).step(state, event, hp, spec, reward_fn)


def run(state: State, events: Event, hp: HParams, spec: Spec,
        reward_fn: Optional[RewardFn] = None) -> tuple[State, StepOutput]:
    return controller(spec.scorer, spec.mode).run(state, events, hp, spec, reward_fn)


def run_batched(states: State, events: Event, hps: HParams, spec: Spec, reward_fn: Optional[RewardFn] = None,
                strategy: Strategy = "auto") -> tuple[State, StepOutput]:
    return controller(spec.scorer, spec.mode).run_batched(states, events, hps, spec, reward_fn, strategy)


def worth(state: State, memory: ArrayLike | MemoryText, hp: HParams, spec: Spec) -> Worth:
    return controller(spec.scorer, spec.mode).worth(state, memory, hp, spec)


# One copy of each rule: these public functions read their composition's docstring, which tw.controller(...)'s
# functions and tw.checked's show too.
for _fn in (init, select, observe, offer, end_task, finish_task, advance, step, run, run_batched, worth):
    _fn.__doc__ = COMPOSED[_fn.__name__][0].__doc__
del _fn


def _call_doc(name: str) -> str:
    """The docstring of the Protocol ``__call__`` of ``name``: its Args and Returns, read from the function's own
    (one copy of them), not Python's "Call self as a function."."""
    doc = inspect.getdoc(COMPOSED[name][0]) or ""
    return f"Call the controller's ``{name}`` (:func:`tokenworth_jax.{name}`).\n\n{doc[doc.index('Args:'):]}"


for _name, _type in dict(init=InitFn, select=SelectFn, observe=ObserveFn, offer=OfferFn, end_task=EndTaskFn,
                         finish_task=FinishTaskFn, advance=AdvanceFn, step=StepFn, run=RunFn,
                         run_batched=RunBatchedFn, worth=WorthFn).items():
    _type.__call__.__doc__ = _call_doc(_name)
del _name, _type
