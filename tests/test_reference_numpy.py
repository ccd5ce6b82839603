"""Self-tests of the float64 NumPy reference (tokenworth_jax/reference_numpy.py).

The reference is the oracle for the JAX controller, so its own correctness is checked
here against independent facts: finite differences, linear-algebra identities, hand
computations and hand-built admission cases.
"""

from __future__ import annotations

import numpy as np
import pytest

from tokenworth_jax.reference_numpy import (
    ADMITTED_NOVEL,
    ADMITTED_ROOM,
    ADMITTED_WORTH,
    NOT_OFFERED,
    REJECTED,
    REPLACED_NEAREST,
    SELF_EVICTED,
    ReferenceController,
    agop_update,
    default_hparams,
    default_spec,
    features,
    krr_fit,
    krr_grad,
    krr_predict,
    laplacian_kernel,
    logistic_loss,
    newton_fit,
)


def _unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def _basis(k: int, dim: int = 8) -> np.ndarray:
    e = np.zeros(dim)
    e[k] = 1.0
    return e


# --------------------------------------------------------------------------- config

def test_presets_differ_only_where_table_a1_says():
    db, os_, kg = default_hparams("db"), default_hparams("os"), default_hparams("kg")
    assert (db.krr_interval, db.agop_interval, db.eta_max, db.warmup) == (50, 200, 0.15, 4)
    assert (os_.krr_interval, os_.agop_interval, os_.eta_max, os_.warmup) == (25, 100, 0.05, 4)
    assert (kg.krr_interval, kg.agop_interval, kg.eta_max, kg.warmup) == (25, 100, 0.10, 24)
    np.testing.assert_array_equal(db.w0, [1.0, 0.10, 0.10, 0.02])
    with pytest.raises(ValueError, match="unknown preset"):
        default_hparams("xx")
    assert default_spec().dim == 512 and default_spec(capacity=3).capacity == 3
    with pytest.raises(ValueError, match="unknown spec"):
        default_spec(capcity=3)


def test_missing_hyperparameter_is_named():
    hp = default_hparams()
    del hp.tau_pos
    with pytest.raises(ValueError, match="tau_pos"):
        ReferenceController(default_spec(dim=8, capacity=2), hp)


# --------------------------------------------------------------------------- Newton

def _logistic_data(seed: int, n: int = 200):
    rng = np.random.default_rng(seed)
    Phi = np.column_stack([rng.uniform(-1, 1, n), rng.normal(1, 1, n), rng.uniform(0, 1, n), rng.uniform(0, 1, n)])
    w_true = np.array([2.0, -0.5, 1.0, 0.3])
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(Phi @ w_true))), 1.0, -1.0)
    return Phi, y


def _fd_grad(fun, x, h=1e-5):
    g = np.zeros_like(x)
    for k in range(len(x)):
        e = np.zeros_like(x)
        e[k] = h
        g[k] = (fun(x + e) - fun(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_newton_decreases_loss_and_reaches_stationary_point(seed):
    Phi, y = _logistic_data(seed)
    w0 = np.array([1.0, 0.1, 0.1, 0.02])
    w, history = newton_fit(Phi, y, w0, w0, 0.1)
    assert len(history) >= 2 and history[-1] < history[0]
    assert all(b <= a for a, b in zip(history, history[1:]))
    assert history[-1] == pytest.approx(logistic_loss(w, Phi, y, w0, 0.1), rel=1e-15)
    grad = _fd_grad(lambda v: logistic_loss(v, Phi, y, w0, 0.1), w)
    assert np.max(np.abs(grad)) < 1e-5
    # Strict convexity: a far start lands on the same minimiser, with monotone loss.
    w_far, hist_far = newton_fit(Phi, y, np.array([40.0, -40.0, 40.0, -40.0]), w0, 0.1)
    assert all(b <= a for a, b in zip(hist_far, hist_far[1:]))
    # Newton stops on the decrement g^T H^-1 g / 2 < 1e-12 (in loss units), so w itself is
    # only pinned to about sqrt(2e-12 / lambda_min(H)).
    np.testing.assert_allclose(w_far, w, atol=2e-6)
    assert hist_far[-1] == pytest.approx(history[-1], rel=1e-13)


def test_newton_regulariser_keeps_separable_data_finite():
    Phi = np.array([[1.0, 0, 0, 0], [-1.0, 0, 0, 0]] * 10)
    y = np.array([1.0, -1.0] * 10)
    w0 = np.zeros(4)
    w, _ = newton_fit(Phi, y, w0, w0, 0.1)
    assert np.all(np.isfinite(w)) and w[0] > 0
    np.testing.assert_allclose(w[1:], 0.0, atol=1e-12)  # no data, no pull away from w0
    assert np.max(np.abs(_fd_grad(lambda v: logistic_loss(v, Phi, y, w0, 0.1), w))) < 1e-6


# --------------------------------------------------------------------------- KRR

def _krr_problem(seed: int, n: int = 10, F: int = 6):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, F)), rng.normal(size=n), rng.uniform(0.2, 3.0, F)


