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
from .protocol import REWARD_RULE

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


# A graded score (0.9) is not a reward: the controller learns from success and failure only, and a float that
# happens to be 0.0 or 1.0 hides the same mistake, so a reward's dtype is refused at trace time.
GRADED = ("a graded score is not a reward here: threshold it to 0 or 1 yourself, e.g. reward = (score >= 0.5)"
          ".astype(jnp.int32)")


def check_reward_dtype(reward: Any, what: str = "reward") -> None:
    """Refuse (TypeError, one line, at trace time: the dtype is static) a reward that is not of an integer or bool
    dtype (Python ints and bools are; Python floats are not)."""
    dtype = reward.dtype if hasattr(reward, "dtype") else np.asarray(reward).dtype
    if not (dtype == np.bool_ or jnp.issubdtype(dtype, jnp.integer)):
        raise TypeError(f"{what} must be an integer 0 or 1 (any integer or bool dtype), got dtype {dtype}: {GRADED}")


def check_reward_values(reward: Any, what: str = "reward", axes: tuple[str, ...] = ()) -> None:
    """Refuse (ValueError, one line) a concrete reward (NumPy, Python, a ``jax.Array`` outside a transformation)
    with an entry other than 0 or 1, naming the first. A traced one (under a user's own jit, vmap or scan) has no
    value to read: it is left to the program, where a task whose reward is not 0 or 1 gets no feedback (the
    documented no-op of ``observe``) and ``tw.checked`` reports it. An integer dtype is checked before this
    (:func:`check_reward_dtype`). ``axes`` names the axes of ``reward`` for the message (``("task",)``: "first at
    task 3"); without them it says "first at index 3"."""
    if isinstance(reward, jax.core.Tracer):
        return
    if type(reward) is np.int32:  # the host's input: the fast path
        if reward == 0 or reward == 1:
            return
    r = np.asarray(reward)  # a device array is fetched (a few bytes; already in host memory on the CPU)
    bad = (r != 0) & (r != 1)
    if np.any(bad):
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        if axes and len(axes) == len(index):
            where = " (first at " + ", ".join(f"{a} {i}" for a, i in zip(axes, index)) + ")"
        else:
            where = f" (first at index {index[0] if len(index) == 1 else index})" if r.ndim else ""
        raise ValueError(f"{what} {REWARD_RULE[len('reward '):]}, got {r[index].item()!r}{where}")


def cast_reward(reward: Any, what: str = "reward") -> Any:
    """A reward (or a stack of them) as int32, its dtype checked first (:func:`check_reward_dtype`: a float is
    refused). Values outside the int32 range become -1, so that no wider integer wraps round to 0 or 1; a value
    other than 0 or 1 stays one (2 stays 2, for the checks to report)."""
    if type(reward) is np.int32:  # the host's input: the fast path
        return reward
    check_reward_dtype(reward, what)
    if isinstance(reward, jax.Array):  # a device array or a tracer
        if reward.dtype == jnp.int32:
            return reward
        return jnp.where(_in_int32(reward), reward, -1).astype(jnp.int32) if _wide(reward.dtype) else \
            reward.astype(jnp.int32)
    r: Any = np.asarray(reward)
    if r.dtype == np.int32:
        return r
    return np.where(_in_int32(r), r, -1).astype(np.int32) if _wide(r.dtype) else r.astype(np.int32)


def _wide(dtype: Any) -> bool:
    """An integer dtype with values beyond int32's range (int64, uint32, uint64)."""
    return dtype != np.bool_ and np.iinfo(dtype).max > np.iinfo(np.int32).max


def _in_int32(r: Any) -> Any:
    """Which entries of an integer array fit in int32 (works on NumPy and JAX arrays alike)."""
    ok = r <= np.iinfo(np.int32).max
    return ok & (r >= np.iinfo(np.int32).min) if np.iinfo(r.dtype).min < 0 else ok


# ----- memory ids -------------------------------------------------------------------------------------------
# The bank stores ids as int32, and -1 means "no memory" in every output (Selection.memory_id, candidate_ids,
# Decision.evicted_id). So an id is guarded as a reward is: a dtype that is not an integer (3.7 would be stored
# as 3, True as 1) is refused at trace time; a concrete value outside int32 (np.int64(2**32) would wrap round
# to 0 and be admitted) is refused before the program runs; a traced one becomes -1, which the program answers
# INVALID_MEMORY (tw.checked reports its value). An id below 0 that fits int32 is the documented
# INVALID_MEMORY (a stream may use -1 for "this task offers nothing"). One id per task: a shape is refused
# (ValueError, at trace time: controller._offer_if).
ID_RULE = "must be an integer that fits int32 (a memory id: 0 <= id <= 2**31 - 1; one below 0 is never admitted)"


