"""The "no memory" arm: p̂₀(q), the success probability of a task run without injection, and how
sure the controller is of it.

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

**Its posterior** (the no-harm promise: "no memory" must be a real arm). The estimate's sampling variance,
by the delta method over the two independent parts (the local outcomes, the global rate),

    Var p̂₀(q) ≈ [Σ_j k_j² p̂₀(1 − p̂₀) + a² μ̄(1 − μ̄)/(n + a + 1)] / (Σ_j k_j + a)²,

gives the standard deviation of logit p̂₀(q), sd₀ = √Var / (p̂₀(1 − p̂₀)). With no no-memory
outcome at all it is the prior's (a = 2: about 1.4 in log-odds), and it shrinks as 1/√n as the
arm is played. Only tasks on which nothing was injected ever enter the ring, so the arm's
posterior learns from its own arm alone.

The kernel sums are a :class:`NullStats`: the lift model keeps each injected task's local sums,
so its offsets can be recomputed against the *current* global rate at every refit
(:func:`null_mean` of stored local sums and the ring's current totals) without a pass over the ring.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..ring import Ring, ring_valid

P0_EPS = 1e-3


class NullStats(NamedTuple):
    """The no-memory ring seen from P queries."""

    k: jax.Array  # (P,) Σ_j k_j(q)
    ky: jax.Array  # (P,) Σ_j k_j(q) y_j
    k2: jax.Array  # (P,) Σ_j k_j(q)²
    n: jax.Array  # () outcomes in the ring
    y: jax.Array  # () successes in the ring


def null_stats(queries: jax.Array, ring: Ring, bandwidth: jax.Array,
               totals: tuple[jax.Array, jax.Array] | None = None) -> NullStats:
    """The kernel sums of P queries (P, D) over the no-memory ring, and its totals (or ``totals``,
    (outcomes, successes) counted elsewhere, e.g. over every no-memory outcome so far)."""
    q_ring, y = ring.data
    f = q_ring.dtype
    valid = ring_valid(ring)
    yv = jnp.where(valid, y, jnp.zeros_like(y))
    cos = queries @ q_ring.T  # (P, N0)
    k = jnp.where(valid[None, :], jnp.exp(-(1 - cos) / jnp.asarray(bandwidth, f)), jnp.zeros_like(cos))
    n, total_y = (jnp.sum(valid).astype(f), jnp.sum(yv)) if totals is None else totals
    return NullStats(k=jnp.sum(k, axis=-1), ky=k @ yv, k2=jnp.sum(k * k, axis=-1), n=n, y=total_y)


def stored_stats(k: jax.Array, ky: jax.Array, totals: tuple[jax.Array, jax.Array]) -> NullStats:
    """Local sums kept from select time (any shape) with the ring's current totals (k2 unused: zeros)."""
    return NullStats(k=k, ky=ky, k2=jnp.zeros_like(k), n=totals[0], y=totals[1])


def far_stats(totals: tuple[jax.Array, jax.Array], like: jax.Array) -> NullStats:
    """The ring seen from far away (no local evidence), shaped like ``like``: its totals only."""
    zero = jnp.zeros_like(like)
    return NullStats(k=zero, ky=zero, k2=zero, n=totals[0], y=totals[1])


def _global_rate(stats: NullStats, prior: jax.Array, strength: jax.Array) -> tuple[jax.Array, jax.Array]:
    a = jnp.asarray(strength, stats.k.dtype)
    return (stats.y + a * jnp.asarray(prior, stats.k.dtype)) / (stats.n + a), a


def null_mean(stats: NullStats, prior: jax.Array, strength: jax.Array) -> jax.Array:
    """p̂₀ (P,) from the kernel sums, clipped to [ε, 1 − ε]."""
    mu, a = _global_rate(stats, prior, strength)
    return jnp.clip((stats.ky + a * mu) / (stats.k + a), P0_EPS, 1 - P0_EPS)


def null_logit_sd(stats: NullStats, prior: jax.Array, strength: jax.Array) -> jax.Array:
    """sd₀ (P,): the standard deviation of logit p̂₀ (delta method; see the module docstring)."""
    mu, a = _global_rate(stats, prior, strength)
    p = null_mean(stats, prior, strength)
    var = (stats.k2 * p * (1 - p) + a * a * mu * (1 - mu) / (stats.n + a + 1)) / (stats.k + a) ** 2
    return jnp.sqrt(var) / (p * (1 - p))


def null_probability(queries: jax.Array, ring: Ring, prior: jax.Array, strength: jax.Array,
                     bandwidth: jax.Array) -> jax.Array:
    """p̂₀ for P queries (P, D) from the no-memory ring; returns (P,)."""
    return null_mean(null_stats(queries, ring, bandwidth), prior, strength)


def logit(p: jax.Array) -> jax.Array:
    return jnp.log(p) - jnp.log1p(-p)
