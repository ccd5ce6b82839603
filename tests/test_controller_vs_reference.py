"""The jitted controller against the independent float64 NumPy reference."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tokenworth_jax as tw
from tests.controller_helpers import clustered_stream, precision, small_setup, tolerance, unit
from tokenworth_jax import agop, base_scorer, kernels, krr
from tokenworth_jax import reference_numpy as ref
from tokenworth_jax.ring import ring_valid

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too

DTYPES = ["float32", "float64"]

# The pure parts (kernels, KRR, AGOP, Newton, features) run as they do in the controller: inside one jitted program per
# check, compiled once. Called op by op, each of their jnp operations was a program of its own (some 60-80 a check).


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matrix_matches_reference(dtype):
    with precision(dtype) as f:
        rng = np.random.default_rng(0)
        A, B = rng.normal(size=(7, 9)), rng.normal(size=(5, 9))
        m = rng.uniform(0.1, 3, size=9)
        got = jax.jit(kernels.kernel_matrix)(jnp.asarray(A, f), jnp.asarray(B, f), jnp.asarray(m, f),
                                             jnp.asarray(0.7, f))
        np.testing.assert_allclose(np.asarray(got), ref.laplacian_kernel(A, B, m, 0.7), rtol=tolerance(f), atol=tolerance(f))


@pytest.mark.parametrize("dtype", DTYPES)
def test_krr_fit_predict_grad_match_reference(dtype):
    with precision(dtype) as f:
        rng = np.random.default_rng(1)
        n, F = 10, 8
        Z = rng.normal(size=(n, F))
        delta = rng.normal(size=n)
        m = rng.uniform(0.2, 2, size=F)
        valid = np.ones(n, bool)
        Zq = rng.normal(size=(6, F))
        Zg = np.concatenate([Zq, Z[:2]])  # includes coincident points

        @jax.jit
        def fit_predict_grad(Z, valid, delta, m, Zq, Zg):
            pred = krr.fit(Z, valid, delta, m, jnp.asarray(1.0, f), jnp.asarray(0.01, f))
            return pred, krr.predict(Zq, pred, m, jnp.asarray(1.0, f)), krr.grad(Zg, pred, m, jnp.asarray(1.0, f))

        pred, predicted, grads = fit_predict_grad(jnp.asarray(Z, f), jnp.asarray(valid), jnp.asarray(delta, f),
                                                  jnp.asarray(m, f), jnp.asarray(Zq, f), jnp.asarray(Zg, f))
        alpha_ref = ref.krr_fit(Z, delta, m, 1.0, 0.01)
        tol = tolerance(f) * 50  # alpha amplifies rounding by the condition number
        np.testing.assert_allclose(np.asarray(pred.alpha), alpha_ref, rtol=tol, atol=tol)
        np.testing.assert_allclose(np.asarray(predicted), ref.krr_predict(Zq, Z, alpha_ref, m, 1.0), rtol=tol, atol=tol)
        np.testing.assert_allclose(np.asarray(grads), ref.krr_grad(Zg, Z, alpha_ref, m, 1.0), rtol=tol, atol=tol)


def test_masked_solve_equals_restricted_solve():
    with precision("float64") as f:
        rng = np.random.default_rng(2)
        Z = rng.normal(size=(12, 6))
        delta = rng.normal(size=12)
        valid = rng.random(12) < 0.6
        m = np.ones(6)
        garbage = np.where(valid[:, None], Z, 1e3 * rng.normal(size=Z.shape))  # invalid rows must not matter
        pred = jax.jit(krr.fit)(jnp.asarray(garbage), jnp.asarray(valid), jnp.asarray(np.where(valid, delta, 77.0)),
                                jnp.asarray(m), jnp.asarray(1.0, f), jnp.asarray(0.01, f))
        restricted = ref.krr_fit(Z[valid], delta[valid], m, 1.0, 0.01)
        np.testing.assert_allclose(np.asarray(pred.alpha)[valid], restricted, rtol=1e-10, atol=1e-12)
        assert np.all(np.asarray(pred.alpha)[~valid] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_agop_update_matches_reference(dtype):
    with precision(dtype) as f:
        rng = np.random.default_rng(3)
        grads = rng.normal(size=(9, 7)) * rng.uniform(0, 3, size=7)
        m = rng.uniform(0.5, 2, size=7)
        got = jax.jit(lambda grads, m: agop.update_metric(m, agop.agop_diagonal(grads, jnp.ones(9, bool)), jnp.asarray(
            0.25, f), jnp.asarray(0.05, f), jnp.asarray(8.0, f)))(jnp.asarray(grads, f), jnp.asarray(m, f))
        want = ref.agop_update(m, grads, 0.25, 0.05, 8.0)
        np.testing.assert_allclose(np.asarray(got), want, rtol=tolerance(f), atol=tolerance(f))
        assert abs(float(jnp.mean(got)) - 1) < 10 * tolerance(f)


@pytest.mark.parametrize("dtype", DTYPES)
def test_newton_solution_and_decreasing_loss(dtype):
    with precision(dtype) as f:
        rng = np.random.default_rng(4)
        Phi = np.column_stack([rng.uniform(-1, 1, 80), rng.uniform(-2, 5, 80), rng.uniform(0, 1, 80), rng.uniform(0, 1, 80)])
        y = np.where(rng.random(80) < 1 / (1 + np.exp(-(Phi @ [1.5, 0.3, -0.5, 0.2]))), 1.0, -1.0)
        w0 = np.array([1.0, 0.1, 0.1, 0.02])
        valid = np.arange(80) < 70
        w_ref, losses = ref.newton_fit(Phi[valid], y[valid], w0, w0, 0.1)
        assert all(b <= a + 1e-12 for a, b in zip(losses, losses[1:])), "reference loss must decrease"

        @jax.jit
        def fit_and_losses(Phi, y, valid, w0):
            w, iters = base_scorer.newton_fit(Phi, y, valid, w0, w0, jnp.asarray(0.1, f))
            loss = lambda v: base_scorer.logistic_loss(v, Phi, y, valid, w0, jnp.asarray(0.1, f))
            return w, iters, loss(w), loss(w0)

        w, iters, loss_w, loss_w0 = fit_and_losses(jnp.asarray(Phi, f), jnp.asarray(y, f), jnp.asarray(valid),
                                                   jnp.asarray(w0, f))
        np.testing.assert_allclose(np.asarray(w), w_ref, rtol=0, atol=1e-3 if f == jnp.float32 else 1e-6)  # the reference stops at decrement 1e-12
        assert float(loss_w) < float(loss_w0)
        assert float(loss_w) <= ref.logistic_loss(w_ref, Phi[valid], y[valid], w0, 0.1) + 1e-4
        assert 1 <= int(iters) < base_scorer.MAX_NEWTON_ITERS


@pytest.mark.parametrize("dtype", DTYPES)
def test_features_match_reference(dtype):
    with precision(dtype) as f:
        spec, hp = small_setup(f)
        rng = np.random.default_rng(5)
        state = tw.init(spec, hp)
        B, D = spec.capacity, spec.dim
        emb = unit(rng, B, D)
        u, h, d, c = rng.uniform(-2, 5, B), rng.integers(0, 5, B), rng.integers(0, 5, B), rng.integers(0, 9, B)
        last, tau = rng.integers(0, 10, B), rng.integers(0, 10, B)
        from tokenworth_jax.bank import stats
        from tokenworth_jax.scoring import ScoreModel, score_pairs
        q = unit(rng, 1, D)

        @jax.jit
        def pair_scores(state, hp, q, emb, u, h, d, c, last, tau):
            bank = state.bank._replace(emb=emb, valid=jnp.ones(B, bool), u=u, h=h, d=d, c=c, last=last, tau=tau)
            model = ScoreModel(state.base.w, state.residual.predictor, state.residual.metric, hp.gamma,
                               jnp.asarray(0.0, f))
            return score_pairs(q, bank.emb, stats(bank, jnp.int32(12), hp.kappa), model)

        ps = pair_scores(state, hp, jnp.asarray(q, f), jnp.asarray(emb, f), jnp.asarray(u, f), jnp.asarray(h, f),
                         jnp.asarray(d, f), jnp.asarray(c, f), jnp.asarray(last, jnp.int32),
                         jnp.asarray(tau, jnp.int32))
        phi_ref, z_ref = ref.features(q[0], emb, u, h, d, c, last, tau, 12, 0.02)
        np.testing.assert_allclose(np.asarray(ps.phi[0]), phi_ref, rtol=tolerance(f), atol=tolerance(f))
        np.testing.assert_allclose(np.asarray(ps.z[0]), z_ref, rtol=tolerance(f), atol=tolerance(f))


def _compare_states(state, reference, f):
    tol = tolerance(f) * 100
    b = jax.device_get(state.bank)
    np.testing.assert_array_equal(b.valid, reference.valid)
    np.testing.assert_array_equal(b.ids, reference.ids)
    for name in ("u", "h", "d", "c", "last", "tau"):
        np.testing.assert_allclose(getattr(b, name), getattr(reference, name), rtol=tol, atol=tol, err_msg=name)
    np.testing.assert_allclose(b.emb[b.valid], reference.emb[reference.valid], rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(state.base.w), reference.w, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(state.residual.metric), reference.m_diag, rtol=tol, atol=tol)
    assert int(state.clock.n_feedback) == reference.n_feedback
    assert int(state.residual.n_fits) == reference.n_krr_fits
    assert int(state.clock.t) == reference.t
    # windows hold the same multiset of rows (ring order differs from list order)
    phi, y = jax.device_get(state.base.window.data)
    mask = np.asarray(ring_valid(state.base.window))
    got = np.column_stack([phi[mask], y[mask]])
    want = np.array([np.append(p, yy) for p, yy in reference.base_window])
    np.testing.assert_allclose(got[np.lexsort(got.T)], want[np.lexsort(want.T)], rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_stream_every_decision_equal(dtype):
    """A long clustered stream: selections, admission decisions and final state agree."""
    with precision(dtype) as f:
        spec, hp = small_setup(f)
        T = 160 if f == jnp.float64 else 90
        q, m, rewards = clustered_stream(seed=6, T=T, dim=spec.dim)
        reference = ref.ReferenceController(spec, hp)
        state = tw.init(spec, hp)
        codes = set()
        # scores and worth: float32 measured within 3.1e-4 of the reference (README: "within 1e-3")
        tol = 1e-3 if f == jnp.float32 else tolerance(f) * 100
        for t in range(T):
            state, sel = tw.select(state, jnp.asarray(q[t], f), hp, spec)
            rsel = reference.select(q[t])
            assert int(sel.slot) == rsel["chosen_slot"], f"selection differs at task {t}"
            if rsel["chosen_slot"] >= 0:
                n = len(rsel["candidates"])
                assert list(np.asarray(sel.candidates)[:n]) == rsel["candidates"]
                np.testing.assert_allclose(np.asarray(sel.scores)[:n], rsel["scores"], rtol=tol, atol=tol)
            state = tw.observe(state, jnp.int32(rewards[t]), hp, spec)
            reference.observe(int(rewards[t]))
            state, dec = tw.offer(state, jnp.asarray(m[t], f), jnp.int32(t), hp, spec)
            if rewards[t] == 1:
                rdec = reference.offer(m[t], t)
                assert int(dec.code) == rdec["code"], f"admission differs at task {t}: {int(dec.code)} vs {rdec}"
                assert int(dec.slot) == rdec["slot"] and int(dec.evicted_id) == rdec["evicted_id"]
                np.testing.assert_allclose(float(dec.v_new), rdec["v_new"], rtol=tol, atol=tol)
            else:
                assert int(dec.code) == tw.Admission.NOT_OFFERED
            codes.add(int(dec.code))
            state = tw.end_task(state, spec)
            reference.end_task()
            assert int(jnp.sum(state.bank.valid)) <= spec.capacity
        _compare_states(state, reference, f)
        # the stream must really exercise the learners and several admission branches
        assert int(state.residual.n_fits) >= 5 and int(state.residual.n_agop) >= 2
        assert {int(tw.Admission.ADMITTED_ROOM), int(tw.Admission.NOT_OFFERED)} < codes
        assert len(codes) >= 4, codes


def test_worth_matrix_matches_reference():
    with precision("float64") as f:
        spec, hp = small_setup(f)
        q, m, rewards = clustered_stream(seed=7, T=40, dim=spec.dim)
        reference = ref.ReferenceController(spec, hp)
        state = tw.init(spec, hp)
        for t in range(40):
            state, _ = tw.select(state, jnp.asarray(q[t]), hp, spec)
            reference.select(q[t])
            state = tw.observe(state, jnp.int32(1), hp, spec)
            reference.observe(1)
            if t < 39:
                state, _ = tw.offer(state, jnp.asarray(m[t]), jnp.int32(t), hp, spec)
                reference.offer(m[t], t)
                state = tw.end_task(state, spec)
                reference.end_task()
        V = tw.worth(state, jnp.asarray(m[39]), hp, spec)
        rw = reference.worth(m[39])
        valid = np.asarray(state.bank.valid)
        np.testing.assert_allclose(np.asarray(V.bank)[valid], np.asarray(rw["V_bank"])[valid], rtol=1e-6, atol=1e-7)  # gram-form distances: ~1e-8 cancellation
        np.testing.assert_allclose(float(V.new), rw["V_new"], rtol=1e-6, atol=1e-7)  # gram-form distances: ~1e-8 cancellation
        np.testing.assert_allclose(float(V.rho_pos), rw["rho_pos"], rtol=1e-12)
        P = int(np.sum(np.asarray(V.probe_valid)))
        cols = np.r_[np.flatnonzero(valid), spec.capacity]
        got, want = np.asarray(V.scores)[:P][:, cols], np.asarray(rw["scores"])[:, cols]
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)  # the current query comes first
        # earlier probes: ring order differs from the reference's list order
        got, want = got[1:], want[1:]
        np.testing.assert_allclose(got[np.lexsort(got.T)], want[np.lexsort(want.T)], rtol=1e-6, atol=1e-7)


# ----- every execution path against the reference, float64, decision for decision ---------------
PATH_T = 260


def _reference_decisions(spec, hp, q, m, rewards, ids=None):
    ids = np.arange(len(rewards)) if ids is None else ids
    reference = ref.ReferenceController(spec, hp)
    chosen, chosen_ids, codes, slots = [], [], [], []
    for t in range(len(rewards)):
        chosen.append(reference.select(q[t])["chosen_slot"])
        chosen_ids.append(-1 if chosen[-1] < 0 else int(reference.ids[chosen[-1]]))
        reference.observe(int(rewards[t]))
        if rewards[t] == 1:
            d = reference.offer(m[t], int(ids[t]))
            codes.append(d["code"])
            slots.append(d["slot"])
        else:
            codes.append(int(tw.Admission.NOT_OFFERED))
            slots.append(-1)
        reference.end_task()
    return np.array(chosen), np.array(chosen_ids), np.array(codes), np.array(slots), reference


def _pure_decisions(path, spec, hp, q, m, rewards, f, ids=None):
    T = len(rewards)
    ids = np.arange(T) if ids is None else ids
    events = tw.Event(jnp.asarray(q, f), jnp.asarray(rewards, jnp.int32), jnp.asarray(m, f), jnp.asarray(ids, jnp.int32))
    if path == "single":
        state, out = tw.run(tw.init(spec, hp), events, hp, spec)
    else:  # configuration 0 of three, stacked
        others = [small_setup(f, eta_max=0.3)[1], small_setup(f, gamma=2.0, tau_nov=0.9)[1]]
        hps = tw.stack_hparams([hp] + others)
        states, outs = tw.run_batched(jax.vmap(functools.partial(tw.init, spec))(hps), events, hps, spec, strategy=path.split("-")[1])
        # read on the host: NumPy indexing compiles nothing (a jax.Array's x[0] compiles a program per leaf shape)
        state, out = jax.tree_util.tree_map(lambda x: np.asarray(x)[0], (states, outs))
    return np.asarray(out.selection.slot), np.asarray(out.decision.code), np.asarray(out.decision.slot), state


def _host_decisions(spec, hp, q, m, rewards):
    """The host Controller: one pure call per protocol step (a judged task not ended is ended by the next select)."""
    ctl = tw.Controller(spec, hp)
    chosen, codes, slots = [], [], []
    for t in range(len(rewards)):
        sel = ctl.select(q[t])
        chosen.append(-1 if sel.memory is None else sel.memory)  # the payload is the source task index
        ctl.observe(int(rewards[t]))
        if rewards[t] == 1:
            d = ctl.offer(f"memory {t}", key_text=m[t], payload=t)  # key given as a vector
            codes.append(int(tw.Admission[d.code]))
            slots.append(d.slot)
        else:
            codes.append(int(tw.Admission.NOT_OFFERED))
            slots.append(-1)
        if t % 3 == 0:
            ctl.end_task()  # the explicit end_task and the implicit one (in the next select) both work
    return np.array(chosen), np.array(codes), np.array(slots), ctl.state


PATHS = ["single", "batched-vmap", "batched-map", "host"]
_PATH_REFERENCE: dict = {}  # spec -> the reference's decisions on the stream of test_every_path_makes_the_...


def _path_reference(spec, hp, q, m, rewards):
    """_reference_decisions of test_every_path_makes_the_reference_decisions_float64's stream (one stream, one hp) for
    ``spec``: the same for each of its paths, so the NumPy reference runs it once per spec (it only reads the result)."""
    if spec not in _PATH_REFERENCE:
        _PATH_REFERENCE[spec] = _reference_decisions(spec, hp, q, m, rewards)
    return _PATH_REFERENCE[spec]


@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
@pytest.mark.parametrize("path", PATHS)
def test_every_path_makes_the_reference_decisions_float64(path, incremental):
    """A long stream with refits, AGOP updates, evictions and replacements: identical decisions."""
    with precision("float64") as f:
        spec, hp = small_setup(f)
        spec = spec._replace(scorer=tw.scorers.incremental() if incremental else tw.scorers.full())
        q, m, rewards = clustered_stream(seed=11, T=PATH_T, dim=spec.dim)
        want_chosen, want_ids, want_codes, want_slots, reference = _path_reference(spec, hp, q, m, rewards)
        if path == "host":  # the host reports memory ids (here: source task indices), not slots
            chosen, codes, slots, state = _host_decisions(spec, hp, q, m, rewards)
            want_chosen = want_ids
        else:
            chosen, codes, slots, state = _pure_decisions(path, spec, hp, q, m, rewards, f)
        np.testing.assert_array_equal(chosen, want_chosen)
        np.testing.assert_array_equal(codes, want_codes)
        np.testing.assert_array_equal(slots, want_slots)
        if path != "host":  # host ids count offers, the reference's count tasks
            _compare_states(state, reference, f)
        # the stream exercises every learner and the full-bank admission branches
        assert int(state.residual.n_agop) >= 5 and int(state.residual.n_fits) >= 20
        for code in (tw.Admission.ADMITTED_NOVEL, tw.Admission.ADMITTED_WORTH, tw.Admission.REPLACED_NEAREST,
                     tw.Admission.REJECTED):
            assert np.any(codes == int(code)), code.name


@pytest.mark.parametrize("path", ["single", "batched-vmap", "batched-map"])
def test_inadmissible_memories_are_invalid_memory_on_every_path_as_in_the_reference(path):
    """Successes that offer a memory with a NaN or an inf, or an id below 0: INVALID_MEMORY, nothing written, in the
    fused step (alone, vmapped, mapped) and in the reference; every other decision and the final state agree."""
    with precision("float64") as f:
        spec, hp = small_setup(f)
        # PATH_T tasks: the programs of test_every_path_makes_the_reference_decisions_float64 (full), compiled once
        q, m, rewards = clustered_stream(seed=13, T=PATH_T, dim=spec.dim)
        ids = np.arange(len(rewards))
        success = np.flatnonzero(rewards == 1)
        m[success[1::6], 3] = np.nan
        m[success[2::6], 0] = np.inf
        ids[success[3::6]] = -1 - success[3::6]
        bad = np.zeros(len(rewards), bool)
        bad[np.concatenate([success[1::6], success[2::6], success[3::6]])] = True
        want_chosen, _, want_codes, want_slots, reference = _reference_decisions(spec, hp, q, m, rewards, ids)
        chosen, codes, slots, state = _pure_decisions(path, spec, hp, q, m, rewards, f, ids)
        np.testing.assert_array_equal(codes[bad], int(tw.Admission.INVALID_MEMORY))
        assert np.all(codes[~bad] != int(tw.Admission.INVALID_MEMORY))
        np.testing.assert_array_equal(chosen, want_chosen)
        np.testing.assert_array_equal(codes, want_codes)
        np.testing.assert_array_equal(slots, want_slots)
        _compare_states(state, reference, f)
        assert np.all(np.isfinite(np.asarray(state.bank.emb))) and np.all(np.asarray(state.bank.ids) >= -1)
        assert np.all(np.asarray(state.bank.ids)[np.asarray(state.bank.valid)] >= 0)


def test_the_app_c_warm_up_rule_matches_the_reference():
    """fit_at_warmup = 0 (App. C: the first KRR fit at the first interval once warm-up examples exist):
    the jitted controller and the reference make the same decisions and the same fits."""
    with precision("float64") as f:
        spec, hp = small_setup(f, fit_at_warmup=0, warmup=4, krr_interval=3)
        q, m, rewards = clustered_stream(seed=12, T=PATH_T, dim=spec.dim)  # PATH_T: the "single" program again
        want_chosen, _, want_codes, want_slots, reference = _reference_decisions(spec, hp, q, m, rewards)
        chosen, codes, slots, state = _pure_decisions("single", spec, hp, q, m, rewards, f)
        np.testing.assert_array_equal(chosen, want_chosen)
        np.testing.assert_array_equal(codes, want_codes)
        assert int(state.residual.n_fits) == reference.n_krr_fits > 0
        _compare_states(state, reference, f)
        eager = small_setup(f, warmup=4, krr_interval=3)[1]  # the Table A1 rule fits once more (at 4)
        assert int(_pure_decisions("single", spec, eager, q, m, rewards, f)[3].residual.n_fits) > reference.n_krr_fits


def test_incremental_equals_full_over_a_long_stream_and_the_cache_stays_exact():
    """4 x PATH_T = 1040 tasks, float64: incremental worth makes the full path's decisions; at every checkpoint (each
    PATH_T tasks: tw.run's programs of test_every_path_makes_the_reference_decisions_float64[single-*], compiled
    once) the maintained cache equals one recomputed from scratch (rows, columns and probe-ring copies)."""
    from tokenworth_jax import probes, worth_cache

    with precision("float64") as f:
        spec, hp = small_setup(f)
        inc = spec._replace(scorer=tw.scorers.incremental())
        T = 4 * PATH_T
        q, m, rewards = clustered_stream(seed=21, T=T, dim=spec.dim, n_clusters=9)
        events = tw.Event(jnp.asarray(q), jnp.asarray(rewards, jnp.int32), jnp.asarray(m), jnp.arange(T, dtype=jnp.int32))
        full_state, inc_state = tw.init(spec, hp), tw.init(inc, hp)
        recomputed = jax.jit(lambda s: worth_cache.refresh(probes.queries(s.probes, s.task.query)[0].key, s.bank.emb,
                                                           s.residual.predictor, s.residual.metric))
        for start in range(0, T, PATH_T):
            chunk = jax.tree_util.tree_map(lambda x: x[start:start + PATH_T], events)
            full_state, a = tw.run(full_state, chunk, hp, spec)
            inc_state, b = tw.run(inc_state, chunk, hp, inc)
            np.testing.assert_array_equal(np.asarray(a.selection.slot), np.asarray(b.selection.slot))
            np.testing.assert_array_equal(np.asarray(a.decision.code), np.asarray(b.decision.code))
            np.testing.assert_array_equal(np.asarray(a.decision.evicted_id), np.asarray(b.decision.evicted_id))
            fresh = recomputed(inc_state)
            valid_rows = np.r_[False, np.asarray(ring_valid(inc_state.probes))]  # row 0 is stale after end_task
            valid = np.asarray(inc_state.bank.valid)
            got, want = np.asarray(inc_state.scorer.dpart), np.asarray(fresh.dpart)
            np.testing.assert_allclose(got[valid_rows][:, valid], want[valid_rows][:, valid], rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(np.asarray(inc_state.scorer.cos)[valid_rows][:, valid],
                                       np.asarray(fresh.cos)[valid_rows][:, valid], rtol=1e-12, atol=1e-12)
        codes = np.asarray(b.decision.code)
        assert int(inc_state.residual.n_agop) >= 10
        assert np.any(codes == int(tw.Admission.REPLACED_NEAREST)) or np.any(codes == int(tw.Admission.ADMITTED_WORTH))
