"""Checked mode: the pure API with NaN/inf checks, via ``jax.experimental.checkify``.

The plain entry points (``tw.select`` etc.) cannot raise under ``jit`` and do not look at
their inputs: one non-finite query or memory vector is admitted and spreads into w, M, the
bank and the windows for good. Each function here runs the same computation with checks
compiled in, and raises ``jax.experimental.checkify.JaxRuntimeError`` naming the *first*
non-finite value in program order:

1. an input (``query``, ``reward``, ``memory``, a hyperparameter leaf such as ``hp.gamma``);
2. the incoming state (e.g. ``state.bank.emb`` already poisoned by an unchecked call);
3. the outgoing state (a non-finite value the step itself produced).

Usage: ``tw.checked.select(state, q, hp, spec)`` instead of ``tw.select(...)`` (same
signature and results). Each one wraps the public function of the same name. The checks cost one reduction per state leaf per call; use them
while developing or when the inputs come from somewhere untrusted.

Which entry points validate (see docs/controller.md): ``tw.hparams``/``tw.preset``/``Spec``
and ``tw.stack_hparams`` check every value on the host at construction; the host
``Controller`` checks its inputs (shape, finiteness, reward in {0, 1}) and the protocol;
the pure API checks nothing (this module is its checked twin).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.experimental import checkify

from . import controller as C
from .config import HParams, Spec
from .controller import Event, Selection, State, StepOutput
from .lifecycle import Decision

# entry point -> (the public function, the names of its array arguments; "state" is checked as a tree)
_ENTRY: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "select": (C.select, ("state", "query", "hp")),
    "observe": (C.observe, ("state", "reward", "hp")),
    "offer": (C.offer, ("state", "memory", "memory_id", "hp")),
    "end_task": (C.end_task, ("state",)),
    "finish_task": (C.finish_task, ("state", "reward", "memory", "memory_id", "offered", "hp")),
    "advance": (C.advance, ("state", "reward", "memory", "memory_id", "offered", "query", "hp")),
    "step": (C.step, ("state", "event", "hp")),
    "run": (C.run, ("state", "events", "hp")),
}


def _check_finite(tree: Any, what: str) -> None:
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        leaf = jnp.asarray(leaf)
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            checkify.check(jnp.all(jnp.isfinite(leaf)), f"{what}{jax.tree_util.keystr(path)} has a non-finite entry")


@functools.lru_cache(maxsize=None)
def _compiled(name: str, spec: Spec) -> Callable[..., Any]:
    fn, names = _ENTRY[name]

    def body(*args: Any) -> Any:
        for arg_name, arg in zip(names, args):
            if arg_name != "state":
                _check_finite(arg, f"{name}: input {arg_name}")
        _check_finite(args[0], f"{name}: incoming state")
        out = fn(*args, spec=spec)
        new_state = out if isinstance(out, State) else out[0]  # State is itself a tuple
        _check_finite(new_state, f"{name}: outgoing state")
        return out

    return jax.jit(checkify.checkify(body, errors=checkify.user_checks))


def _call(name: str, spec: Spec, *args: Any) -> Any:
    err, out = _compiled(name, spec)(*args)
    err.throw()
    return out


def select(state: State, query: jax.Array, hp: HParams, spec: Spec) -> tuple[State, Selection]:
    return _call("select", spec, state, query, hp)


def observe(state: State, reward: jax.Array, hp: HParams, spec: Spec) -> State:
    return _call("observe", spec, state, jnp.asarray(reward, jnp.int32), hp)


def offer(state: State, e_new: jax.Array, new_id: jax.Array, hp: HParams, spec: Spec) -> tuple[State, Decision]:
    return _call("offer", spec, state, e_new, jnp.asarray(new_id, jnp.int32), hp)


def end_task(state: State, spec: Spec) -> State:
    return _call("end_task", spec, state)


def finish_task(state: State, reward: jax.Array, memory: jax.Array, memory_id: jax.Array, offered: jax.Array,
                hp: HParams, spec: Spec) -> tuple[State, Decision]:
    return _call("finish_task", spec, state, jnp.asarray(reward, jnp.int32), memory, jnp.asarray(memory_id, jnp.int32),
                 jnp.asarray(offered, bool), hp)


def advance(state: State, reward: jax.Array, memory: jax.Array, memory_id: jax.Array, offered: jax.Array,
            query: jax.Array, hp: HParams, spec: Spec) -> tuple[State, Decision, Selection]:
    return _call("advance", spec, state, jnp.asarray(reward, jnp.int32), memory, jnp.asarray(memory_id, jnp.int32),
                 jnp.asarray(offered, bool), query, hp)


def step(state: State, event: Event, hp: HParams, spec: Spec) -> tuple[State, StepOutput]:
    return _call("step", spec, state, event, hp)


def run(state: State, events: Event, hp: HParams, spec: Spec) -> tuple[State, StepOutput]:
    """Checked :func:`tokenworth_jax.run`: the inputs and the state before and after the whole stream."""
    return _call("run", spec, state, events, hp)


__all__ = ["select", "observe", "offer", "end_task", "finish_task", "advance", "step", "run"]