def test_laplacian_kernel_hand_value_and_exact_diagonal():
    A = np.array([[0.0, 0.0], [1.0, 2.0]])
    B = np.array([[3.0, 4.0]])
    m = np.array([1.0, 0.25])
    K = laplacian_kernel(A, B, m, 0.5)
    np.testing.assert_allclose(K[:, 0], [np.exp(-0.5 * np.sqrt(9 + 4)), np.exp(-0.5 * np.sqrt(4 + 1))])
    Z, _, m = _krr_problem(0)
    KZ = laplacian_kernel(Z, Z, m, 1.0)
    assert np.all(np.diag(KZ) == 1.0)
    np.testing.assert_array_equal(KZ, KZ.T)


def test_krr_fit_solves_ridge_system_and_interpolates_as_lambda_vanishes():
    Z, delta, m = _krr_problem(1)
    K = laplacian_kernel(Z, Z, m, 1.0)
    alpha = krr_fit(Z, delta, m, 1.0, 0.01)
    np.testing.assert_allclose((K + 0.01 * np.eye(len(Z))) @ alpha, delta, atol=1e-12)
    pred_ridge = krr_predict(Z, Z, alpha, m, 1.0)
    assert np.max(np.abs(pred_ridge - delta)) > 1e-4  # a real ridge does not interpolate
    alpha_tiny = krr_fit(Z, delta, m, 1.0, 1e-12)
    np.testing.assert_allclose(krr_predict(Z, Z, alpha_tiny, m, 1.0), delta, atol=1e-9)


def test_krr_ridge_fallback_and_failure():
    Z = np.array([[0.3, -1.0], [0.3, -1.0]])  # identical rows: K is singular
    delta = np.array([1.0, -1.0])
    m = np.ones(2)
    alpha, ridge = krr_fit(Z, delta, m, 1.0, 1e-18, return_ridge=True)
    assert 1e-18 < ridge <= 1e-12 and np.all(np.isfinite(alpha))
    _, ridge_ok = krr_fit(Z, delta, m, 1.0, 0.01, return_ridge=True)
    assert ridge_ok == 0.01
    with pytest.raises(np.linalg.LinAlgError):
        krr_fit(Z, delta, m, 1.0, 0.0)  # x10 of a zero ridge never helps
    with pytest.raises(np.linalg.LinAlgError):
        krr_fit(np.array([[np.nan, 0.0], [1.0, 0.0]]), delta, m, 1.0, 0.01)


def test_krr_gradient_matches_central_differences_off_support():
    Z, delta, m = _krr_problem(2)
    alpha = krr_fit(Z, delta, m, 1.3, 0.01)
    Zq = np.random.default_rng(3).normal(size=(5, Z.shape[1]))
    G = krr_grad(Zq, Z, alpha, m, 1.3)
    for i in range(len(Zq)):
        fd = _fd_grad(lambda v: krr_predict(v[None, :], Z, alpha, m, 1.3)[0], Zq[i], h=1e-6)
        np.testing.assert_allclose(G[i], fd, rtol=1e-6, atol=1e-8)


