"""Independent float64 NumPy reference of the TokenWorth controller.

This module is written straight from ``shared/docs/tokenworth-algorithm.md`` (the spec)
and ``docs/controller.md`` (the project's exact semantics), deliberately without
looking at or importing ``tokenworth_jax``. It serves two purposes:

* the tests use it as the oracle for the jitted functions;
* the benchmarks use it as "what a careful researcher would otherwise write":
  readable Python, loops where natural, ``np.linalg`` for the linear algebra.

Conventions and decisions (where the two documents leave something open):

* Everything is float64. Hyperparameters are read with
  ``np.asarray(getattr(hp, name), dtype=np.float64)``; the integer schedule
  parameters (``base_interval``, ``krr_interval``, ``agop_interval``, ``warmup``)
  with ``int()``.
* ``u_failure`` is a positive magnitude: a failure does ``u <- u - u_failure``.
* FIFO windows and the probe ring are Python lists, oldest first. The KRR support
  snapshot (``support``/``alpha``/``support_valid``) is stored in that same
  oldest-first order and padded with zeros up to ``fast_window`` rows. (A ring buffer
  in the JAX state may order rows differently once it wraps; compare predictions or
  sort rows before comparing ``alpha`` element-wise.)
* The KRR ridge fallback tries ``lam * 10**k`` for ``k = 0..6`` (the first try plus
  at most 6 retries); if all fail, :func:`krr_fit` raises ``LinAlgError`` rather than
  returning a silently wrong predictor.
* Newton stops when the Newton decrement ``g^T H^-1 g / 2`` is below ``tol``, after
  ``max_iter`` iterations, or when Armijo backtracking finds no acceptable step within
  30 halvings (then the iterate is already at numerical precision).
* ``SELF_EVICTED`` reports ``slot = -1`` and ``evicted_id = -1``: the bank is
  unchanged, nothing was removed from it.
* ``offer`` of a memory with a non-finite entry or an id below 0 returns ``INVALID_MEMORY``
  and changes nothing: the task has not offered yet (docs/controller.md).
* Protocol misuse (``observe`` before ``select``, ``offer`` after a failed task,
  calling a phase twice) raises ``RuntimeError`` naming the problem.
  ``end_task`` is accepted at any point of a task; it just closes it.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import numpy.typing as npt

# Admission codes, as in docs/controller.md.
NOT_OFFERED = 0
ADMITTED_ROOM = 1
ADMITTED_NOVEL = 2
ADMITTED_WORTH = 3
SELF_EVICTED = 4
REPLACED_NEAREST = 5
REJECTED = 6
INVALID_MEMORY = 7  # a non-finite memory or an id below 0: never written, the task may offer again

FLOAT_HPARAMS = (
    "w0", "lambda_w", "beta_w", "w_min", "w_max", "lambda_krr", "gamma", "beta_m",
    "m_min", "m_max", "eta_max", "kappa", "tau_nov", "delta_write", "tau_pos",
    "tau_util", "delta_rep", "u_init", "u_success", "u_failure", "u_min", "u_max",
)
INT_HPARAMS = ("base_interval", "krr_interval", "agop_interval", "warmup")
SPEC_FIELDS = ("dim", "capacity", "base_window", "fast_window", "slow_window", "k_candidates", "n_probes")

# Table A1 of the paper (plus App. C for BigCodeBench and ALFWorld): only these differ between
# presets. App. C: "a fit needs at least 4 examples, so the first KRR fit is at example 75", so no
# fit at the warm-up count itself (fit_at_warmup = 0).
PRESETS: dict[str, dict[str, float | int]] = {
    "db": dict(krr_interval=50, agop_interval=200, eta_max=0.15, warmup=4),
    "os": dict(krr_interval=25, agop_interval=100, eta_max=0.05, warmup=4),
    "kg": dict(krr_interval=25, agop_interval=100, eta_max=0.10, warmup=24),
    "bigcodebench": dict(krr_interval=75, agop_interval=225, eta_max=0.10, warmup=4, fit_at_warmup=0),
    "alfworld": dict(krr_interval=75, agop_interval=225, eta_max=0.10, warmup=4, fit_at_warmup=0),
}

ARMIJO_C = 1e-4
ARMIJO_MAX_HALVINGS = 30
KRR_MAX_RETRIES = 6


# --------------------------------------------------------------------------- config

def default_hparams(preset: str = "db") -> types.SimpleNamespace:
    """The spec's hyperparameters (§6) for one of the presets ``db``, ``os``, ``kg``, ``bigcodebench``,
    ``alfworld``."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
    values: dict[str, Any] = dict(
        w0=np.array([1.0, 0.10, 0.10, 0.02]),
        lambda_w=0.1,
        beta_w=0.5,
        w_min=np.zeros(4),
        w_max=np.array([2.0, 1.0, 1.0, 1.0]),
        base_interval=50,
        lambda_krr=0.01,
        gamma=1.0,
        beta_m=0.25,
        m_min=0.05,
        m_max=8.0,
        kappa=0.02,
        tau_nov=0.35,
        delta_write=0.02,
        tau_pos=0.45,
        tau_util=0.5,
        delta_rep=0.10,
        u_init=1.0,
        u_success=0.25,
        u_failure=0.45,
        u_min=-2.0,
        u_max=5.0,
        fit_at_warmup=1,  # a KRR fit at the warm-up count itself (Table A1's reading)
    )
    values.update(PRESETS[preset])
    return types.SimpleNamespace(**values)


