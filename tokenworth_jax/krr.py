"""Masked Laplacian-kernel ridge regression: fit by Cholesky, predict, and its gradient."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve

from . import _doc
from .kernels import kernel_matrix, safe_sqrt, sqdist_gram

MAX_RIDGE_RETRIES = 6
RIDGE_GROWTH = 10.0


class Predictor(NamedTuple):
    """The fitted residual KRR: a snapshot of the fast window at the last fit.

    Shapes: N = ``Spec.fast_window`` support rows of F = D + 5 features.
    """

    support: jax.Array
    support_valid: jax.Array
    alpha: jax.Array
    ridge: jax.Array


_doc.fields(
    Predictor,
    support="(N, F) float: the support rows z_j, the fast window's examples at the last fit.",
    support_valid="(N,) bool: which support rows hold an example.",
    alpha="(N,) float: the KRR coefficients (zero on invalid rows; all zero before the first fit, so f = 0).",
    ridge="() float: the ridge the last solve needed (lambda_krr, or larger after a retry).",
)


def predictor_init(n: int, F: int, lambda_krr: jax.Array, dtype: jnp.dtype) -> Predictor:
    """No fit yet: all support rows invalid, alpha = 0 (so f = 0)."""
    return Predictor(support=jnp.zeros((n, F), dtype), support_valid=jnp.zeros((n,), bool),
                     alpha=jnp.zeros((n,), dtype), ridge=jnp.asarray(lambda_krr, dtype))


def support_center(predictor: Predictor) -> jax.Array:
    """(F,) mean of the valid support rows (0 with none): the centring point of :func:`predict`."""
    valid = predictor.support_valid
    count = jnp.maximum(jnp.sum(valid), 1).astype(predictor.support.dtype)
    return jnp.sum(jnp.where(valid[:, None], predictor.support, jnp.zeros_like(predictor.support)), axis=0) / count


class _Attempt(NamedTuple):
    tries: jax.Array
    ridge: jax.Array
    alpha: jax.Array
    ok: jax.Array


def fit(support: jax.Array, valid: jax.Array, delta: jax.Array, metric: jax.Array,
        gamma: jax.Array, lambda_krr: jax.Array) -> Predictor:
    """alpha = (K_M + lambda I)^-1 delta over the valid rows, zero elsewhere.

    Invalid rows and columns of K are replaced by the identity and their targets by 0, so the
    result equals the solve restricted to the valid rows, padded with zeros. If the Cholesky
    factor is not finite the ridge grows tenfold, at most ``MAX_RIDGE_RETRIES`` times.
    """
    f = support.dtype
    n = support.shape[0]
    pair_valid = valid[:, None] & valid[None, :]
    eye = jnp.eye(n, dtype=f)
    K = jnp.where(pair_valid, kernel_matrix(support, support, metric, gamma), eye)
    target = jnp.where(valid, delta, jnp.zeros_like(delta))

    def attempt(ridge: jax.Array) -> tuple[jax.Array, jax.Array]:
        chol = jnp.linalg.cholesky(K + ridge * eye)
        alpha = cho_solve((chol, True), target)
        ok = jnp.all(jnp.isfinite(chol)) & jnp.all(jnp.isfinite(alpha))
        return alpha, ok

    def not_done(a: _Attempt) -> jax.Array:
        return (~a.ok) & (a.tries < MAX_RIDGE_RETRIES)

    def retry(a: _Attempt) -> _Attempt:
        ridge = jnp.where(a.tries < 0, a.ridge, a.ridge * RIDGE_GROWTH)  # the first pass tries lambda_krr itself
        alpha, ok = attempt(ridge)
        return _Attempt(a.tries + 1, ridge, alpha, ok)

    # The first solve is the loop's first pass (tries -1 -> 0), not a copy before it: one Cholesky and one
    # solve in the program, not two (each is compiled code; the results are the same).
    ridge0 = jnp.asarray(lambda_krr, f)
    final = jax.lax.while_loop(not_done, retry, _Attempt(jnp.full((), -1, jnp.int32), ridge0, jnp.zeros_like(target),
                                                         jnp.zeros((), bool)))
    alpha = jnp.where(valid & final.ok, final.alpha, jnp.zeros_like(final.alpha))
    return Predictor(support=support, support_valid=valid, alpha=alpha, ridge=final.ridge)


def predict(zq: jax.Array, predictor: Predictor, metric: jax.Array, gamma: jax.Array) -> jax.Array:
    """f(z) = sum_j alpha_j K_M(z, z_j) for a batch ``zq`` of shape (n, D+5)."""
    r2 = sqdist_gram(zq, predictor.support, metric, support_center(predictor))
    return predict_from_sqdist(r2, predictor, gamma)


def predict_from_sqdist(r2: jax.Array, predictor: Predictor, gamma: jax.Array) -> jax.Array:
    """f from squared metric distances ``r2`` of shape (..., N) to the support rows."""
    K = jnp.exp(-gamma * safe_sqrt(r2))
    return K @ predictor.alpha  # alpha is zero on invalid support rows


def grad(zq: jax.Array, predictor: Predictor, metric: jax.Array, gamma: jax.Array) -> jax.Array:
    """Analytic gradient (n, D+5): -gamma sum_j alpha_j K(z,z_j) M (z - z_j) / ||z - z_j||_M.

    A term with z == z_j contributes exactly 0 (the reference RFM omits self-kernel
    derivatives); the double ``where`` keeps it free of NaN.
    """

    def one(z: jax.Array) -> jax.Array:
        diff = z[None, :] - predictor.support  # (N, F)
        r2 = jnp.sum(metric[None, :] * diff * diff, axis=-1)
        positive = r2 > 0
        r = safe_sqrt(r2)
        coeff = jnp.where(positive, predictor.alpha * jnp.exp(-gamma * r) / jnp.where(positive, r, jnp.ones_like(r)),
                          jnp.zeros_like(r))
        # sum_j c_j M (z - z_j) = M (z sum_j c_j - sum_j c_j z_j)
        return -gamma * metric * (z * jnp.sum(coeff) - coeff @ predictor.support)

    return jax.vmap(one)(zq)