def test_krr_gradient_drops_coincident_terms_exactly():
    Z, delta, m = _krr_problem(4)
    alpha = krr_fit(Z, delta, m, 1.0, 0.01)
    at_support = krr_grad(Z[2:3], Z, alpha, m, 1.0)
    alpha_without = alpha.copy()
    alpha_without[2] = 0.0
    np.testing.assert_array_equal(at_support, krr_grad(Z[2:3], Z, alpha_without, m, 1.0))
    assert np.all(np.isfinite(at_support)) and np.any(at_support != 0)
    single = krr_grad(Z[:1], Z[:1], np.array([5.0]), m, 1.0)
    assert np.all(single == 0.0)


# --------------------------------------------------------------------------- AGOP

def test_agop_hand_value():
    new = agop_update(np.ones(3), np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), 0.25, 0.05, 8.0)
    blended = np.array([0.75 + 0.25 * 2.0, 0.75, 0.75])
    np.testing.assert_allclose(new, blended / blended.mean(), rtol=1e-15)


def test_agop_normclip_bounds_and_unit_mean():
    rng = np.random.default_rng(5)
    for _ in range(20):
        m = rng.uniform(0.05, 8.0, 7)
        grads = rng.normal(size=(30, 7)) * rng.choice([1e-4, 1.0, 1e3], 7)
        new = agop_update(m, grads, 0.5, 0.05, 8.0)
        assert new.mean() == pytest.approx(1.0, abs=1e-14)
        assert np.all(new > 0) and new.max() / new.min() <= 8.0 / 0.05 + 1e-9
    # Both clips active: [1000.5, 0.5, 0.5, 0.0005] -> [8, 0.5, 0.5, 0.05].
    new = agop_update(np.array([1.0, 1.0, 1.0, 0.001]),
                      np.array([[np.sqrt(2000.0), 0.0, 0.0, 0.0]]), 0.5, 0.05, 8.0)
    clipped = np.array([8.0, 0.5, 0.5, 0.05])
    np.testing.assert_allclose(new, clipped / clipped.mean(), rtol=1e-15)


# --------------------------------------------------------------------------- features

def test_features_hand_values():
    q = _unit([1.0, 1.0, 0.0])
    emb = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    phi, z = features(q, emb, u=[1.5, -0.5], h=[3, 0], d=[1, 2], c=[4, 0], last=[7, 2], tau=[2, 2],
                      t=10, kappa=0.02)
    cos0 = 1 / np.sqrt(2)
    np.testing.assert_allclose(phi[0], [cos0, 1.5, 4 / 6, np.exp(-0.06)])
    np.testing.assert_allclose(phi[1], [0.0, -0.5, 1 / 4, np.exp(-0.16)])
    assert z.shape == (2, 3 + 5)
    np.testing.assert_allclose(z[0, :3], np.abs(q - emb[0]))
    np.testing.assert_allclose(z[0, 3:], [cos0, 1.5, 4 / 6, np.exp(-0.06), 4 / 9])
    assert z[1, -1] == 0.0


# --------------------------------------------------------------------------- controller helpers

def _controller(dim: int = 8, capacity: int = 2, **hp_overrides) -> ReferenceController:
    hp = default_hparams("db")
    for k, v in hp_overrides.items():
        setattr(hp, k, v)
    spec = default_spec(dim=dim, capacity=capacity, base_window=16, fast_window=8, slow_window=12,
                        k_candidates=min(12, capacity), n_probes=3)
    return ReferenceController(spec, hp)


def _fill_bank(ctrl: ReferenceController, rows, us, ids=None) -> None:
    n = len(rows)
    ctrl.emb[:n] = np.asarray(rows, dtype=np.float64)
    ctrl.valid[:n] = True
    ctrl.u[:n] = us
    ctrl.h[:n] = ctrl.d[:n] = ctrl.c[:n] = 0.0
    ctrl.last[:n] = ctrl.tau[:n] = ctrl.t
    ctrl.ids[:n] = ids if ids is not None else 100 + np.arange(n)


