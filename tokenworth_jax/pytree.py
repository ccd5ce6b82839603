"""Small pytree utilities shared by every component: the empty state, per-configuration
selection, and the flat ``{path: array}`` form used by checkpoints."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Empty(NamedTuple):
    """The state (or hyperparameters) of a part that is switched off: a pytree with no leaves.

    Every optional part of the controller is absent this one way, chosen from ``Spec`` when
    the state is made, as ``optax.EmptyState`` marks a stateless transformation.
    """


def tree_where(mask: jax.Array, new: Any, old: Any) -> Any:
    """Per-configuration choice between two stacked pytrees: ``new[c] if mask[c] else old[c]``.

    ``mask`` has shape (C,) and every leaf a leading axis C; a scalar mask picks whole trees.

    Args:
        mask: (C,) bool, one entry per configuration, or () to pick whole trees.
        new: a pytree whose every leaf has the leading axis C.
        old: a pytree of the same structure and shapes.

    Returns:
        pytree: of that structure, leaf by leaf, ``new[c]`` where ``mask[c]``, else ``old[c]``.
    """

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - mask.ndim)), a, b)

    return jax.tree_util.tree_map(pick, new, old)


def fetch(tree: Any) -> Any:
    """A pytree of device arrays as the same pytree of NumPy arrays: what crosses to the host, typed.

    ``jax.device_get`` of the whole tree (its copies run in parallel); when the arrays live on the CPU
    (:func:`platform`, whatever the default backend) they already are in host memory, and reading each one (``np.asarray``, no copy) costs about a tenth of
    that (bench/tokenworth_bench/controller/per_task.py measures the host path)."""
    if (platform(tree) or jax.default_backend()) == "cpu":  # where the arrays live, not the default backend
        return jax.tree_util.tree_map(np.asarray, tree)
    return jax.device_get(tree)


def platform(tree: Any) -> str | None:
    """The platform (``"cpu"``, ``"gpu"``, ``"tpu"``) of the device that ``tree``'s arrays live on: that of its
    first concrete ``jax.Array`` leaf. None when it has none: NumPy or Python values (not placed yet), or
    tracers (inside jit, vmap or scan a value's placement is not known while tracing). Callers then fall back
    to ``jax.default_backend()``, where JAX places uncommitted values."""
    for leaf in jax.tree_util.tree_leaves(tree):
        if isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer):
            try:
                return next(iter(leaf.devices())).platform
            except (RuntimeError, StopIteration):  # a deleted (donated) buffer: try the next leaf
                continue
    return None


def to_numpy(tree: Any) -> dict[str, np.ndarray]:
    """Flatten to ``{key path: array}`` (see :func:`from_numpy`)."""
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def from_numpy(template: Any, arrays: dict[str, np.ndarray], what: str = "state") -> Any:
    """Rebuild a pytree shaped like ``template`` from :func:`to_numpy`, checking names, shapes and dtypes."""
    paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    expected = {jax.tree_util.keystr(path) for path, _ in paths}
    unknown = sorted(set(arrays) - expected)
    if unknown:
        raise ValueError(f"checkpoint {what} has leaves this layout does not know: {unknown[:4]}")
    leaves = []
    for path, leaf in paths:
        key = jax.tree_util.keystr(path)
        if key not in arrays:
            raise ValueError(f"checkpoint {what} lacks leaf {key}")
        arr = np.asarray(arrays[key])
        if arr.shape != leaf.shape or arr.dtype != leaf.dtype:
            raise ValueError(f"checkpoint {what} leaf {key} has {arr.shape}/{arr.dtype}, "
                             f"expected {leaf.shape}/{leaf.dtype}")
        leaves.append(jnp.asarray(arr))
    return jax.tree_util.tree_unflatten(treedef, leaves)
