"""vmap over configurations, jit versus eager, and no recompilation for new hyperparameter values."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tokenworth_jax as tw

from tests.controller_helpers import clustered_stream, precision, small_setup


def _events(spec, f, T=40, seed=3):
    q, m, r = clustered_stream(seed=seed, T=T, dim=spec.dim)
    return tw.Event(jnp.asarray(q, f), jnp.asarray(r, jnp.int32), jnp.asarray(m, f), jnp.arange(T, dtype=jnp.int32))


CONFIGS = [
    dict(eta_max=0.05), dict(eta_max=0.30), dict(gamma=0.5), dict(gamma=2.0),
    dict(lambda_w=1.0, beta_w=1.0), dict(krr_interval=2, agop_interval=4), dict(beta_m=0.75), dict(tau_nov=0.9, delta_rep=0.0),
]


def test_vmap_over_eight_configs_equals_separate_runs():
    with precision("float32") as f:
        spec, _ = small_setup(f)
        hps = [small_setup(f, **c)[1] for c in CONFIGS]
        events = _events(spec, f)
        batched_hp = tw.stack_hparams(hps)
        states = jax.vmap(lambda hp: tw.init(spec, hp))(batched_hp)
        final, out = jax.vmap(lambda s, hp: tw.run(s, events, hp, spec))(states, batched_hp)
        for i, hp in enumerate(hps):
            single, single_out = tw.run(tw.init(spec, hp), events, hp, spec)
            np.testing.assert_array_equal(np.asarray(out.decision.code[i]), np.asarray(single_out.decision.code))
            np.testing.assert_array_equal(np.asarray(out.selection.slot[i]), np.asarray(single_out.selection.slot))
            jax.tree_util.tree_map(
                lambda a, b: np.testing.assert_allclose(np.asarray(a)[i], np.asarray(b), rtol=2e-4, atol=2e-4), final, single)
        # the configurations really differ
        codes = {tuple(np.asarray(out.selection.slot[i]).tolist()) for i in range(len(hps))}
        assert len(codes) > 1


def test_jit_and_eager_agree():
    with precision("float64") as f:
        spec, hp = small_setup(f)
        events = _events(spec, f, T=12)
        jitted, jout = tw.run(tw.init(spec, hp), events, hp, spec)
        state = tw.init(spec, hp)
        with jax.disable_jit():
            codes = []
            for t in range(12):
                e = jax.tree_util.tree_map(lambda x: x[t], events)
                state, o = tw.step(state, e, hp, spec)
                codes.append(int(o.decision.code))
        assert codes == np.asarray(jout.decision.code).tolist()
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7, atol=1e-9),
                               state, jitted)


def test_new_hyperparameter_values_compile_nothing():
    from tokenworth_jax import controller as C

    with precision("float32") as f:
        spec, hp = small_setup(f)
        events = _events(spec, f, T=8)
        state = tw.init(spec, hp)
        e0 = jax.tree_util.tree_map(lambda x: x[0], events)
        # each Python function may be traced once: a second trace (a recompile) fails the test
        step = jax.jit(chex.assert_max_traces(C._step, n=1), static_argnames=("spec", "reward_fn"))
        run = jax.jit(chex.assert_max_traces(C._run, n=1), static_argnames=("spec", "reward_fn"))
        jax.block_until_ready(step(state, e0, hp, spec))
        jax.block_until_ready(run(state, events, hp, spec))
        jax.block_until_ready(tw.step(state, e0, hp, spec))
        compiles = []

        def listener(name, *a, **k):
            if "backend_compile" in name:
                compiles.append(name)

        jax.monitoring.register_event_duration_secs_listener(listener)
        try:
            for overrides in CONFIGS:
                hp2 = small_setup(f, **overrides)[1]
                jax.block_until_ready(step(state, e0, hp2, spec))
                jax.block_until_ready(run(state, events, hp2, spec))
                jax.block_until_ready(tw.step(state, e0, hp2, spec))
        finally:
            jax.monitoring.unregister_event_duration_listener(listener)
        assert compiles == [], compiles
        # a new *shape* does retrace: the counter works
        spec2 = spec._replace(capacity=spec.capacity + 1)
        with pytest.raises(AssertionError, match="traced"):
            step(tw.init(spec2, hp), e0, hp, spec2)
    chex.clear_trace_counter()


def test_worth_chunk_gives_identical_results():
    """``Spec.worth_chunk`` only bounds memory: the same decisions, worth equal to rounding.

    Not bit-equal: XLA blocks a matmul over fewer columns differently (seen: 1 ulp)."""
    with precision("float64") as f:
        spec, hp = small_setup(f)
        events = _events(spec, f, T=40)
        full, out = tw.run(tw.init(spec, hp), events, hp, spec)
        for chunk in (1, 4, spec.capacity + 1):
            spec_c = spec._replace(worth_chunk=chunk)
            chunked, out_c = tw.run(tw.init(spec_c, hp), events, hp, spec_c)
            np.testing.assert_array_equal(np.asarray(out_c.decision.code), np.asarray(out.decision.code))
            np.testing.assert_array_equal(np.asarray(out_c.selection.slot), np.asarray(out.selection.slot))
            np.testing.assert_allclose(np.asarray(out_c.decision.v_new), np.asarray(out.decision.v_new), rtol=1e-13)
            chex.assert_trees_all_close(chunked, full, rtol=1e-12, atol=1e-13)
        assert int(np.sum(np.asarray(out.decision.code) >= int(tw.Admission.ADMITTED_NOVEL))) > 0  # the full bank was exercised
        m = jnp.asarray(np.asarray(events.memory[-1]))
        np.testing.assert_allclose(np.asarray(tw.worth(full, m, hp, spec._replace(worth_chunk=4)).scores),
                                   np.asarray(tw.worth(full, m, hp, spec).scores), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("strategy", ["vmap", "map"])
def test_batched_run_equals_vmapped_run(strategy):
    with precision("float32") as f:
        spec, _ = small_setup(f)
        hps = tw.stack_hparams([small_setup(f, **c)[1] for c in CONFIGS])
        events = _events(spec, f)
        states = tw.init_batched(spec, hps)
        batched, bout = tw.run_batched(states, events, hps, spec, strategy=strategy)
        vmapped, vout = jax.vmap(lambda s, hp: tw.run(s, events, hp, spec))(states, hps)
        np.testing.assert_array_equal(np.asarray(bout.decision.code), np.asarray(vout.decision.code))
        np.testing.assert_array_equal(np.asarray(bout.selection.slot), np.asarray(vout.selection.slot))
        chex.assert_trees_all_close(batched, vmapped, rtol=2e-4, atol=2e-4)
        # observe_batched is the per-phase entry point the lockstep agent sweep uses
        s2, _ = tw.select_batched(states, events.query[0], hps, spec, strategy=strategy)
        r = jnp.ones((len(CONFIGS),), jnp.int32)
        a = tw.observe_batched(s2, r, hps, spec, strategy=strategy)
        b = jax.vmap(lambda s, rr, hp: tw.observe(s, rr, hp, spec))(s2, r, hps)
        chex.assert_trees_all_close(a, b, rtol=1e-6)


@pytest.mark.parametrize("strategy", ["vmap", "map"])
def test_batched_phases_with_masks_equal_single_calls(strategy):
    """select/offer/end_task_batched: masked-in configurations equal single calls, the others keep their state."""
    with precision("float64") as f:
        spec, _ = small_setup(f)
        hp_list = [small_setup(f, **c)[1] for c in CONFIGS[:4]]
        hps = tw.stack_hparams(hp_list)
        events = _events(spec, f, T=30)
        states, _ = tw.run_batched(tw.init_batched(spec, hps), events, hps, spec, strategy=strategy)
        q, m = events.query[0], events.memory[0]
        mask = jnp.asarray([True, False, True, False])
        s1, sel = tw.select_batched(states, q, hps, spec, mask=mask, strategy=strategy)
        s2 = tw.observe_batched(s1, jnp.ones(4, jnp.int32), hps, spec, strategy=strategy)
        ids = jnp.arange(4, dtype=jnp.int32) + 100
        s3, dec = tw.offer_batched(s2, m, ids, hps, spec, mask=mask, strategy=strategy)
        s4 = tw.end_task_batched(s3, spec, mask=mask, strategy=strategy)
        for i, hp in enumerate(hp_list):
            one = jax.tree_util.tree_map(lambda x: x[i], states)
            if bool(mask[i]):
                a, sel_i = tw.select(one, q, hp, spec)
                a = tw.observe(a, jnp.int32(1), hp, spec)
                a, dec_i = tw.offer(a, m, ids[i], hp, spec)
                a = tw.end_task(a, spec)
                chex.assert_trees_all_close(jax.tree_util.tree_map(lambda x: x[i], s4), a, rtol=1e-12, atol=1e-12)
                assert int(dec.code[i]) == int(dec_i.code) != int(tw.Admission.NOT_OFFERED)
                assert int(sel.slot[i]) == int(sel_i.slot)
            else:  # selection state untouched, offer not made
                assert int(dec.code[i]) == int(tw.Admission.NOT_OFFERED)
                chex.assert_trees_all_equal(jax.tree_util.tree_map(lambda x: x[i], s1), one)
        # no configuration enabled: nothing is admitted anywhere and the state is unchanged
        s5, dec5 = tw.offer_batched(s2, m, ids, hps, spec, mask=jnp.zeros(4, bool), strategy=strategy)
        assert np.all(np.asarray(dec5.code) == int(tw.Admission.NOT_OFFERED))
        chex.assert_trees_all_equal(s5, s2)


def test_vmap_admission_runs_only_when_some_configuration_offers():
    """Under the vmap strategy the admission is one lax.cond on any(enabled & success), not a select."""
    with precision("float32") as f:
        spec, _ = small_setup(f)
        hps = tw.stack_hparams([small_setup(f, **c)[1] for c in CONFIGS[:2]])
        states = tw.init_batched(spec, hps)
        m = jnp.zeros((spec.dim,), f)
        jaxpr = jax.make_jaxpr(lambda s: tw.offer_batched(s, m, jnp.zeros(2, jnp.int32), hps, spec,
                                                          strategy="vmap"))(states)
        text = str(jaxpr)
        assert "cond[" in text
        # the worth's top-level score matmul lives inside the conditional's branch, not outside it
        outer = [e for e in jaxpr.jaxpr.eqns if e.primitive.name in ("jit", "pjit")][0].params["jaxpr"].jaxpr.eqns
        names = [e.primitive.name for e in outer]
        assert "cond" in names and "dot_general" not in names, names


def test_plain_vmap_of_run_at_the_db_preset_completes():
    """``jax.jit(jax.vmap(tw.run))`` at the DB preset's shapes runs to the end (a conditional that
    returned only the changed leaves once deadlocked XLA here) and equals run_batched."""
    spec, _ = tw.preset("db")
    hps = tw.stack_hparams([tw.hparams("db"), tw.hparams("db", eta_max=0.3), tw.hparams("db", lambda_w=0.03),
                            tw.hparams("db", beta_w=0.25)])
    rng = np.random.default_rng(0)
    v = rng.normal(size=(2, 20, spec.dim))
    v /= np.linalg.norm(v, axis=-1, keepdims=True)
    events = tw.Event(jnp.asarray(v[0], jnp.float32), jnp.ones(20, jnp.int32), jnp.asarray(v[1], jnp.float32),
                      jnp.arange(20, dtype=jnp.int32))
    states = tw.init_batched(spec, hps)
    _, out = jax.jit(jax.vmap(lambda s, h: tw.run(s, events, h, spec)))(states, hps)
    _, ref = tw.run_batched(states, events, hps, spec, strategy="map")
    np.testing.assert_array_equal(np.asarray(out.decision.code), np.asarray(ref.decision.code))
