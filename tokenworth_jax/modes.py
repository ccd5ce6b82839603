"""How the controller chooses a memory and credits it: two values of one small interface.

A :class:`Mode` is a ``NamedTuple`` of pure functions over its own state, as
``optax.GradientTransformation`` is. :func:`paper` is the method of the paper (inject the best
scoring candidate, credit the residual with y - (2 sigma(s_base) - 1), worth = the score); its
state is :class:`~tokenworth_jax.pytree.Empty`. TokenWorth+ (:func:`tokenworth_jax.plus.mode`) is
the other value. The controller picks one from ``Spec.plus`` and never looks inside its state.
"""

from __future__ import annotations

from typing import Callable, Generic, NamedTuple, TypeVar

import jax
import jax.numpy as jnp

from .config import HParams, Spec
from .inputs import MemoryText, Query
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
    """A mode's selection: what to inject and what the policy reports about it."""

    index: jax.Array  # int32 index into the candidates, -1 for nothing
    p0: jax.Array  # estimated success probability without a memory (NaN: the mode has none)
    advantage: jax.Array  # predicted success-probability change of the best candidate (NaN: none)
    abstained: jax.Array  # bool: candidates existed but nothing was injected
    gains: jax.Array  # (K,) each candidate's predicted change (NaN: the mode has none, or invalid)
    affinity: jax.Array  # (K,) each candidate's learned query-memory affinity (NaN: none)


class Feedback(NamedTuple):
    """The judged task, as the mode sees it."""

    query: Query
    selected: jax.Array  # bool: a memory was injected
    slot: jax.Array  # int32 its bank slot (-1 if none)
    reward: jax.Array  # int32 0/1


S = TypeVar("S")  # a mode's own state


class Mode(NamedTuple, Generic[S]):
    init: Callable[[Spec, HParams], S]
    choose: Callable[[S, Candidates, HParams], tuple[S, Choice]]
    target: Callable[[S, jax.Array, jax.Array, HParams], jax.Array]  # (state, y, s_base, hp) -> residual target
    update: Callable[[S, Feedback, HParams], S]
    # (state, probes (P+1 stacked), the paper's probe scores (a function: computed only if called), the offered
    #  memory, the creation step of every slot and of the offered memory (B+1,), hp) -> per-probe worth (P+1, B+1)
    worth: Callable[[S, Query, Callable[[], ProbeScores], MemoryText, jax.Array, HParams], jax.Array]
    # (state, slot, writes, memory, offered): where ``offered``, a judged success offered ``memory``; it
    # entered ``slot`` where ``writes``
    write: Callable[[S, jax.Array, jax.Array, MemoryText, jax.Array], S]


def best(score: jax.Array, valid: jax.Array) -> jax.Array:
    """The paper's choice: the highest score (first on ties), -1 when there is no candidate."""
    return jnp.where(jnp.any(valid), jnp.argmax(score).astype(jnp.int32), jnp.int32(-1))


def paper_target(y: jax.Array, s_base: jax.Array) -> jax.Array:
    """delta = y - (2 sigma(s_base) - 1): what the base scorer got wrong, in +-1 units."""
    return y - (2 * jax.nn.sigmoid(s_base) - 1)


def _choose(state: Empty, cands: Candidates, hp: HParams) -> tuple[Empty, Choice]:
    nan = jnp.full((), jnp.nan, cands.score.dtype)
    none = jnp.full(cands.score.shape, jnp.nan, cands.score.dtype)
    return state, Choice(index=best(cands.score, cands.valid), p0=nan, advantage=nan, abstained=jnp.zeros((), bool),
                         gains=none, affinity=none)


def paper() -> Mode[Empty]:
    """The paper's mode: stateless."""
    return Mode(init=lambda spec, hp: Empty(), choose=_choose, target=lambda state, y, s_base, hp: paper_target(y, s_base),
                update=lambda state, feedback, hp: state, worth=lambda state, probes, scores, memory, created, hp: scores().score,
                write=lambda state, slot, writes, memory, offered: state)
