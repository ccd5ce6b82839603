"""The learners' refits (spec §4): base Newton fit, KRR solve, AGOP metric update, and their schedule.

Each refit is a pure ``State -> State`` function of one configuration; :func:`refit` runs
the due ones in order, for one configuration or (``batched=True``) for C stacked ones with
every refit gated on "any configuration due" (see :mod:`tokenworth_jax.batching`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import krr
from .agop import agop_diagonal, update_metric
from .base_scorer import newton_fit, refit_weights
from .batching import gated, lift
from .config import HParams
from .ring import ring_valid
from .state import State
from . import worth_cache


def fit_krr(state: State, hp: HParams) -> State:
    """Solve the residual KRR on the fast window with the current metric."""
    (z, delta) = state.fast_ring.data
    predictor = krr.fit(z, ring_valid(state.fast_ring), delta, state.metric, jnp.asarray(hp.gamma, z.dtype),
                        jnp.asarray(hp.lambda_krr, z.dtype))
    counters = state.counters._replace(n_krr_fits=state.counters.n_krr_fits + 1)
    cache = state.cache
    if worth_cache.enabled(cache):  # new support and/or metric: every cached distance changes
        cache = worth_cache.refresh(cache, state.pending.query, state.probe_ring, state.bank.emb, predictor,
                                    state.metric)
    return state._replace(predictor=predictor, counters=counters, cache=cache)


def fit_base(state: State, hp: HParams) -> State:
    """Newton fit of the base weights on the base window, then the damped, clipped update."""
    phi, y = state.base_ring.data
    f = phi.dtype
    w_fit, _ = newton_fit(phi, y, ring_valid(state.base_ring), state.w, jnp.asarray(hp.w0, f),
                          jnp.asarray(hp.lambda_w, f))
    w = refit_weights(state.w, w_fit, jnp.asarray(hp.beta_w, f), jnp.asarray(hp.w_min, f), jnp.asarray(hp.w_max, f))
    return state._replace(w=w, counters=state.counters._replace(n_base_fits=state.counters.n_base_fits + 1))


def agop_update(state: State, hp: HParams) -> State:
    """Diagonal AGOP step on the slow window, then an immediate KRR refit with the new metric."""
    z, _ = state.slow_ring.data
    f = z.dtype
    grads = krr.grad(z, state.predictor, state.metric, jnp.asarray(hp.gamma, f))
    G = agop_diagonal(grads, ring_valid(state.slow_ring))
    metric = update_metric(state.metric, G, jnp.asarray(hp.beta_m, f), jnp.asarray(hp.m_min, f),
                           jnp.asarray(hp.m_max, f))
    state = state._replace(metric=metric, counters=state.counters._replace(n_agop=state.counters.n_agop + 1))
    return fit_krr(state, hp)


def schedule(n_feedback: jax.Array, hp: HParams) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Which refits are due at feedback count ``n_feedback``: (base, krr, agop-if-fitted)."""
    n = n_feedback
    base_due = (n > 0) & (n % hp.base_interval == 0)
    krr_due = (n == hp.warmup) | ((n > hp.warmup) & (n % hp.krr_interval == 0))
    agop_due = (n > 0) & (n % hp.agop_interval == 0)
    return base_due, krr_due, agop_due


def refits_due(state: State, hp: HParams) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(base, krr, agop) refits due right after this task's feedback was recorded."""
    base_due, krr_due, agop_due = schedule(state.counters.n_feedback, hp)
    sel = state.pending.selected
    return sel & base_due, sel & krr_due, sel & agop_due


def _keep(state: State, hp: HParams) -> State:
    return state


def refit(state: State, hp: HParams, batched: bool = False) -> State:
    """Run the due refits in order: base, KRR, then AGOP (needs a fitted KRR) with its KRR refit."""
    base_due, krr_due, agop_due = lift(refits_due, batched)(state, hp)
    state = gated(base_due, fit_base, _keep, (state, hp), batched)
    state = gated(krr_due, fit_krr, _keep, (state, hp), batched)
    return gated(agop_due & (state.counters.n_krr_fits > 0), agop_update, _keep, (state, hp), batched)
