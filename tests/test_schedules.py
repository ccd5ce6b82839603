"""Refit schedules count feedback examples: exact fit counts, eta ramp, AGOP moves M and refits."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import tokenworth_jax as tw
from tokenworth_jax import residual
from tokenworth_jax.schedule import due as schedule

from tests.controller_helpers import clustered_stream, precision, small_setup


def _expected_counts(n_max, base_interval, krr_interval, agop_interval, warmup):
    base, krr_fits, agop_fits = [], [], []
    nb = nk = na = 0
    for n in range(1, n_max + 1):
        if n % base_interval == 0:
            nb += 1
        if n == warmup or (n > warmup and n % krr_interval == 0):
            nk += 1
        if n % agop_interval == 0 and nk > 0:
            na += 1
            nk += 1  # AGOP refits KRR
        base.append(nb), krr_fits.append(nk), agop_fits.append(na)
    return base, krr_fits, agop_fits


def test_fits_happen_at_exact_feedback_counts_not_tasks():
    with precision("float32") as f:
        spec, hp = small_setup(f, base_interval=4, krr_interval=3, agop_interval=5, warmup=2)
        q, m, rewards = clustered_stream(seed=1, T=60, dim=spec.dim)
        state = tw.init(spec, hp)
        expected = _expected_counts(60, 4, 3, 5, 2)
        n_fb = 0
        for t in range(60):
            state, sel = tw.select(state, jnp.asarray(q[t]), hp, spec)
            state = tw.observe(state, jnp.int32(rewards[t]), hp, spec)
            n_fb += int(sel.slot >= 0)
            # task 0 has an empty bank: no selection, so no feedback example and no fit
            assert int(state.clock.n_feedback) == n_fb
            if n_fb:
                assert int(state.base.n_fits) == expected[0][n_fb - 1], t
                assert int(state.residual.n_fits) == expected[1][n_fb - 1], t
                assert int(state.residual.n_agop) == expected[2][n_fb - 1], t
            else:
                assert int(state.residual.n_fits) == 0
            state, _ = tw.offer(state, jnp.asarray(m[t]), jnp.int32(t), hp, spec)
            state = tw.end_task(state, spec)
        assert n_fb >= 50  # feedback only on tasks where the bank was non-empty


def test_schedule_predicates_for_db_preset():
    hp = tw.hparams("db")
    due = {n: [bool(x) for x in schedule(jnp.int32(n), hp)] for n in (1, 4, 49, 50, 100, 200)}
    assert due[4] == [False, True, False]  # warm-up: the first KRR fit
    assert due[49] == [False, False, False]
    assert due[50] == [True, True, False]
    assert due[200] == [True, True, True]


@pytest.mark.parametrize("env, capacity", [("bigcodebench", 50), ("alfworld", 128)])
def test_appendix_c_presets(env, capacity):
    """App. C: KRR every 75 and AGOP every 225 feedback examples, windows 128/256, warm-up 4 with the
    first KRR fit at example 75, eta_max 0.10, the paper's shared values for the rest; B_max 50 / 128."""
    spec, hp = tw.preset(env)
    assert (spec.capacity, spec.fast_window, spec.slow_window, spec.base_window, spec.dim) == (capacity, 128, 256, 256,
                                                                                               512)
    assert (spec.scorer.name, spec.mode.name) == ("full", "paper")
    want = dict(krr_interval=75, agop_interval=225, warmup=4, fit_at_warmup=0, eta_max=0.10, lambda_krr=0.01,
                gamma=1.0, beta_m=0.25, m_min=0.05, m_max=8.0, base_interval=50, lambda_w=0.1, beta_w=0.5)
    for name, value in want.items():
        assert float(getattr(hp, name)) == pytest.approx(value), name
    krr = [n for n in range(1, 451) if bool(schedule(jnp.int32(n), hp).krr)]
    agop = [n for n in range(1, 451) if bool(schedule(jnp.int32(n), hp).agop)]
    assert krr == [75, 150, 225, 300, 375, 450] and agop == [225, 450]
    assert getattr(tw.presets, env)()[0] == spec
    assert not hasattr(tw.presets, "appc")  # the single App. C preset is gone: pick the benchmark


def test_the_table_a1_warm_up_fit_is_kept():
    """fit_at_warmup = 1 (Table A1): the first fit at the warm-up count, then every interval."""
    for env, first in (("db", [4, 50, 100]), ("os", [4, 25, 50]), ("kg", [24, 25, 50])):
        hp = tw.hparams(env)
        assert [n for n in range(1, 101) if bool(schedule(jnp.int32(n), hp).krr)][:3] == first, env


def test_eta_ramps_over_three_fits():
    with precision("float32") as f:
        spec, hp = small_setup(f)
        state = tw.init(spec, hp)
        values = []
        for k in range(5):
            res = state.residual._replace(n_fits=jnp.int32(k))
            values.append(float(residual.eta(res, hp.eta_max)))
        np.testing.assert_allclose(values, [0, 0.05, 0.10, 0.15, 0.15], rtol=1e-6)


def test_agop_changes_metric_and_triggers_refit():
    with precision("float64") as f:
        spec, hp = small_setup(f, agop_interval=6, krr_interval=100, warmup=3, base_interval=100)
        q, m, rewards = clustered_stream(seed=2, T=8, dim=spec.dim)
        state = tw.init(spec, hp)
        before = None
        for t in range(8):
            state, sel = tw.select(state, jnp.asarray(q[t]), hp, spec)
            n_next = int(state.clock.n_feedback) + int(sel.slot >= 0)
            if n_next == 6:
                before = state
            state = tw.observe(state, jnp.int32(rewards[t]), hp, spec)
            if n_next == 6:
                break
            state, _ = tw.offer(state, jnp.asarray(m[t]), jnp.int32(t), hp, spec)
            state = tw.end_task(state, spec)
        assert before is not None
        assert int(state.residual.n_agop) == 1
        assert np.all(np.asarray(before.residual.metric) == 1.0)
        assert not np.allclose(np.asarray(state.residual.metric), 1.0), "AGOP must move M away from the identity"
        np.testing.assert_allclose(float(jnp.mean(state.residual.metric)), 1.0, rtol=1e-12)
        assert int(state.residual.n_fits) == int(before.residual.n_fits) + 1  # the refit after AGOP
        # the refit used the new metric: alpha differs from a fit with the old one
        from tokenworth_jax import krr
        from tokenworth_jax.ring import ring_valid
        z, delta = state.residual.fast.data
        old = krr.fit(z, ring_valid(state.residual.fast), delta, before.residual.metric, hp.gamma, hp.lambda_krr)
        new = krr.fit(z, ring_valid(state.residual.fast), delta, state.residual.metric, hp.gamma, hp.lambda_krr)
        np.testing.assert_allclose(np.asarray(state.residual.predictor.alpha), np.asarray(new.alpha), rtol=1e-10, atol=1e-12)
        assert not np.allclose(np.asarray(old.alpha), np.asarray(new.alpha))
