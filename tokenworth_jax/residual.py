"""The residual Recursive Feature Machine (spec §4): Laplacian KRR on the fast window whose
diagonal metric M adapts by AGOP on the slow window.

This module owns :class:`Residual`: its two windows of (z, delta) examples, the metric, the
fitted predictor and its fit counts. F = D + 5 residual features; N_fast / N_slow the windows.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from . import krr
from .batching import gated
from .agop import agop_diagonal, update_metric
from .krr import Predictor, predictor_init
from .ring import Ring, ring_init, ring_push, ring_valid


class Residual(NamedTuple):
    fast: Ring  # data = (z (N_fast, F), delta (N_fast,)): the KRR's training window
    slow: Ring  # data = (z (N_slow, F), delta (N_slow,)): the AGOP window
    metric: jax.Array  # (F,) diagonal of M
    predictor: Predictor  # the last KRR fit (support snapshot and alpha)
    n_fits: jax.Array  # int32 completed KRR solves
    n_agop: jax.Array  # int32 completed metric updates


def init(fast_window: int, slow_window: int, F: int, lambda_krr: jax.Array, dtype: jnp.dtype) -> Residual:
    """Empty windows, M = I, no fit yet (so f = 0)."""
    zero = jnp.zeros((), jnp.int32)
    return Residual(fast=ring_init((jnp.zeros((fast_window, F), dtype), jnp.zeros((fast_window,), dtype))),
                    slow=ring_init((jnp.zeros((slow_window, F), dtype), jnp.zeros((slow_window,), dtype))),
                    metric=jnp.ones((F,), dtype), predictor=predictor_init(fast_window, F, lambda_krr, dtype),
                    n_fits=zero, n_agop=zero)


def record(res: Residual, z: jax.Array, delta: jax.Array, enabled: jax.Array) -> Residual:
    """One example (z (F,), its residual target) into both windows, where ``enabled``."""
    return res._replace(fast=ring_push(res.fast, (z, delta), enabled), slow=ring_push(res.slow, (z, delta), enabled))


def eta(res: Residual, eta_max: jax.Array) -> jax.Array:
    """eta_t = eta_max * min(1, n_fits / 3): the residual ramps in over three fits."""
    f = res.metric.dtype
    ramp = jnp.minimum(jnp.ones((), f), res.n_fits.astype(f) / 3)
    return jnp.asarray(eta_max, f) * ramp


def fit(res: Residual, gamma: jax.Array, lambda_krr: jax.Array) -> Residual:
    """Solve the KRR on the fast window with the current metric."""
    z, delta = res.fast.data
    predictor = krr.fit(z, ring_valid(res.fast), delta, res.metric, jnp.asarray(gamma, z.dtype),
                        jnp.asarray(lambda_krr, z.dtype))
    return res._replace(predictor=predictor, n_fits=res.n_fits + 1)


def metric_step(res: Residual, gamma: jax.Array, beta_m: jax.Array, m_min: jax.Array, m_max: jax.Array) -> Residual:
    """Diagonal AGOP step on the slow window: the new metric M (the predictor is not refitted)."""
    z, _ = res.slow.data
    f = z.dtype
    grads = krr.grad(z, res.predictor, res.metric, jnp.asarray(gamma, f))
    G = agop_diagonal(grads, ring_valid(res.slow))
    metric = update_metric(res.metric, G, jnp.asarray(beta_m, f), jnp.asarray(m_min, f), jnp.asarray(m_max, f))
    return res._replace(metric=metric, n_agop=res.n_agop + 1)


def agop(res: Residual, gamma: jax.Array, lambda_krr: jax.Array, beta_m: jax.Array, m_min: jax.Array,
         m_max: jax.Array) -> Residual:
    """Diagonal AGOP step on the slow window, then an immediate KRR refit with the new metric."""
    return fit(metric_step(res, gamma, beta_m, m_min, m_max), gamma, lambda_krr)


def _unchanged(res: Residual, *hyperparameters: jax.Array) -> Residual:
    return res


def refit(res: Residual, fit_due: jax.Array, agop_due: jax.Array, gamma: jax.Array, lambda_krr: jax.Array,
          beta_m: jax.Array, m_min: jax.Array, m_max: jax.Array) -> tuple[Residual, jax.Array]:
    """The refits due after a feedback example, in the schedule's order: a KRR solve where ``fit_due``; then,
    where ``agop_due`` and a fit exists, :func:`agop` (a metric step and a solve with the new metric).
    Returns the residual and whether the AGOP step ran.

    The two solves are two passes of one loop body, so the compiled program holds one KRR solve, not two
    (fewer kernels to compile; the same operations in the same order). Each step runs only where due
    (:func:`~tokenworth_jax.batching.gated`)."""

    def one_pass(i: jax.Array, carry: tuple[Residual, jax.Array]) -> tuple[Residual, jax.Array]:
        r, agop_ran = carry
        agop_now = (i == 1) & agop_due & (r.n_fits > 0)  # AGOP needs a fitted KRR
        r = gated(agop_now, metric_step, _unchanged, r, gamma, beta_m, m_min, m_max)
        r = gated(((i == 0) & fit_due) | agop_now, fit, _unchanged, r, gamma, lambda_krr)
        return r, agop_ran | agop_now

    return jax.lax.fori_loop(0, 2, one_pass, (res, jnp.zeros(jnp.shape(agop_due), bool)))
