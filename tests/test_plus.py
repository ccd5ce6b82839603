"""TokenWorth+ (tw.preset(method="tokenworth+")): its parts (action model, lift model and evidence, choice), the
mode in the controller on every path, its hyperparameters and its inputs."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenworth_jax as tw
from tokenworth_jax.config import flatten, hparams_from_arrays
from tokenworth_jax.modes import Candidates
from tokenworth_jax.plus import actions as action_model
from tokenworth_jax.plus.abstain import null_probability
from tokenworth_jax.plus.lift import fit_by_evidence, newton_fit, thompson
from tokenworth_jax.plus.config import N_LIFT_FEATURES as F
from tokenworth_jax.plus.mode import choose
from tokenworth_jax.plus.text import action_vectors, unit_features, word_vectors
from tokenworth_jax.ring import ring_init, ring_push

from tests.controller_helpers import FAST_SCHEDULE, SMALL_SPEC, clustered_stream, precision

WORDS, ACTIONS = 16, 8
# The streams that tw.run runs at setup()'s spec: one length, so that every test of this module running the plain
# program (no reward_fn) at that spec and dtype reuses its one compile (a new length is a new program). 70 tasks:
# the bank (capacity 6) is full for most of the stream, and every refit interval of FAST_SCHEDULE recurs often.
T_RUN = 70
# The lift model's fits and the choice, compiled once each (per shape) as the controller runs them inside its programs;
# called eagerly, every call traced the fits' loops and vmaps anew (a fresh closure each time), and the choice ran as
# a hundred one-op programs.
fit_jit, newton_jit, thompson_jit, choose_jit = map(jax.jit, (fit_by_evidence, newton_fit, thompson, choose))


def setup(plus: bool = True, incremental: bool = False, dtype: str = "float32", **overrides):
    mode = tw.plus_mode(null_window=10, word_dim=WORDS, action_dim=ACTIONS) if plus else tw.paper_mode()
    spec = tw.Spec(**SMALL_SPEC, mode=mode, scorer=tw.scorers.incremental() if incremental else tw.scorers.full(),
                   dtype=dtype)
    return spec, tw.hparams("db", mode=spec.mode, scorer=spec.scorer, dtype=spec.float_dtype,
                            **{**FAST_SCHEDULE, **overrides})


def with_plus(hp, **changes):
    """``hp`` with TokenWorth+ leaves replaced (by field)."""
    return hp._replace(mode=hp.mode._replace(**{k: jnp.asarray(v, getattr(hp.mode, k).dtype) for k, v in changes.items()}))


def events(seed: int = 0, T: int = 80, dtype=jnp.float32):
    """A clustered stream whose memories' actions depend on their cluster (so the action model has something to learn)."""
    q, m, r = clustered_stream(seed, T, SMALL_SPEC["dim"])
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, WORDS))
    a = np.tanh(x[:, :ACTIONS] + 0.3 * rng.normal(size=(T, ACTIONS)))
    unit = lambda v: jnp.asarray(v / np.linalg.norm(v, axis=1, keepdims=True), dtype)  # noqa: E731
    return tw.Event(query=tw.Query(jnp.asarray(q, dtype), {"words": unit(x)}), reward=jnp.asarray(r),
                    memory=tw.MemoryText(jnp.asarray(m, dtype), {"actions": unit(a)}),
                    memory_id=jnp.arange(T, dtype=jnp.int32))


# ------------------------------------------------------------------ the mode and its inputs
def test_the_two_methods_are_two_pairs_of_the_preset_table():
    spec, hp = tw.preset("db")
    assert (spec.scorer.name, spec.mode.name) == ("full", "paper")
    assert tw.init(spec, hp).mode == tw.Empty() and hp.mode == tw.Empty()
    pspec, php = tw.preset("db", method="tokenworth+")
    assert (pspec.scorer.name, pspec.mode.name) == ("full", "tokenworth+") and isinstance(php.mode, tw.PlusHParams)
    assert pspec.mode == tw.plus_mode() and pspec.mode.shapes.word_dim == 512  # a value: equal when rebuilt
    assert tw.controller(pspec.scorer, pspec.mode) is tw.controller(tw.scorers.full(), tw.plus_mode())  # built once
    with pytest.raises(ValueError, match="needs its hyperparameters"):
        tw.init(spec._replace(mode=tw.plus_mode()), hp)
    with pytest.raises(ValueError, match="the mode 'paper' has none"):
        tw.Controller(spec, php)


