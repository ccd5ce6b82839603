"""Prior-regularised logistic base scorer, fitted by Newton's method with backtracking.

L(w) = sum_j log(1 + exp(-y_j w^T phi_j)) + lambda_w ||w - w0||^2 over the valid window.
The Newton direction is scaled by optax's Armijo backtracking line search
(``scale_by_backtracking_linesearch``: initial step 1, halving, slope constant 1e-4).

This module owns :class:`BaseScorer` (w, its window of (phi, y) examples and its fit count):
:func:`init`, :func:`record` an example, :func:`fit`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from .ring import Ring, ring_init, ring_push, ring_valid

MAX_NEWTON_ITERS = 50
MAX_BACKTRACKS = 30
ARMIJO_C = 1e-4


def logistic_loss(w: jax.Array, phi: jax.Array, y: jax.Array, valid: jax.Array,
                  w0: jax.Array, lambda_w: jax.Array) -> jax.Array:
    margins = y * (phi @ w)
    data = jnp.sum(jnp.where(valid, jax.nn.softplus(-margins), jnp.zeros_like(margins)))
    return data + lambda_w * jnp.sum((w - w0) ** 2)


def _grad_hess(w: jax.Array, phi: jax.Array, y: jax.Array, valid: jax.Array,
               w0: jax.Array, lambda_w: jax.Array) -> tuple[jax.Array, jax.Array]:
    margins = y * (phi @ w)
    p = jnp.where(valid, jax.nn.sigmoid(-margins), jnp.zeros_like(margins))  # d softplus(-m)/dm = -p
    g = -(p * y) @ phi + 2 * lambda_w * (w - w0)
    curv = p * (1 - p)  # sigma(m) sigma(-m), zero on invalid rows
    H = (phi * curv[:, None]).T @ phi + 2 * lambda_w * jnp.eye(w.shape[0], dtype=w.dtype)
    return g, H


class _Newton(NamedTuple):
    w: jax.Array
    iters: jax.Array
    decrement: jax.Array


def newton_tolerance(dtype: jnp.dtype) -> float:
    """Stop when the Newton decrement g^T H^-1 g / 2 (an estimate of L - L*) is this small."""
    return 1e-16 if jnp.finfo(dtype).bits >= 64 else 1e-6


def newton_fit(phi: jax.Array, y: jax.Array, valid: jax.Array, w_start: jax.Array,
               w0: jax.Array, lambda_w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Minimise L(w) from ``w_start``. Returns (w_fit, iterations used)."""
    linesearch = optax.scale_by_backtracking_linesearch(
        max_backtracking_steps=MAX_BACKTRACKS, slope_rtol=ARMIJO_C, decrease_factor=0.5,
        increase_factor=1.0, max_learning_rate=1.0,
    )
    tol = newton_tolerance(w_start.dtype)

    def value_fn(w: jax.Array) -> jax.Array:
        return logistic_loss(w, phi, y, valid, w0, lambda_w)

    def body(s: _Newton) -> _Newton:
        g, H = _grad_hess(s.w, phi, y, valid, w0, lambda_w)
        direction = -jnp.linalg.solve(H, g)
        # A fresh line-search state per iteration: every Newton step first tries step 1.
        ls_state = linesearch.init(s.w)
        step, _ = linesearch.update(direction, ls_state, s.w, value=value_fn(s.w), grad=g, value_fn=value_fn)
        return _Newton(s.w + step, s.iters + 1, -jnp.dot(g, direction) / 2)

    def cond(s: _Newton) -> jax.Array:
        return (s.iters < MAX_NEWTON_ITERS) & (s.decrement > tol)

    inf = jnp.asarray(jnp.inf, w_start.dtype)
    out = jax.lax.while_loop(cond, body, _Newton(w_start, jnp.zeros((), jnp.int32), inf))
    return out.w, out.iters


def refit_weights(w_old: jax.Array, w_fit: jax.Array, beta_w: jax.Array,
                  w_min: jax.Array, w_max: jax.Array) -> jax.Array:
    """w <- clip((1 - beta_w) w_old + beta_w w_fit, w_min, w_max)."""
    return jnp.clip((1 - beta_w) * w_old + beta_w * w_fit, w_min, w_max)


class BaseScorer(NamedTuple):
    w: jax.Array  # (4,) weights of phi = [cos, u, rel, rec]
    window: Ring  # data = (phi (N_base, 4), y (N_base,) in {-1, 1})
    n_fits: jax.Array  # int32 completed Newton fits


def init(window: int, w0: jax.Array, dtype: jnp.dtype) -> BaseScorer:
    """w = w0, an empty window."""
    w0 = jnp.asarray(w0, dtype)
    n = w0.shape[-1]
    return BaseScorer(w=w0 * jnp.ones((n,), dtype),
                      window=ring_init((jnp.zeros((window, n), dtype), jnp.zeros((window,), dtype))),
                      n_fits=jnp.zeros((), jnp.int32))


def record(scorer: BaseScorer, phi: jax.Array, y: jax.Array, enabled: jax.Array) -> BaseScorer:
    """One example (phi (4,), y = 2r - 1) into the window, where ``enabled``."""
    return scorer._replace(window=ring_push(scorer.window, (phi, y), enabled))


def fit(scorer: BaseScorer, w0: jax.Array, lambda_w: jax.Array, beta_w: jax.Array, w_min: jax.Array,
        w_max: jax.Array) -> BaseScorer:
    """Newton fit on the window from the current w, then the damped, clipped update."""
    phi, y = scorer.window.data
    f = phi.dtype
    w_fit, _ = newton_fit(phi, y, ring_valid(scorer.window), scorer.w, jnp.asarray(w0, f), jnp.asarray(lambda_w, f))
    w = refit_weights(scorer.w, w_fit, jnp.asarray(beta_w, f), jnp.asarray(w_min, f), jnp.asarray(w_max, f))
    return BaseScorer(w=w, window=scorer.window, n_fits=scorer.n_fits + 1)
