"""Predictor gradients: finite differences, jax.grad, and exact zeros at coincident points."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from tokenworth_jax import kernels, krr

from tests.controller_helpers import precision


def _fitted(f, seed=0, n=9, F=6):
    rng = np.random.default_rng(seed)
    Z = jnp.asarray(rng.normal(size=(n, F)), f)
    pred = krr.fit(Z, jnp.ones(n, bool), jnp.asarray(rng.normal(size=n), f), jnp.asarray(rng.uniform(0.3, 2, F), f),
                   jnp.asarray(1.0, f), jnp.asarray(0.01, f))
    return pred, jnp.asarray(rng.uniform(0.3, 2, F), f), rng


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_analytic_gradient_matches_finite_differences(dtype):
    with precision(dtype) as f:
        pred, metric, rng = _fitted(f)
        gamma = jnp.asarray(1.0, f)
        pred = pred._replace(alpha=krr.fit(pred.support, pred.support_valid, jnp.asarray(rng.normal(size=9), f),
                                           metric, gamma, jnp.asarray(0.01, f)).alpha)
        zq = jnp.asarray(rng.normal(size=(5, 6)), f)
        analytic = krr.grad(zq, pred, metric, gamma)
        eps = 1e-6 if f == jnp.float64 else 3e-3
        fn = lambda z: krr.predict(z, pred, metric, gamma)
        fd = np.zeros((5, 6))
        for k in range(6):
            e = jnp.zeros((6,), f).at[k].set(eps)
            fd[:, k] = (np.asarray(fn(zq + e[None, :])) - np.asarray(fn(zq - e[None, :]))) / (2 * eps)
        tol = 1e-6 if f == jnp.float64 else 2e-2
        np.testing.assert_allclose(np.asarray(analytic), fd, rtol=tol, atol=tol)
        # and jax.grad through the exact-difference kernel agrees too
        exact = lambda z: jnp.sum(pred.alpha * jax.vmap(kernels.laplacian, (None, 0, None, None))(z, pred.support, metric, gamma))
        autodiff = jax.vmap(jax.grad(exact))(zq)
        np.testing.assert_allclose(np.asarray(analytic), np.asarray(autodiff), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradient_is_nan_free_and_zero_term_at_coincident_points(dtype):
    with precision(dtype) as f:
        pred, metric, _ = _fitted(f)
        gamma = jnp.asarray(1.0, f)
        g = krr.grad(pred.support, pred, metric, gamma)  # every query coincides with one support point
        assert bool(jnp.all(jnp.isfinite(g)))
        for j in range(3):
            # the gradient at z_j equals the gradient with alpha_j zeroed: its own term contributes exactly 0
            without = pred._replace(alpha=pred.alpha.at[j].set(0))
            tol = 1e-12 if f == jnp.float64 else 1e-6
            np.testing.assert_allclose(np.asarray(g[j]), np.asarray(krr.grad(pred.support[j:j + 1], without, metric, gamma)[0]),
                                       rtol=tol, atol=tol)
        single = pred._replace(alpha=jnp.zeros_like(pred.alpha).at[0].set(1.0))
        assert np.all(np.asarray(krr.grad(pred.support[:1], single, metric, gamma)) == 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_laplacian_kernel_check_grads_and_zero_safe(dtype):
    with precision(dtype) as f:
        rng = np.random.default_rng(3)
        a, b = jnp.asarray(rng.normal(size=5), f), jnp.asarray(rng.normal(size=5), f)
        m = jnp.asarray(rng.uniform(0.5, 2, 5), f)
        tol = 1e-6 if f == jnp.float64 else 5e-2
        check_grads(lambda x, y: kernels.laplacian(x, y, m, jnp.asarray(0.8, f)), (a, b), order=2, modes=("fwd", "rev"),
                    atol=tol, rtol=tol)
        g = jax.grad(kernels.laplacian)(a, a, m, jnp.asarray(0.8, f))  # coincident: sqrt's derivative is never hit
        assert bool(jnp.all(jnp.isfinite(g))) and bool(jnp.all(g == 0))
        assert float(kernels.safe_sqrt(jnp.zeros((), f))) == 0.0
        assert float(jax.grad(kernels.safe_sqrt)(jnp.zeros((), f))) == 0.0
