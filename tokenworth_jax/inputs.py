"""What the controller is given about a query and about a memory.

The core reads one vector of each, the recall ``key`` (``featurize``: D hashed buckets); the pure
API also takes it as a plain (D,) array. A scorer or a mode that reads more declares it: each
:class:`Feature` names a vector, the side it describes (the query or the memory), its width, and
how the host hashes it from a text. A :class:`Query` / :class:`MemoryText` carries the declared
features in ``features``, a dict by name (``{}`` when the parts read none).
"""

from __future__ import annotations

from typing import Any, Callable, Literal, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

Side = Literal["query", "memory"]


class Feature(NamedTuple):
    """One input vector a part reads beyond the recall key.

    ``name`` is its key in ``features`` and the keyword the host ``Controller`` takes it by (a text,
    which the host hashes with ``featurize(text, size)``, or a vector); without it the host hashes the
    question's text (query side) or the memory's text (memory side).
    """

    name: str
    side: Side
    size: int  # its width
    featurize: Callable[[str, int], np.ndarray]  # host side: (text, size) -> (size,) float64
    what: str  # what it is, for messages ("the question's words")


class Query(NamedTuple):
    key: jax.Array  # (D,) the recall vector
    features: dict[str, jax.Array] = {}  # the parts' query-side features, by name (never mutated)


class MemoryText(NamedTuple):
    key: jax.Array  # (D,) the recall vector of the memory's key text (its source question)
    features: dict[str, jax.Array] = {}  # the parts' memory-side features, by name (never mutated)


def declared(parts: Sequence[Any], side: Side) -> tuple[Feature, ...]:
    """The features the parts (a scorer and a mode) read on ``side``; a name declared twice is an error."""
    out = tuple(f for part in parts for f in part.features if f.side == side)
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise ValueError(f"two parts declare the {side} feature(s) {sorted({n for n in names if names.count(n) > 1})}")
    return out


def as_query(query: ArrayLike | Query, dim: int, features: Sequence[Feature]) -> Query:
    """A :class:`Query` with the recall key and exactly the declared ``features``, shapes checked
    (while tracing: free under jit)."""
    q = query if isinstance(query, Query) else Query(key=jnp.asarray(query))
    return Query(key=q.key, features=_complete(q, dim, features, "query", "tw.Query(key, {name: vector})"))


def as_memory(memory: ArrayLike | MemoryText, dim: int, features: Sequence[Feature]) -> MemoryText:
    m = memory if isinstance(memory, MemoryText) else MemoryText(key=jnp.asarray(memory))
    return MemoryText(key=m.key, features=_complete(m, dim, features, "memory", "tw.MemoryText(key, {name: vector})"))


def _complete(value: Query | MemoryText, dim: int, features: Sequence[Feature], what: str,
              how: str) -> dict[str, jax.Array]:
    _check(value.key, (dim,), f"{what} key vector")
    out = {}
    for f in features:
        if f.name not in value.features:
            raise ValueError(f"this controller reads {f.what} ({what} feature {f.name!r}, {f.size} wide): pass {how}")
        _check(value.features[f.name], (f.size,), f"{what} feature {f.name!r}")
        out[f.name] = value.features[f.name]
    return out


def _check(x: ArrayLike, shape: tuple[int, ...], what: str) -> None:
    if jnp.shape(x)[-len(shape):] != shape:
        raise ValueError(f"{what} must have shape {shape}, got {jnp.shape(x)}")


def zeros(dim: int, features: Sequence[Feature], dtype: jnp.dtype, cls: type = Query) -> Any:
    """An all-zero Query (or MemoryText) with the declared features: the slot's value when there is none."""
    return cls(key=jnp.zeros((dim,), dtype), features={f.name: jnp.zeros((f.size,), dtype) for f in features})
