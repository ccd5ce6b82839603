"""How the controller chooses a memory and credits it: the :class:`Mode` interface, and the paper's value.

A mode is a ``NamedTuple`` of pure functions over its own state, as an
``optax.GradientTransformation`` is, plus what it declares about itself: its ``name``, its static
shape fields (``shapes``, a hashable NamedTuple), its traced hyperparameters (``hparams``, a
:class:`~tokenworth_jax.config.Schema`; they arrive as ``hp.mode``) and the extra inputs it reads
(``features``, :class:`~tokenworth_jax.inputs.Feature`). The controller is built from a scorer and
a mode (``tw.controller``) and never looks inside the mode's state; a new mode needs no edit here
or in the core (``tests/test_custom_mode.py`` defines one in the test file alone).

:func:`paper` is the method of the paper: inject the best scoring candidate, credit the residual
with y - (2 sigma(s_base) - 1), worth = the score. It is stateless (:class:`~tokenworth_jax.pytree.Empty`).
"""

from __future__ import annotations

from typing import Any, Callable, Generic, NamedTuple, TypeVar

import jax
import jax.numpy as jnp

from . import _doc
from .config import HParams, Schema
from .inputs import Feature, MemoryText, Query
from .pytree import Empty
from .scorers import ProbeScores


class Candidates(NamedTuple):
    """The recall set at selection time (K candidates, recall order)."""

    query: Query
    slots: jax.Array
    relevance: jax.Array
    valid: jax.Array
    score: jax.Array
    base: jax.Array


_doc.fields(
    Candidates,
    query="Query: the open task's query, with the features the parts read.",
    slots="(K,) int32: the candidates' bank slots (meaningless where not ``valid``).",
    relevance="(K,) float: their recall cosines, -inf where not valid.",
    valid="(K,) bool: the entry holds a memory.",
    score="(K,) float: the paper's score s, -inf where not valid.",
    base="(K,) float: the base score s_base.",
)


class Choice(NamedTuple):
    """A mode's selection: what to inject, and what it reports about its choice."""

    index: jax.Array  # type: ignore[assignment]  # the field shadows tuple.index, on purpose (the public name)
    p0: jax.Array
    advantage: jax.Array
    abstained: jax.Array
    scores: dict[str, jax.Array]


_doc.fields(
    Choice,
    index="() int32: the index into the candidates of the memory to inject, -1 for nothing.",
    p0="() float: the estimated success probability without a memory (NaN: the mode makes no estimate).",
    advantage="() float: the predicted change in success probability from the best candidate (NaN: none).",
    abstained="() bool: candidates existed but nothing is injected.",
    scores="dict[str, (K,) float]: the mode's own per-candidate scores by name (NaN where not valid); ``{}`` for "
           "none.",
)


class Feedback(NamedTuple):
    """The judged task, as the mode sees it."""

    query: Query
    selected: jax.Array
    slot: jax.Array
    reward: jax.Array


_doc.fields(
    Feedback,
    query="Query: the task's query.",
    selected="() bool: a memory was injected.",
    slot="() int32: its bank slot, -1 when none.",
    reward="() int32: the judged reward, 0 or 1.",
)


S = TypeVar("S")  # a mode's own state


class Mode(NamedTuple, Generic[S]):
    """How the controller chooses a memory, credits it and values it: a NamedTuple of pure functions over the
    mode's own state ``S``, plus what the mode declares about itself.

    ``Spec(mode=...)`` names the mode a controller is built with; the controller keeps the mode's
    state in ``State.mode`` and its hyperparameters in ``HParams.mode``, and never looks inside
    either. The paper's is :func:`paper` (``tw.paper_mode``); the preset table names the others;
    a new mode is a new value (see the API reference's page on modes). Every function must be
    traceable by JAX (no Python branching on array values). Shapes: K candidates, P + 1 probes,
    B bank slots.
    """

    name: str
    init: Callable[[Any, HParams], S]
    choose: Callable[[S, Candidates, HParams], tuple[S, Choice]]
    target: Callable[[S, jax.Array, jax.Array, HParams], jax.Array]
    update: Callable[[S, Feedback, HParams], S]
    worth: Callable[[S, Query, Callable[[], ProbeScores], MemoryText, jax.Array, HParams], jax.Array]
    write: Callable[[S, jax.Array, jax.Array, MemoryText, jax.Array], S]
    shapes: Any = Empty()
    hparams: Schema | None = None
    features: tuple[Feature, ...] = ()


