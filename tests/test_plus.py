"""TokenWorth+ (Spec(plus=True), docs/tokenworth-plus.md): equivalence with the paper when its
parts are off, transforms, no recompiles, hand-checkable rules, and finiteness properties."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenworth_jax as tw
from tests.controller_helpers import FAST_SCHEDULE, SMALL_SPEC, clustered_stream
from tokenworth_jax.config import flatten, hparams_from_arrays
from tokenworth_jax.plus.abstain import null_probability
from tokenworth_jax.plus.lift import lift_fit, thompson
from tokenworth_jax.ring import ring_init, ring_push

OFF = dict(plus_rank=0.0, plus_abstain=0.0, plus_advantage=0.0, plus_worth=0.0)


def setup(plus: bool = True, incremental: bool = False, **overrides):
    spec = tw.Spec(**SMALL_SPEC, plus=plus, null_window=10, incremental=incremental)
    return spec, tw.hparams("db", plus=plus, **{**FAST_SCHEDULE, **overrides})


def with_plus(hp, **flat):
    """``hp`` with TokenWorth+ values changed by flat name (``plus_margin=...``)."""
    return hparams_from_arrays({**flatten(hp), **{k: jnp.asarray(v) for k, v in flat.items()}})


def events(seed: int = 0, T: int = 80):
    q, m, r = clustered_stream(seed, T, SMALL_SPEC["dim"])
    return tw.Event(query=jnp.asarray(q, jnp.float32), reward=jnp.asarray(r), memory=jnp.asarray(m, jnp.float32),
                    memory_id=jnp.arange(T, dtype=jnp.int32))


def test_paper_mode_has_no_plus_state_and_mismatches_are_refused():
    spec, hp = tw.preset("db")
    assert not spec.plus and tw.init(spec, hp).mode == tw.Empty() and hp.plus == tw.Empty()
    with pytest.raises(ValueError, match="needs TokenWorth\\+ hyperparameters"):
        tw.init(spec._replace(plus=True), hp)
    with pytest.raises(ValueError, match="Spec.plus is False"):
        tw.Controller(spec, tw.hparams("db", plus=True))
    with pytest.raises(ValueError, match="pass plus=True"):
        tw.hparams("db", plus_margin=0.1)


@pytest.mark.parametrize("seed,incremental", [(0, False), (1, False), (0, True)])
def test_switched_off_equals_paper_decision_for_decision(seed, incremental):
    ev = events(seed)
    spec0, hp0 = setup(plus=False, incremental=incremental)
    spec1, hp1 = setup(plus=True, incremental=incremental, plus_explore=1.0, **OFF)
    s0, out0 = tw.run(tw.init(spec0, hp0), ev, hp0, spec0)
    s1, out1 = tw.run(tw.init(spec1, hp1), ev, hp1, spec1)
    # the stream is long enough to exercise every admission path and refit
    assert int(s0.residual.n_fits) > 3 and int(s0.residual.n_agop) > 0
    # everything but the mode's own estimates (which the paper mode does not make)
    estimates = dict(p0=out1.selection.p0, advantage=out1.selection.advantage, abstained=out1.selection.abstained)
    assert np.all(np.isnan(np.asarray(out0.selection.p0))) and not np.any(np.asarray(out1.selection.abstained))
    out0 = out0._replace(selection=out0.selection._replace(**estimates))
    for a, b in zip(jax.tree_util.tree_leaves(out0), jax.tree_util.tree_leaves(out1)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(jax.tree_util.tree_leaves(s0._replace(mode=tw.Empty())),
                    jax.tree_util.tree_leaves(s1._replace(mode=tw.Empty()))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_each_switch_changes_something():
    ev = events(0)
    spec, hp_off = setup(**OFF)
    _, ref = tw.run(tw.init(spec, hp_off), ev, hp_off, spec)
    for name in OFF:
        hp = with_plus(hp_off, **{name: 1.0})
        _, out = tw.run(tw.init(spec, hp), ev, hp, spec)
        differs = any(not np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
                      for a, b in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(out)))
        assert differs, name


@pytest.mark.parametrize("strategy", ["vmap", "map"])
def test_batched_equals_loop(strategy):
    ev = events(2, T=50)
    spec, _ = setup()
    hps = [setup(plus_margin=m, plus_explore=e, plus_seed=k)[1] for m, e, k in [(0.0, 1.0, 0), (0.05, 0.0, 1),
                                                                                (-0.02, 2.0, 2)]]
    stacked = tw.stack_hparams(hps)
    _, outb = tw.run_batched(jax.vmap(functools.partial(tw.init, spec))(stacked), ev, stacked, spec, strategy=strategy)
    for i, hp in enumerate(hps):
        _, out = tw.run(tw.init(spec, hp), ev, hp, spec)
        np.testing.assert_array_equal(np.asarray(outb.selection.chosen[i]), np.asarray(out.selection.chosen))
        np.testing.assert_array_equal(np.asarray(outb.decision.code[i]), np.asarray(out.decision.code))
        # float32 scores: batched refits round differently (the project's float32 score tolerance, 1e-3)
        np.testing.assert_allclose(np.asarray(outb.selection.scores[i]), np.asarray(out.selection.scores),
                                   rtol=1e-3, atol=1e-3)


def test_new_values_do_not_recompile():
    ev = events(3, T=20)
    spec, hp = setup()
    tw.run(tw.init(spec, hp), ev, hp, spec)
    size = tw.run._cache_size()
    for k, v in [("plus_margin", 0.1), ("plus_explore", 0.0), ("plus_lambda", 3.0), ("plus_bandwidth", 0.2),
                 ("plus_seed", 7), ("plus_rank", 0.0), ("plus_theta0", (0.5, 1.0, -1.0))]:
        hp2 = tw.hparams("db", plus=True, **{**FAST_SCHEDULE, k: v})
        tw.run(tw.init(spec, hp2), ev, hp2, spec)
    assert tw.run._cache_size() == size


def _bank_of_three(hp, spec):
    """A controller whose bank holds three memories (tasks 0-2 succeeded)."""
    rng = np.random.default_rng(5)
    vecs = rng.normal(size=(4, spec.dim))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    state = tw.init(spec, hp)
    for i in range(3):
        state, _ = tw.select(state, jnp.asarray(vecs[i], jnp.float32), hp, spec)
        state = tw.observe(state, 1, hp, spec)
        state, dec = tw.offer(state, jnp.asarray(vecs[i], jnp.float32), i, hp, spec)
        state = tw.end_task(state, spec)
    assert int(jnp.sum(state.bank.valid)) == 3
    return state, jnp.asarray(vecs[3], jnp.float32)


def test_abstains_when_every_candidate_is_predicted_harmful():
    spec, hp = setup(plus_explore=0.0)
    state, q = _bank_of_three(hp, spec)
    # lift weights: intercept -5 log-odds whatever the candidate -> every gain < 0
    state = state._replace(mode=state.mode._replace(theta=jnp.asarray([-5.0, 0.0, 0.0])))
    state, sel = tw.select(state, q, hp, spec)
    assert int(sel.chosen) == -1 and int(sel.memory_id) == -1
    assert bool(state.mode.pending.abstained) and float(state.mode.pending.gain) < 0
    assert not bool(state.pending.selected)


def test_injects_when_one_candidate_clearly_helps():
    spec, hp = setup(plus_explore=0.0, plus_rank=1.0)
    state, q = _bank_of_three(hp, spec)
    slot = 1  # this memory has helped on 10 earlier uses (mean advantage ~ 0.45)
    plus = state.mode._replace(theta=jnp.asarray([-1.0, 0.0, 10.0]),
                               adv_sum=state.mode.adv_sum.at[slot].set(5.0), adv_n=state.mode.adv_n.at[slot].set(10.0))
    state, sel = tw.select(state._replace(mode=plus), q, hp, spec)
    assert int(sel.slot) == slot and int(sel.memory_id) == int(state.bank.ids[slot])
    assert float(state.mode.pending.gain) > 0.1 and float(state.mode.pending.p0) < 0.9


def test_baseline_moves_on_abstained_tasks():
    spec, hp = setup(plus_explore=0.0)
    state, q = _bank_of_three(hp, spec)
    state = state._replace(mode=state.mode._replace(theta=jnp.asarray([-5.0, 0.0, 0.0])))
    before = float(null_probability(q[None], state.mode.null_ring, hp.plus.p0_prior, hp.plus.p0_strength,
                                    hp.plus.bandwidth)[0])
    n_feedback, n_lift = int(state.clock.n_feedback), int(state.mode.lift_ring.idx)
    for reward, direction in [(1, 1.0), (0, -1.0)]:
        state, sel = tw.select(state, q, hp, spec)
        assert int(sel.chosen) == -1
        state = tw.observe(state, reward, hp, spec)
        state = tw.end_task(state, spec)
        after = float(null_probability(q[None], state.mode.null_ring, hp.plus.p0_prior, hp.plus.p0_strength,
                                       hp.plus.bandwidth)[0])
        assert (after - before) * direction > 0.05
        before = after
    # abstained tasks never touch the injected-feedback windows
    assert int(state.clock.n_feedback) == n_feedback and int(state.mode.lift_ring.idx) == n_lift


def test_injected_feedback_trains_the_lift_model():
    spec, hp = setup(plus_explore=0.0, plus_abstain=0.0)
    state, q = _bank_of_three(hp, spec)
    theta0 = np.asarray(state.mode.theta)
    n0, null0 = int(state.mode.lift_ring.idx), int(state.mode.null_ring.idx)
    state, sel = tw.select(state, q, hp, spec)
    uses = float(state.mode.adv_n[int(sel.slot)])
    state = tw.observe(state, 0, hp, spec)
    assert int(state.mode.lift_ring.idx) == n0 + 1 and int(state.mode.null_ring.idx) == null0
    assert float(state.mode.adv_n[int(sel.slot)]) == uses + 1
    assert float(state.mode.theta[0]) < theta0[0]  # a failure lowers the intercept


def test_thompson_is_deterministic_per_key_and_scales():
    theta = jnp.asarray([0.1, 0.2, 0.3])
    chol = jnp.eye(3) * 0.5
    key = jax.random.PRNGKey(3)
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


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 30), lam=st.floats(1e-3, 10.0), scale=st.floats(0.0, 10.0),
       separable=st.booleans())
def test_posterior_stays_finite(seed, n, lam, scale, separable):
    rng = np.random.default_rng(seed)
    psi = np.concatenate([np.ones((30, 1)), rng.normal(size=(30, 2)) * 5], axis=1)
    y = np.where(psi[:, 1] > 0, 1.0, -1.0) if separable else rng.choice([-1.0, 1.0], size=30)
    offset = rng.normal(size=30) * 4
    valid = np.arange(30) < n
    theta, chol = lift_fit(jnp.asarray(psi, jnp.float32), jnp.asarray(y, jnp.float32), jnp.asarray(offset, jnp.float32),
                           jnp.asarray(valid), jnp.zeros(3), jnp.zeros(3), jnp.float32(lam))
    draw = thompson(jax.random.PRNGKey(seed), theta, chol, scale)
    for arr in (theta, chol, draw):
        assert np.all(np.isfinite(np.asarray(arr)))


def test_plus_hparams_are_validated():
    with pytest.raises(ValueError, match="plus_theta0"):
        tw.hparams("db", plus=True, plus_theta0=(1.0, 2.0))
    with pytest.raises(ValueError, match="plus_p0_prior"):
        tw.hparams("db", plus=True, plus_p0_prior=1.0)
    with pytest.raises(ValueError, match="plus_explore"):
        tw.hparams("db", plus=True, plus_explore=-1.0)


def test_incremental_worth_equals_full_in_plus_mode():
    """Spec.incremental with Spec.plus: same decisions as the full worth (float64), scores to rounding."""
    from tests.controller_helpers import precision

    with precision("float64"):
        q, m, r = clustered_stream(4, 90, SMALL_SPEC["dim"])
        ev = tw.Event(query=jnp.asarray(q), reward=jnp.asarray(r), memory=jnp.asarray(m),
                      memory_id=jnp.arange(90, dtype=jnp.int32))
        hp = tw.hparams("db", plus=True, dtype=jnp.float64, **FAST_SCHEDULE)
        outs = []
        for incremental in (False, True):
            spec = tw.Spec(**SMALL_SPEC, dtype="float64", plus=True, null_window=10, incremental=incremental)
            state, out = tw.run(tw.init(spec, hp), ev, hp, spec)
            outs.append((state, out))
        (s_full, full), (s_inc, inc) = outs
        assert int(s_full.mode.n_abstain) > 0 and int(jnp.sum(full.decision.code >= 2)) > 0  # abstains, bank full
        for name in ("chosen", "slot", "memory_id"):
            np.testing.assert_array_equal(np.asarray(getattr(inc.selection, name)), np.asarray(getattr(full.selection, name)))
        for name in ("code", "slot", "evicted_id"):
            np.testing.assert_array_equal(np.asarray(getattr(inc.decision, name)), np.asarray(getattr(full.decision, name)))
        np.testing.assert_allclose(np.asarray(inc.decision.v_new), np.asarray(full.decision.v_new), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.asarray(s_inc.mode.theta), np.asarray(s_full.mode.theta), rtol=1e-9, atol=1e-12)


def test_checkpoint_hparams_round_trip_by_flat_name_with_and_without_plus():
    for plus in (False, True):
        hp = tw.hparams("db", plus=plus)
        flat = {k: np.asarray(v) for k, v in flatten(hp).items()}
        assert any(k.startswith("plus_") for k in flat) == plus
        loaded = hparams_from_arrays(flat)
        for a, b in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(hp)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            assert np.asarray(a).dtype == np.asarray(b).dtype
        assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(hp)
    with pytest.raises(ValueError, match="missing"):
        hparams_from_arrays({k: v for k, v in flat.items() if k != "gamma"})
    with pytest.raises(ValueError, match="missing"):
        hparams_from_arrays({k: v for k, v in flat.items() if k != "plus_margin"})


def test_plus_switch_must_be_a_bool():
    with pytest.raises(ValueError, match="Spec.plus"):
        tw.Spec(plus=1)
    with pytest.raises(ValueError, match="Spec.null_window"):
        tw.Spec(plus=True, null_window=0)


def test_checked_mode_accepts_a_plus_state():
    """tw.checked flags every non-finite state leaf: the plus state has none (empty-bank gain is 0)."""
    ev = events(5, T=30)
    spec, hp = setup()
    state, out = tw.checked.run(tw.init(spec, hp), ev, hp, spec)
    assert int(jnp.sum(out.selection.chosen >= 0)) > 0
    assert float(tw.init(spec, hp).mode.pending.gain) == 0.0
