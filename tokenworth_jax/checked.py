"""Checked mode: the pure API with value, protocol and NaN/inf checks, via ``jax.experimental.checkify``.

The plain entry points (``tw.select`` etc.) cannot raise under ``jit``: one non-finite query or
memory vector is admitted and spreads into w, M, the bank and the windows for good, and a call out
of the protocol's order is answered by its documented fallback (a no-op, or NOT_OFFERED). Each
function here runs the same computation with checks compiled in, and raises
``jax.experimental.checkify.JaxRuntimeError`` naming a problem and what to do about it: the first
in program order, of these kinds (where a call has several, jax 0.10 may report a protocol check,
which runs inside the controller's own jitted program, ahead of an earlier input check):

1. a wrong input value: a reward other than 0 or 1 (``observe: input reward must be 0 or 1 ...,
   got 2``; ``run: input events.reward ...`` names the first bad task; a reward of a float dtype is
   refused before that, at trace time, with the plain functions' TypeError), and an offered memory
   that can never be admitted (a non-finite vector or an id below 0: ``offer(): an offered memory
   needs finite entries ... got memory id -1``; the plain functions answer ``INVALID_MEMORY``), and a
   memory id outside int32 (``offer: input memory_id must be an integer that fits int32 ..., got
   4294967296``: a concrete one before the program runs, where the plain functions raise a
   ValueError; a traced one of a wider dtype in the program, where they answer ``INVALID_MEMORY``);
2. a non-finite input (``query``, ``reward``, ``memory``, a hyperparameter leaf such as ``hp.gamma``);
3. the incoming state (e.g. ``state.bank.emb`` already poisoned by an unchecked call);
4. the protocol's order, read from the open task's phase in the state (``State.task.progress``), so
   it holds under ``jit``, ``vmap`` and ``scan``: ``select(): a task is still open: call
   observe(reward) before the next select()``, a second ``observe``, ``offer`` before ``observe``
   or twice, ``end_task`` before ``observe``; the rules are :func:`tokenworth_jax.protocol.refusals`'
   eager walk (the host ``Controller`` raises the same messages);
5. the outgoing state (a non-finite value the step itself produced).

Shapes, a state made for another spec (:func:`tokenworth_jax.controller.check_state`), a batch given
to a function of one configuration, one task's event given to a stream function, a float64 spec
without 64-bit JAX (a ``ValueError``) and a reward of a float dtype (a ``TypeError``) are refused by
the plain functions too, at trace time.

Where it is raised: called eagerly (concrete inputs), a checked function raises
``checkify.JaxRuntimeError`` at once. Inside the caller's own ``jax.jit``, ``jax.vmap`` or
``lax.scan`` (traced inputs) it works as written, with no ``checkify.checkify`` of theirs: the
checks are staged into their program and a failed one raises ``jax.errors.JaxRuntimeError`` when
the program runs, its message ending with the same line after where it failed (``at mapped index i``
under vmap; ``task t (state.clock.t)`` for a function of one task, naming a scan's failing step),
its first line XLA's (no JAX API puts the check's first: docs/api/sharp_bits.rst shows the exact
output), and nothing on stderr (:class:`_Quiet`; :func:`_throw`; why and what it costs:
docs/api/checked.rst).

Usage: ``tw.checked.select(state, q, hp, spec)`` instead of ``tw.select(...)`` (same signature
and results), for every function of the controller (``init``, ``select``, ``observe``, ``offer``,
``end_task``, ``finish_task``, ``advance``, ``step``, ``run``, ``run_batched``, ``worth``). The
wrappers are derived from the controller's own table of its functions and their static arguments
(``controller.COMPOSED``): a function added there is checked here with no edit. The checks cost
one reduction per leaf per call; use them while developing or when the inputs come from somewhere
untrusted.

Which entry points validate (see docs/controller.md): ``tw.hparams``/``tw.preset``/``Spec``
and ``tw.stack_hparams`` check every value on the host at construction; the host
``Controller`` checks its inputs (shape, finiteness, reward in {0, 1}) and the protocol;
the pure API checks shapes, the state against its spec, batches, reward and memory-id dtypes and the
float64 setting at trace time, refuses a concrete reward other than 0 or 1 and a concrete memory id
outside int32 before its program runs, answers an out-of-order call with a documented no-op and an
inadmissible memory with ``INVALID_MEMORY``, but cannot raise on traced values (this module is its
checked twin).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from . import inputs
from .controller import COMPOSED, Event, Spec, State, cast_arguments, check_state, controller
from .inputs import MemoryText, Query
from .controller import signature as _signature
from .protocol import REWARD_RULE

STATE_ARGS = ("state", "states")  # checked as the incoming state


def _check_reward(reward: Any, what: str) -> Any:
    """Check that every entry of ``reward`` (as given: int32, or float for an integer beyond int32's range, so
    that its value is reported) is 0 or 1, reporting the first bad one; returns ``reward`` as int32 with bad
    entries as 0, so the controller's own reward check (which would report the int32 it casts to) does not fire
    too (the call raises and its result is discarded)."""
    r = jnp.ravel(jnp.asarray(reward))
    bad = ~((r == 0) | (r == 1))
    first = jnp.argmax(bad)
    where = " (first at index {i})" if jnp.ndim(reward) else ""
    checkify.check(~jnp.any(bad), f"{what} {REWARD_RULE[len('reward '):]}, got {{v}}{where}", v=r[first],
                   **({"i": first} if jnp.ndim(reward) else {}))  # type: ignore[arg-type]  # format values
    return jnp.where(bad.reshape(jnp.shape(reward)), jnp.zeros((), r.dtype), reward).astype(jnp.int32)


def _with_reward(event: Event, reward: Any) -> Event:
    """``event`` with its rewards replaced (an input, not state)."""
    return Event(event.query, reward, event.memory, event.memory_id)


def _raw_reward(reward: Any, spec: Spec) -> Any:
    """A reward (of an integer or bool dtype: :func:`~tokenworth_jax.controller.cast_arguments` refused any other)
    as the checked program takes it: its value kept (2**40 stays 2**40, so the check can report it), Python and
    NumPy values as int32 or, beyond int32's range, the spec's float dtype (so a new value never compiles again)."""
    if isinstance(reward, jax.Array):
        return reward
    r = np.asarray(reward)
    return r.astype(np.int32) if np.all(np.abs(r) < 2**31) else r.astype(spec.float_dtype)


def _check_id(memory_id: Any, what: str) -> Any:
    """Check that a traced memory id (or a stream's ids) of a wider integer dtype than int32 (int64 under 64-bit
    JAX, uint32) fits int32, reporting the first that does not with its value; returns the ids as int32 with bad
    entries as 0, so that the controller's own admission check (an id below 0), which may come first in the
    report, does not fire too (the call raises and its result is discarded). A concrete id was checked on the host
    (:func:`_check_ids_on_host`); an int32 one needs no check."""
    if memory_id.dtype == jnp.int32:
        return memory_id
    fits = inputs._in_int32(memory_id)
    r, ok = jnp.ravel(memory_id), jnp.ravel(fits)
    first = jnp.argmin(ok)
    where = " (first at index {i})" if jnp.ndim(memory_id) else ""
    checkify.check(jnp.all(ok), f"{what} {inputs.ID_RULE}, got {{v}}{where}", v=r[first],
                   **({"i": first} if jnp.ndim(memory_id) else {}))  # type: ignore[arg-type]  # format values
    return jnp.where(fits, memory_id, 0).astype(jnp.int32)


def _with_id(event: Event, memory_id: Any) -> Event:
    """``event`` with its memory ids replaced (an input, not state)."""
    return Event(event.query, event.reward, event.memory, memory_id)


def _raw_id(given: Any, cast: Any) -> Any:
    """A memory id as the checked program takes it: a traced one of a wider integer dtype as given (its value kept
    for :func:`_check_id` to report), anything else as cast (int32)."""
    return given if isinstance(given, jax.core.Tracer) and given.dtype != jnp.int32 else cast


def _check_ids_on_host(name: str, raw: dict[str, Any]) -> None:
    """A concrete memory id outside int32 is reported before the program runs (its value, beyond what the
    program's int32 could hold), as the error a check in the program raises."""
    try:
        if "memory_id" in raw:
            inputs.check_id_values(raw["memory_id"], f"{name}: input memory_id")
        for key in ("event", "events"):
            if isinstance(raw.get(key), Event):
                inputs.check_id_values(raw[key].memory_id, f"{name}: input {key}.memory_id")
    except ValueError as error:
        raise checkify.JaxRuntimeError(f"{error} (`check` failed)") from None


def _check_finite(tree: Any, what: str, per_task: bool = False) -> None:
    """Check that every inexact leaf of ``tree`` is finite. ``per_task``: the leaves are a stream's (axis 0 the
    task), and the message names the first task with a non-finite entry."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        leaf = jnp.asarray(leaf)
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            message = f"{what}{jax.tree_util.keystr(path)} has a non-finite entry"
            if per_task and jnp.ndim(leaf):
                bad = ~jnp.all(jnp.isfinite(leaf).reshape(leaf.shape[0], -1), axis=1)
                checkify.check(~jnp.any(bad), message + " (first at task {i})", i=jnp.argmax(bad))
            else:
                checkify.check(jnp.all(jnp.isfinite(leaf)), message)


@functools.lru_cache(maxsize=None)
def _compiled(name: str, statics: tuple[Any, ...]) -> Callable[..., Any]:
    static_names = COMPOSED[name][1]
    spec = statics[static_names.index("spec")]
    public = getattr(controller(spec.scorer, spec.mode), name)
    arrays = [p for p in _signature(name).parameters if p not in static_names]

    def body(*arguments: Any) -> Any:
        if "state" in arrays:  # first, as the plain function does (run_batched's states: in its own _sweep)
            check_state(name, arguments[arrays.index("state")], spec)
        args = list(arguments)
        for i, arg_name in enumerate(arrays):
            if arg_name == "reward":
                args[i] = _check_reward(args[i], f"{name}: input reward")
            if arg_name == "memory_id":
                args[i] = _check_id(args[i], f"{name}: input memory_id")
            if arg_name in ("event", "events"):
                args[i] = _with_id(args[i], _check_id(args[i].memory_id, f"{name}: input {arg_name}.memory_id"))
            if arg_name in ("event", "events") and dict(zip(arrays, arguments)).get("reward_fn") is None:
                args[i] = _with_reward(args[i], _check_reward(args[i].reward, f"{name}: input {arg_name}.reward"))
        for arg_name, arg in zip(arrays, args):
            if arg_name not in STATE_ARGS:
                _check_finite(arg, f"{name}: input {arg_name}", per_task=arg_name == "events")
        for arg_name, arg in zip(arrays, args):
            if arg_name in STATE_ARGS:
                _check_finite(arg, f"{name}: incoming state")
        out = public(**dict(zip(arrays, args)), **dict(zip(static_names, statics)))
        new_state = out if isinstance(out, State) else out[0] if isinstance(out, tuple) else None
        if isinstance(new_state, State):
            _check_finite(new_state, f"{name}: outgoing state")
        return out

    return jax.jit(checkify.checkify(body, errors=checkify.user_checks))


# ----- reporting: at once, or (inside a user's own jit / vmap / scan) when the program runs ---------------------------
class JaxRuntimeError(checkify.JaxRuntimeError):
    """A failed check reported from inside a user's own transformation, by the host callback that raises it (a
    ``checkify.JaxRuntimeError``, of the same name: XLA's message ends ``JaxRuntimeError: <the check's line>``;
    JAX re-raises it as ``jax.errors.JaxRuntimeError``). Its own class, so that JAX's log record of the callback's
    failure, a copy of the same traceback on stderr, is dropped (:class:`_Quiet`)."""


class _Quiet(logging.Filter):
    """Drops JAX's log record of a failed host callback ("jax.debug.callback failed" and its traceback) when what
    failed is a check of this module: the error the program raises carries the same traceback and message, so the
    record only repeated it on stderr. Any other callback's failure is logged as before."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], JaxRuntimeError))