def test_plus_mode_needs_the_words_and_the_actions():
    spec, hp = setup()
    state = tw.init(spec, hp)
    ev = jax.tree_util.tree_map(lambda x: x[0], events())
    with pytest.raises(ValueError, match=r"reads the question's words \(query feature 'words', 16 wide\)"):
        tw.select(state, ev.query.key, hp, spec)
    with pytest.raises(ValueError, match="query feature 'words' must have shape"):
        tw.select(state, tw.Query(ev.query.key, {"words": jnp.zeros(WORDS + 1)}), hp, spec)
    state, _ = tw.select(state, ev.query, hp, spec)
    with pytest.raises(ValueError, match="reads the memory's actions"):
        tw.finish_task(state, 1, ev.memory.key, 0, True, hp, spec)


def test_host_hashes_words_and_actions_and_refuses_a_bare_vector():
    ctl = tw.Controller.from_preset("db", method="tokenworth+", spec_overrides=dict(capacity=4))
    with pytest.raises(ValueError, match="words="):
        ctl.select(np.ones(512))
    for i in range(3):
        ctl.select(f"how many rows of table t{i} are open")
        ctl.observe(1)
        ctl.offer("a memory", key_text=f"how many rows of table t{i} are open",
                  actions=f"SELECT COUNT(*) FROM t{i} WHERE open = 1")
    sel = ctl.select("how many rows of table t9 are open")
    assert len(sel.scorers["gain"]) == len(sel.candidate_ids) == len(sel.scorers["action model"]) == 3
    assert sel.as_dict()["scorers"] == sel.scorers
    assert int(ctl.state.mode.actions.n) == 3  # every offer taught the action model


# ------------------------------------------------------------------ the action model
def test_recursive_least_squares_equals_the_batch_ridge_solution_and_disabled_steps_are_identity():
    rng = np.random.default_rng(0)
    X, A, on = rng.normal(size=(40, 16)), rng.normal(size=(40, 8)), rng.random(40) < 0.7
    with precision("float64"):
        model = action_model.init(16, 8, 0.5, jnp.float64)
        for x, a, enabled in zip(X, A, on):
            before = model
            model = action_model.learn(model, jnp.asarray(x), jnp.asarray(a), jnp.asarray(bool(enabled)))
            if not enabled:
                for b, m in zip(before[:2], model[:2]):
                    np.testing.assert_array_equal(np.asarray(b), np.asarray(m))
        M = np.linalg.solve(X[on].T @ X[on] + 0.5 * np.eye(16), X[on].T @ A[on])  # only the enabled pairs
        assert int(model.n) == int(on.sum())
        np.testing.assert_allclose(np.asarray(model.M), M, atol=1e-9)


def test_action_model_ranks_the_memory_whose_actions_the_words_predict():
    """Trained on (question, actions) pairs, the affinity prefers the memory with the predicted
    actions even when another memory's question shares more words with the query."""
    pairs = [("how many rows have status open", "SELECT COUNT(*) FROM t WHERE status = 'open'"),
             ("how many orders were late", "SELECT COUNT(*) FROM orders WHERE late = 1"),
             ("list the names sorted by age", "SELECT name FROM p ORDER BY age"),
             ("list the cities sorted by size", "SELECT city FROM c ORDER BY size")] * 3
    model = action_model.init(512, 256, 1.0, jnp.float32)
    for q, a in pairs:
        model = action_model.learn(model, jnp.asarray(word_vectors(q)), jnp.asarray(action_vectors(a)), jnp.asarray(True))
    query = jnp.asarray(word_vectors("how many cities are sorted here"))
    counting, sorting = action_vectors(["SELECT COUNT(*) FROM x WHERE y = 2", "SELECT z FROM x ORDER BY w"])
    s = action_model.affinity(model, query[None], jnp.asarray(np.stack([counting, sorting])))[0]
    assert float(s[0]) > float(s[1])


