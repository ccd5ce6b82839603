"""The no-harm guard: an injection only while the controller can still show it has done no harm.

The promise (docs/tokenworth-plus.md, "No harm") is a bound on the whole run: TokenWorth+ must not end below injecting
nothing by more than a small allowance. That is the constraint of a *conservative bandit*
(Wu et al., 2016; Kazerouni et al., 2017): the baseline arm is "no memory", and another action
may be played only if a lower confidence bound on the cumulative gain over the baseline, the new
action included, stays above −(allowance). The allowance here is ``budget + rate · t`` expected
successes after t tasks (``plus_guard_budget``, ``plus_guard_rate``).

The cumulative gain is counted over every injected task of the run: the rows r of the lift
window (outcomes y_r ∈ {0, 1}, offsets o_r = logit p̂₀ against the current no-memory rate), the
injections that have left that window (their sums, frozen as they left: :class:`Retired`) and
the injection now proposed (features ψ, offset o):

    G   = Σ_r (y_r − σ(o_r))  +  σ(o + θ̂ᵀψ) − σ(o)
    sd  = √(‖Lᵀ σ'(o + θ̂ᵀψ) ψ‖²  +  (Σ_r σ'(o_r) + σ'(o))² sd₀²  +  Σ_r σ'(o_r))

The past is counted by what happened (its realised successes against what no memory is expected
to give). Its uncertainty has two parts. The first is the baseline's: sd₀ is the sd of the
no-memory arm's global log-odds (:func:`~.abstain.null_logit_sd` far from every stored query).
Its error is common to every row, so its share of sd grows with the number of injections, and
only more no-memory outcomes shrink it. The second is the counterfactual's own coin: had nothing
been injected, task r would still have succeeded only with probability σ(o_r), so Σ_r (y_r −
σ(o_r)) estimates the gain with a variance Σ_r σ(o_r)(1 − σ(o_r)) even when the baseline is
exact. The new injection's uncertainty is the lift's posterior (L: the Cholesky factor of its
Laplace covariance). The bound is G − ``plus_guard_sds``·sd.

Why every injection and not only the window's: the promise is about the whole run. With a
window only, harm done early is forgotten once 256 more injections have been made. Why the
coin's variance: without it the guard trusts a lucky run of outcomes as if it were the effect
(measured: h10-x10-s0-n2, seed 2, where the no-memory rate was estimated 0.04 low, injected on
37 % of tasks and ended 2.8 points below no memory; with the coins, 13 % and −1.0). What neither
fixes: a no-memory rate estimated low for most of a run (h40-x20-s3-n2-hard, development seed
12, still −3.0; docs/tokenworth-plus.md, "What the guard cannot promise").

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

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Retired(NamedTuple):
    """The injected tasks that have left the lift window, summed as they left."""

    gain: jax.Array  # Σ (y − σ(o)) with o against the no-memory rate of that moment
    var: jax.Array  # Σ σ(o)(1 − σ(o))


def retire(retired: Retired, y: jax.Array, offset: jax.Array, enabled: jax.Array) -> Retired:
    """Add one injected task (outcome ``y`` in {0, 1}, offset ``offset``) when ``enabled``."""
    q = jax.nn.sigmoid(offset)
    on = jnp.asarray(enabled).astype(q.dtype)
    return Retired(gain=retired.gain + on * (y - q), var=retired.var + on * q * (1 - q))


def allows(psi: jax.Array, offset: jax.Array, past_y: jax.Array, past_offset: jax.Array, past_valid: jax.Array,
           retired: Retired, theta: jax.Array, chol: jax.Array, sd0: jax.Array, sds: jax.Array,
           allowance: jax.Array) -> jax.Array:
    """Whether injecting the candidate with features ``psi`` (F,) at ``offset`` keeps the run's bound:
    its own bound is positive, or the bound of the run's total gain with it stays above
    −``allowance``. ``past_y`` (N,) in {0, 1}, ``past_offset`` (N,) and ``past_valid`` (N,) are the
    injected tasks of the lift window, ``retired`` those that have left it."""
    f = theta.dtype
    kappa = jnp.asarray(sds, f)
    eta = offset + psi @ theta
    p1, p0 = jax.nn.sigmoid(eta), jax.nn.sigmoid(offset)
    lift_var = jnp.sum((chol.T @ (p1 * (1 - p1) * psi)) ** 2)  # the new injection's gain, through θ
    base_now = p0 * (1 - p0)  # d gain / d baseline log-odds
    one = (p1 - p0) - kappa * jnp.sqrt(lift_var + (base_now * sd0) ** 2)
    q = jax.nn.sigmoid(past_offset)
    w = past_valid.astype(f)
    past = jnp.sum(w * (past_y - q)) + retired.gain
    coins = jnp.sum(w * q * (1 - q)) + retired.var  # each past task's no-memory outcome, a coin of its own
    common = coins + base_now
    total = past + (p1 - p0) - kappa * jnp.sqrt(lift_var + (common * sd0) ** 2 + coins)
    return (one > 0) | (total + allowance >= 0)