def _succeed_and_offer(ctrl, q, e_new, new_id=7) -> dict:
    ctrl.select(q)
    ctrl.observe(1)
    return ctrl.offer(e_new, new_id)


# --------------------------------------------------------------------------- recall and feedback

def test_recall_ties_go_to_lower_slot_and_invalid_slots_are_skipped():
    ctrl = _controller(capacity=4)
    ctrl.spec.k_candidates = 2
    e = _unit([1, 1, 0, 0, 0, 0, 0, 0])
    _fill_bank(ctrl, [_basis(0), e, _basis(0), _basis(0)], [1.0] * 4)
    ctrl.valid[0] = False
    out = ctrl.select(_basis(0))
    assert out["candidates"] == [2, 3]
    assert out["chosen_slot"] == 2  # equal scores: first in recall order


def test_select_uses_learned_score_not_only_recall():
    ctrl = _controller(capacity=2)
    near, far = _unit([1, 0.2, 0, 0, 0, 0, 0, 0]), _unit([1, 0.6, 0, 0, 0, 0, 0, 0])
    _fill_bank(ctrl, [near, far], [-2.0, 5.0])
    out = ctrl.select(_basis(0))
    assert out["candidates"] == [0, 1] and out["chosen_slot"] == 1
    assert out["s_base"] == pytest.approx(float(out["phi"] @ ctrl.w))


def test_observe_updates_stats_windows_and_target():
    ctrl = _controller(capacity=2)
    _fill_bank(ctrl, [_basis(0), _basis(1)], [4.9, 1.0])
    ctrl.t = 3
    sel = ctrl.select(_basis(0))
    ctrl.observe(1)
    assert (ctrl.u[0], ctrl.h[0], ctrl.d[0], ctrl.c[0], ctrl.last[0]) == (5.0, 1, 0, 1, 3)
    assert ctrl.n_feedback == 1 and len(ctrl.base_window) == len(ctrl.fast_window) == 1
    phi, y = ctrl.base_window[0]
    np.testing.assert_array_equal(phi, sel["phi"])
    assert y == 1.0
    assert ctrl.fast_window[0][1] == pytest.approx(1.0 - (2 / (1 + np.exp(-sel["s_base"])) - 1))
    ctrl.end_task()
    ctrl.u[1] = -1.9
    ctrl.select(_basis(1))
    ctrl.observe(0)
    assert (ctrl.u[1], ctrl.h[1], ctrl.d[1]) == (-2.0, 0, 1)
    s_base = float(ctrl.base_window[1][0] @ ctrl.w)
    assert ctrl.base_window[1][1] == -1.0
    assert ctrl.fast_window[1][1] == pytest.approx(-1.0 - (2 / (1 + np.exp(-s_base)) - 1))


def test_no_selection_means_no_learning():
    ctrl = _controller()
    out = ctrl.select(_basis(0))
    assert out["chosen_slot"] == -1 and out["candidates"] == []
    ctrl.observe(1)
    assert ctrl.n_feedback == 0 and ctrl.base_window == []
    ctrl.end_task()
    assert ctrl.probe_ring == [] and ctrl.t == 1  # no retrieval, no probe


def test_protocol_misuse_raises():
    ctrl = _controller()
    with pytest.raises(RuntimeError, match="before select"):
        ctrl.observe(1)
    ctrl.select(_basis(0))
    with pytest.raises(ValueError, match="reward"):
        ctrl.observe(2)
    ctrl.observe(0)
    with pytest.raises(RuntimeError, match="failed task"):
        ctrl.offer(_basis(1), 1)
    with pytest.raises(ValueError, match="shape"):
        ctrl.worth(np.ones(3))