for _logger in ("jax._src.debugging", "jax._src.callback"):  # where jax 0.10 and 0.11 log a failed callback
    if not any(isinstance(f, _Quiet) for f in logging.getLogger(_logger).filters):
        logging.getLogger(_logger).addFilter(_Quiet())


def _throw(err: checkify.Error, clock: Any = None, returned: Any = None, name: str = "") -> None:
    """Raise the first failed check of ``err``. A concrete ``err`` (the inputs were concrete) raises at once. A
    traced one (the call is inside the caller's own ``jax.jit``, ``jax.vmap`` or ``lax.scan``) cannot: its checks
    are staged into the caller's program as one ``lax.cond`` on "some check failed", whose taken branch hands the
    error's values to a host callback that raises. So the checks cost what they cost eagerly (one reduction per
    leaf) plus that condition (a predicate read by the host: a device-to-host sync on an accelerator, once per
    call), and the callback runs only when a check failed.

    ``clock``: the incoming state's task index (``state.clock.t``) of a one-task function, named in a staged report
    (inside a ``lax.scan`` it tells which step failed). ``returned``: the rewards a ``reward_fn`` returned (the
    program's ``StepOutput.reward``) of ``name``, reported as :func:`tokenworth_jax.run` words them (naming the
    first bad task) in place of the controller's own reward check."""
    leaves, tree = jax.tree_util.tree_flatten(err)
    if not any(isinstance(leaf, jax.core.Tracer) for leaf in leaves + jax.tree_util.tree_leaves((clock, returned))):
        message = err.get()
        if message is not None:
            raise checkify.JaxRuntimeError(_reworded(message, returned, name))
        return
    preds = jax.tree_util.tree_leaves(err._pred)  # noqa: SLF001  (checkify's own field: whether each check failed)
    if not preds:  # no check in the program
        return
    extra = tuple(x for x in (clock, returned) if x is not None)
    ndims = tuple(jnp.ndim(leaf) for leaf in (*leaves, *extra))
    _reporter(tree, ndims, len(preds), clock is not None, returned is not None, name)(
        *(jax.lax.stop_gradient(x) for x in (*preds, *leaves, *extra)))


