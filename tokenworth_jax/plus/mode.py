"""TokenWorth+ as a :class:`~tokenworth_jax.modes.Mode`: its state (the no-memory ring, the lift
model's posterior, per-slot advantage statistics, the PRNG key, what the open task remembers)
and its pure functions: choose (rank by predicted advantage, abstain below a margin), the
residual target, the feedback update (no-memory ring, lift refit,
per-memory advantage), the worth used by the lifecycle, and the reset of a written slot.

Switches are traced 0/1 leaves of :class:`~tokenworth_jax.config.PlusHParams` (``rank``, ``abstain``,
``advantage``, ``worth``; ``explore`` = 0 turns exploration off), so the plus mode with every
switch at 0 makes exactly the paper's decisions (tests/test_plus.py checks it), and a sweep can
turn each part on and off in one compiled program.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ..batching import gated
from ..config import N_LIFT_FEATURES as N_LIFT
from ..config import HParams, PlusHParams, Spec
from ..modes import Candidates, Choice, Feedback, Mode, best, paper_target
from ..ring import Ring, ring_init, ring_push, ring_valid
from ..scorers import ProbeScores
from .abstain import logit, null_probability
from .lift import lift_features, lift_fit, mean_advantage, thompson

__all__ = ["PlusPending", "PlusState", "init", "plus", "predicted_gain"]


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


def _on(flag: ArrayLike) -> jax.Array:
    return jnp.asarray(flag) > 0.5


def _p0(state: PlusState, queries: jax.Array, php: PlusHParams) -> jax.Array:
    return null_probability(queries, state.null_ring, php.p0_prior, php.p0_strength, php.bandwidth)


def predicted_gain(p0: jax.Array, psi: jax.Array, theta: jax.Array, eta_f: jax.Array) -> jax.Array:
    """Â = σ(logit p̂₀ + θᵀψ) − p̂₀ + ηf/2: the predicted change of the success probability.

    In plus mode the residual f is fitted to y − (2p̂₀ − 1) (±1 units), so ηf/2 is a
    (damped) second estimate of the same advantage in probability units.
    """
    lift = jax.nn.sigmoid(logit(p0)[..., None] + psi @ theta) - p0[..., None]
    return lift + eta_f / 2


def choose(state: PlusState, cands: Candidates, hp: HParams) -> tuple[PlusState, Choice]:
    """The candidate to inject (or none) by predicted advantage, with a Thompson draw of θ."""
    php = hp.plus
    score = cands.score
    f = score.dtype
    i32 = jnp.int32
    valid = cands.valid
    retrieved = jnp.any(valid)
    p0 = _p0(state, cands.query[None, :], php)[0]
    key, sub = jax.random.split(state.key)
    theta = thompson(sub, state.theta, state.chol, php.explore)
    adv = mean_advantage(state.adv_sum[cands.slots], state.adv_n[cands.slots])
    psi = lift_features(jnp.where(valid, score, jnp.zeros_like(score)), adv)  # (K, N_LIFT)
    eta_f = jnp.where(valid, score - cands.base, jnp.zeros_like(score))
    gain = jnp.where(valid, predicted_gain(p0, psi, theta, eta_f), -jnp.inf)
    idx = jnp.where(_on(php.rank), jnp.argmax(gain).astype(i32), jnp.maximum(best(score, valid), 0))
    g = jnp.where(retrieved, gain[idx], jnp.zeros((), f))
    inject = retrieved & (~_on(php.abstain) | (gain[idx] > php.margin))
    abstained = retrieved & ~inject
    pending = PlusPending(p0=p0, psi=psi[idx], gain=g, abstained=abstained)
    state = state._replace(key=key, pending=pending, n_abstain=state.n_abstain + abstained.astype(i32))
    return state, Choice(index=jnp.where(inject, idx, i32(-1)), p0=p0, advantage=g, abstained=abstained)


def target(state: PlusState, y: jax.Array, s_base: jax.Array, hp: HParams) -> jax.Array:
    """The KRR target: y − (2p̂₀(q) − 1) when ``advantage`` is on, else the paper's δ."""
    return jnp.where(_on(hp.plus.advantage), y - (2 * state.pending.p0 - 1), paper_target(y, s_base))


def _refit_lift(state: PlusState, theta0: jax.Array, lam: jax.Array) -> PlusState:
    psi, y, off = state.lift_ring.data
    theta, chol = lift_fit(psi, y, off, ring_valid(state.lift_ring), state.theta, theta0, lam)
    return state._replace(theta=theta, chol=chol)


def update(state: PlusState, fb: Feedback, hp: HParams) -> PlusState:
    """The judged task: train p̂₀ on a task with nothing injected; otherwise add (ψ, y, logit p̂₀)
    to the lift window, refit the lift posterior and credit the memory with y − p̂₀."""
    f = state.theta.dtype
    r = (fb.reward == 1).astype(f)
    sel = fb.selected
    slot = jnp.maximum(fb.slot, 0)
    state = state._replace(
        null_ring=ring_push(state.null_ring, (fb.query, r), ~sel),
        lift_ring=ring_push(state.lift_ring, (state.pending.psi, 2 * r - 1, logit(state.pending.p0)), sel),
        adv_sum=state.adv_sum.at[slot].add(jnp.where(sel, r - state.pending.p0, jnp.zeros((), f))),
        adv_n=state.adv_n.at[slot].add(sel.astype(f)))
    return gated(sel, _refit_lift, lambda s, t0, lam: s, state, jnp.asarray(hp.plus.theta0, f),
                 jnp.asarray(hp.plus.lambda_, f))


def worth(state: PlusState, probes: jax.Array, scores: ProbeScores, hp: HParams) -> jax.Array:
    """(P+1, B+1) per-probe worth: the predicted advantage Â(q_p, m) with the posterior mean θ̂
    (no sampling: the lifecycle stays deterministic) when ``worth`` is on, else the paper's s.
    The last column is the offered memory, whose advantage statistics are zero."""
    P, N = scores.score.shape
    eta_f = scores.score - scores.base
    adv = jnp.concatenate([mean_advantage(state.adv_sum, state.adv_n), jnp.zeros((1,), scores.score.dtype)])
    psi = lift_features(scores.score, jnp.broadcast_to(adv[None, :], (P, N)))
    gain = predicted_gain(_p0(state, probes, hp.plus), psi, state.theta, eta_f)
    return jnp.where(_on(hp.plus.worth), gain, scores.score)


def write(state: PlusState, slot: jax.Array, writes: jax.Array) -> PlusState:
    """A new memory in ``slot``: its advantage statistics start from zero."""
    s = jnp.maximum(slot, 0)
    zero = jnp.zeros((), state.adv_sum.dtype)
    return state._replace(adv_sum=state.adv_sum.at[s].set(jnp.where(writes, zero, state.adv_sum[s])),
                          adv_n=state.adv_n.at[s].set(jnp.where(writes, zero, state.adv_n[s])))


def plus() -> Mode:
    """The TokenWorth+ mode."""
    return Mode(init=init, choose=choose, target=target, update=update, worth=worth, write=write)
