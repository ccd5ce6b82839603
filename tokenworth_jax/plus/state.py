"""TokenWorth+'s own state: the no-memory ring, the lift model's posterior, per-slot advantage
statistics, the PRNG key and what the open task remembers. Only :mod:`.mode` writes it."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..config import N_LIFT_FEATURES as N_LIFT
from ..config import HParams, Spec
from ..ring import Ring, ring_init


class PlusPending(NamedTuple):
    p0: jax.Array  # p̂₀(q) at select time
    psi: jax.Array  # (N_LIFT,) lift features of the chosen candidate
    # predicted advantage Â of the chosen candidate; 0 when the bank was empty (finite, so that
    # tw.checked accepts the state; the controller's pending.retrieved tells the two apart)
    gain: jax.Array
    abstained: jax.Array  # bool: a candidate existed but nothing was injected


class PlusState(NamedTuple):
    key: jax.Array  # (2,) uint32 PRNG key, split once per select
    null_ring: Ring  # data = (q (N0, D), y (N0,) in {0, 1}): tasks with nothing injected
    lift_ring: Ring  # data = (psi (Nb, N_LIFT), y (Nb,) in {-1, 1}, offset (Nb,) = logit p̂₀)
    theta: jax.Array  # (N_LIFT,) posterior mean of the lift weights
    chol: jax.Array  # (N_LIFT, N_LIFT) Cholesky factor of the Laplace covariance H⁻¹
    adv_sum: jax.Array  # (B,) sum over uses of y - p̂₀(q) per bank slot
    adv_n: jax.Array  # (B,) uses per bank slot
    n_abstain: jax.Array  # int32 tasks abstained so far
    pending: PlusPending


def init(spec: Spec, hp: HParams) -> PlusState:
    """A fresh TokenWorth+ state for a ``Spec`` and ``HParams`` (whose ``plus`` is set)."""
    f = spec.float_dtype
    php = hp.plus
    theta0 = jnp.asarray(php.theta0, f) * jnp.ones((N_LIFT,), f)
    lam = jnp.asarray(php.lambda_, f)
    # Prior covariance (2 lambda)^-1 I: the Hessian of the ridge term alone.
    chol = jnp.eye(N_LIFT, dtype=f) / jnp.sqrt(2 * lam)
    return PlusState(
        key=jax.random.PRNGKey(jnp.asarray(php.seed, jnp.int32)),
        null_ring=ring_init((jnp.zeros((spec.null_window, spec.dim), f), jnp.zeros((spec.null_window,), f))),
        lift_ring=ring_init((jnp.zeros((spec.base_window, N_LIFT), f), jnp.zeros((spec.base_window,), f),
                             jnp.zeros((spec.base_window,), f))),
        theta=theta0,
        chol=chol,
        adv_sum=jnp.zeros((spec.capacity,), f),
        adv_n=jnp.zeros((spec.capacity,), f),
        n_abstain=jnp.zeros((), jnp.int32),
        pending=PlusPending(p0=jnp.full((), 0.5, f), psi=jnp.zeros((N_LIFT,), f), gain=jnp.zeros((), f),
                            abstained=jnp.zeros((), bool)),
    )