def test_word_and_action_features_are_units_and_bigrams_presence_only():
    feats = unit_features("GROUP BY a, b GROUP BY", actions=True)
    assert feats[:3] == ["w:group", "w:by", "w:a"] and "w:," in feats and "b:group by" in feats
    assert len(feats) == len(set(feats)) and "w:," not in unit_features("a, b")
    v = word_vectors("Which customers?")
    assert v.shape == (512,) and abs(float(np.linalg.norm(v)) - 1) < 1e-6
    assert not np.any(word_vectors("")) and action_vectors(["x", "y"]).shape == (2, 256)


# ------------------------------------------------------------------ the lift model
def _window(psi: np.ndarray, y: np.ndarray) -> tuple[jax.Array, ...]:
    return (jnp.asarray(psi, jnp.float32), jnp.asarray(y, jnp.float32), jnp.zeros(len(y), jnp.float32),
            jnp.ones(len(y), bool))


@pytest.mark.parametrize("signal", [True, False])
def test_evidence_frees_a_feature_only_when_the_rewards_support_it(signal: bool):
    rng = np.random.default_rng(1)
    n = 256
    bump = (rng.random(n) < 0.5).astype(float)
    logits = (-2.0 * bump) if signal else np.zeros(n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-logits)), 1.0, -1.0)
    psi = np.zeros((n, F))
    psi[:, 0], psi[:, 3] = 1.0, bump
    lam, zeros = jnp.ones(F), jnp.zeros(F)
    adaptive = jnp.asarray([0, 0, 0, 1, 1, 1, 1], jnp.float32)
    grid = jnp.asarray([1.0, 3.0, 10.0, 30.0, 100.0])
    theta, chol = fit_jit(*_window(psi, y), zeros, zeros, lam, adaptive, grid)
    free, _ = newton_jit(*_window(psi, y), zeros, zeros, lam)
    assert np.all(np.isfinite(np.asarray(chol)))
    if signal:  # a strong effect: the smallest ridge wins and the weight is learned
        assert float(theta[3]) < -1.0 and abs(float(theta[3]) - float(free[3])) < 1e-3
    else:  # no effect: shrunk harder than the plain ridge fit
        assert abs(float(theta[3])) < abs(float(free[3]))


def test_thompson_is_deterministic_per_key_and_scales():
    theta, chol, key = jnp.asarray([0.1, 0.2, 0.3]), jnp.eye(3) * 0.5, jax.random.PRNGKey(3)
    np.testing.assert_array_equal(np.asarray(thompson(key, theta, chol, 1.0)), np.asarray(thompson(key, theta, chol, 1.0)))
    np.testing.assert_array_equal(np.asarray(thompson(key, theta, chol, 0.0)), np.asarray(theta))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 12), bandwidth=st.floats(1e-3, 10.0),
       strength=st.floats(1e-3, 100.0), prior=st.floats(0.01, 0.99))
def test_p0_stays_finite_and_in_unit_interval(seed, n, bandwidth, strength, prior):
    rng = np.random.default_rng(seed)
    ring = ring_init((jnp.zeros((8, 5)), jnp.zeros((8,))))
    for _ in range(n):
        v = rng.normal(size=5)
        ring = ring_push(ring, (jnp.asarray(v / np.linalg.norm(v), jnp.float32), jnp.float32(rng.integers(0, 2))))
    q = rng.normal(size=(4, 5))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    p0 = np.asarray(null_probability(jnp.asarray(q, jnp.float32), ring, prior, strength, bandwidth))
    assert np.all(np.isfinite(p0)) and np.all((p0 > 0) & (p0 < 1))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 30), lam=st.floats(1e-3, 10.0), scale=st.floats(0.0, 10.0),
       separable=st.booleans())
