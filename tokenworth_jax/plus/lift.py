"""The lift model: how much an injected memory moves a task's log-odds of success.

    P(y = 1 | q, m) = σ(o(q) + θᵀψ(q, m)),   o(q) = logit p̂₀(q)  (a fixed offset per example)

The offset carries the task's own difficulty, so θ is credited only with the memory's effect: a
failure on a task that was expected to fail anyway (p̂₀ ≈ 0) has almost no gradient. θ is a
ridge-regularised Newton fit towards θ₀ with a ridge λ_i per feature; its Hessian at the optimum,
H = Σ p(1−p) ψψᵀ + 2 diag(λ), gives the Laplace posterior N(θ̂, H⁻¹) (:func:`thompson` samples
it). For a group of features whose shrinkage the data should decide, :func:`fit_by_evidence`
fits under λ·g for each multiplier g of a grid and keeps the fit with the largest Laplace
evidence (empirical Bayes): noisy rewards keep the group near its prior, a strong and consistent
effect frees it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEWTON_STEPS = 4  # warm-started from the last fit, which one more example barely moves
MAX_STEP = 2.0  # cap on the Newton step's norm (keeps the first steps of a separable window sane)


def _grad_hess(theta: jax.Array, psi: jax.Array, y: jax.Array, offset: jax.Array, valid: jax.Array,
               theta0: jax.Array, lam: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Gradient and Hessian of Σ log(1 + exp(−y (o + θᵀψ))) + Σ λ_i (θ_i − θ0_i)² over the valid rows."""
    margins = y * (offset + psi @ theta)
    p = jnp.where(valid, jax.nn.sigmoid(-margins), jnp.zeros_like(margins))
    g = -(p * y) @ psi + 2 * lam * (theta - theta0)
    H = (psi * (p * (1 - p))[:, None]).T @ psi + jnp.diag(2 * lam)
    return g, H


def newton_fit(psi: jax.Array, y: jax.Array, offset: jax.Array, valid: jax.Array, theta_start: jax.Array,
               theta0: jax.Array, lam: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(θ̂, Cholesky factor of H⁻¹) over the valid rows of ψ (N, F), y (N,) in {−1, 1} and the
    offsets (N,): :data:`NEWTON_STEPS` capped Newton steps from ``theta_start``, ridge ``lam`` (F,)."""

    def body(_: int, theta: jax.Array) -> jax.Array:
        g, H = _grad_hess(theta, psi, y, offset, valid, theta0, lam)
        step = -jnp.linalg.solve(H, g)
        return theta + step * jnp.minimum(1.0, MAX_STEP / jnp.maximum(jnp.linalg.norm(step), 1e-12))

    theta = jax.lax.fori_loop(0, NEWTON_STEPS, body, theta_start)
    _, H = _grad_hess(theta, psi, y, offset, valid, theta0, lam)
    cov = jnp.linalg.inv(H)
    return theta, jnp.linalg.cholesky((cov + cov.T) / 2)


def laplace_evidence(theta: jax.Array, chol: jax.Array, psi: jax.Array, y: jax.Array, offset: jax.Array,
                     valid: jax.Array, theta0: jax.Array, lam: jax.Array) -> jax.Array:
    """log p(data | λ) under the Laplace approximation at θ̂ (``chol`` = Cholesky factor of H⁻¹):
    log-likelihood − Σ λ_i (θ̂_i − θ0_i)² + ½ Σ log 2λ_i − ½ log det H."""
    loglik = jnp.sum(jnp.where(valid, jax.nn.log_sigmoid(y * (offset + psi @ theta)), jnp.zeros_like(y)))
    return (loglik - jnp.sum(lam * (theta - theta0) ** 2) + 0.5 * jnp.sum(jnp.log(2 * lam))
            + jnp.sum(jnp.log(jnp.diagonal(chol))))


def fit_by_evidence(psi: jax.Array, y: jax.Array, offset: jax.Array, valid: jax.Array, theta_start: jax.Array,
                    theta0: jax.Array, lam: jax.Array, adaptive: jax.Array,
                    grid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The :func:`newton_fit`, among ``lam`` with the ``adaptive`` (F,) features' ridge multiplied by
    each entry of ``grid`` (G,), that the data support best (largest Laplace evidence)."""
    lams = lam[None, :] * jnp.where(adaptive[None, :] > 0.5, grid[:, None], jnp.ones_like(grid)[:, None])  # (G, F)
    thetas, chols = jax.vmap(lambda l: newton_fit(psi, y, offset, valid, theta_start, theta0, l))(lams)
    scores = jax.vmap(lambda t, c, l: laplace_evidence(t, c, psi, y, offset, valid, theta0, l))(thetas, chols, lams)
    best = jnp.argmax(scores)
    return thetas[best], chols[best]


def thompson(key: jax.Array, theta: jax.Array, chol: jax.Array, scale: jax.Array) -> jax.Array:
    """θ̃ = θ̂ + scale · L ε, ε ~ N(0, I): a draw from the (tempered) Laplace posterior."""
    eps = jax.random.normal(key, theta.shape, theta.dtype)
    return theta + jnp.asarray(scale, theta.dtype) * (chol @ eps)
