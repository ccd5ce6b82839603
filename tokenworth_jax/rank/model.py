"""The learned ranker: which memory of the recall set helps this query (issue 24).

Two learners, both pure functions over NamedTuple states with traced hyperparameters
(docs/ranking-research.md has the measurements behind every choice):

1. **The action model** (self-supervised, from memory texts alone). Every successful task offers
   a memory whose text shows both its question and its actions. A ridge regression from the
   question's hashed words x (``query_dim``) to the hashed action tokens a (``action_dim``),

       W = (λ_a I + Σ_j x_j x_jᵀ)⁻¹ Σ_j x_j a_jᵀ,        â(q) = Wᵀ x(q),

   is kept exactly by recursive least squares (Sherman–Morrison; ``P`` is the inverse Gram).
   The pair score ŝ(q, m) = â(q)·a_m = x(q)ᵀ W a_m is a learned bilinear form between query words
   and memory action tokens: it predicts how much of m's procedure the query will need. The
   paper's features cannot express it (element-wise products of one hashed space only match
   words the two questions share), and rewards are too noisy to learn it (measured).

2. **The lift model** (from rewards; TokenWorth+'s estimator with other features). With the
   task's difficulty as a fixed offset o(q) = logit p̂₀(q) (the no-memory arm,
   :func:`tokenworth_jax.plus.abstain.null_probability`),

       P(y = 1 | q, m) = σ(o(q) + θᵀψ(q, m)),
       ψ = [1, cos, ŝ, κ(cos − 0.2), κ(cos − 0.4), κ(cos − 0.6), κ(cos − 0.8)] ⊙ features,

   κ(d) = exp(−d²/2w²), w = 0.1: bumps that let worth be a non-monotone function of similarity
   (near duplicates that mislead). θ is a Newton fit towards θ₀ under a ridge λ_i per feature
   over the last ``window`` injected tasks. For the ``adaptive`` features (the bumps) λ is
   chosen by empirical Bayes: the fit is made under λ·g for each g of ``lam_grid`` and the one
   with the largest Laplace evidence kept, so the bumps stay near 0 when the rewards show no
   such structure (simulated DB) and move freely when they do (relevance ≠ worth streams).

Choice. Candidates are ranked by the posterior-mean advantage
Â(q, m) = σ(o + θ̂ᵀψ) − p̂₀(q) (a draw would perturb the ranking with noise the DB rewards cannot
pay for). The best one is injected unless

    σ(o + θ̃ᵀψ + optimism · sd(ψ)) − p̂₀ ≤ margin,     θ̃ = θ̂ + explore · L ε,  sd(ψ) = ‖Lᵀψ‖,

with L the Cholesky factor of the Laplace covariance: an upper confidence bound on the logit
(``optimism``; default 1) and optionally a Thompson draw (``explore``; default 0). So "no
memory" needs evidence of harm, and a run cannot talk itself into never injecting (greedy
abstention did, on some seeds).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..plus.abstain import logit, null_probability
from ..plus.lift import MAX_STEP, _grad_hess, thompson
from ..ring import Ring, ring_init, ring_push, ring_valid

N_PAIR = 7  # ψ = [1, cos, ŝ, four cosine bumps]
BUMP_CENTRES = (0.2, 0.4, 0.6, 0.8)
BUMP_WIDTH = 0.1
N_GRID = 5  # ridge multipliers tried by the evidence fit
NEWTON_STEPS = 4  # warm-started from the last fit, which one more example barely moves


class RankDims(NamedTuple):
    """Static sizes (they fix array shapes)."""

    query_dim: int = 512  # hashed question words and bigrams
    action_dim: int = 256  # hashed action tokens and bigrams
    window: int = 256  # injected tasks kept for the lift fit
    null_window: int = 128  # tasks without injection kept for p̂₀
    key_dim: int = 512  # the recall vectors (tokenworth_jax.featurize), used by p̂₀


class RankParams(NamedTuple):
    """Traced hyperparameters (arrays; stack them to vmap over configurations)."""

    action_lambda: jax.Array  # λ_a, ridge of the action model (enters P₀ = I/λ_a at init)
    theta0: jax.Array  # (N_PAIR,) prior mean of the lift weights
    lam: jax.Array  # (N_PAIR,) ridge of the lift model per feature
    adaptive: jax.Array  # (N_PAIR,) 0/1: features whose ridge is chosen by evidence among lam · lam_grid
    lam_grid: jax.Array  # (N_GRID,) ridge multipliers tried for the adaptive features
    explore: jax.Array  # Thompson scale of the inject decision (0: none)
    optimism: jax.Array  # posterior sds added to the inject decision's logit (upper confidence bound)
    margin: jax.Array  # inject only if the decision's Â > margin (probability units)
    abstain: jax.Array  # 0/1: allow "no memory" at all
    features: jax.Array  # (N_PAIR,) 0/1 mask of ψ
    p0_prior: jax.Array  # Beta prior mean of the no-memory rate
    p0_strength: jax.Array  # its pseudo-count
    bandwidth: jax.Array  # p̂₀ kernel width on 1 − cos
    seed: jax.Array  # int32, the PRNG key's seed


DEFAULTS = dict(action_lambda=1.0, theta0=(0.5, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0), lam=1.0,
                adaptive=(0, 0, 0, 1, 1, 1, 1), lam_grid=(1.0, 3.0, 10.0, 30.0, 100.0), explore=0.0, optimism=1.0,
                margin=-0.05, abstain=1.0, features=(1, 1, 1, 1, 1, 1, 1), p0_prior=0.5, p0_strength=2.0,
                bandwidth=0.05, seed=0)
VECTORS = {"theta0": (N_PAIR,), "lam": (N_PAIR,), "adaptive": (N_PAIR,), "features": (N_PAIR,),
           "lam_grid": (N_GRID,)}


def rank_params(**overrides: object) -> RankParams:
    """:data:`DEFAULTS` with ``overrides`` as float32 arrays (``seed`` int32; a scalar ``lam`` is
    one ridge for every feature); unknown names and wrong shapes raise ``ValueError``."""
    unknown = set(overrides) - set(RankParams._fields)
    if unknown:
        raise ValueError(f"unknown rank hyperparameter(s) {sorted(unknown)}; known: {', '.join(RankParams._fields)}")
    values = {**DEFAULTS, **overrides}
    out = {}
    for name in RankParams._fields:
        arr = jnp.asarray(values[name], jnp.int32 if name == "seed" else jnp.float32)
        if name == "lam" and arr.shape == ():
            arr = jnp.full((N_PAIR,), arr)
        expected = VECTORS.get(name, ())
        if arr.shape != expected:
            raise ValueError(f"rank hyperparameter {name} must have shape {expected}, got {arr.shape}")
        out[name] = arr
    return RankParams(**out)


class ActionModel(NamedTuple):
    P: jax.Array  # (Dq, Dq) inverse of λ_a I + Σ x xᵀ
    W: jax.Array  # (Dq, Da) ridge solution
    n: jax.Array  # int32 pairs learned


class Pending(NamedTuple):
    """What the open task remembers between :func:`choose` and :func:`learn_reward`."""

    p0: jax.Array  # p̂₀(q)
    psi: jax.Array  # (N_PAIR,) features of the injected candidate (zeros when none)
    injected: jax.Array  # bool


class RankState(NamedTuple):
    actions: ActionModel
    null_ring: Ring  # (key vectors (N0, D), y (N0,) in {0, 1}) of tasks without injection
    lift_ring: Ring  # (ψ (N, F), y (N,) in {−1, 1}, offset (N,))
    theta: jax.Array  # (N_PAIR,) posterior mean
    chol: jax.Array  # (N_PAIR, N_PAIR) Cholesky factor of the Laplace covariance
    key: jax.Array  # PRNG key (used when explore > 0)
    pending: Pending


def init(dims: RankDims, hp: RankParams) -> RankState:
    f = jnp.float32
    return RankState(
        actions=ActionModel(P=jnp.eye(dims.query_dim, dtype=f) / hp.action_lambda,
                            W=jnp.zeros((dims.query_dim, dims.action_dim), f), n=jnp.zeros((), jnp.int32)),
        null_ring=ring_init((jnp.zeros((dims.null_window, dims.key_dim), f), jnp.zeros((dims.null_window,), f))),
        lift_ring=ring_init((jnp.zeros((dims.window, N_PAIR), f), jnp.zeros((dims.window,), f),
                             jnp.zeros((dims.window,), f))),
        theta=hp.theta0 * hp.features,
        chol=jnp.diag(1.0 / jnp.sqrt(2 * hp.lam)),
        key=jax.random.PRNGKey(hp.seed),
        pending=Pending(p0=jnp.full((), 0.5, f), psi=jnp.zeros((N_PAIR,), f), injected=jnp.zeros((), bool)),
    )


# ------------------------------------------------------------------ the action model
def learn_actions(model: ActionModel, x: jax.Array, a: jax.Array, enabled: jax.Array | bool = True) -> ActionModel:
    """One exact recursive-least-squares step with the pair (x, a); a no-op when not ``enabled``
    (a ``lax.cond``, so a task without an offer skips the O(Dq²) work outside ``vmap``)."""

    def step(m: ActionModel) -> ActionModel:
        Px = m.P @ x
        k = Px / (1.0 + x @ Px)
        return ActionModel(P=m.P - jnp.outer(k, Px), W=m.W + jnp.outer(k, a - x @ m.W), n=m.n + 1)

    return jax.lax.cond(jnp.asarray(enabled, bool), step, lambda m: m, model)


def pair_scores(model: ActionModel, x: jax.Array, acts: jax.Array) -> jax.Array:
    """ŝ(q, m) = xᵀ W a_m for K memories' action vectors ``acts`` (K, Da)."""
    return acts @ (x @ model.W)