def test_posterior_stays_finite(seed, n, lam, scale, separable):
    rng = np.random.default_rng(seed)
    psi = np.concatenate([np.ones((30, 1)), rng.normal(size=(30, F - 1)) * 5], axis=1)
    y = np.where(psi[:, 1] > 0, 1.0, -1.0) if separable else rng.choice([-1.0, 1.0], size=30)
    offset = rng.normal(size=30) * 4
    valid = np.arange(30) < n
    zeros = jnp.zeros(F)
    theta, chol = fit_jit(jnp.asarray(psi, jnp.float32), jnp.asarray(y, jnp.float32),
                          jnp.asarray(offset, jnp.float32), jnp.asarray(valid), zeros, zeros,
                          jnp.full((F,), lam, jnp.float32), jnp.asarray([0, 0, 0, 1, 1, 1, 1.0]),
                          jnp.asarray([1.0, 3.0, 10.0, 30.0, 100.0]))
    draw = thompson_jit(jax.random.PRNGKey(seed), theta, chol, scale)
    for arr in (theta, chol, draw):
        assert np.all(np.isfinite(np.asarray(arr)))


# ------------------------------------------------------------------ choosing
def _candidates(words: jax.Array) -> Candidates:
    return Candidates(query=tw.Query(jnp.zeros(SMALL_SPEC["dim"]).at[0].set(1.0), {"words": words}),
                      slots=jnp.asarray([0, 1, 2], jnp.int32), relevance=jnp.asarray([0.5, 0.2, 0.9]),
                      valid=jnp.asarray([True, True, False]), score=jnp.asarray([1.0, 0.1, -jnp.inf]),
                      base=jnp.zeros(3))


def test_choose_prefers_the_predicted_procedure_and_abstains_only_on_evidence_of_harm():
    spec, defaults = setup()
    state = tw.init(spec, defaults).mode
    # the action model maps word 0 to action 0; slot 1's memory shows action 0, slot 0's action 1
    state = state._replace(actions=state.actions._replace(M=jnp.zeros((WORDS, ACTIONS)).at[0, 0].set(1.0)),
                           slot_actions=state.slot_actions.at[1, 0].set(1.0).at[0, 1].set(1.0))
    cands = _candidates(jnp.zeros(WORDS).at[0].set(1.0))
    # by default nothing is injected before "no memory" has been measured (plus_null_first outcomes)
    assert int(choose_jit(state, cands, defaults)[1].index) == -1
    # the first rule (no floor, no guard): posterior means ranked, an upper bound on the gain decides, no floor, no guard
    hp = with_plus(defaults, null_first=0.0, explore=0.0, null_explore=0.0, optimism=1.0, margin=-0.05, guard=0.0)
    _, choice = choose_jit(state, cands, hp)
    assert int(choice.index) == 1 and np.isnan(float(choice.scores["gain"][2]))  # affinity beats cosine; invalid never chosen
    harmful = state._replace(theta=jnp.asarray([-6.0, 1.0, 2.0, 0, 0, 0, 0]), chol=jnp.eye(F) * 0.01)
    _, choice = choose_jit(harmful, cands, hp)
    assert int(choice.index) == -1 and bool(choice.abstained) and float(choice.advantage) < 0
    no_abstain = with_plus(hp, abstain=0.0)
    assert int(choose_jit(harmful, cands, no_abstain)[1].index) == 1
    unsure = harmful._replace(chol=jnp.eye(F) * 10.0)  # the same mean, little evidence: optimism injects
    assert int(choose_jit(unsure, cands, hp)[1].index) == 1
    greedy = with_plus(hp, optimism=0.0)
    assert int(choose_jit(unsure, cands, greedy)[1].index) == -1