def default_spec(**overrides: int) -> types.SimpleNamespace:
    """Static sizes: D = 512, B_max = 64, windows 256/128/256, K_c = 12, 8 probes."""
    values = dict(dim=512, capacity=64, base_window=256, fast_window=128, slow_window=256,
                  k_candidates=12, n_probes=8)
    unknown = set(overrides) - set(values)
    if unknown:
        raise ValueError(f"unknown spec fields {sorted(unknown)}; expected some of {list(values)}")
    values.update(overrides)
    return types.SimpleNamespace(**values)


def _read_hparams(hp: Any) -> types.SimpleNamespace:
    out: dict[str, Any] = {}
    for name in FLOAT_HPARAMS:
        if not hasattr(hp, name):
            raise ValueError(f"hyperparameter object lacks {name!r}")
        out[name] = np.asarray(getattr(hp, name), dtype=np.float64)
    for name in INT_HPARAMS:
        if not hasattr(hp, name):
            raise ValueError(f"hyperparameter object lacks {name!r}")
        out[name] = int(getattr(hp, name))
        if out[name] < 1:
            raise ValueError(f"{name} must be a positive integer, got {out[name]}")
    for name in ("w0", "w_min", "w_max"):
        if out[name].shape != (4,):
            raise ValueError(f"{name} must have shape (4,), got {out[name].shape}")
    out["fit_at_warmup"] = int(getattr(hp, "fit_at_warmup", 1))  # optional: 1 unless said otherwise
    if out["fit_at_warmup"] not in (0, 1):
        raise ValueError(f"fit_at_warmup must be 0 or 1, got {out['fit_at_warmup']}")
    return types.SimpleNamespace(**out)


def _read_spec(spec: Any) -> types.SimpleNamespace:
    out = {}
    for name in SPEC_FIELDS:
        if not hasattr(spec, name):
            raise ValueError(f"spec object lacks {name!r}")
        out[name] = int(getattr(spec, name))
        if out[name] < 1:
            raise ValueError(f"spec.{name} must be a positive integer, got {out[name]}")
    return types.SimpleNamespace(**out)


# --------------------------------------------------------------------------- base scorer

def logistic_loss(w: np.ndarray, Phi: np.ndarray, y: np.ndarray, w0: np.ndarray, lam: float) -> float:
    """L(w) = sum_j log(1 + exp(-y_j w^T phi_j)) + lam * ||w - w0||^2."""
    margins = y * (Phi @ w)
    return float(np.sum(np.logaddexp(0.0, -margins)) + lam * np.sum((w - w0) ** 2))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Two-branch form so that neither branch overflows.
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def _loss_grad_hess(w: np.ndarray, Phi: np.ndarray, y: np.ndarray, w0: np.ndarray,
                    lam: float) -> tuple[np.ndarray, np.ndarray]:
    margins = y * (Phi @ w)
    # d/dw log(1+exp(-m)) = -sigmoid(-m) * y * phi
    grad = -(Phi.T @ (y * _sigmoid(-margins))) + 2.0 * lam * (w - w0)
    s = _sigmoid(Phi @ w)
    curvature = s * (1.0 - s)
    hess = (Phi * curvature[:, None]).T @ Phi + 2.0 * lam * np.eye(len(w))
    return grad, hess


