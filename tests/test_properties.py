"""Property tests over random streams: the state stays finite and its masks stay consistent."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokenworth_jax as tw
from tokenworth_jax.ring import ring_count, ring_valid

from tests.controller_helpers import small_setup, unit

SPEC, HP = small_setup(jnp.float32, base_interval=3, krr_interval=2, agop_interval=4, warmup=1)
T = 24


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), p_success=st.floats(0.0, 1.0), duplicates=st.booleans(),
       eta_max=st.floats(0.0, 1.0), gamma=st.floats(0.1, 4.0))
def test_random_streams_keep_state_finite_and_masks_consistent(seed, p_success, duplicates, eta_max, gamma):
    rng = np.random.default_rng(seed)
    q = unit(rng, T, SPEC.dim)
    m = unit(rng, T, SPEC.dim)
    if duplicates:  # exact repeats make coincident support points and singular kernel blocks
        q[T // 2:] = q[: T - T // 2]
        m[T // 2:] = q[T // 2:]
    rewards = (rng.random(T) < p_success).astype(np.int32)
    hp = HP._replace(eta_max=jnp.float32(eta_max), gamma=jnp.float32(gamma))
    events = tw.Event(jnp.asarray(q, jnp.float32), jnp.asarray(rewards), jnp.asarray(m, jnp.float32),
                      jnp.arange(T, dtype=jnp.int32))
    state, out = tw.run(tw.init(SPEC, hp), events, hp, SPEC)
    chex.assert_tree_all_finite(state)
    bank = jax.device_get(state.bank)
    assert np.all((bank.ids >= 0) == bank.valid)
    assert bank.valid.sum() <= SPEC.capacity
    assert len(set(bank.ids[bank.valid])) == bank.valid.sum()
    n_fb = int(state.clock.n_feedback)
    assert n_fb == int(np.sum(np.asarray(out.selection.slot) >= 0))
    for ring in (state.base.window, state.residual.fast, state.residual.slow):
        assert int(ring_count(ring)) == min(n_fb, ring.data[1].shape[0])
        assert int(np.sum(np.asarray(ring_valid(ring)))) == int(ring_count(ring))
    assert np.all(np.asarray(state.residual.predictor.alpha)[~np.asarray(state.residual.predictor.support_valid)] == 0)
    assert np.all(np.asarray(state.residual.metric) > 0)
    np.testing.assert_allclose(float(jnp.mean(state.residual.metric)), 1.0, rtol=1e-5)
    codes = np.asarray(out.decision.code)
    assert np.all((codes == tw.Admission.NOT_OFFERED) == (rewards == 0))
    w = np.asarray(state.base.w)
    assert np.all(w >= np.asarray(HP.w_min)) and np.all(w <= np.asarray(HP.w_max))