# ------------------------------------------------------------------ the lift model
def pair_features(cos: jax.Array, s: jax.Array, mask: jax.Array) -> jax.Array:
    """ψ for K candidates, (K, N_PAIR); ``cos`` and ``s`` are (K,)."""
    centres = jnp.asarray(BUMP_CENTRES, cos.dtype)
    bumps = jnp.exp(-((cos[:, None] - centres[None, :]) ** 2) / (2 * BUMP_WIDTH ** 2))
    psi = jnp.concatenate([jnp.stack([jnp.ones_like(cos), cos, s], axis=-1), bumps], axis=-1)
    return psi * mask[None, :]


class Choice(NamedTuple):
    index: jax.Array  # int32 candidate index injected, −1 for none
    best: jax.Array  # int32 argmax of Â over the valid candidates (−1 if none)
    gain: jax.Array  # (K,) posterior-mean Â per candidate (−inf where invalid)
    s: jax.Array  # (K,) ŝ per candidate
    p0: jax.Array  # p̂₀(q)


def choose(state: RankState, hp: RankParams, key_vec: jax.Array, x: jax.Array, cos: jax.Array, acts: jax.Array,
           valid: jax.Array) -> tuple[RankState, Choice]:
    """Score K candidates (cosines ``cos`` (K,), action vectors ``acts`` (K, Da), ``valid`` mask) for
    the query (recall vector ``key_vec``, word vector ``x``); pick one or none."""
    key, sub = jax.random.split(state.key)
    s = pair_scores(state.actions, x, acts)
    psi = pair_features(cos, s, hp.features)
    p0 = null_probability(key_vec[None, :], state.null_ring, hp.p0_prior, hp.p0_strength, hp.bandwidth)[0]
    o = logit(p0)
    gain = jnp.where(valid, jax.nn.sigmoid(o + psi @ (state.theta * hp.features)) - p0, -jnp.inf)
    any_valid = jnp.any(valid)
    best = jnp.where(any_valid, jnp.argmax(gain), -1).astype(jnp.int32)
    chosen = psi[jnp.maximum(best, 0)]
    drawn = thompson(sub, state.theta, state.chol, hp.explore) * hp.features
    sd = jnp.linalg.norm(state.chol.T @ chosen)
    decisive = jax.nn.sigmoid(o + chosen @ drawn + hp.optimism * sd) - p0
    inject = any_valid & ((hp.abstain < 0.5) | (decisive > hp.margin))
    index = jnp.where(inject, best, -1).astype(jnp.int32)
    pending = Pending(p0=p0, psi=jnp.where(inject, chosen, jnp.zeros_like(chosen)), injected=inject)
    return state._replace(key=key, pending=pending), Choice(index=index, best=best, gain=gain, s=s, p0=p0)