def newton_fit(Phi: np.ndarray, y: np.ndarray, w_start: np.ndarray, w0: np.ndarray, lam: float,
               *, max_iter: int = 50, tol: float = 1e-12) -> tuple[np.ndarray, list[float]]:
    """Minimise :func:`logistic_loss` by Newton's method with Armijo backtracking.

    Returns the final ``w`` and the loss at every accepted iterate (the start included).
    """
    Phi = np.asarray(Phi, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.array(w_start, dtype=np.float64)
    w0 = np.asarray(w0, dtype=np.float64)
    lam = float(lam)
    if Phi.ndim != 2 or Phi.shape[0] != y.shape[0] or Phi.shape[1] != w.shape[0]:
        raise ValueError(f"shape mismatch: Phi {Phi.shape}, y {y.shape}, w_start {w.shape}")
    loss = logistic_loss(w, Phi, y, w0, lam)
    history = [loss]
    for _ in range(max_iter):
        grad, hess = _loss_grad_hess(w, Phi, y, w0, lam)
        direction = -np.linalg.solve(hess, grad)
        decrement = float(-grad @ direction) / 2.0  # g^T H^-1 g / 2
        if decrement < tol:
            break
        slope = float(grad @ direction)
        step = 1.0
        accepted = False
        for _ in range(ARMIJO_MAX_HALVINGS + 1):
            trial = w + step * direction
            trial_loss = logistic_loss(trial, Phi, y, w0, lam)
            if trial_loss <= loss + ARMIJO_C * step * slope:
                accepted = True
                break
            step /= 2.0
        if not accepted:
            break  # no descent is representable any more
        w, loss = trial, trial_loss
        history.append(loss)
    return w, history


# --------------------------------------------------------------------------- kernel ridge residual

def _metric_distances(z: np.ndarray, Z: np.ndarray, m_diag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Differences z - Z_j and distances sqrt((z-Z_j)^T M (z-Z_j)) for one query row."""
    diff = z[None, :] - Z
    dist = np.sqrt(np.sum(m_diag[None, :] * diff * diff, axis=1))
    return diff, dist


def laplacian_kernel(A: np.ndarray, B: np.ndarray, m_diag: np.ndarray, gamma: float) -> np.ndarray:
    """K[i, j] = exp(-gamma * sqrt(sum_k m_k (A_ik - B_jk)^2)), computed from differences
    (not the expanded quadratic form) so that identical rows give distance exactly 0."""
    A = np.atleast_2d(np.asarray(A, dtype=np.float64))
    B = np.atleast_2d(np.asarray(B, dtype=np.float64))
    m_diag = np.asarray(m_diag, dtype=np.float64)
    K = np.empty((A.shape[0], B.shape[0]))
    for i in range(A.shape[0]):
        _, dist = _metric_distances(A[i], B, m_diag)
        K[i] = np.exp(-float(gamma) * dist)
    return K


def krr_fit(Z: np.ndarray, delta: np.ndarray, m_diag: np.ndarray, gamma: float, lam: float,
            *, return_ridge: bool = False) -> np.ndarray | tuple[np.ndarray, float]:
    """alpha = (K_M + lam I)^-1 delta by Cholesky, over the (already valid-only) rows ``Z``.

    If the factorisation fails or is not finite, the ridge is multiplied by 10 and the solve
    retried, at most 6 times. With ``return_ridge=True`` also returns the ridge that worked.
    """
    Z = np.atleast_2d(np.asarray(Z, dtype=np.float64))
    delta = np.asarray(delta, dtype=np.float64)
    if delta.shape != (Z.shape[0],):
        raise ValueError(f"delta has shape {delta.shape}, expected ({Z.shape[0]},)")
    K = laplacian_kernel(Z, Z, m_diag, gamma)
    ridge = float(lam)
    for _ in range(KRR_MAX_RETRIES + 1):
        try:
            L = np.linalg.cholesky(K + ridge * np.eye(len(Z)))
        except np.linalg.LinAlgError:
            L = None
        if L is not None and np.all(np.isfinite(L)):
            # Two triangular solves: L v = delta, L^T alpha = v.
            alpha = np.linalg.solve(L.T, np.linalg.solve(L, delta))
            return (alpha, ridge) if return_ridge else alpha
        ridge *= 10.0
    raise np.linalg.LinAlgError(
        f"KRR Cholesky failed for ridges {lam} .. {lam * 10.0 ** KRR_MAX_RETRIES}")


def krr_predict(Zq: np.ndarray, support: np.ndarray, alpha: np.ndarray, m_diag: np.ndarray,
                gamma: float) -> np.ndarray:
    """f(z) = sum_j alpha_j K_M(z, z_j) for every row of ``Zq``."""
    Zq = np.atleast_2d(np.asarray(Zq, dtype=np.float64))
    support = np.atleast_2d(np.asarray(support, dtype=np.float64))
    if support.shape[0] == 0:
        return np.zeros(Zq.shape[0])
    return laplacian_kernel(Zq, support, m_diag, gamma) @ np.asarray(alpha, dtype=np.float64)


def krr_grad(Zq: np.ndarray, support: np.ndarray, alpha: np.ndarray, m_diag: np.ndarray,
             gamma: float) -> np.ndarray:
    """grad f(z) = -gamma sum_j alpha_j K_M(z,z_j) M (z - z_j) / ||z - z_j||_M.

    A term whose distance is exactly 0 (z coincides with z_j) contributes 0, as in the
    reference RFM code.
    """
    Zq = np.atleast_2d(np.asarray(Zq, dtype=np.float64))
    support = np.atleast_2d(np.asarray(support, dtype=np.float64))
    alpha = np.asarray(alpha, dtype=np.float64)
    m_diag = np.asarray(m_diag, dtype=np.float64)
    grads = np.zeros(Zq.shape)
    for i in range(Zq.shape[0]):
        diff, dist = _metric_distances(Zq[i], support, m_diag)
        for j in range(support.shape[0]):
            if dist[j] == 0.0:
                continue
            weight = alpha[j] * np.exp(-gamma * dist[j]) / dist[j]
            grads[i] -= gamma * weight * m_diag * diff[j]
    return grads


def agop_update(m_diag: np.ndarray, grads: np.ndarray, beta: float, m_min: float, m_max: float) -> np.ndarray:
    """M <- NormClip((1 - beta) M + beta G), G_k = mean_j grads_jk^2."""
    grads = np.atleast_2d(np.asarray(grads, dtype=np.float64))
    G = np.mean(grads ** 2, axis=0)
    blended = (1.0 - beta) * np.asarray(m_diag, dtype=np.float64) + beta * G
    clipped = np.clip(blended, m_min, m_max)
    return clipped / np.mean(clipped)


# --------------------------------------------------------------------------- features

def features(q: np.ndarray, emb: np.ndarray, u: npt.ArrayLike, h: npt.ArrayLike, d: npt.ArrayLike, c: npt.ArrayLike,
             last: npt.ArrayLike, tau: npt.ArrayLike, t: float, kappa: float) -> tuple[np.ndarray, np.ndarray]:
    """phi (B,4) = [cos, u, rel, rec] and z (B, D+5) = [|q - e|, cos, u, rel, rec, freq]."""
    q = np.asarray(q, dtype=np.float64)
    emb = np.atleast_2d(np.asarray(emb, dtype=np.float64))
    u, h, d, c, last, tau = (np.asarray(a, dtype=np.float64) for a in (u, h, d, c, last, tau))
    cos = emb @ q
    rel = (h + 1.0) / (h + d + 2.0)
    rec = np.exp(-float(kappa) * (float(t) - last))
    freq = c / np.maximum(1.0, float(t) - tau + 1.0)
    phi = np.stack([cos, u, rel, rec], axis=1)
    z = np.concatenate([np.abs(q[None, :] - emb), np.stack([cos, u, rel, rec, freq], axis=1)], axis=1)
    return phi, z


# --------------------------------------------------------------------------- controller

class ReferenceController:
    """The whole TokenWorth controller, one task at a time, in float64 NumPy."""

    def __init__(self, spec: Any, hp: Any):
        self.spec = _read_spec(spec)
        self.hp = _read_hparams(hp)
        B, D = self.spec.capacity, self.spec.dim
        F = D + 5
        # bank
        self.emb = np.zeros((B, D))
        self.valid = np.zeros(B, dtype=bool)
        self.u = np.zeros(B)
        self.h = np.zeros(B)
        self.d = np.zeros(B)
        self.c = np.zeros(B)
        self.last = np.zeros(B)
        self.tau = np.zeros(B)
        self.ids = np.full(B, -1, dtype=np.int64)
        # learners
        self.w = self.hp.w0.copy()
        self.m_diag = np.ones(F)
        self.alpha = np.zeros(self.spec.fast_window)
        self.support = np.zeros((self.spec.fast_window, F))
        self.support_valid = np.zeros(self.spec.fast_window, dtype=bool)
        self.n_feedback = 0
        self.n_krr_fits = 0
        self.t = 0
        # FIFO windows, oldest first: (phi, y) and (z, delta) pairs
        self.base_window: list[tuple[np.ndarray, float]] = []
        self.fast_window: list[tuple[np.ndarray, float]] = []
        self.slow_window: list[tuple[np.ndarray, float]] = []
        self.probe_ring: list[np.ndarray] = []
        self._reset_task()

    # ---------------------------------------------------------------- task bookkeeping
    def _reset_task(self) -> None:
        self._query: np.ndarray | None = None
        self._retrieved = False
        self._chosen = -1
        self._phi_star: np.ndarray | None = None
        self._z_star: np.ndarray | None = None
        self._s_base_star = np.nan
        self._reward: int | None = None
        self._offered = False

    def _check_vector(self, v: Any, name: str) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64)
        if v.shape != (self.spec.dim,):
            raise ValueError(f"{name} must have shape ({self.spec.dim},), got {v.shape}")
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{name} contains non-finite values")
        return v

    # ---------------------------------------------------------------- scoring
    def eta(self) -> float:
        return float(self.hp.eta_max * min(1.0, self.n_krr_fits / 3.0))

    def _residual(self, Z: np.ndarray) -> np.ndarray:
        if not self.support_valid.any():
            return np.zeros(Z.shape[0])
        return krr_predict(Z, self.support[self.support_valid], self.alpha[self.support_valid],
                           self.m_diag, float(self.hp.gamma))

    def _bank_features(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return features(q, self.emb, self.u, self.h, self.d, self.c, self.last, self.tau,
                        self.t, self.hp.kappa)

    def _scores(self, phi: np.ndarray, z: np.ndarray) -> np.ndarray:
        return phi @ self.w + self.eta() * self._residual(z)

    def _recall(self, q: np.ndarray) -> list[int]:
        """Top-k valid slots by cosine; a stable sort keeps ties in slot order."""
        cos = self.emb @ q
        masked = np.where(self.valid, cos, -np.inf)
        order = np.argsort(-masked, kind="stable")
        n = min(self.spec.k_candidates, int(self.valid.sum()))
        return [int(i) for i in order[:n]]

    # ---------------------------------------------------------------- phases
    def select(self, q: Any) -> dict[str, Any]:
        if self._query is not None:
            raise RuntimeError("select called twice in one task; call end_task first")
        q = self._check_vector(q, "q")
        self._query = q
        candidates = self._recall(q)
        self._retrieved = len(candidates) > 0
        if not candidates:
            return dict(candidates=[], scores=[], chosen_slot=-1, phi=None, z=None, s_base=np.nan)
        phi, z = self._bank_features(q)
        idx = np.array(candidates)
        scores = self._scores(phi[idx], z[idx])
        best = 0
        for k in range(1, len(candidates)):  # first maximum in recall-rank order
            if scores[k] > scores[best]:
                best = k
        slot = candidates[best]
        self._chosen = slot
        self._phi_star = phi[slot].copy()
        self._z_star = z[slot].copy()
        self._s_base_star = float(self._phi_star @ self.w)
        return dict(candidates=candidates, scores=[float(s) for s in scores], chosen_slot=slot,
                    phi=self._phi_star.copy(), z=self._z_star.copy(), s_base=self._s_base_star)

    def observe(self, reward: int) -> None:
        if self._query is None:
            raise RuntimeError("observe called before select")
        if self._reward is not None:
            raise RuntimeError("observe called twice in one task")
        if reward not in (0, 1):
            raise ValueError(f"reward must be 0 or 1, got {reward!r}")
        reward = int(reward)
        self._reward = reward
        if self._chosen < 0:
            return  # nothing was injected: no feedback example
        hp = self.hp
        y = 2.0 * reward - 1.0
        y_hat = 2.0 * float(_sigmoid(np.array([self._s_base_star]))[0]) - 1.0
        delta = y - y_hat
        self._push(self.base_window, (self._phi_star, y), self.spec.base_window)
        self._push(self.fast_window, (self._z_star, delta), self.spec.fast_window)
        self._push(self.slow_window, (self._z_star, delta), self.spec.slow_window)
        m = self._chosen
        change = hp.u_success if reward else -hp.u_failure
        self.u[m] = np.clip(self.u[m] + change, hp.u_min, hp.u_max)
        self.h[m] += reward
        self.d[m] += 1 - reward
        self.c[m] += 1
        self.last[m] = self.t
        self.n_feedback += 1
        self._scheduled_refits()

    @staticmethod
    def _push(window: list[Any], item: Any, size: int) -> None:
        window.append((np.array(item[0], dtype=np.float64), float(item[1])))
        if len(window) > size:
            del window[0]

    def _scheduled_refits(self) -> None:
        n, hp = self.n_feedback, self.hp
        if n % hp.base_interval == 0:
            self._refit_base()
        if (n == hp.warmup and hp.fit_at_warmup) or (n >= hp.warmup and n % hp.krr_interval == 0):
            self._refit_krr()
        if n % hp.agop_interval == 0 and self.n_krr_fits >= 1:
            self._refit_agop()

    def _refit_base(self) -> None:
        Phi = np.stack([phi for phi, _ in self.base_window])
        y = np.array([y for _, y in self.base_window])
        w_fit, _ = newton_fit(Phi, y, self.w, self.hp.w0, float(self.hp.lambda_w))
        blended = (1.0 - self.hp.beta_w) * self.w + self.hp.beta_w * w_fit
        self.w = np.clip(blended, self.hp.w_min, self.hp.w_max)

    def _refit_krr(self) -> None:
        Z = np.stack([z for z, _ in self.fast_window])
        delta = np.array([dl for _, dl in self.fast_window])
        alpha = krr_fit(Z, delta, self.m_diag, float(self.hp.gamma), float(self.hp.lambda_krr))
        n = len(Z)
        self.support = np.zeros_like(self.support)
        self.alpha = np.zeros_like(self.alpha)
        self.support_valid = np.zeros_like(self.support_valid)
        self.support[:n] = Z
        self.alpha[:n] = alpha
        self.support_valid[:n] = True
        self.n_krr_fits += 1

    def _refit_agop(self) -> None:
        Zs = np.stack([z for z, _ in self.slow_window])
        grads = krr_grad(Zs, self.support[self.support_valid], self.alpha[self.support_valid],
                         self.m_diag, float(self.hp.gamma))
        self.m_diag = agop_update(self.m_diag, grads, float(self.hp.beta_m), float(self.hp.m_min),
                                  float(self.hp.m_max))
        self._refit_krr()

    # ---------------------------------------------------------------- bank lifecycle
    def worth(self, e_new: Any) -> dict[str, Any]:
        if self._query is None:
            raise RuntimeError("worth needs the current query: call select first")
        e_new = self._check_vector(e_new, "e_new")
        hp = self.hp
        probes = [self._query] + list(self.probe_ring)
        B = self.spec.capacity
        scores = np.full((len(probes), B + 1), np.nan)
        t = float(self.t)
        for p, q in enumerate(probes):
            phi, z = self._bank_features(q)
            bank_scores = self._scores(phi, z)
            scores[p, :B] = np.where(self.valid, bank_scores, np.nan)
            phi_new, z_new = features(q, e_new[None, :], [hp.u_init], [0.0], [0.0], [0.0], [t], [t],
                                      t, hp.kappa)
            scores[p, B] = self._scores(phi_new, z_new)[0]
        V_bank = np.mean(scores[:, :B], axis=0)  # nan where the slot is empty
        V_new = float(np.mean(scores[:, B]))
        rho_pos = float(np.mean(scores[:, B] > 0.0))
        if self.valid.any():
            cos = np.where(self.valid, self.emb @ e_new, -np.inf)
            near_slot = int(np.argmax(cos))  # first maximum
            novelty = float(1.0 - cos[near_slot])
        else:
            near_slot, novelty = -1, 1.0
        return dict(V_bank=V_bank, V_new=V_new, rho_pos=rho_pos, novelty=novelty,
                    near_slot=near_slot, scores=scores)

    def _write(self, slot: int, e_new: np.ndarray, new_id: int) -> None:
        self.emb[slot] = e_new
        self.valid[slot] = True
        self.u[slot] = self.hp.u_init
        self.h[slot] = self.d[slot] = self.c[slot] = 0.0
        self.last[slot] = self.tau[slot] = self.t
        self.ids[slot] = new_id

    def offer(self, e_new: Any, new_id: int) -> dict[str, Any]:
        if self._query is None:
            raise RuntimeError("offer called before select")
        if self._reward is None:
            raise RuntimeError("offer called before observe: only successful tasks may offer")
        if self._reward != 1:
            raise RuntimeError("offer called after a failed task: failures never write memories")
        if self._offered:
            raise RuntimeError("offer called twice in one task")
        hp = self.hp
        e_new = np.asarray(e_new, dtype=np.float64)
        if e_new.shape == (self.spec.dim,) and (not np.all(np.isfinite(e_new)) or new_id < 0):
            return dict(code=INVALID_MEMORY, slot=-1, evicted_id=-1, novelty=np.nan, v_new=np.nan,
                        v_max_bank=np.nan, v_near=np.nan, rho_pos=np.nan)
        e_new = self._check_vector(e_new, "e_new")
        wv = self.worth(e_new)
        self._offered = True
        V_bank, V_new, near = wv["V_bank"], wv["V_new"], wv["near_slot"]
        v_max_bank = float(np.nanmax(V_bank)) if self.valid.any() else np.nan
        v_near = float(V_bank[near]) if near >= 0 else np.nan
        result = dict(novelty=wv["novelty"], v_new=V_new, v_max_bank=v_max_bank, v_near=v_near,
                      rho_pos=wv["rho_pos"], slot=-1, evicted_id=-1)

        if not self.valid.all():
            slot = int(np.flatnonzero(~self.valid)[0])
            self._write(slot, e_new, new_id)
            return dict(result, code=ADMITTED_ROOM, slot=slot)

        novel = wv["novelty"] > hp.tau_nov
        worthy = V_new > v_max_bank + hp.delta_write and wv["rho_pos"] >= hp.tau_pos
        if novel or worthy:
            values = np.append(V_bank, V_new)
            loser = int(np.argmin(values))  # first minimum; index B is the candidate
            if loser == self.spec.capacity:
                return dict(result, code=SELF_EVICTED)
            evicted = int(self.ids[loser])
            self._write(loser, e_new, new_id)
            return dict(result, code=ADMITTED_NOVEL if novel else ADMITTED_WORTH, slot=loser,
                        evicted_id=evicted)
        if self.u[near] < hp.tau_util and V_new > v_near + hp.delta_rep:
            evicted = int(self.ids[near])
            self._write(near, e_new, new_id)
            return dict(result, code=REPLACED_NEAREST, slot=near, evicted_id=evicted)
        return dict(result, code=REJECTED)

    def end_task(self) -> None:
        if self._retrieved:
            assert self._query is not None  # select stored it
            self.probe_ring.append(self._query.copy())
            if len(self.probe_ring) > self.spec.n_probes:
                del self.probe_ring[0]
        self.t += 1
        self._reset_task()

    def step(self, q: Any, reward: int, e_new: Any = None, new_id: int = -1) -> dict[str, Any]:
        """select, observe, offer (only if reward == 1), end_task; one flat dict of results."""
        out = self.select(q)
        self.observe(reward)
        if reward == 1:
            if e_new is None:
                raise ValueError("a successful task must offer e_new")
            out.update(self.offer(e_new, new_id))
        else:
            out.update(code=NOT_OFFERED, slot=-1, evicted_id=-1, novelty=np.nan, v_new=np.nan,
                       v_max_bank=np.nan, v_near=np.nan, rho_pos=np.nan)
        self.end_task()
        return out
