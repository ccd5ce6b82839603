"""What the controller is given about a query and about a memory: hashed text vectors.

The paper's controller reads one vector of each (``featurize``: the recall vector), and the pure
API takes it as a plain (D,) array. TokenWorth+'s learned ranker reads one more of each: the
question's words (``featurize.word_vectors``, (W,)) and the memory's actions
(``featurize.action_vectors``, (A,)). A :class:`Query` / :class:`MemoryText` carries them; the
part a mode does not read is :class:`~tokenworth_jax.pytree.Empty`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .config import Spec
from .pytree import Empty


class Query(NamedTuple):
    key: jax.Array  # (D,) the recall vector
    words: jax.Array | Empty = Empty()  # (Spec.word_dim,) the question's words (TokenWorth+)


class MemoryText(NamedTuple):
    key: jax.Array  # (D,) the recall vector of the memory's key text (its source question)
    actions: jax.Array | Empty = Empty()  # (Spec.action_dim,) the memory's action tokens (TokenWorth+)


def as_query(query: ArrayLike | Query, spec: Spec) -> Query:
    """A :class:`Query`, with the shapes ``spec`` needs (checked while tracing: free under jit)."""
    q = query if isinstance(query, Query) else Query(key=jnp.asarray(query))
    _complete(q, spec, "query", "words", spec.word_dim, "the question's words",
              "tw.Query(key, words) with words = tokenworth_jax.featurize.word_vectors(question, spec.word_dim)")
    return q


def as_memory(memory: ArrayLike | MemoryText, spec: Spec) -> MemoryText:
    """A :class:`MemoryText`, with the shapes ``spec`` needs (checked while tracing: free under jit)."""
    m = memory if isinstance(memory, MemoryText) else MemoryText(key=jnp.asarray(memory))
    _complete(m, spec, "memory", "actions", spec.action_dim, "the memory's actions",
              "tw.MemoryText(key, actions) with actions = tokenworth_jax.featurize.action_vectors(actions, "
              "spec.action_dim)")
    return m


def _complete(value: Query | MemoryText, spec: Spec, what: str, field: str, dim: int, reads: str, how: str) -> None:
    """The key vector's shape; in TokenWorth+ mode also the second vector's presence and shape."""
    _check(value.key, (spec.dim,), f"{what} key vector")
    if spec.plus:
        second = getattr(value, field)
        if isinstance(second, Empty):
            raise ValueError(f"TokenWorth+ (Spec.plus) reads {reads}: pass {how}")
        _check(second, (dim,), f"{what} {field.rstrip('s')} vector")


def _check(x: jax.Array, shape: tuple[int, ...], what: str) -> None:
    if jnp.shape(x)[-len(shape):] != shape:
        raise ValueError(f"{what} must have shape {shape}, got {jnp.shape(x)}")