def _expected_krr_fits(n_fb: int, warmup: int, krr_interval: int, agop_interval: int) -> int:
    fits = 0
    for n in range(1, n_fb + 1):
        if n == warmup or (n > warmup and n % krr_interval == 0):
            fits += 1
        if n % agop_interval == 0 and fits >= 1:
            fits += 1
    return fits


def test_refit_schedule_windows_and_krr_snapshot_on_a_stream():
    dim = 12
    ctrl = _controller(dim=dim, capacity=6, base_interval=7, krr_interval=3, agop_interval=6, warmup=4)
    rng = np.random.default_rng(11)
    w_changes, codes = 0, []
    snapshot = None  # the fast window right after the latest KRR fit
    for task in range(120):
        q = _unit(rng.normal(size=dim))
        reward = int(rng.random() < 0.6)
        w_before, fits_before = ctrl.w.copy(), ctrl.n_krr_fits
        out = ctrl.step(q, reward, _unit(rng.normal(size=dim)), task)
        codes.append(out["code"])
        w_changes += int(not np.array_equal(w_before, ctrl.w))
        if ctrl.n_krr_fits != fits_before:
            snapshot = [(z.copy(), dl) for z, dl in ctrl.fast_window]
        assert len(ctrl.base_window) <= 16 and len(ctrl.fast_window) <= 8 and len(ctrl.slow_window) <= 12
        assert len(ctrl.probe_ring) <= 3
        assert np.all(ctrl.w >= 0) and np.all(ctrl.w <= [2, 1, 1, 1])
    n = ctrl.n_feedback
    assert n > 50
    assert w_changes == n // 7  # the base refit moves w each time it runs, and only then
    assert ctrl.n_krr_fits == _expected_krr_fits(n, 4, 3, 6)
    assert ctrl.eta() == pytest.approx(0.15)
    assert ctrl.m_diag.mean() == pytest.approx(1.0, abs=1e-13) and not np.allclose(ctrl.m_diag, 1.0)
    assert ctrl.t == 120 and ctrl.valid.all()
    assert set(codes) >= {NOT_OFFERED, ADMITTED_ROOM}
    # The support is the fast window as it was at the last fit; alpha solves that system
    # under the current metric (an AGOP update is always followed by a refit).
    k = len(snapshot)
    assert int(ctrl.support_valid.sum()) == k and ctrl.support_valid[:k].all()
    Z = np.stack([z for z, _ in snapshot])
    delta = np.array([dl for _, dl in snapshot])
    np.testing.assert_array_equal(ctrl.support[:k], Z)
    np.testing.assert_allclose(ctrl.alpha[:k], krr_fit(Z, delta, ctrl.m_diag, 1.0, 0.01), rtol=1e-12)
    assert np.all(ctrl.alpha[k:] == 0) and np.all(ctrl.support[k:] == 0)


def test_krr_fit_happens_exactly_at_warmup():
    ctrl = _controller(dim=8, capacity=2, warmup=3, krr_interval=50, agop_interval=200)
    _fill_bank(ctrl, [_basis(0), _basis(1)], [1.0, 1.0])
    for task in range(3):
        assert ctrl.n_krr_fits == 0 and ctrl.eta() == 0.0
        ctrl.select(_basis(task % 2))
        ctrl.observe(task % 2)
        ctrl.end_task()
    assert ctrl.n_krr_fits == 1 and ctrl.eta() == pytest.approx(0.05)
    assert ctrl.support_valid.sum() == 3


# --------------------------------------------------------------------------- worth and admission

def test_worth_averages_over_current_query_and_probe_ring():
    ctrl = _controller(capacity=2)
    _fill_bank(ctrl, [_basis(0), _basis(1)], [1.0, 1.0])
    e_new = _basis(2)
    ctrl.probe_ring = [-e_new]
    ctrl.select(e_new)
    wv = ctrl.worth(e_new)
    assert wv["scores"].shape == (2, 3)
    # s(new) = w.[cos, 1, 0.5, 1]: +1.17 for the current query, -0.83 for the ring probe.
    np.testing.assert_allclose(wv["scores"][:, 2], [1.17, -0.83])
    assert wv["V_new"] == pytest.approx(0.17) and wv["rho_pos"] == 0.5
    np.testing.assert_allclose(wv["V_bank"], wv["scores"][:, :2].mean(axis=0))
    assert wv["novelty"] == 1.0 and wv["near_slot"] == 0
    ctrl.valid[1] = False
    assert np.isnan(ctrl.worth(e_new)["V_bank"][1])


