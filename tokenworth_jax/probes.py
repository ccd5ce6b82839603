"""The probe set of the lifecycle's worth: the current query plus a ring of the last
``Spec.n_probes`` queries on which the bank was non-empty. This module owns that ring."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .ring import Ring, ring_init, ring_push, ring_valid


def init(n_probes: int, dim: int, dtype: jnp.dtype) -> Ring:
    return ring_init(jnp.zeros((n_probes, dim), dtype))


def push(ring: Ring, query: jax.Array, enabled: jax.Array) -> Ring:
    """The finished task's query (D,) joins the probes, where ``enabled``."""
    return ring_push(ring, query, enabled)


def queries(ring: Ring, current: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(P+1, D) probe queries (``current`` first, then the ring) and their (P+1,) validity."""
    return (jnp.concatenate([current[None, :], ring.data], axis=0),
            jnp.concatenate([jnp.ones((1,), bool), ring_valid(ring)]))