_doc.fields(
    Mode,
    name="str: how presets, checkpoints and messages name the mode (unique among the modes in use).",
    init="``(spec, hp) -> S``: the mode's fresh state (its own shape fields are ``spec.mode.shapes``).",
    choose="``(state, candidates, hp) -> (state, Choice)``: which of the K recalled candidates to inject, if any.",
    target="``(state, y, s_base, hp) -> () float``: the residual RFM's training target for the injected pair, "
           "from y = 2r - 1 and its base score (the paper's: y - (2 sigmoid(s_base) - 1)).",
    update="``(state, Feedback, hp) -> state``: learn from the judged task (called by ``observe``).",
    worth="``(state, probes, scores, memory, created, hp) -> (P+1, B+1) float``: the per-probe worth of every "
          "bank slot and of the offered memory (last column), which the lifecycle averages into V(m). "
          "``probes`` is a stacked Query (P+1 rows); ``scores()`` computes the paper's probe scores "
          "(ProbeScores) only if called; ``created`` (B+1,) int32 is each slot's creation step and the "
          "offered memory's (now).",
    write="``(state, slot, writes, memory, offered) -> state``: where ``offered``, a judged success offered "
          "``memory``; where ``writes`` it entered bank slot ``slot``.",
    shapes="A hashable NamedTuple of the mode's static shape fields (default ``Empty()``: none).",
    hparams="Schema or None: the mode's traced hyperparameters (they arrive as ``hp.mode``); None when it has "
            "none.",
    features="tuple[Feature, ...]: the inputs it reads beyond the recall keys (default: none).",
)


def best(score: jax.Array, valid: jax.Array) -> jax.Array:
    """The paper's choice: the highest score (first on ties), -1 when there is no candidate."""
    return jnp.where(jnp.any(valid), jnp.argmax(score).astype(jnp.int32), jnp.int32(-1))


def paper_target(y: jax.Array, s_base: jax.Array) -> jax.Array:
    """delta = y - (2 sigma(s_base) - 1): what the base scorer got wrong, in +-1 units."""
    return y - (2 * jax.nn.sigmoid(s_base) - 1)


def no_report(index: jax.Array, dtype: jnp.dtype) -> Choice:
    """A choice that reports nothing beyond ``index`` (NaN estimates, no scores, no abstention).

    Args:
        index: () int32: the chosen candidate's index, -1 for none.
        dtype: the float dtype of the estimates (the spec's).

    Returns:
        :class:`~tokenworth_jax.modes.Choice`: ``index`` with NaN ``p0`` and ``advantage``, ``abstained`` False
        and no scores.
    """
    nan = jnp.full((), jnp.nan, dtype)
    return Choice(index=index, p0=nan, advantage=nan, abstained=jnp.zeros((), bool), scores={})


def _init(spec: Any, hp: HParams) -> Empty:
    return Empty()


def _choose(state: Empty, cands: Candidates, hp: HParams) -> tuple[Empty, Choice]:
    return state, no_report(best(cands.score, cands.valid), cands.score.dtype)


def _target(state: Empty, y: jax.Array, s_base: jax.Array, hp: HParams) -> jax.Array:
    return paper_target(y, s_base)


def _update(state: Empty, feedback: Feedback, hp: HParams) -> Empty:
    return state


def _worth(state: Empty, probes: Query, scores: Callable[[], ProbeScores], memory: MemoryText, created: jax.Array,
           hp: HParams) -> jax.Array:
    return scores().score


def _write(state: Empty, slot: jax.Array, writes: jax.Array, memory: MemoryText, offered: jax.Array) -> Empty:
    return state


PAPER: Mode[Empty] = Mode(name="paper", init=_init, choose=_choose, target=_target, update=_update, worth=_worth,
                          write=_write)


def paper() -> Mode[Empty]:
    """The paper's mode: stateless, no hyperparameters or inputs of its own.

    Returns:
        Mode: the paper's mode, named ``"paper"`` (the preset table's value).
    """
    return PAPER