def test_probe_ring_records_retrieval_queries_fifo():
    ctrl = _controller(capacity=2)
    _fill_bank(ctrl, [_basis(0), _basis(1)], [1.0, 1.0])
    for k in range(5):
        ctrl.step(_basis(k), 0)
    assert [int(np.argmax(p)) for p in ctrl.probe_ring] == [2, 3, 4]


def test_admit_while_not_full_uses_lowest_free_slot():
    ctrl = _controller(capacity=3)
    out = _succeed_and_offer(ctrl, _basis(0), _basis(0), new_id=11)
    assert (out["code"], out["slot"], out["evicted_id"]) == (ADMITTED_ROOM, 0, -1)
    assert ctrl.ids[0] == 11 and ctrl.tau[0] == 0 and ctrl.u[0] == 1.0
    ctrl.end_task()
    ctrl.valid[:] = [False, True, False]
    out = _succeed_and_offer(ctrl, _basis(1), _basis(3), new_id=12)
    assert (out["code"], out["slot"]) == (ADMITTED_ROOM, 0)
    assert ctrl.ids[0] == 12 and ctrl.last[0] == 1


def test_admitted_novel_evicts_lowest_worth():
    ctrl = _controller()
    _fill_bank(ctrl, [_basis(0), _basis(1)], [1.0, 1.0])
    out = _succeed_and_offer(ctrl, _basis(2), _basis(2))  # slot 0 selected and rewarded
    assert (out["code"], out["slot"], out["evicted_id"]) == (ADMITTED_NOVEL, 1, 101)
    assert out["novelty"] == 1.0 and out["v_new"] == pytest.approx(1.17)
    np.testing.assert_array_equal(ctrl.emb[1], _basis(2))
    assert ctrl.ids.tolist() == [100, 7]


def test_self_eviction_leaves_bank_unchanged():
    ctrl = _controller()
    _fill_bank(ctrl, [_basis(0), _unit([1, 1, 0, 0, 0, 0, 0, 0])], [1.0, 1.0])
    before = ctrl.emb.copy()
    out = _succeed_and_offer(ctrl, _basis(0), _basis(3))
    assert (out["code"], out["slot"], out["evicted_id"]) == (SELF_EVICTED, -1, -1)
    assert out["v_new"] < out["v_max_bank"]
    np.testing.assert_array_equal(ctrl.emb, before)
    assert ctrl.ids.tolist() == [100, 101]


def test_admitted_by_worth_gate():
    ctrl = _controller()
    _fill_bank(ctrl, [_basis(0), _basis(1)], [1.0, 1.0])
    cand = 0.8 * _basis(0) + 0.6 * _basis(2)
    out = _succeed_and_offer(ctrl, cand, cand)
    assert out["novelty"] == pytest.approx(0.2) and out["rho_pos"] == 1.0
    assert out["v_new"] > out["v_max_bank"] + 0.02
    assert (out["code"], out["slot"], out["evicted_id"]) == (ADMITTED_WORTH, 1, 101)


def test_replaced_nearest_low_utility_memory():
    ctrl = _controller()
    _fill_bank(ctrl, [_basis(0), _basis(1)], [-1.0, 1.0])
    cand = 0.8 * _basis(0) + 0.6 * _basis(2)
    out = _succeed_and_offer(ctrl, _basis(1), cand)  # slot 1 selected: its worth stays the max
    assert out["v_near"] == pytest.approx(-0.03) and out["v_new"] == pytest.approx(0.17)
    assert (out["code"], out["slot"], out["evicted_id"]) == (REPLACED_NEAREST, 0, 100)
    np.testing.assert_array_equal(ctrl.emb[0], cand)
    assert ctrl.u[0] == 1.0 and ctrl.ids[0] == 7