REWARD_CHECK = f"observe(): {REWARD_RULE}, got "  # the controller's own reward check (protocol.reward_check)


def _reworded(message: str, returned: Any, name: str) -> str:
    """``message``, or where it is the controller's reward check and ``returned`` holds the rewards a ``reward_fn``
    returned, :func:`tokenworth_jax.run`'s words for them (the first bad task; the configuration too for
    ``run_batched``)."""
    if returned is None or not message.startswith(REWARD_CHECK):
        return message
    axes = {0: (), 1: ("task",), 2: ("configuration", "task")}[np.ndim(returned)]
    try:
        inputs.check_reward_values(np.asarray(returned), f"{name}: the reward that reward_fn returned", axes)
    except ValueError as error:
        return f"{error} (`check` failed)"
    return message


def _reporter(tree: Any, ndims: tuple[int, ...], n_preds: int, has_clock: bool, has_returned: bool,
              name: str) -> Callable[..., Any]:
    """``report(*preds, *leaves, [clock], [returned])``: a ``custom_vmap`` function, so that under ``jax.vmap`` the
    condition stays one unbatched ``lax.cond`` (a batched predicate would make it a select: the callback on every
    call) and the callback gets the whole batch at once, reporting its first failed element (as ``at mapped index
    i: ...``, checkify's own words for a batch) and, for a one-task function, its task (``at task t
    (state.clock.t): ...``)."""
    n_err = len(ndims) - has_clock - has_returned

    def raise_first(*values: np.ndarray) -> None:
        lead = np.shape(values[0])[:np.ndim(values[0]) - ndims[0]]  # the vmapped axes, outermost first
        for index in np.ndindex(*lead):
            at = [np.asarray(x)[index] for x in values]
            message = jax.tree_util.tree_unflatten(tree, at[:n_err]).get()
            if message is not None:
                where = [f"at mapped index {', '.join(map(str, index))}"] if index else []
                if has_clock:
                    where.append(f"task {int(at[n_err])} (state.clock.t)")
                message = _reworded(message, at[-1] if has_returned else None, name)
                raise JaxRuntimeError((", ".join(where) + ": " if where else "") + message) from None

    def report(*args: Any) -> Any:
        failed = jnp.any(jnp.stack([jnp.any(p) for p in args[:n_preds]]))
        jax.lax.cond(failed, lambda: jax.debug.callback(raise_first, *args[n_preds:]), lambda: None)
        return jnp.zeros((), bool)

    batched_report = jax.custom_batching.custom_vmap(report)

    @batched_report.def_vmap
    def _batched(axis_size: int, in_batched: list[bool], *args: Any) -> tuple[Any, bool]:
        args = tuple(x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))) for x, b in zip(args, in_batched))
        return batched_report(*args), False  # the batch axis is now an array axis: one condition, one callback

    return batched_report


