"""How per-configuration functions are lifted to C stacked configurations.

Every controller phase is written once, for one configuration. The batched entry points
apply the same code in one of two ways (the static ``strategy``):

* ``"vmap"`` batches every array op over the configurations. A ``lax.cond`` whose predicate
  differs per configuration would become a ``select`` under a plain ``jax.vmap``, running
  both branches for everybody at every step. :func:`gated` keeps the branch real instead:
  one ``lax.cond`` on "any configuration needs it", then a per-configuration
  :func:`tree_where`. Refits and admission are gated this way. Best where batched matmuls
  are cheap (GPU).
* ``"map"`` loops over the configurations inside the compiled program (``lax.map``), so
  each configuration keeps its own real branches.

``"auto"`` picks ``"map"`` on the CPU backend and ``"vmap"`` elsewhere (measurements in
docs/performance.md). Both equal separate runs (tests/test_transforms.py).
"""

from __future__ import annotations

from typing import Any, Callable, Literal, get_args

import jax
import jax.numpy as jnp

Strategy = Literal["auto", "vmap", "map"]


def resolve(strategy: Strategy) -> Literal["vmap", "map"]:
    """``"auto"`` -> ``"map"`` on CPU, ``"vmap"`` elsewhere; anything else must be a Strategy."""
    if strategy not in get_args(Strategy):
        raise ValueError(f"strategy must be one of {get_args(Strategy)}, got {strategy!r}")
    if strategy == "auto":
        return "map" if jax.default_backend() == "cpu" else "vmap"
    return strategy


def tree_where(mask: jax.Array, new: Any, old: Any) -> Any:
    """Per-configuration choice between two stacked pytrees: ``new[c] if mask[c] else old[c]``.

    ``mask`` has shape (C,); every leaf has leading axis C. A scalar mask picks whole trees.
    """

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - mask.ndim)), a, b)

    return jax.tree_util.tree_map(pick, new, old)


def lift(fn: Callable[..., Any], batched: bool) -> Callable[..., Any]:
    """``fn`` itself for one configuration, ``jax.vmap(fn)`` over stacked arguments."""
    return jax.vmap(fn) if batched else fn


def gated(pred: jax.Array, fn: Callable[..., Any], otherwise: Callable[..., Any], args: tuple, batched: bool) -> Any:
    """``fn(*args) if pred else otherwise(*args)`` with both branches returning the same structure.

    For one configuration this is ``lax.cond``. Batched (``pred`` of shape (C,), every argument
    stacked on axis 0) ``fn`` runs, vmapped, only when some configuration needs it, and each
    configuration keeps ``otherwise``'s result where its own ``pred`` is false.
    """
    if not batched:
        return jax.lax.cond(pred, fn, otherwise, *args)

    def some(a: tuple) -> Any:
        return tree_where(pred, jax.vmap(fn)(*a), jax.vmap(otherwise)(*a))

    return jax.lax.cond(jnp.any(pred), some, lambda a: jax.vmap(otherwise)(*a), args)


def map_configs(fn: Callable[..., Any], *stacked: Any, strategy: Strategy = "auto") -> Any:
    """Apply a per-configuration function to arguments stacked on axis 0 (vmap or lax.map).

    Shared arguments go in ``fn``'s closure. Use it inside ``jax.jit``.
    """
    if resolve(strategy) == "map":
        return jax.lax.map(lambda args: fn(*args), stacked)
    return jax.vmap(fn)(*stacked)
