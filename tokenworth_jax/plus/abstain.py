"""The "no memory" arm: p̂₀(q), the success probability of a task run without injection.

Estimator (documented in docs/tokenworth-plus.md). Over the ring of the last N0 tasks on
which nothing was injected, with outcomes y_j ∈ {0, 1} and unit query vectors q_j:

    μ̄      = (Σ_j y_j + a·π) / (n + a)                       global rate, Beta(aπ, a(1−π)) prior
    k_j(q) = exp(−(1 − qᵀq_j) / h)                            a kernel on the cosine distance
    p̂₀(q)  = (Σ_j k_j(q) y_j + a·μ̄) / (Σ_j k_j(q) + a)       Nadaraya–Watson, shrunk to μ̄

π = ``plus_p0_prior``, a = ``plus_p0_strength``, h = ``plus_bandwidth`` (all traced). With
an empty ring p̂₀ = π; far from every stored query p̂₀ → μ̄; next to many near-duplicates
it follows their outcomes. It is a convex combination of values in [0, 1], so it stays in
[0, 1] whatever the inputs (the property tests check it), and it is clipped to
[ε, 1 − ε] so that its logit is finite.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..ring import Ring, ring_valid

P0_EPS = 1e-3


def null_probability(queries: jax.Array, ring: Ring, prior: jax.Array, strength: jax.Array,
                     bandwidth: jax.Array) -> jax.Array:
    """p̂₀ for P queries (P, D) from the no-memory ring; returns (P,)."""
    q_ring, y = ring.data
    f = q_ring.dtype
    valid = ring_valid(ring)
    yv = jnp.where(valid, y, jnp.zeros_like(y))
    n = jnp.sum(valid).astype(f)
    a = jnp.asarray(strength, f)
    mu = (jnp.sum(yv) + a * jnp.asarray(prior, f)) / (n + a)
    cos = queries @ q_ring.T  # (P, N0)
    k = jnp.where(valid[None, :], jnp.exp(-(1 - cos) / jnp.asarray(bandwidth, f)), jnp.zeros_like(cos))
    p0 = (k @ yv + a * mu) / (jnp.sum(k, axis=-1) + a)
    return jnp.clip(p0, P0_EPS, 1 - P0_EPS)


def logit(p: jax.Array) -> jax.Array:
    return jnp.log(p) - jnp.log1p(-p)