def test_rejected_when_nearest_is_still_useful():
    ctrl = _controller()
    _fill_bank(ctrl, [_basis(0), _basis(1)], [1.0, 1.0])
    before = ctrl.emb.copy()
    out = _succeed_and_offer(ctrl, _basis(1), 0.8 * _basis(0) + 0.6 * _basis(2))
    assert (out["code"], out["slot"], out["evicted_id"]) == (REJECTED, -1, -1)
    np.testing.assert_array_equal(ctrl.emb, before)


def test_failed_task_is_not_offered():
    ctrl = _controller()
    _fill_bank(ctrl, [_basis(0), _basis(1)], [1.0, 1.0])
    before = ctrl.emb.copy()
    out = ctrl.step(_basis(0), 0, _basis(5), 9)
    assert (out["code"], out["slot"], out["evicted_id"]) == (NOT_OFFERED, -1, -1)
    np.testing.assert_array_equal(ctrl.emb, before)
    assert ctrl.d[0] == 1 and ctrl.u[0] == pytest.approx(0.55)


@pytest.mark.parametrize("overrides", [dict(tau_util=-1.5), dict(tau_util=-1.0), dict(delta_rep=0.2)])
def test_replacement_needs_both_low_utility_and_worth_margin(overrides):
    # The replacement case above (u_near = -1, V_near = -0.03, V_new = 0.17) with a threshold
    # moved just past it: u_near < tau_util fails (strictly), or V_new > V_near + delta_rep fails.
    ctrl = _controller(**overrides)
    _fill_bank(ctrl, [_basis(0), _basis(1)], [-1.0, 1.0])
    out = _succeed_and_offer(ctrl, _basis(1), 0.8 * _basis(0) + 0.6 * _basis(2))
    assert out["code"] == REJECTED and ctrl.ids.tolist() == [100, 101]


def test_agop_uses_the_krr_fit_made_at_the_same_count_then_refits():
    ctrl = _controller(dim=8, capacity=2, warmup=2, krr_interval=50, agop_interval=2)
    _fill_bank(ctrl, [_basis(0), _unit([1, 1, 0, 0, 0, 0, 0, 0])], [1.0, 1.0])
    for k, reward in enumerate([1, 0]):
        ctrl.select(_unit([1, 0.3 * k, 0.5, 0, 0, 0, 0, 0]))
        ctrl.observe(reward)
        ctrl.end_task()
    assert ctrl.n_krr_fits == 2  # warm-up fit, then the fit after the AGOP step
    Z = np.stack([z for z, _ in ctrl.fast_window])
    delta = np.array([dl for _, dl in ctrl.fast_window])
    alpha_identity = krr_fit(Z, delta, np.ones(13), 1.0, 0.01)
    G_grads = krr_grad(Z, Z, alpha_identity, np.ones(13), 1.0)
    expected_m = agop_update(np.ones(13), G_grads, 0.25, 0.05, 8.0)
    np.testing.assert_allclose(ctrl.m_diag, expected_m, rtol=1e-14)
    assert not np.allclose(expected_m, 1.0)
    np.testing.assert_allclose(ctrl.alpha[:2], krr_fit(Z, delta, expected_m, 1.0, 0.01), rtol=1e-12)


def test_agop_waits_for_a_first_krr_fit():
    ctrl = _controller(dim=8, capacity=2, warmup=5, krr_interval=50, agop_interval=2)
    _fill_bank(ctrl, [_basis(0), _basis(1)], [1.0, 1.0])
    for k in range(6):
        ctrl.step(_basis(k % 2), 0)
        if k < 4:
            assert ctrl.n_krr_fits == 0 and np.all(ctrl.m_diag == 1.0)
    assert ctrl.n_krr_fits == 2  # n=5 warm-up fit, n=6 AGOP step and refit
