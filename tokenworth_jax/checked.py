"""Checked mode: the pure API with NaN/inf checks, via ``jax.experimental.checkify``.

The plain entry points (``tw.select`` etc.) cannot raise under ``jit`` and do not look at
their inputs: one non-finite query or memory vector is admitted and spreads into w, M, the
bank and the windows for good. Each function here runs the same computation with checks
compiled in, and raises ``jax.experimental.checkify.JaxRuntimeError`` naming the *first*
non-finite value in program order:

1. an input (``query``, ``reward``, ``memory``, a hyperparameter leaf such as ``hp.gamma``);
2. the incoming state (e.g. ``state.bank.emb`` already poisoned by an unchecked call);
3. the outgoing state (a non-finite value the step itself produced).

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
the pure API checks nothing (this module is its checked twin).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.experimental import checkify

from .controller import COMPOSED, State, controller

STATE_ARGS = ("state", "states")  # checked as the incoming state


def _check_finite(tree: Any, what: str) -> None:
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        leaf = jnp.asarray(leaf)
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            checkify.check(jnp.all(jnp.isfinite(leaf)), f"{what}{jax.tree_util.keystr(path)} has a non-finite entry")


def _signature(name: str) -> inspect.Signature:
    """The public signature of ``name``: its composition's, without the bound parts."""
    params = list(inspect.signature(COMPOSED[name][0]).parameters.values())[1:]
    return inspect.Signature(params)


@functools.lru_cache(maxsize=None)
def _compiled(name: str, statics: tuple[Any, ...]) -> Callable[..., Any]:
    static_names = COMPOSED[name][1]
    spec = statics[static_names.index("spec")]
    public = getattr(controller(spec.scorer, spec.mode), name)
    arrays = [p for p in _signature(name).parameters if p not in static_names]

    def body(*args: Any) -> Any:
        for arg_name, arg in zip(arrays, args):
            if arg_name not in STATE_ARGS:
                _check_finite(arg, f"{name}: input {arg_name}")
        for arg_name, arg in zip(arrays, args):
            if arg_name in STATE_ARGS:
                _check_finite(arg, f"{name}: incoming state")
        out = public(**dict(zip(arrays, args)), **dict(zip(static_names, statics)))
        new_state = out if isinstance(out, State) else out[0] if isinstance(out, tuple) else None
        if isinstance(new_state, State):
            _check_finite(new_state, f"{name}: outgoing state")
        return out

    return jax.jit(checkify.checkify(body, errors=checkify.user_checks))


def _derive(name: str) -> Callable[..., Any]:
    signature = _signature(name)
    static_names = COMPOSED[name][1]

    def checked(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = bound.arguments
        err, out = _compiled(name, tuple(values[s] for s in static_names))(
            *(v for k, v in values.items() if k not in static_names))
        err.throw()
        return out

    checked.__name__ = checked.__qualname__ = name
    checked.__signature__ = signature  # type: ignore[attr-defined]
    checked.__doc__ = f"Checked ``tw.{name}``: {COMPOSED[name][0].__doc__}"
    return checked


__all__ = list(COMPOSED)
globals().update({_name: _derive(_name) for _name in COMPOSED})
