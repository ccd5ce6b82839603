"""vmap over configurations, jit versus eager, and no recompilation for new hyperparameter values."""

from __future__ import annotations

import functools

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
    with precision("float32") as f:
        spec, hp = small_setup(f)
        events = _events(spec, f, T=8)
        state = tw.init(spec, hp)
        e0 = jax.tree_util.tree_map(lambda x: x[0], events)
        fns = tw.controller(spec.scorer, spec.mode)
        # each Python function may be traced once: a second trace (a recompile) fails the test
        step = jax.jit(chex.assert_max_traces(lambda s, e, h, spec: fns.step(s, e, h, spec), n=1),
                       static_argnames=("spec",))
        run = jax.jit(chex.assert_max_traces(lambda s, e, h, spec: fns.run(s, e, h, spec), n=1),
                      static_argnames=("spec",))
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
        events = _events(spec, f, T=60)  # test_vmapped_step_equals_separate_runs's stream: its tw.run program
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
        states = jax.vmap(functools.partial(tw.init, spec))(hps)
        batched, bout = tw.run_batched(states, events, hps, spec, strategy=strategy)
        vmapped, vout = jax.vmap(lambda s, hp: tw.run(s, events, hp, spec))(states, hps)
        np.testing.assert_array_equal(np.asarray(bout.decision.code), np.asarray(vout.decision.code))
        np.testing.assert_array_equal(np.asarray(bout.selection.slot), np.asarray(vout.selection.slot))
        chex.assert_trees_all_close(batched, vmapped, rtol=2e-4, atol=2e-4)


def test_vmapped_step_equals_separate_runs():
    """``jax.vmap(tw.step)`` scanned over a stream is C separate ``tw.run``s, decision for decision."""
    with precision("float64") as f:
        spec, _ = small_setup(f)
        hp_list = [small_setup(f, **c)[1] for c in CONFIGS]
        hps = tw.stack_hparams(hp_list)
        events = _events(spec, f, T=60)
        vstep = jax.jit(jax.vmap(lambda s, e, h: tw.step(s, e, h, spec), in_axes=(0, None, 0)))
        states = jax.vmap(functools.partial(tw.init, spec))(hps)
        slots, codes = [], []
        for t in range(60):
            states, out = vstep(states, jax.tree_util.tree_map(lambda x: x[t], events), hps)
            slots.append(np.asarray(out.selection.slot))
            codes.append(np.asarray(out.decision.code))
        for i, hp in enumerate(hp_list):
            final, single = tw.run(tw.init(spec, hp), events, hp, spec)
            np.testing.assert_array_equal(np.stack(slots)[:, i], np.asarray(single.selection.slot))
            np.testing.assert_array_equal(np.stack(codes)[:, i], np.asarray(single.decision.code))
            chex.assert_trees_all_close(jax.tree_util.tree_map(lambda x: x[i], states), final, rtol=1e-9, atol=1e-9)
        assert len({tuple(np.stack(codes)[:, i]) for i in range(len(hp_list))}) > 1  # the configurations differ