def _derive(name: str) -> Callable[..., Any]:
    signature = _signature(name)
    static_names = COMPOSED[name][1]

    def checked(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        raw = dict(bound.arguments)
        values = cast_arguments(name, raw)  # as the plain function casts (no new compile for a new input dtype)
        for key in ("query", "memory"):  # a bare vector stays one, so a message names it "input query"
            if key in raw and not isinstance(raw[key], (Query, MemoryText)):
                values[key] = values[key].key
        for key in ("event", "events"):
            if isinstance(raw.get(key), Event):
                event = values[key]
                values[key] = Event(*(getattr(event, f).key if f in ("query", "memory") and not isinstance(
                    getattr(raw[key], f), (Query, MemoryText)) else getattr(event, f) for f in Event._fields))
        _check_ids_on_host(name, raw)
        spec = raw["spec"]
        if "memory_id" in raw:
            values["memory_id"] = _raw_id(raw["memory_id"], values["memory_id"])
        for key in ("event", "events"):
            if isinstance(raw.get(key), Event):
                values[key] = _with_id(values[key], _raw_id(raw[key].memory_id, values[key].memory_id))
        if "reward" in raw:  # rewards as given, for their check to report the value
            values["reward"] = _raw_reward(raw["reward"], spec)
        for key in ("event", "events"):
            if isinstance(raw.get(key), Event):
                values[key] = _with_reward(values[key], _raw_reward(raw[key].reward, spec))
        err, out = _compiled(name, tuple(values[s] for s in static_names))(
            *(v for k, v in values.items() if k not in static_names))
        one_task = "state" in values and "events" not in values  # run's tasks are named by its own checks
        returned = out[1].reward if values.get("reward_fn") is not None else None
        _throw(err, values["state"].clock.t if one_task else None, returned, name)
        return out

    checked.__name__ = checked.__qualname__ = name
    checked.__signature__ = signature  # type: ignore[attr-defined]
    checked.__doc__ = f"Checked ``tw.{name}``: {COMPOSED[name][0].__doc__}"
    return checked


__all__ = list(COMPOSED)
globals().update({_name: _derive(_name) for _name in COMPOSED})

if TYPE_CHECKING:  # what a type checker sees of the derived functions: the controller's own signatures
    from .controller import (AdvanceFn, EndTaskFn, FinishTaskFn, InitFn, ObserveFn, OfferFn, RunBatchedFn, RunFn,
                             SelectFn, StepFn, WorthFn)

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
