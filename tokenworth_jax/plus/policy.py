"""TokenWorth+ decisions: choose (rank by predicted advantage, abstain below a margin), record
feedback (no-memory ring, lift refit, per-memory advantage), the residual target, and the
worth used by the lifecycle. Each function is a pure step on ``State`` whose ``plus`` field
is a :class:`~.state.PlusState`; the core controller calls them behind ``if state.plus is not None``.

Switches are traced 0/1 leaves (``plus_rank``, ``plus_abstain``, ``plus_advantage``,
``plus_worth``; ``plus_explore`` = 0 turns exploration off), so an extended controller with
every switch at 0 makes exactly the paper's decisions (tests/test_plus.py checks it), and a
sweep can turn each part on and off in one compiled program.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..features import MemoryStats, base_features
from ..ring import ring_push
from .abstain import logit, null_probability
from .lift import lift_features, lift_fit, mean_advantage, thompson
from .state import PlusPending


def _on(flag: Any) -> jax.Array:
    return jnp.asarray(flag) > 0.5


def p0_of(state: Any, queries: jax.Array, hp: Any) -> jax.Array:
    return null_probability(queries, state.plus.null_ring, hp.plus_p0_prior, hp.plus_p0_strength, hp.plus_bandwidth)


def predicted_gain(p0: jax.Array, psi: jax.Array, theta: jax.Array, eta_f: jax.Array) -> jax.Array:
    """Â = σ(logit p̂₀ + θᵀψ) − p̂₀ + ηf/2: the predicted change of the success probability.

    In the extended mode the residual f is fitted to y − (2p̂₀ − 1) (±1 units), so ηf/2
    is a (damped) second estimate of the same advantage in probability units.
    """
    lift = jax.nn.sigmoid(logit(p0)[..., None] + psi @ theta) - p0[..., None]
    return lift + eta_f / 2


def choose(state: Any, query: jax.Array, top: jax.Array, cos: jax.Array, cand_valid: jax.Array,
           score: jax.Array, base: jax.Array, paper_chosen: jax.Array, hp: Any) -> tuple[Any, jax.Array]:
    """The candidate index to inject (-1: none) and the state with the plus pending filled.

    ``top`` (K,) bank slots in recall order, ``cos`` their recall cosines, ``score``/``base``
    the paper's s and s_base (−inf where invalid), ``paper_chosen`` the paper's argmax.
    """
    plus = state.plus
    f = score.dtype
    i32 = jnp.int32
    retrieved = jnp.any(cand_valid)
    p0 = p0_of(state, query[None, :], hp)[0]
    key, sub = jax.random.split(plus.key)
    theta = thompson(sub, plus.theta, plus.chol, hp.plus_explore)
    adv = mean_advantage(plus.adv_sum[top], plus.adv_n[top])
    psi = lift_features(jnp.where(cand_valid, score, jnp.zeros_like(score)), adv)  # (K, N_LIFT)
    eta_f = jnp.where(cand_valid, score - base, jnp.zeros_like(score))
    gain = jnp.where(cand_valid, predicted_gain(p0, psi, theta, eta_f), -jnp.inf)
    idx = jnp.where(_on(hp.plus_rank), jnp.argmax(gain).astype(i32), jnp.maximum(paper_chosen, 0))
    g = gain[idx]
    inject = retrieved & (~_on(hp.plus_abstain) | (g > hp.plus_margin))
    chosen = jnp.where(inject, idx, i32(-1))
    abstained = retrieved & ~inject
    pending = PlusPending(p0=p0, psi=psi[idx], gain=jnp.where(retrieved, g, jnp.zeros((), f)),
                          abstained=abstained)
    plus = plus._replace(key=key, pending=pending, n_abstain=plus.n_abstain + abstained.astype(i32))
    return state._replace(plus=plus), chosen


def residual_target(state: Any, y: jax.Array, delta: jax.Array, hp: Any) -> jax.Array:
    """The KRR target: y − b(q) with b = 2p̂₀(q) − 1 when ``plus_advantage`` is on, else the paper's δ."""
    b = 2 * state.plus.pending.p0 - 1
    return jnp.where(_on(hp.plus_advantage), y - b, delta)


def record(state: Any, hp: Any) -> Any:
    """Feedback of the judged task (``pending.reward`` set): train p̂₀ on a task with nothing
    injected; otherwise add (ψ, y, logit p̂₀) to the lift window, refit the lift posterior and
    credit the memory with y − p̂₀."""
    p = state.pending
    plus = state.plus
    f = plus.theta.dtype
    r = (p.reward == 1).astype(f)
    sel = p.selected
    null_ring = ring_push(plus.null_ring, (p.query, r), ~sel)
    lift_ring = ring_push(plus.lift_ring, (plus.pending.psi, 2 * r - 1, logit(plus.pending.p0)), sel)
    slot = jnp.maximum(p.slot, 0)
    adv_sum = plus.adv_sum.at[slot].add(jnp.where(sel, r - plus.pending.p0, jnp.zeros((), f)))
    adv_n = plus.adv_n.at[slot].add(sel.astype(f))

    def refit(args: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        from ..ring import ring_valid

        psi, y, off = lift_ring.data
        return lift_fit(psi, y, off, ring_valid(lift_ring), plus.theta, jnp.asarray(hp.plus_theta0, f),
                        jnp.asarray(hp.plus_lambda, f))

    theta, chol = jax.lax.cond(sel, refit, lambda a: a, (plus.theta, plus.chol))
    plus = plus._replace(null_ring=null_ring, lift_ring=lift_ring, adv_sum=adv_sum, adv_n=adv_n, theta=theta,
                         chol=chol)
    return state._replace(plus=plus)


def on_write(state: Any, slot: jax.Array, writes: jax.Array) -> Any:
    """A new memory in ``slot``: its advantage statistics start from zero."""
    plus = state.plus
    s = jnp.maximum(slot, 0)
    zero = jnp.zeros((), plus.adv_sum.dtype)
    plus = plus._replace(adv_sum=plus.adv_sum.at[s].set(jnp.where(writes, zero, plus.adv_sum[s])),
                         adv_n=plus.adv_n.at[s].set(jnp.where(writes, zero, plus.adv_n[s])))
    return state._replace(plus=plus)


def worth_scores(state: Any, queries: jax.Array, cos: jax.Array, stats: MemoryStats, scores: jax.Array,
                 hp: Any) -> jax.Array:
    """(P, B+1) per-probe worth: the predicted advantage Â(q_p, m) with the posterior mean θ̂
    (no sampling: the lifecycle stays deterministic) when ``plus_worth`` is on, else ``scores``.

    ``cos`` (P, B+1) are the probe-memory cosines (the incremental path passes its cached ones),
    ``stats`` the B+1 memories' statistics, ``scores`` the paper's s. The last column is the
    offered candidate, whose advantage statistics are zero.
    """
    plus = state.plus
    P, N = scores.shape
    stats_pn = MemoryStats(*(jnp.broadcast_to(s[None, :], (P, N)) for s in stats))
    eta_f = scores - base_features(cos, stats_pn) @ state.w
    adv = jnp.concatenate([mean_advantage(plus.adv_sum, plus.adv_n), jnp.zeros((1,), scores.dtype)])
    psi = lift_features(scores, jnp.broadcast_to(adv[None, :], (P, N)))
    gain = predicted_gain(p0_of(state, queries, hp), psi, plus.theta, eta_f)
    return jnp.where(_on(hp.plus_worth), gain, scores)
