"""The controller's immutable state pytree: fixed-capacity arrays with validity masks.

Shape names used in the comments: B = ``Spec.capacity``, D = ``Spec.dim``, F = D + 5 residual
features, N_base / N_fast / N_slow = the window sizes, P = ``Spec.n_probes``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .config import N_BASE_FEATURES, HParams, Spec
from .krr import Predictor, predictor_init
from .ring import Ring, ring_init
from .worth_cache import WorthCache, cache_init


class Bank(NamedTuple):
    """B_max memory slots. Empty slots have ``valid == False`` and ``ids == -1``."""

    emb: jax.Array  # (B, D) unit-norm text vectors
    valid: jax.Array  # (B,) bool
    ids: jax.Array  # (B,) int32 caller's id of the memory text
    u: jax.Array  # (B,) utility
    h: jax.Array  # (B,) successes while selected
    d: jax.Array  # (B,) failures while selected
    c: jax.Array  # (B,) access count
    last: jax.Array  # (B,) int32 last access step
    tau: jax.Array  # (B,) int32 creation step


class Pending(NamedTuple):
    """What the open task remembers between select, observe and offer."""

    query: jax.Array  # (D,)
    retrieved: jax.Array  # bool: the bank was non-empty at select
    selected: jax.Array  # bool: a memory was chosen
    slot: jax.Array  # int32 chosen bank slot (-1 if none)
    phi: jax.Array  # (4,) phi* at selection time
    z: jax.Array  # (F,) z* at selection time
    s_base: jax.Array  # scalar s_base* at selection time
    reward: jax.Array  # int32 reward once observed (-1 before)


class Counters(NamedTuple):
    t: jax.Array  # int32 current task index
    n_feedback: jax.Array  # int32 feedback examples seen
    n_krr_fits: jax.Array  # int32 completed KRR solves
    n_base_fits: jax.Array  # int32 completed Newton fits
    n_agop: jax.Array  # int32 completed metric updates


class State(NamedTuple):
    bank: Bank
    base_ring: Ring  # data = (phi (N_base, 4), y (N_base,))
    fast_ring: Ring  # data = (z (N_fast, F), delta (N_fast,))
    slow_ring: Ring  # data = (z (N_slow, F), delta (N_slow,))
    probe_ring: Ring  # data = q (P, D)
    w: jax.Array  # (4,) base weights
    metric: jax.Array  # (F,) diagonal of M
    predictor: Predictor
    pending: Pending
    counters: Counters
    cache: WorthCache  # incremental worth (Spec.incremental); zero-width arrays when off
    plus: Any = None  # TokenWorth+ sub-state (plus.state.PlusState) when Spec.plus, else None (no leaves)


def init(spec: Spec, hp: HParams) -> State:
    """A fresh controller: empty bank and windows, w = w0, M = I, no KRR fit yet."""
    f = spec.float_dtype
    B, D, F = spec.capacity, spec.dim, spec.feature_dim
    zeros_i = jnp.zeros((), jnp.int32)
    bank = Bank(
        emb=jnp.zeros((B, D), f),
        valid=jnp.zeros((B,), bool),
        ids=jnp.full((B,), -1, jnp.int32),
        u=jnp.zeros((B,), f),
        h=jnp.zeros((B,), f),
        d=jnp.zeros((B,), f),
        c=jnp.zeros((B,), f),
        last=jnp.zeros((B,), jnp.int32),
        tau=jnp.zeros((B,), jnp.int32),
    )
    w0 = jnp.asarray(hp.w0, f)
    return State(
        bank=bank,
        base_ring=ring_init((jnp.zeros((spec.base_window, N_BASE_FEATURES), f), jnp.zeros((spec.base_window,), f))),
        fast_ring=ring_init((jnp.zeros((spec.fast_window, F), f), jnp.zeros((spec.fast_window,), f))),
        slow_ring=ring_init((jnp.zeros((spec.slow_window, F), f), jnp.zeros((spec.slow_window,), f))),
        probe_ring=ring_init(jnp.zeros((spec.n_probes, D), f)),
        w=w0 * jnp.ones(w0.shape[-1:], f),
        metric=jnp.ones((F,), f),
        predictor=predictor_init(spec.fast_window, F, hp.lambda_krr, f),
        pending=Pending(
            query=jnp.zeros((D,), f),
            retrieved=jnp.zeros((), bool),
            selected=jnp.zeros((), bool),
            slot=jnp.full((), -1, jnp.int32),
            phi=jnp.zeros((N_BASE_FEATURES,), f),
            z=jnp.zeros((F,), f),
            s_base=jnp.zeros((), f),
            reward=jnp.full((), -1, jnp.int32),
        ),
        counters=Counters(zeros_i, zeros_i, zeros_i, zeros_i, zeros_i),
        cache=cache_init(spec.n_probes + 1, B, spec.fast_window, D, f, spec.incremental),
        plus=_init_plus(spec, hp) if spec.plus else None,  # TokenWorth+ hook
    )


def _init_plus(spec: Spec, hp: HParams) -> Any:
    from .plus.state import init_plus

    return init_plus(spec, hp)


def state_to_numpy(state: State) -> dict[str, np.ndarray]:
    """Flatten to ``{path: array}`` for checkpoints (see :func:`state_from_numpy`)."""
    leaves = jax.tree_util.tree_leaves_with_path(state)
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}


def state_from_numpy(template: State, arrays: dict[str, np.ndarray]) -> State:
    """Rebuild a state from :func:`state_to_numpy`, checking names, shapes and dtypes."""
    paths, treedef = jax.tree_util.tree_flatten_with_path(template)
    leaves = []
    for path, leaf in paths:
        key = jax.tree_util.keystr(path)
        if key not in arrays:
            if leaf.size == 0:  # an empty leaf added later (e.g. the cache when off): nothing to restore
                leaves.append(leaf)
                continue
            raise ValueError(f"checkpoint lacks state leaf {key}")
        arr = np.asarray(arrays[key])
        if arr.shape != leaf.shape or arr.dtype != leaf.dtype:
            raise ValueError(f"checkpoint leaf {key} has {arr.shape}/{arr.dtype}, expected {leaf.shape}/{leaf.dtype}")
        leaves.append(jnp.asarray(arr))
    return jax.tree_util.tree_unflatten(treedef, leaves)
