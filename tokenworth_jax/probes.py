"""The probe set of the lifecycle's worth: the current query plus a ring of the last
``Spec.n_probes`` queries on which the bank was non-empty. This module owns that ring; it keeps
whole :class:`~tokenworth_jax.inputs.Query` values, so a mode that reads more than the recall key
(its declared query features) has it for the probes too."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .inputs import Query
from .ring import Ring, ring_init, ring_push, ring_valid


def init(n_probes: int, empty: Query) -> Ring:
    """An empty ring of ``n_probes`` queries shaped like ``empty`` (a zero query with its features)."""
    return ring_init(jax.tree_util.tree_map(lambda x: jnp.zeros((n_probes,) + x.shape, x.dtype), empty))


def push(ring: Ring, query: Query, enabled: jax.Array) -> Ring:
    """The finished task's query joins the probes, where ``enabled``."""
    return ring_push(ring, query, enabled)


def queries(ring: Ring, current: Query) -> tuple[Query, jax.Array]:
    """The P+1 probe queries (``current`` first, then the ring), stacked, and their (P+1,) validity."""
    stacked = jax.tree_util.tree_map(lambda c, r: jnp.concatenate([c[None], r], axis=0), current, ring.data)
    return stacked, jnp.concatenate([jnp.ones((1,), bool), ring_valid(ring)])
