"""TokenWorth+ as a :class:`~tokenworth_jax.modes.Mode`: a learned ranking of the recall set.

Its state and its pure functions (docs/tokenworth-plus.md; the research behind every choice:
docs/ranking-research.md):

* **The action model** (:mod:`.actions`, self-supervised): every offered memory teaches which
  action tokens a question's words call for; the affinity ŝ(q, m) = x(q)ᵀ M a_m of a candidate is
  how much of its procedure the query will need.
* **The no-memory arm** (:mod:`.abstain`): p̂₀(q), the success probability without injection,
  and its posterior sd, learned on the tasks where nothing was injected (and only there).
* **The lift model** (:mod:`.lift`, from rewards): P(y=1 | q, m) = σ(logit p̂₀(q) + θᵀψ) with
  ψ = [1, cos, ŝ, κ(cos − 0.2), κ(cos − 0.4), κ(cos − 0.6), κ(cos − 0.8)] ⊙ ``features``,
  κ(d) = exp(−d²/(2·0.1²)): bumps that let worth be a non-monotone function of similarity (near
  duplicates that mislead), their shrinkage chosen by Laplace evidence. θ is refitted after every
  injected task over the last ``base_window`` of them.
* **Choose**: rank the recall set by the posterior-mean gain Â = σ(o + θ̂ᵀψ) − p̂₀; then draw
  the best candidate's arm and the no-memory arm, each from its own posterior (Thompson), and
  inject when the first wins, no sooner than ``null_first`` no-memory outcomes, and only while
  the no-harm guard (:mod:`.guard`) allows it.
* **Worth** (the lifecycle): the mean of Â over the probes, deterministic (posterior mean), when
  ``worth`` is on; else the paper's score.

The residual RFM and the base scorer keep learning as in the paper (``target`` is the paper's δ):
the lifecycle reads them when ``worth`` is 0.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ..batching import gated
from ..config import HParams
from ..inputs import Feature, MemoryText, Query
from ..modes import Candidates, Choice, Feedback, Mode, paper_target
from ..ring import Ring, ring_init, ring_push, ring_valid
from ..scorers import ProbeScores
from . import actions as action_model
from .abstain import NullStats, far_stats, logit, null_logit_sd, null_mean, null_stats, stored_stats
from .actions import ActionModel
from .config import N_LIFT_FEATURES, SCHEMA, PlusShapes
from .guard import Retired, allows, retire
from .lift import fit_by_evidence, thompson
from .text import action_vector, word_vector

BUMP_CENTRES = (0.2, 0.4, 0.6, 0.8)
BUMP_WIDTH = 0.1


class PlusPending(NamedTuple):
    p0: jax.Array  # p̂₀(q) at select time
    k: jax.Array  # Σ_j k_j(q): the query's local no-memory evidence at select time (abstain.NullStats)
    ky: jax.Array  # Σ_j k_j(q) y_j
    psi: jax.Array  # (F,) lift features of the injected candidate (zeros when none)
    injected: jax.Array  # bool
    words: jax.Array  # (W,) the question's words: the key of the memory this task may offer


class PlusState(NamedTuple):
    actions: ActionModel
    slot_actions: jax.Array  # (B, A) the action vector of the memory in each bank slot
    null_ring: Ring  # data = (q (N0, D), y (N0,) in {0, 1}): tasks with nothing injected
    lift_ring: Ring  # data = (psi (N, F), y (N,) in {-1, 1}, offset (N,) = logit p̂₀, k (N,), ky (N,))
    retired: Retired  # the injected tasks that have left the lift ring (the guard counts the whole run)
    theta: jax.Array  # (F,) posterior mean of the lift weights
    chol: jax.Array  # (F, F) Cholesky factor of the Laplace covariance H⁻¹
    key: jax.Array  # (2,) uint32 PRNG key, split once per select
    n_injected: jax.Array  # int32 tasks on which a memory was injected (the lift refits every refit_interval)
    n_abstain: jax.Array  # int32 tasks on which candidates existed and nothing was injected
    n_tasks: jax.Array  # int32 tasks selected for (the guard's allowance grows with it)
    null_n: jax.Array  # every no-memory outcome so far (the global rate's evidence with ``null_all``)
    null_y: jax.Array  # and its successes
    pending: PlusPending


def init(spec: Any, hp: HParams) -> PlusState:
    f = spec.float_dtype
    php = hp.mode
    own: PlusShapes = spec.mode.shapes
    F = N_LIFT_FEATURES
    features = jnp.asarray(php.features, f)
    return PlusState(
        actions=action_model.init(own.word_dim, own.action_dim, php.action_lambda, f),
        slot_actions=jnp.zeros((spec.capacity, own.action_dim), f),
        null_ring=ring_init((jnp.zeros((own.null_window, spec.dim), f), jnp.zeros((own.null_window,), f))),
        lift_ring=ring_init((jnp.zeros((spec.base_window, F), f),) + tuple(jnp.zeros((spec.base_window,), f)
                                                                             for _ in range(4))),
        retired=Retired(gain=jnp.zeros((), f), var=jnp.zeros((), f)),
        theta=jnp.asarray(php.theta0, f) * features,
        chol=jnp.diag(1 / jnp.sqrt(2 * jnp.asarray(php.lambda_, f))),
        key=jax.random.PRNGKey(jnp.asarray(php.seed, jnp.int32)),
        n_injected=jnp.zeros((), jnp.int32),
        n_abstain=jnp.zeros((), jnp.int32),
        n_tasks=jnp.zeros((), jnp.int32),
        null_n=jnp.zeros((), f),
        null_y=jnp.zeros((), f),
        pending=PlusPending(p0=jnp.full((), 0.5, f), k=jnp.zeros((), f), ky=jnp.zeros((), f), psi=jnp.zeros((F,), f),
                            injected=jnp.zeros((), bool), words=jnp.zeros((own.word_dim,), f)),
    )


def _on(flag: ArrayLike) -> jax.Array:
    return jnp.asarray(flag) > 0.5


def pair_features(cos: jax.Array, s: jax.Array, features: jax.Array) -> jax.Array:
    """ψ = [1, cos, ŝ, four cosine bumps] ⊙ ``features`` (F,); ``cos`` and ``s`` broadcast, output adds an axis F."""
    cos, s = jnp.broadcast_arrays(cos, s)
    lead = (1,) * cos.ndim
    centres = jnp.asarray(BUMP_CENTRES, cos.dtype).reshape(lead + (len(BUMP_CENTRES),))
    bumps = jnp.exp(-((cos[..., None] - centres) ** 2) / (2 * BUMP_WIDTH ** 2))
    psi = jnp.concatenate([jnp.stack([jnp.ones_like(cos), cos, s], axis=-1), bumps], axis=-1)
    return psi * features.reshape(lead + features.shape)


def null_totals(state: PlusState, hp: HParams) -> tuple[jax.Array, jax.Array]:
    """(outcomes, successes) behind the global no-memory rate: the ring's, or with ``null_all`` every
    no-memory outcome so far (the kernel's local part always reads the ring)."""
    valid = ring_valid(state.null_ring)
    y = state.null_ring.data[1]
    ring = jnp.sum(valid).astype(y.dtype), jnp.sum(jnp.where(valid, y, jnp.zeros_like(y)))
    everything = _on(hp.mode.null_all)
    return jnp.where(everything, state.null_n, ring[0]), jnp.where(everything, state.null_y, ring[1])


def _null(state: PlusState, keys: jax.Array, hp: HParams) -> NullStats:
    """The no-memory evidence about P queries (P, D): local kernel sums and the global totals."""
    return null_stats(keys, state.null_ring, hp.mode.bandwidth, null_totals(state, hp))


def _p0(state: PlusState, keys: jax.Array, hp: HParams) -> jax.Array:
    return null_mean(_null(state, keys, hp), hp.mode.p0_prior, hp.mode.p0_strength)


def lift_offsets(rows: tuple[jax.Array, ...], totals: tuple[jax.Array, jax.Array], hp: HParams) -> jax.Array:
    """The offsets of lift rows (the lift ring's data, (N,) each, or one row): logit p̂₀ at select
    time, or with ``reoffset`` against the no-memory ring's current totals (each row's local sums
    as they were at its select time)."""
    php = hp.mode
    _, _, stored, k, ky = rows
    current = logit(null_mean(stored_stats(k, ky, totals), php.p0_prior, php.p0_strength))
    return jnp.where(_on(php.reoffset), current, stored)


def guard_window(state: PlusState, totals: tuple[jax.Array, jax.Array],
                 hp: HParams) -> tuple[jax.Array, jax.Array, jax.Array]:
    """What the no-harm guard counts of the injections in the lift window, in ring order: their
    outcomes y (N,) in {0, 1}, their offsets (N,) against the no-memory rate of ``totals`` and
    their validity (N,). Public so that a trace (``tokenworth_bench.plus.guard_trace``) reads what the guard reads."""
    ring = state.lift_ring
    return (ring.data[1] + 1) / 2, lift_offsets(ring.data, totals, hp), ring_valid(ring)


def choose(state: PlusState, cands: Candidates, hp: HParams) -> tuple[PlusState, Choice]:
    """Rank the K candidates by posterior-mean gain; inject the best unless the decision says "no memory".

    The decision compares two arms, each a draw (Thompson scale) plus an optimism bonus (posterior
    sds) around its posterior: the best candidate, σ(o + θ̃ᵀψ + ``optimism``·‖Lᵀψ‖) with
    θ̃ = θ̂ + ``explore``·Lε, and no memory, σ(o + ``null_explore``·sd₀·ε₀ + ``null_optimism``·sd₀)
    with sd₀ the no-memory arm's own posterior sd (:func:`~.abstain.null_logit_sd`). It injects when
    the first exceeds the second by more than ``margin``."""
    php = hp.mode
    f = state.theta.dtype
    features = jnp.asarray(php.features, f)
    valid = cands.valid
    any_valid = jnp.any(valid)
    cos = jnp.where(valid, cands.relevance, jnp.zeros_like(cands.relevance))
    words = cands.query.features["words"]
    s = action_model.affinity(state.actions, words[None, :], state.slot_actions[cands.slots])[0]  # (K,)
    psi = pair_features(cos, s, features)  # (K, F)
    stats = _null(state, cands.query.key[None, :], hp)
    p0 = null_mean(stats, php.p0_prior, php.p0_strength)[0]
    sd0 = null_logit_sd(stats, php.p0_prior, php.p0_strength)[0]
    o = logit(p0)
    gain = jnp.where(valid, jax.nn.sigmoid(o + psi @ (state.theta * features)) - p0, -jnp.inf)
    best = jnp.where(any_valid, jnp.argmax(gain), -1).astype(jnp.int32)
    chosen = psi[jnp.maximum(best, 0)]
    key, sub = jax.random.split(state.key)
    k_lift, k_null = jax.random.split(sub)
    drawn = thompson(k_lift, state.theta, state.chol, php.explore) * features
    upper = jax.nn.sigmoid(o + chosen @ drawn + php.optimism * jnp.linalg.norm(state.chol.T @ chosen))
    null = jax.nn.sigmoid(o + sd0 * (php.null_explore * jax.random.normal(k_null, (), f) + php.null_optimism))
    propose = upper - null > php.margin
    totals = stats.n, stats.y
    sd_global = null_logit_sd(far_stats(totals, p0[None]), php.p0_prior, php.p0_strength)[0]
    allowance = php.guard_budget + php.guard_rate * (state.n_tasks + 1).astype(f)
    safe = allows(chosen, o, *guard_window(state, totals, hp), state.retired, state.theta * features, state.chol,
                  sd_global, php.guard_sds, allowance)
    measured = state.null_n >= php.null_first  # "no memory" is measured before anything is injected
    inject = any_valid & (~_on(php.abstain) | (measured & propose & (~_on(php.guard) | safe)))
    abstained = any_valid & ~inject
    state = state._replace(
        key=key, n_abstain=state.n_abstain + abstained.astype(jnp.int32), n_tasks=state.n_tasks + 1,
        pending=PlusPending(p0=p0, k=stats.k[0], ky=stats.ky[0], psi=jnp.where(inject, chosen, jnp.zeros_like(chosen)),
                            injected=inject, words=words))
    nan = jnp.full((), jnp.nan, f)
    return state, Choice(index=jnp.where(inject, best, -1).astype(jnp.int32), p0=p0,
                         advantage=jnp.where(any_valid, gain[jnp.maximum(best, 0)], nan), abstained=abstained,
                         scores={"gain": jnp.where(valid, gain, nan), "action model": jnp.where(valid, s, nan)})


def target(state: PlusState, y: jax.Array, s_base: jax.Array, hp: HParams) -> jax.Array:
    """The residual's target: the paper's δ (the paper's learners serve the lifecycle when ``worth`` is 0)."""
    return paper_target(y, s_base)


def _refit(posterior: tuple[jax.Array, jax.Array], ring: Ring, totals: tuple[jax.Array, jax.Array],
           hp: HParams) -> tuple[jax.Array, jax.Array]:
    """(θ̂, L) refitted on the lift window (only the posterior goes through the conditional: it is small)."""
    php = hp.mode
    theta = posterior[0]
    f = theta.dtype
    features = jnp.asarray(php.features, f)
    psi, y = ring.data[:2]
    return fit_by_evidence(psi * features[None, :], y, lift_offsets(ring.data, totals, hp), ring_valid(ring), theta,
                           jnp.asarray(php.theta0, f) * features, jnp.asarray(php.lambda_, f),
                           jnp.asarray(php.adaptive, f), jnp.asarray(php.lambda_grid, f))


def update(state: PlusState, fb: Feedback, hp: HParams) -> PlusState:
    """The judged task: the no-memory ring when nothing was injected (the no-memory arm learns from its
    own arm only); else the lift window and its refit."""
    f = state.theta.dtype
    r = (fb.reward == 1).astype(f)
    pend = state.pending
    n = state.n_injected + fb.selected.astype(jnp.int32)
    none = (~fb.selected).astype(f)
    # the row the push overwrites leaves the window: the guard keeps its gain (against the current rate)
    ring = state.lift_ring
    leaving = fb.selected & ring.is_full
    old = jax.tree_util.tree_map(lambda a: a[ring.idx], ring.data)
    old_offset = lift_offsets(old, null_totals(state, hp), hp)
    state = state._replace(null_ring=ring_push(state.null_ring, (fb.query.key, r), ~fb.selected),
                           null_n=state.null_n + none, null_y=state.null_y + none * r,
                           retired=retire(state.retired, (old[1] + 1) / 2, old_offset, leaving),
                           lift_ring=ring_push(ring, (pend.psi, 2 * r - 1, logit(pend.p0), pend.k, pend.ky),
                                               fb.selected),
                           n_injected=n)
    totals = null_totals(state, hp)
    due = fb.selected & (n % hp.mode.refit_interval == 0)
    theta, chol = gated(due, _refit, lambda post, ring, tot, h: post, (state.theta, state.chol), state.lift_ring,
                        totals, hp)
    return state._replace(theta=theta, chol=chol)


def worth(state: PlusState, probes: Query, scores: Callable[[], ProbeScores], memory: MemoryText,
          created: jax.Array, hp: HParams) -> jax.Array:
    """(P+1, B+1) per-probe worth, by ``worth``: 0, the paper's score; 1, the predicted gain Â(q_p, m)
    with the posterior mean θ̂ (deterministic); 2, recency, the creation step (so the lifecycle
    admits every offered memory and evicts the oldest: a FIFO bank). The last column is ``memory``.
    Only the chosen one is computed (a ``lax.switch``; vmapped with per-configuration choices, all)."""
    php = hp.mode
    f = state.theta.dtype

    def paper() -> jax.Array:
        return scores().score

    def gain() -> jax.Array:
        features = jnp.asarray(php.features, f)
        acts = jnp.concatenate([state.slot_actions, memory.features["actions"][None, :]], axis=0)  # (B+1, A)
        psi = pair_features(scores().cos, action_model.affinity(state.actions, probes.features["words"], acts),
                            features)
        p0 = _p0(state, probes.key, hp)  # (P+1,)
        return jax.nn.sigmoid(logit(p0)[:, None] + psi @ (state.theta * features)) - p0[:, None]

    def recency() -> jax.Array:  # > 0, so the offered memory passes the rho_pos gate
        return jnp.broadcast_to(created.astype(f) + 1, (probes.key.shape[0], created.shape[0]))

    return jax.lax.switch(jnp.clip(jnp.asarray(php.worth, jnp.int32), 0, 2), [paper, gain, recency])


def write(state: PlusState, slot: jax.Array, writes: jax.Array, memory: MemoryText, offered: jax.Array) -> PlusState:
    """An offered memory (a judged success): the action model learns (question words → its actions),
    whether or not it is admitted; where it is written, its slot takes its action vector. A memory
    without actions teaches nothing."""
    actions = memory.features["actions"]
    learns = offered & jnp.any(actions != 0)
    s = jnp.maximum(slot, 0)
    return state._replace(actions=action_model.learn(state.actions, state.pending.words, actions, learns),
                          slot_actions=state.slot_actions.at[s].set(jnp.where(writes, actions, state.slot_actions[s])))


NAME = "tokenworth+"


def plus(**shapes: int) -> Mode[PlusState]:
    """The TokenWorth+ mode, with its shape fields (:class:`PlusShapes`: ``null_window``, ``word_dim``,
    ``action_dim``) where given. It reads the question's words and the memory's actions.

    Args:
        **shapes: TokenWorth+'s shape fields by name (``null_window``, ``word_dim``, ``action_dim``); the rest
            keep their defaults.

    Returns:
        Mode: the TokenWorth+ mode, named ``"tokenworth+"`` (the preset table's value for those shapes).
    """
    own = PlusShapes(**shapes)
    return Mode(name=NAME, init=init, choose=choose, target=target, update=update, worth=worth, write=write,
                shapes=own, hparams=SCHEMA,
                features=(Feature("words", "query", own.word_dim, word_vector, "the question's words"),
                          Feature("actions", "memory", own.action_dim, action_vector, "the memory's actions")))