def newton_fit(psi: jax.Array, y: jax.Array, offset: jax.Array, valid: jax.Array, theta_start: jax.Array,
               theta0: jax.Array, lam: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(θ̂, Cholesky factor of H⁻¹) of the offset logistic regression with a ridge ``lam`` (F,) per
    feature: :func:`tokenworth_jax.plus.lift.lift_fit`'s capped Newton steps, :data:`NEWTON_STEPS`
    of them from ``theta_start`` (the ranker refits after every injection from the last optimum)."""

    def grad_hess(theta: jax.Array) -> tuple[jax.Array, jax.Array]:
        g, H = _grad_hess(theta, psi, y, offset, valid, theta0, jnp.zeros((), theta.dtype))  # the likelihood's
        return g + 2 * lam * (theta - theta0), H + jnp.diag(2 * lam)

    def body(_: int, theta: jax.Array) -> jax.Array:
        g, H = grad_hess(theta)
        step = -jnp.linalg.solve(H, g)
        return theta + step * jnp.minimum(1.0, MAX_STEP / jnp.maximum(jnp.linalg.norm(step), 1e-12))

    theta = jax.lax.fori_loop(0, NEWTON_STEPS, body, theta_start)
    _, H = grad_hess(theta)
    cov = jnp.linalg.inv(H)
    return theta, jnp.linalg.cholesky((cov + cov.T) / 2)


def laplace_evidence(theta: jax.Array, chol: jax.Array, psi: jax.Array, y: jax.Array, offset: jax.Array,
                     valid: jax.Array, theta0: jax.Array, lam: jax.Array) -> jax.Array:
    """log p(data | λ) under the Laplace approximation at θ̂ (``chol`` = Cholesky factor of H⁻¹):
    log-likelihood − Σ λ_i (θ̂_i − θ0_i)² + ½ Σ log 2λ_i − ½ log det H."""
    loglik = jnp.sum(jnp.where(valid, jax.nn.log_sigmoid(y * (offset + psi @ theta)), 0.0))
    return (loglik - jnp.sum(lam * (theta - theta0) ** 2) + 0.5 * jnp.sum(jnp.log(2 * lam))
            + jnp.sum(jnp.log(jnp.diagonal(chol))))


def fit_by_evidence(psi: jax.Array, y: jax.Array, offset: jax.Array, valid: jax.Array, theta_start: jax.Array,
                    theta0: jax.Array, lam: jax.Array, adaptive: jax.Array,
                    grid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The fit, among ``lam`` with the ``adaptive`` features' ridge multiplied by each entry of
    ``grid``, that the data support best (largest Laplace evidence): empirical Bayes for how far
    a feature group may move from its prior. Noisy rewards keep it shrunk; a strong, consistent
    effect frees it."""
    lams = lam[None, :] * jnp.where(adaptive[None, :] > 0.5, grid[:, None], 1.0)  # (G, F)
    thetas, chols = jax.vmap(lambda l: newton_fit(psi, y, offset, valid, theta_start, theta0, l))(lams)
    scores = jax.vmap(lambda t, c, l: laplace_evidence(t, c, psi, y, offset, valid, theta0, l))(thetas, chols, lams)
    g = jnp.argmax(scores)
    return thetas[g], chols[g]


def learn_reward(state: RankState, hp: RankParams, key_vec: jax.Array, reward: jax.Array) -> RankState:
    """After the grader: the no-memory ring (nothing injected), or the lift window and its refit."""
    pend = state.pending
    r = jnp.asarray(reward, state.theta.dtype)
    null_ring = ring_push(state.null_ring, (key_vec, r), ~pend.injected)
    lift_ring = ring_push(state.lift_ring, (pend.psi, 2 * r - 1, logit(pend.p0)), pend.injected)

    def refit(_: None) -> tuple[jax.Array, jax.Array]:
        psi, y, offset = lift_ring.data
        return fit_by_evidence(psi * hp.features[None, :], y, offset, ring_valid(lift_ring), state.theta,
                               hp.theta0 * hp.features, hp.lam, hp.adaptive, hp.lam_grid)

    theta, chol = jax.lax.cond(pend.injected, refit, lambda _: (state.theta, state.chol), None)
    return state._replace(null_ring=null_ring, lift_ring=lift_ring, theta=theta, chol=chol)


def learn_memory(state: RankState, x: jax.Array, a: jax.Array, enabled: jax.Array | bool = True) -> RankState:
    """An offered memory (its question's word vector ``x``, its action vector ``a``) trains the action model."""
    return state._replace(actions=learn_actions(state.actions, x, a, enabled))
