"""Fixed-capacity FIFO rings that live under jit (flashbax-style).

A ring holds arrays with a leading axis of size ``n``, a write index and an ``is_full`` flag.
The oldest entry is overwritten once full. Order inside the ring never matters to the
algorithm (every use is a masked sum or a masked solve), only which entries are valid.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Ring(NamedTuple):
    data: Any  # pytree of arrays with leading axis n
    idx: jax.Array  # int32 scalar: next write position
    is_full: jax.Array  # bool scalar


def ring_init(data: Any) -> Ring:
    return Ring(data=data, idx=jnp.zeros((), jnp.int32), is_full=jnp.zeros((), bool))


def ring_size(ring: Ring) -> int:
    return jax.tree_util.tree_leaves(ring.data)[0].shape[0]


def ring_valid(ring: Ring) -> jax.Array:
    """``(n,)`` bool mask of the written entries."""
    n = ring_size(ring)
    return ring.is_full | (jnp.arange(n, dtype=jnp.int32) < ring.idx)


def ring_count(ring: Ring) -> jax.Array:
    return jnp.where(ring.is_full, jnp.int32(ring_size(ring)), ring.idx)


def ring_push(ring: Ring, item: Any, enabled: jax.Array | bool = True) -> Ring:
    """Write one item at ``idx`` when ``enabled`` (a traced bool); otherwise a no-op."""
    n = ring_size(ring)
    enabled = jnp.asarray(enabled, bool)

    def write(buf: jax.Array, x: jax.Array) -> jax.Array:
        return buf.at[ring.idx].set(jnp.where(enabled, x.astype(buf.dtype), buf[ring.idx]))

    data = jax.tree_util.tree_map(write, ring.data, item)
    nxt = (ring.idx + 1) % n
    return Ring(
        data=data,
        idx=jnp.where(enabled, nxt, ring.idx),
        is_full=ring.is_full | (enabled & (nxt == 0)),
    )
