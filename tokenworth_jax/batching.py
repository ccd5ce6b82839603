"""Batching is a transform: every controller function is written for one configuration, and
C configurations are ``jax.vmap`` of it (or ``jax.lax.map``, the CPU strategy).

A plain ``jax.vmap`` turns a ``lax.cond`` whose predicate differs per configuration into a
``select`` that runs both branches for everybody, so a refit or an admission would run at every
task. :func:`gated` is the one place that rule is written: a ``lax.cond`` for one
configuration, and, through :func:`jax.custom_batching.custom_vmap`, one ``lax.cond`` on "some
configuration needs it" followed by a per-configuration :func:`~tokenworth_jax.pytree.tree_where`
when vmapped. So ``jax.vmap(tw.step)`` is the batched controller, and stays cheap.

``"auto"`` picks ``"map"`` on the CPU backend (each configuration keeps its own real branches
and small matmuls stay small) and ``"vmap"`` elsewhere (measurements: docs/performance.md).
"""

from __future__ import annotations

from typing import Any, Callable, Literal, TypeVar, get_args

import jax
import jax.numpy as jnp
from jax import custom_batching

from .pytree import tree_where

Strategy = Literal["auto", "vmap", "map"]
T = TypeVar("T")


def resolve(strategy: Strategy) -> Literal["vmap", "map"]:
    """``"auto"`` -> ``"map"`` on CPU, ``"vmap"`` elsewhere; anything else must be a Strategy."""
    if strategy not in get_args(Strategy):
        raise ValueError(f"strategy must be one of {get_args(Strategy)}, got {strategy!r}")
    if strategy == "auto":
        return "map" if jax.default_backend() == "cpu" else "vmap"
    return strategy


def over_configs(fn: Callable[..., T], strategy: Strategy = "auto") -> Callable[..., T]:
    """``fn`` of one configuration, applied to arguments stacked on axis 0 (vmap or lax.map)."""
    if resolve(strategy) == "map":
        return lambda *stacked: jax.lax.map(lambda args: fn(*args), stacked)
    return jax.vmap(fn)


def gated(pred: jax.Array, fn: Callable[..., T], otherwise: Callable[..., T], *operands: Any) -> T:
    """``fn(*operands) if pred else otherwise(*operands)``; both return the same structure.

    ``fn`` and ``otherwise`` must close over nothing traced (pass every array as an operand).
    Vmapped with a batched ``pred``, ``fn`` runs (vmapped) only when some configuration's
    ``pred`` holds, and each configuration keeps ``otherwise``'s result where its own is false.
    """

    @custom_batching.custom_vmap
    def branch(p: jax.Array, *ops: Any) -> Any:
        return jax.lax.cond(p, fn, otherwise, *ops)

    @branch.def_vmap
    def _batched(axis_size: int, in_batched: list, p: jax.Array, *ops: Any) -> tuple[Any, Any]:
        axes = tuple(jax.tree_util.tree_map(lambda b: 0 if b else None, list(in_batched[1:])))
        p = p if in_batched[0] else jnp.broadcast_to(p, (axis_size,))
        run_fn, run_otherwise = jax.vmap(fn, in_axes=axes), jax.vmap(otherwise, in_axes=axes)

        def some(args: tuple) -> Any:
            return tree_where(p, run_fn(*args), run_otherwise(*args))

        out = jax.lax.cond(jnp.any(p), some, lambda args: run_otherwise(*args), ops)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return branch(jnp.asarray(pred, bool), *operands)
