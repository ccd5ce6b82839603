"""The lift model: how much an injected memory moves a task's log-odds of success.

    P(y = 1 | q, m) = σ(o(q) + θᵀψ(q, m)),   o(q) = logit p̂₀(q)  (a fixed offset per example)
    ψ(q, m) = [1, cos(q, m), ā(m)]           ā(m) = Σ_uses (y − p̂₀) / (uses + 1)

The offset carries the task's own difficulty, so θ is credited only with the memory's
effect: a failure on a task that was expected to fail anyway (p̂₀ ≈ 0) has almost no gradient.
θ is fitted by a ridge-regularised Newton method towards the prior θ₀ (``plus_theta0``,
``plus_lambda``). Its Hessian at the optimum, H = Σ p(1−p) ψψᵀ + 2λI, gives the Laplace
posterior N(θ̂, H⁻¹) that :func:`thompson` samples from.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEWTON_ITERS = 12
MAX_STEP = 2.0  # cap on the Newton step's norm (keeps the first steps of a separable window sane)


def lift_features(cos: jax.Array, adv: jax.Array) -> jax.Array:
    """ψ = [1, cos, ā]; inputs broadcast, output adds a trailing axis of N_LIFT."""
    cos, adv = jnp.broadcast_arrays(cos, adv)
    return jnp.stack([jnp.ones_like(cos), cos, adv], axis=-1)


def mean_advantage(adv_sum: jax.Array, adv_n: jax.Array) -> jax.Array:
    """ā = sum / (n + 1): the memory's mean advantage, shrunk towards 0 (one pseudo-use)."""
    return adv_sum / (adv_n + 1)


def _grad_hess(theta: jax.Array, psi: jax.Array, y: jax.Array, offset: jax.Array, valid: jax.Array,
               theta0: jax.Array, lam: jax.Array) -> tuple[jax.Array, jax.Array]:
    margins = y * (offset + psi @ theta)
    p = jnp.where(valid, jax.nn.sigmoid(-margins), jnp.zeros_like(margins))
    g = -(p * y) @ psi + 2 * lam * (theta - theta0)
    H = (psi * (p * (1 - p))[:, None]).T @ psi + 2 * lam * jnp.eye(theta.shape[0], dtype=theta.dtype)
    return g, H


def lift_fit(psi: jax.Array, y: jax.Array, offset: jax.Array, valid: jax.Array, theta_start: jax.Array,
             theta0: jax.Array, lam: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(θ̂, chol(H⁻¹)) of the ridge-regularised offset logistic regression over the valid rows."""

    def body(_: int, theta: jax.Array) -> jax.Array:
        g, H = _grad_hess(theta, psi, y, offset, valid, theta0, lam)
        step = -jnp.linalg.solve(H, g)
        norm = jnp.linalg.norm(step)
        return theta + step * jnp.minimum(1.0, MAX_STEP / jnp.maximum(norm, 1e-12))

    theta = jax.lax.fori_loop(0, NEWTON_ITERS, body, theta_start)
    _, H = _grad_hess(theta, psi, y, offset, valid, theta0, lam)
    cov = jnp.linalg.inv(H)
    chol = jnp.linalg.cholesky((cov + cov.T) / 2)
    return theta, chol


def thompson(key: jax.Array, theta: jax.Array, chol: jax.Array, scale: jax.Array) -> jax.Array:
    """θ̃ = θ̂ + scale · L ε, ε ~ N(0, I): a draw from the (tempered) Laplace posterior."""
    eps = jax.random.normal(key, theta.shape, theta.dtype)
    return theta + jnp.asarray(scale, theta.dtype) * (chol @ eps)
