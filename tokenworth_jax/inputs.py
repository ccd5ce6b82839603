"""What the controller is given about a query and about a memory.

The core reads one vector of each, the recall ``key`` (``featurize``: D hashed buckets); the pure
API also takes it as a plain (D,) array. A scorer or a mode that reads more declares it: each
:class:`Feature` names a vector, the side it describes (the query or the memory), its width, and
how the host hashes it from a text. A :class:`Query` / :class:`MemoryText` carries the declared
features in ``features``, a dict by name (``{}`` when the parts read none).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Literal, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from . import _doc

Side = Literal["query", "memory"]


class Feature(NamedTuple):
    """One input vector a part reads beyond the recall key.

    ``name`` is its key in ``features`` and the keyword the host ``Controller`` takes it by (a text,
    which the host hashes with ``featurize(text, size)``, or a vector); without it the host hashes the
    question's text (query side) or the memory's text (memory side).
    """

    name: str
    side: Side
    size: int
    featurize: Callable[[str, int], np.ndarray]
    what: str


_doc.fields(
    Feature,
    name="str: its key in ``Query.features`` / ``MemoryText.features`` and the host's keyword for it.",
    side='``"query"`` or ``"memory"``: which input it describes.',
    size="int: its width (the vector has shape (size,)).",
    featurize="``(text, size) -> (size,) float64`` NumPy vector: how the host hashes it from a text.",
    what='str: what it is, for error messages ("the question\'s words").',
)


class Query(NamedTuple):
    """What the controller is given about a query: its recall vector and the features the parts read.

    The pure API also takes a bare (D,) vector where a Query is expected (``features`` then ``{}``);
    a part that declares query-side :class:`Feature` s needs them here, by name.
    """

    key: jax.Array
    features: dict[str, jax.Array] = {}


_doc.fields(
    Query,
    key="(D,) float: the recall vector of the question (``tw.featurize(text, spec.dim)``).",
    features="dict[str, (size,) float]: the query-side features the parts declare, by name; ``{}`` when they "
             "read none (the default; never mutated).",
)


class MemoryText(NamedTuple):
    """What the controller is given about a memory: the recall vector of its key text and the features the parts
    read.

    The pure API also takes a bare (D,) vector where a MemoryText is expected.
    """

    key: jax.Array
    features: dict[str, jax.Array] = {}


_doc.fields(
    MemoryText,
    key="(D,) float: the recall vector of the memory's key text (the agent harness uses its source question, so "
        "recall compares like with like).",
    features="dict[str, (size,) float]: the memory-side features the parts declare, by name; ``{}`` when they "
             "read none (the default; never mutated).",
)


def declared(parts: Iterable[Any], side: Side) -> tuple[Feature, ...]:
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
    """Refuse (ValueError, at trace time) a vector whose shape is not ``shape``; a batch of them (extra leading
    axes) is told to map the call with ``jax.vmap``."""
    got = jnp.shape(x)
    if got == shape:
        return
    if len(got) > len(shape) and got[len(got) - len(shape):] == shape:
        raise ValueError(f"{what} must have shape {shape}, got a batch of shape {got}: the pure functions take one "
                         "task's input per call. Map the call over the batch with jax.vmap (e.g. jax.vmap(lambda q: "
                         "tw.select(state, q, hp, spec))(queries)); for C configurations stack them with "
                         "tw.stack_hparams and jax.vmap over states and hyperparameters, and for a stream of tasks "
                         "use tw.run / tw.run_batched")
    raise ValueError(f"{what} must have shape {shape}, got {got}")


def zeros(dim: int, features: Sequence[Feature], dtype: jnp.dtype, cls: type = Query) -> Any:
    """An all-zero Query (or MemoryText) with the declared features: the slot's value when there is none."""
    return cls(key=jnp.zeros((dim,), dtype), features={f.name: jnp.zeros((f.size,), dtype) for f in features})


# ----- casting before the jit boundary --------------------------------------------------------------
# The public functions cast their inputs with these before they call their jitted programs, so an input of
# another dtype (a float64 or bfloat16 query, a Python int reward) reaches the program as the spec's dtype
# and never compiles it again. NumPy and Python values are cast on the host (no device work); a jax.Array
# of another dtype gets one convert op (under a user's own jit / vmap / scan, part of their program).
def cast(x: Any, dtype: Any, cls: type | None = None) -> Any:
    """``x`` (an array-like, a :class:`Query` or a :class:`MemoryText`: the key and every feature) as ``dtype``;
    a value already of ``dtype`` is returned as it is. Given ``cls`` (Query or MemoryText), a bare vector is
    wrapped in it, so a vector and the same vector in a Query make one program, not two."""
    if isinstance(x, (Query, MemoryText)):
        key = _as(x.key, dtype)
        if key is x.key and not x.features:  # the host's inputs: nothing to do
            return x
        return type(x)(key=key, features={k: _as(v, dtype) for k, v in x.features.items()})
    return _as(x, dtype) if cls is None else cls(key=_as(x, dtype))


def cast_reward(reward: Any) -> Any:
    """A reward as int32. Integer rewards keep their value (2 stays 2, for the checks to report); a
    non-integer one (0.5) becomes -1: either way not 0 or 1, so ``observe`` is a no-op on it (and
    ``tw.checked`` reports the value it was given)."""
    if type(reward) is np.int32:  # the host's input: the fast path
        return reward
    if isinstance(reward, (bool, np.bool_)) or (isinstance(reward, np.ndarray) and reward.dtype == bool):
        return np.asarray(reward, np.int32)
    if isinstance(reward, (int, float, np.number, np.ndarray, list, tuple)):
        r: Any = np.asarray(reward)  # NumPy here, a jax.Array below
        if r.dtype == np.int32:
            return r
        if np.issubdtype(r.dtype, np.integer):
            return np.where((r >= -2**31) & (r < 2**31), r, -1).astype(np.int32)
        return np.where(r == np.round(r), np.clip(np.nan_to_num(r, nan=-1.0), -2**31, 2**31 - 1), -1).astype(np.int32)
    r = jnp.asarray(reward)
    if r.dtype == jnp.int32:
        return r
    if r.dtype == bool or jnp.issubdtype(r.dtype, jnp.integer):
        return r.astype(jnp.int32)
    return jnp.where((r == 0) | (r == 1), r, -1).astype(jnp.int32)


def cast_index(x: Any) -> Any:
    """A memory id (or ids) as int32."""
    return _as(x, np.int32)


def cast_flag(x: Any) -> Any:
    """A flag (``offered``) as bool."""
    return _as(x, np.bool_)


def _as(x: Any, dtype: Any) -> Any:
    if type(x) is np.ndarray or isinstance(x, np.generic):  # the host's inputs: the fast path
        return x if x.dtype == dtype else np.asarray(x, dtype)
    if isinstance(x, jax.Array):  # a device array or a tracer
        if x.dtype == dtype:
            return x
        if not isinstance(x, jax.core.Tracer) and x.is_fully_addressable and \
                all(d.platform == "cpu" for d in x.devices()):
            return np.asarray(x).astype(dtype)  # in host memory already: NumPy casts it, nothing is compiled
        return x.astype(dtype)  # on an accelerator (or traced): one convert op there
    if isinstance(x, np.ndarray) and x.dtype == dtype:
        return x
    return np.asarray(x, dtype)