# ------------------------------------------------------------------ the mode in the controller
def test_fifo_lifecycle_admits_every_offer_and_evicts_the_oldest():
    spec, hp = setup()
    assert int(hp.mode.worth) == 2  # the default bank is FIFO (docs/ranking-research.md)
    ev = events(1, T=T_RUN)
    ev = ev._replace(reward=jnp.ones_like(ev.reward))  # every task succeeds, so every task offers its memory
    _, out = tw.run(tw.init(spec, hp), ev, hp, spec)
    codes = np.asarray(out.decision.code)
    admitted = {tw.Admission.ADMITTED_ROOM, tw.Admission.ADMITTED_NOVEL, tw.Admission.ADMITTED_WORTH}
    assert set(codes.tolist()) <= {int(a) for a in admitted}  # never rejected, self-evicted or a replacement
    evicted = np.asarray(out.decision.evicted_id)
    full = evicted >= 0
    np.testing.assert_array_equal(evicted[full], np.arange(int(full.sum())))  # the oldest first, in order


def test_each_lifecycle_worth_runs_and_only_recency_skips_the_paper_probe_scores():
    spec, hp = setup()
    ev = events(2, T=T_RUN)
    outs = {}
    for worth in (0, 1, 2):
        h = with_plus(hp, worth=worth)
        _, out = tw.run(tw.init(spec, h), ev, h, spec)
        outs[worth] = np.asarray(out.decision.code)
    assert len({tuple(c) for c in outs.values()}) == 3  # three different lifecycles

    def kernels(jaxpr) -> int:  # exp of the Laplacian kernel: KRR predictions over probe x bank
        from tests.test_transforms import _eqns
        return sum(e.primitive.name == "exp" and e.outvars[0].aval.shape[-1:] == (spec.fast_window,)
                   for e in _eqns(jaxpr.jaxpr))

    ev0 = jax.tree_util.tree_map(lambda x: x[0], ev)
    jaxpr = jax.make_jaxpr(lambda s, h: tw.step(s, ev0, h, spec))(tw.init(spec, hp), hp)
    # the switch holds the paper's probe scores in its score branch only
    switches = [e for e in __import__("tests.test_transforms", fromlist=["_eqns"])._eqns(jaxpr.jaxpr)
                if e.primitive.name == "cond" and len(e.params["branches"]) == 3]
    assert switches and kernels(switches[0].params["branches"][2]) == 0 < kernels(switches[0].params["branches"][0])


@pytest.mark.parametrize("strategy", ["vmap", "map"])
def test_batched_equals_loop(strategy):
    ev = events(2, T=T_RUN)
    spec, _ = setup()
    hps = [setup(plus_margin=m, plus_optimism=o, plus_seed=k)[1] for m, o, k in [(0.0, 1.0, 0), (0.05, 0.0, 1),
                                                                                  (-0.02, 2.0, 2)]]
    stacked = tw.stack_hparams(hps)
    _, outb = tw.run_batched(jax.vmap(functools.partial(tw.init, spec))(stacked), ev, stacked, spec, strategy=strategy)
    for i, hp in enumerate(hps):
        _, out = tw.run(tw.init(spec, hp), ev, hp, spec)
        np.testing.assert_array_equal(np.asarray(outb.selection.chosen[i]), np.asarray(out.selection.chosen))
        np.testing.assert_array_equal(np.asarray(outb.decision.code[i]), np.asarray(out.decision.code))
        np.testing.assert_allclose(np.asarray(outb.selection.mode_scores["gain"][i]),
                                   np.asarray(out.selection.mode_scores["gain"]),
                                   rtol=1e-3, atol=1e-3)


def test_new_values_do_not_recompile():
    ev = events(3, T=T_RUN)
    spec, hp = setup()
    tw.run(tw.init(spec, hp), ev, hp, spec)
    run = tw.controller(spec.scorer, spec.mode).run
    size = run._cache_size()
    for k, v in [("plus_margin", 0.1), ("plus_optimism", 0.0), ("plus_lambda", 3.0), ("plus_bandwidth", 0.2),
                 ("plus_seed", 7), ("plus_worth", 0), ("plus_refit_interval", 3),
                 ("plus_theta0", (0.5, 1.0, -1.0, 0, 0, 0, 0))]:
        hp2 = tw.hparams("db", mode="tokenworth+", **{**FAST_SCHEDULE, k: v})
        tw.run(tw.init(spec, hp2), ev, hp2, spec)
    assert run._cache_size() == size


