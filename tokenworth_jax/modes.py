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

from .config import HParams, Schema
from .inputs import Feature, MemoryText, Query
from .pytree import Empty
from .scorers import ProbeScores


class Candidates(NamedTuple):
    """The recall set at selection time (K candidates, recall order)."""

    query: Query
    slots: jax.Array  # (K,) int32 bank slots
    relevance: jax.Array  # (K,) recall cosines
    valid: jax.Array  # (K,) bool
    score: jax.Array  # (K,) the paper's s, -inf where invalid
    base: jax.Array  # (K,) s_base


class Choice(NamedTuple):
    """A mode's selection: what to inject, and what it reports about its choice."""

    index: jax.Array  # int32 index into the candidates, -1 for nothing
    p0: jax.Array  # estimated success probability without a memory (NaN: the mode has no estimate)
    advantage: jax.Array  # predicted success-probability change of the best candidate (NaN: none)
    abstained: jax.Array  # bool: candidates existed but nothing was injected
    scores: dict[str, jax.Array]  # the mode's own per-candidate scores by name, each (K,) (NaN where invalid)


class Feedback(NamedTuple):
    """The judged task, as the mode sees it."""

    query: Query
    selected: jax.Array  # bool: a memory was injected
    slot: jax.Array  # int32 its bank slot (-1 if none)
    reward: jax.Array  # int32 0/1


S = TypeVar("S")  # a mode's own state


class Mode(NamedTuple, Generic[S]):
    name: str  # how presets, checkpoints and messages name it
    # (spec, hp) -> its state; its own shape fields are spec.mode.shapes
    init: Callable[[Any, HParams], S]
    choose: Callable[[S, Candidates, HParams], tuple[S, Choice]]
    target: Callable[[S, jax.Array, jax.Array, HParams], jax.Array]  # (state, y, s_base, hp) -> residual target
    update: Callable[[S, Feedback, HParams], S]
    # (state, probes (P+1 stacked), the paper's probe scores (a function: computed only if called), the offered
    #  memory, the creation step of every slot and of the offered memory (B+1,), hp) -> per-probe worth (P+1, B+1)
    worth: Callable[[S, Query, Callable[[], ProbeScores], MemoryText, jax.Array, HParams], jax.Array]
    # (state, slot, writes, memory, offered): where ``offered``, a judged success offered ``memory``; it
    # entered ``slot`` where ``writes``
    write: Callable[[S, jax.Array, jax.Array, MemoryText, jax.Array], S]
    shapes: Any = Empty()  # static shape fields (a hashable NamedTuple)
    hparams: Schema | None = None  # its traced hyperparameters (hp.mode), None if it has none
    features: tuple[Feature, ...] = ()  # what it reads beyond the recall keys


def best(score: jax.Array, valid: jax.Array) -> jax.Array:
    """The paper's choice: the highest score (first on ties), -1 when there is no candidate."""
    return jnp.where(jnp.any(valid), jnp.argmax(score).astype(jnp.int32), jnp.int32(-1))


def paper_target(y: jax.Array, s_base: jax.Array) -> jax.Array:
    """delta = y - (2 sigma(s_base) - 1): what the base scorer got wrong, in +-1 units."""
    return y - (2 * jax.nn.sigmoid(s_base) - 1)


def no_report(index: jax.Array, dtype: jnp.dtype) -> Choice:
    """A choice that reports nothing beyond ``index`` (NaN estimates, no scores, no abstention)."""
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
    """The paper's mode: stateless, no hyperparameters or inputs of its own."""
    return PAPER
