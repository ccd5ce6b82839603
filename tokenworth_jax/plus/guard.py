"""The no-harm guard: an injection only while the controller can still show it has done no harm.

The promise (issue 30) is a bound on the whole run: TokenWorth+ must not end below injecting
nothing by more than a small allowance. That is the constraint of a *conservative bandit*
(Wu et al., 2016; Kazerouni et al., 2017): the baseline arm is "no memory", and another action
may be played only if a lower confidence bound on the cumulative gain over the baseline, the new
action included, stays above −(allowance). The allowance here is ``budget + rate · t`` expected
successes after t tasks (``plus_guard_budget``, ``plus_guard_rate``).

The cumulative gain is counted over the injected tasks of the lift window (rows r, outcomes
y_r ∈ {0, 1}, offsets o_r = logit p̂₀ against the current no-memory rate) and the injection now
proposed (features ψ, offset o):

    G   = Σ_r (y_r − σ(o_r))  +  σ(o + θ̂ᵀψ) − σ(o)
    sd  = √(‖Lᵀ σ'(o + θ̂ᵀψ) ψ‖²  +  (Σ_r σ'(o_r) + σ'(o))² sd₀²)

The past is counted by what happened (its realised successes against what no memory is expected
to give), so its only uncertainty is the baseline's; the new injection by the lift's posterior
(L: the Cholesky factor of its Laplace covariance). sd₀ is the sd of the no-memory arm's global
log-odds (:func:`~.abstain.null_logit_sd` far from every stored query). The baseline's error is
common to every row, so its share of sd grows with the number of injections, and only more
no-memory outcomes shrink it. The bound is G − ``plus_guard_sds``·sd.

Why the past by its outcomes and not by the model: a model's estimate of old injections keeps
the uncertainty of θ along their features for as long as nothing similar is injected again, and
the guard, which then blocks injections, never lets it shrink (measured on simulated DB: a seed
whose first 69 injections were ambiguous stopped injecting for the remaining 300 tasks). Counted
by outcomes, a blocked guard abstains, the abstentions measure the baseline, and the bound
recovers.

The guard never blocks "no memory" (the baseline), nor an injection whose own bound (the same
formula without the past) is positive: that injection raises the bound of the total.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def allows(psi: jax.Array, offset: jax.Array, past_y: jax.Array, past_offset: jax.Array, past_valid: jax.Array,
           theta: jax.Array, chol: jax.Array, sd0: jax.Array, sds: jax.Array, allowance: jax.Array) -> jax.Array:
    """Whether injecting the candidate with features ``psi`` (F,) at ``offset`` keeps the run's bound:
    its own bound is positive, or the bound of the window's total gain with it stays above
    −``allowance``. ``past_y`` (N,) in {0, 1}, ``past_offset`` (N,) and ``past_valid`` (N,) are the
    injected tasks of the lift window."""
    f = theta.dtype
    kappa = jnp.asarray(sds, f)
    eta = offset + psi @ theta
    p1, p0 = jax.nn.sigmoid(eta), jax.nn.sigmoid(offset)
    lift_var = jnp.sum((chol.T @ (p1 * (1 - p1) * psi)) ** 2)  # the new injection's gain, through θ
    base_now = p0 * (1 - p0)  # d gain / d baseline log-odds
    one = (p1 - p0) - kappa * jnp.sqrt(lift_var + (base_now * sd0) ** 2)
    q = jax.nn.sigmoid(past_offset)
    w = past_valid.astype(f)
    past = jnp.sum(w * (past_y - q))
    common = jnp.sum(w * q * (1 - q)) + base_now
    total = past + (p1 - p0) - kappa * jnp.sqrt(lift_var + (common * sd0) ** 2)
    return (one > 0) | (total + allowance >= 0)
