"""The probe set of the lifecycle's worth: the current query plus a ring of the last
``Spec.n_probes`` queries on which the bank was non-empty. This module owns that ring; it keeps
whole :class:`~tokenworth_jax.inputs.Query` values, so a mode that reads the question's words
has them for the probes too."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .inputs import Query
from .pytree import Empty
from .ring import Ring, ring_init, ring_push, ring_valid


def init(n_probes: int, dim: int, word_dim: int | None, dtype: jnp.dtype) -> Ring:
    """An empty ring of ``n_probes`` queries (with their (word_dim,) words unless ``word_dim`` is None)."""
    words = Empty() if word_dim is None else jnp.zeros((n_probes, word_dim), dtype)
    return ring_init(Query(key=jnp.zeros((n_probes, dim), dtype), words=words))


def push(ring: Ring, query: Query, enabled: jax.Array) -> Ring:
    """The finished task's query joins the probes, where ``enabled``."""
    return ring_push(ring, query, enabled)


def queries(ring: Ring, current: Query) -> tuple[Query, jax.Array]:
    """The P+1 probe queries (``current`` first, then the ring), stacked, and their (P+1,) validity."""
    stacked = jax.tree_util.tree_map(lambda c, r: jnp.concatenate([c[None], r], axis=0), current, ring.data)
    return stacked, jnp.concatenate([jnp.ones((1,), bool), ring_valid(ring)])