def _host_ids(x: Any) -> np.ndarray:
    """``x`` (a Python int, a list of them, a NumPy value) as a NumPy array. Python ints stay integers whatever their
    size (an object array beyond int64, where NumPy would make a list of them float64), so that a value is
    reported as given."""
    if isinstance(x, (int, list, tuple)) and not isinstance(x, bool):
        held = np.asarray(x, dtype=object)
        if held.size and all(type(v) is int for v in held.flat):
            try:
                return np.asarray(x, dtype=np.int64)
            except OverflowError:
                return held
    return np.asarray(x)


def _integer(r: Any) -> bool:
    """An integer dtype (not bool), or an object array holding Python ints only."""
    if r.dtype == object:
        return r.size > 0 and all(type(v) is int for v in np.asarray(r).flat)
    return r.dtype != np.bool_ and bool(jnp.issubdtype(r.dtype, jnp.integer))


def check_id_dtype(memory_id: Any, what: str = "memory_id") -> None:
    """Refuse (TypeError, one line, at trace time: the dtype is static) a memory id that is not of an integer dtype:
    a float (3.7 would be stored as 3), a bool (True as 1). Python ints are integers, of any size (their value is
    checked by :func:`check_id_values`)."""
    if isinstance(memory_id, jax.Array):
        r: Any = memory_id
    else:
        r = _host_ids(memory_id)
    if not _integer(r):
        shown = "" if isinstance(memory_id, jax.core.Tracer) or np.ndim(r) else f" ({np.asarray(r).item()!r})"
        raise TypeError(f"{what} {ID_RULE}, got dtype {r.dtype}{shown}: a float or a bool is not an id")


def check_id_values(memory_id: Any, what: str = "memory_id") -> None:
    """Refuse (ValueError, one line) a concrete memory id (NumPy, Python, a ``jax.Array`` outside a transformation;
    or a stream's ids) outside int32's range, naming the first: it would wrap round (``np.int64(2**32)`` to 0). A
    traced one has no value to read: :func:`cast_index` makes it -1, which the program answers ``INVALID_MEMORY``
    and ``tw.checked`` reports. An integer dtype is checked before this (:func:`check_id_dtype`)."""
    if isinstance(memory_id, jax.core.Tracer) or type(memory_id) is np.int32:  # traced, or the host's own input
        return
    if isinstance(memory_id, jax.Array) and memory_id.dtype == jnp.int32:
        return
    r = _host_ids(memory_id)  # a device array is fetched (a few bytes; already in host memory on the CPU)
    bad = np.asarray((r < np.iinfo(np.int32).min) | (r > np.iinfo(np.int32).max), bool)
    if np.any(bad):
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f" (first at index {index[0] if len(index) == 1 else index})" if r.ndim else ""
        value = r[index] if r.ndim else r.item()
        raise ValueError(f"{what} {ID_RULE}, got {int(value)}{where}")


def host_id(value: Any, what: str) -> int:
    """A memory id held on the host (a memory table's ``next_id``) as a Python int: a Python or NumPy integer scalar;
    anything else (a float, a bool, an array) is refused (TypeError, one line). Its range is the caller's rule."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} {ID_RULE}, got {value!r} ({type(value).__name__})")
    return int(value)


def cast_index(x: Any, what: str = "memory_id") -> Any:
    """A memory id (or a stream's ids) as int32, its dtype checked first (:func:`check_id_dtype`: a float or a bool
    is refused). Values outside int32's range become -1, so that no wider integer wraps round to a valid id (the
    program answers -1 ``INVALID_MEMORY``; a concrete one is refused before that: :func:`check_id_values`)."""
    if type(x) is np.int32:  # the host's input: the fast path
        return x
    check_id_dtype(x, what)
    if isinstance(x, jax.Array) and not _wide(x.dtype):  # a device array or a tracer that fits int32 by its dtype
        return _as(x, np.int32)
    if isinstance(x, jax.core.Tracer):
        return jnp.where(_in_int32(x), x, -1).astype(jnp.int32)
    r = _host_ids(x)  # a wide device array is fetched (a few bytes), as check_id_values reads its values anyway
    if r.dtype == object or _wide(r.dtype):
        fits = np.asarray((r >= np.iinfo(np.int32).min) & (r <= np.iinfo(np.int32).max), bool)
        return np.where(fits, np.where(fits, r, 0).astype(np.int64), -1).astype(np.int32)
    return _as(r, np.int32)


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