def test_incremental_worth_equals_full_in_plus_mode():
    """The incremental scorer with TokenWorth+'s mode: the same decisions as the full worth (float64), with the
    lifecycle reading the paper's scores (worth 0) and the predicted gain (worth 1)."""
    with precision("float64"):
        ev = events(4, 90, jnp.float64)
        for worth in (0, 1):
            outs = []
            for incremental in (False, True):
                spec, hp = setup(incremental=incremental, dtype="float64", plus_worth=worth)
                outs.append(tw.run(tw.init(spec, hp), ev, hp, spec))
            (s_full, full), (s_inc, inc) = outs
            assert int(jnp.sum(full.decision.code >= 2)) > 0  # the bank was full
            for name in ("chosen", "slot", "memory_id"):
                np.testing.assert_array_equal(np.asarray(getattr(inc.selection, name)),
                                              np.asarray(getattr(full.selection, name)))
            for name in ("code", "slot", "evicted_id"):
                np.testing.assert_array_equal(np.asarray(getattr(inc.decision, name)),
                                              np.asarray(getattr(full.decision, name)))
            np.testing.assert_allclose(np.asarray(s_inc.mode.theta), np.asarray(s_full.mode.theta), rtol=1e-9,
                                       atol=1e-12)


def test_plus_hparams_are_validated_by_flat_name():
    with pytest.raises(ValueError, match="plus_theta0"):
        tw.hparams("db", mode="tokenworth+", plus_theta0=(1.0, 2.0))
    with pytest.raises(ValueError, match="plus_p0_prior"):
        tw.hparams("db", mode="tokenworth+", plus_p0_prior=1.0)
    with pytest.raises(ValueError, match="plus_worth"):
        tw.hparams("db", mode="tokenworth+", plus_worth=3)
    with pytest.raises(ValueError, match="plus_refit_interval"):
        tw.hparams("db", mode="tokenworth+", plus_refit_interval=0)
    assert tw.hparams("db", mode="tokenworth+", plus_lambda=2.0).mode.lambda_.shape == (F,)  # a scalar ridge is broadcast


def test_checkpoint_hparams_round_trip_by_flat_name_with_and_without_plus():
    for plus in (False, True):
        spec, hp = tw.preset("db", method="tokenworth+" if plus else "tokenworth")
        flat = {k: np.asarray(v) for k, v in flatten(hp, spec.parts).items()}
        assert any(k.startswith("plus_") for k in flat) == plus
        loaded = hparams_from_arrays(flat, spec.parts)
        for a, b in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(hp)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            assert np.asarray(a).dtype == np.asarray(b).dtype
        assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(hp)
    with pytest.raises(ValueError, match="missing"):
        hparams_from_arrays({k: v for k, v in flat.items() if k != "plus_margin"}, spec.parts)


def test_plus_shapes_are_checked_and_features_follow_them():
    with pytest.raises(ValueError, match=r"PlusShapes\.word_dim = 0"):
        tw.plus_mode(word_dim=0)
    with pytest.raises(ValueError, match=r"PlusShapes\.null_window = 2.5 must be an integer"):
        tw.plus_mode(null_window=2.5)
    mode = tw.plus_mode(word_dim=32, action_dim=8)
    assert {(f.name, f.side, f.size) for f in mode.features} == {("words", "query", 32), ("actions", "memory", 8)}


def test_checked_mode_accepts_a_plus_state():
    """tw.checked flags every non-finite state leaf: the plus state has none."""
    ev = events(5, T=30)
    spec, hp = setup(plus_null_first=0.0)  # 30 tasks: inject without first measuring "no memory" 50 times
    state, out = tw.checked.run(tw.init(spec, hp), ev, hp, spec)
    assert int(jnp.sum(out.selection.chosen >= 0)) > 0 and int(state.mode.actions.n) > 0