def _eqns(jaxpr):
    """Every equation of a jaxpr, sub-jaxprs (jit, cond branches, scan bodies) included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in (param if isinstance(param, (tuple, list)) else [param]):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _eqns(inner)


def test_vmapped_phases_with_masks_equal_single_calls():
    """Batching is a transform: ``jax.vmap`` of each phase, a (C,) mask through ``tw.tree_where`` (for
    select) or ``finish_task``'s ``offered``; masked-in configurations equal single calls."""
    with precision("float64") as f:
        spec, _ = small_setup(f)
        hp_list = [small_setup(f, **c)[1] for c in CONFIGS[:4]]
        hps = tw.stack_hparams(hp_list)
        events = _events(spec, f, T=30)
        states, _ = tw.run_batched(jax.vmap(functools.partial(tw.init, spec))(hps), events, hps, spec)
        q, m = events.query[0], events.memory[0]
        mask = jnp.asarray([True, False, True, False])
        ids = jnp.arange(4, dtype=jnp.int32) + 100
        new, sel = jax.vmap(lambda s, h: tw.select(s, q, h, spec))(states, hps)
        s1 = tw.tree_where(mask, new, states)
        s2, dec = jax.vmap(lambda s, i, o, h: tw.finish_task(s, 1, m, i, o, h, spec))(s1, ids, mask, hps)
        for i, hp in enumerate(hp_list):
            one = jax.tree_util.tree_map(lambda x: x[i], states)
            if bool(mask[i]):
                a, sel_i = tw.select(one, q, hp, spec)
                a = tw.observe(a, jnp.int32(1), hp, spec)
                a, dec_i = tw.offer(a, m, ids[i], hp, spec)
                a = tw.end_task(a, spec)
                chex.assert_trees_all_close(jax.tree_util.tree_map(lambda x: x[i], s2), a, rtol=1e-12, atol=1e-12)
                assert int(dec.code[i]) == int(dec_i.code) != int(tw.Admission.NOT_OFFERED)
                assert int(sel.slot[i]) == int(sel_i.slot)
            else:  # selection state untouched, offer not made
                assert int(dec.code[i]) == int(tw.Admission.NOT_OFFERED)
                chex.assert_trees_all_equal(jax.tree_util.tree_map(lambda x: x[i], s1), one)
        # no configuration offers: nothing is admitted anywhere
        _, dec5 = jax.vmap(lambda s, i, h: tw.finish_task(s, 1, m, i, False, h, spec))(s1, ids, hps)
        assert np.all(np.asarray(dec5.code) == int(tw.Admission.NOT_OFFERED))


def test_vmap_runs_the_gated_branches_once_and_only_when_some_configuration_needs_them():
    """Under ``jax.vmap(tw.step)`` the admission and the refits stay real conditionals on "any
    configuration" (a plain vmap would turn them into selects that run every branch every task),
    and each gated branch appears once in the program, as in the single-configuration one."""
    with precision("float32") as f:
        spec, _ = small_setup(f)
        hps = tw.stack_hparams([small_setup(f, **c)[1] for c in CONFIGS[:2]])
        states = jax.vmap(functools.partial(tw.init, spec))(hps)
        event = jax.tree_util.tree_map(lambda x: x[0], _events(spec, f, T=1))
        single = jax.make_jaxpr(lambda s, h: tw.step(s, event, h, spec))(jax.tree_util.tree_map(lambda x: x[0], states),
                                                                          jax.tree_util.tree_map(lambda x: x[0], hps))
        batched = jax.make_jaxpr(jax.vmap(lambda s, h: tw.step(s, event, h, spec)))(states, hps)

        def conds(jaxpr):
            return [e for e in _eqns(jaxpr.jaxpr) if e.primitive.name == "cond"]

        def solves(jaxpr):  # the Cholesky factorisations: KRR fits (inside the gated refits)
            return sum(e.primitive.name == "cholesky" for e in _eqns(jaxpr.jaxpr))

        # the same number of conditionals, each on a scalar predicate (any over configurations)
        assert len(conds(batched)) == len(conds(single)) >= 4  # base fit, KRR fit, AGOP, admission
        assert all(e.invars[0].aval.shape == () for e in conds(batched))
        assert solves(batched) == solves(single) > 0
        # the worth's Gram matmul over (P+1) x (B+1) pairs lives inside a conditional's branch only
        pairs = (spec.n_probes + 1) * (spec.capacity + 1)
        worth_matmuls = [e for e in _eqns_outside_conds(batched.jaxpr) if e.primitive.name == "dot_general"
                         and pairs in e.invars[0].aval.shape]
        assert worth_matmuls == [] and any(e.primitive.name == "dot_general" and pairs in e.invars[0].aval.shape
                                           for e in _eqns(batched.jaxpr))


def _eqns_outside_conds(jaxpr):
    """The equations not inside any cond branch (calls and custom rules are entered, conds are not)."""
    for eqn in jaxpr.eqns:
        yield eqn
        if eqn.primitive.name == "cond":
            continue
        for param in eqn.params.values():
            for sub in (param if isinstance(param, (tuple, list)) else [param]):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _eqns_outside_conds(inner)


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
    states = jax.vmap(functools.partial(tw.init, spec))(hps)
    _, out = jax.jit(jax.vmap(lambda s, h: tw.run(s, events, h, spec)))(states, hps)
    _, ref = tw.run_batched(states, events, hps, spec, strategy="map")
    np.testing.assert_array_equal(np.asarray(out.decision.code), np.asarray(ref.decision.code))
