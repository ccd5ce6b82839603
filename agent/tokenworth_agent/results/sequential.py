"""The sequential rule: add task orders one at a time and stop each comparison once the data decide.

A run of several task orders (``tokenworth run --orders``) asks whether a method's paired difference to the
baseline holds **over orders of the benchmark** (its tasks in other orders), not only in the order it ran.
Order ``r`` gives one per-order difference ``d_r`` (percentage points; :func:`~.estimate.paired` on that
order's pairs, clustered by task over seeds) with its within-order sampling variance ``v_r`` (its squared
standard error). The model: ``d_r = mu + u_r + e_r``, ``u_r`` the order's own effect (variance ``tau^2``,
the spread between orders), ``e_r`` the sampling noise of the order (variance ``v_r``); ``mu`` is the claim,
the difference over orders.

**The rule** (:func:`sequential`, the pure core; :func:`decide_run` on a run folder). After ``k`` orders
(a *look*; looks ``1 .. max_orders``):

* the estimate is the mean of the ``d_r``; its variance ``max(s^2, mean(v_r)) / k``, ``s^2`` the sample
  variance of the ``d_r`` (it estimates ``tau^2 + v``: the between-order component plus the within-order
  one). The floor: the per-order differences cannot vary less than their own sampling noise, which keeps an
  accidental near-tie of two or three orders from looking precise. The floor only makes ``|T|`` smaller, so
  the error rate below holds with it;
* ``T = mean / se`` is compared with a boundary ``c_k`` from a group-sequential design with **alpha
  spending** (Lan-DeMets, O'Brien-Fleming type: ``alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))``,
  ``t = k / max_orders``): almost nothing is spent at the first looks, nearly the fixed design's level at
  the last. Because ``s^2`` has only ``k - 1`` degrees of freedom, the boundaries are not the normal ones:
  they are **calibrated by simulation** (:func:`boundaries`) for the studentised statistic of normal
  per-order differences, whose joint law over the looks does not depend on the unknown variance (it is
  pivotal), so one table serves every run. No decision before :data:`MIN_ORDERS` orders (a variance from
  fewer says almost nothing);
* ``|T| > c_k``: **better** or **worse**; else the interval ``mean +- c_k se`` (a repeated confidence
  interval: it covers ``mu`` at every look at once with probability ``1 - level``) inside
  ``(-effect, effect)``: **smaller than the effect** (futility); else the comparison goes on, and after
  ``max_orders`` orders it is **undecided**.

**The family.** Every comparison of the run (each method against the baseline, in each env and budget point)
is one family; the family-wise error rate is held by Holm's rule over the comparisons with each one's
group-sequential test at its share of alpha (``alpha / h`` for ``h`` comparisons not yet found different;
the sequentially rejective graphical procedure of Maurer & Bretz, 2013, for group-sequential trials): a
comparison found better or worse passes its share to the others at the next check, within the same look
as well. A comparison stopped for futility keeps its share (it is not rejected). ``tests/test_sequential.py``
shows by simulation that the family-wise rate holds, that stopping at the first fixed 95 % interval that
excludes 0 does not, and how many orders the rule needs (docs/results.md, "Deciding over task orders").

**Why not a bound without the variance.** An anytime-valid bound that knows only that a per-order mean lies
in [-1, 1] needs hundreds of orders to see a few points; the spread between orders is a few points, so the
rule uses the observed variance, and pays for its few degrees of freedom in the boundaries.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

ALPHA = 0.05
DEFAULT_EFFECT_PP = 3.0  # the smallest difference worth finding, in percentage points (futility below it)
DEFAULT_MAX_ORDERS = 10  # looks planned: orders at most
MIN_ORDERS = 3  # no decision before this many orders (the variance between orders needs them)
CALIBRATION_PATHS = 200_000  # simulated null experiments per boundary table
CALIBRATION_SEED = 20_240_917  # fixed: the boundaries are the same in every process
_MONTE_CARLO_HITS = 100  # a look whose spending gives fewer crossings than this uses the conservative t bound

BETTER, WORSE, SMALLER, UNDECIDED = "better", "worse", "smaller than the effect", "undecided"
_CODES = {1: BETTER, -1: WORSE, 2: SMALLER, 0: UNDECIDED}


@dataclasses.dataclass(frozen=True)
class Decision:
    """One comparison's outcome: the decision, after how many orders, and the estimate at stopping (pp)."""

    decision: str  # "better", "worse", "smaller than the effect" or "undecided"
    orders_used: int
    interval: tuple[float, float]  # the repeated confidence interval at stopping (±inf before MIN_ORDERS)
    difference: float  # the mean of the per-order differences at stopping


@dataclasses.dataclass(frozen=True)
class Outcome:
    """:func:`sequential`'s arrays, each of shape ``(..., comparisons)``."""

    code: np.ndarray  # 1 better, -1 worse, 2 smaller than the effect, 0 undecided
    orders_used: np.ndarray
    low: np.ndarray
    high: np.ndarray
    difference: np.ndarray

    def decisions(self) -> list[Decision]:
        """One family's outcome (one-dimensional arrays) as :class:`Decision` objects."""
        return [Decision(_CODES[int(c)], int(k), (float(lo), float(hi)), float(d))
                for c, k, lo, hi, d in zip(self.code, self.orders_used, self.low, self.high, self.difference)]


def check(effect: float, max_orders: int) -> None:
    """A :class:`ValueError` (one line) for an effect that is not positive or fewer than one order."""
    if not (isinstance(effect, (int, float)) and effect > 0 and math.isfinite(effect)):
        raise ValueError(f"--effect {effect:g}: the effect must be a positive number of percentage points")
    if int(max_orders) != max_orders or max_orders < 1:
        raise ValueError(f"--max-orders {max_orders}: must be a whole number of orders, at least 1")


def first_look(max_orders: int) -> int:
    """The first look that can decide: :data:`MIN_ORDERS`, or 2 when fewer are planned (1: none can)."""
    return max(2, min(MIN_ORDERS, max_orders))


def spent(alpha: float, fraction: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending: the error allowed by information fraction ``fraction``."""
    from scipy import stats

    return float(2.0 - 2.0 * stats.norm.cdf(stats.norm.isf(alpha / 2.0) / math.sqrt(fraction)))


@functools.lru_cache(maxsize=64)
def boundaries(alpha: float, max_orders: int) -> np.ndarray:
    """The boundaries ``c_1 .. c_M`` for ``|T|`` (``inf`` where no decision is allowed), two-sided ``alpha``.

    Simulated (:data:`CALIBRATION_PATHS` null experiments of iid normal per-order differences, a fixed seed):
    at each look the boundary is the one that the experiments not stopped before cross with the spending's
    increment. Where that increment is too small to simulate, the marginal t quantile (``k - 1`` df) at the
    increment, which crosses at most as often (conservative)."""
    from scipy import stats

    rng = np.random.default_rng(CALIBRATION_SEED)
    n, start = CALIBRATION_PATHS, first_look(max_orders)
    out = np.full(max_orders, np.inf)
    total, squares = np.zeros(n), np.zeros(n)
    alive = np.ones(n, dtype=bool)
    before = 0.0
    for k in range(1, max_orders + 1):
        z = rng.standard_normal(n)
        total += z
        squares += z * z
        if k < start:
            continue
        now = spent(alpha, k / max_orders)
        increment = now - before
        before = now
        mean = total / k
        t = np.abs(mean) / np.sqrt(np.maximum(squares - k * mean * mean, 1e-300) / (k - 1) / k)
        if increment * n >= _MONTE_CARLO_HITS:
            ranked = np.sort(t[alive])[::-1]
            c = float(ranked[int(round(increment * n))])
        else:
            c = float(stats.t.isf(increment / 2.0, k - 1))
        out[k - 1] = c
        alive &= t <= c
    return out


def sequential(differences: Any, variances: Any, *, effect: float = DEFAULT_EFFECT_PP,
               max_orders: int = DEFAULT_MAX_ORDERS, alpha: float = ALPHA) -> Outcome:
    """The rule (module docstring) replayed over orders ``0 .. K-1``, for a batch of families at once.

    Args:
        differences: per-order differences, shape ``(..., comparisons, K)`` (``K <= max_orders`` orders so
            far); the last axis in the order the orders ran. Units are the caller's (``effect`` in the same).
        variances: the within-order sampling variance of each difference (its squared standard error), the
            same shape.
        effect: the smallest difference worth finding; an interval inside ``(-effect, effect)`` stops for futility.
        max_orders: the looks planned (the boundaries' information scale).
        alpha: the family-wise error rate.

    Returns:
        An :class:`Outcome`; a comparison not stopped reports the last look (``orders_used = K``).
    """
    check(effect, max_orders)
    d = np.asarray(differences, dtype=np.float64)
    v = np.asarray(variances, dtype=np.float64)
    if d.shape != v.shape or d.ndim < 2:
        raise ValueError(f"sequential: differences and variances must share a shape (..., comparisons, orders); "
                         f"got {d.shape} and {v.shape}")
    *lead, m, looks = d.shape
    if looks > max_orders:
        raise ValueError(f"sequential: {looks} orders given, more than --max-orders {max_orders}")
    table = np.stack([boundaries(alpha / h, max_orders) for h in range(1, m + 1)])  # (m, M): row h-1 at alpha/h
    shape = (*lead, m)
    code = np.zeros(shape, dtype=np.int64)
    used = np.zeros(shape, dtype=np.int64)
    low, high, centre = np.full(shape, -np.inf), np.full(shape, np.inf), np.full(shape, np.nan)
    for k in range(1, looks + 1):
        x = d[..., :k]
        mean = x.mean(axis=-1)
        s2 = x.var(axis=-1, ddof=1) if k > 1 else np.full(shape, np.nan)
        se = np.sqrt(np.fmax(s2, v[..., :k].mean(axis=-1)) / k)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(mean) / se
        open_ = (code == 0) & np.isfinite(mean)  # NaN: this comparison's orders have run out (see _pad)
        while True:  # Holm within the look: each rejection raises the others' share
            remaining = m - np.sum(np.abs(code) == 1, axis=-1, keepdims=True)
            c = table[np.maximum(remaining, 1) - 1, k - 1]
            reject = open_ & (t > c)
            if not reject.any():
                break
            code = np.where(reject, np.where(mean > 0, 1, -1), code)
            used, low, high, centre = _record(reject, k, mean, c * se, used, low, high, centre)
            open_ &= ~reject
        futile = open_ & (mean - c * se > -effect) & (mean + c * se < effect)
        code = np.where(futile, 2, code)
        used, low, high, centre = _record(open_, k, mean, c * se, used, low, high, centre)
    return Outcome(code, used, low, high, centre)


def _record(where: np.ndarray, k: int, mean: np.ndarray, half: np.ndarray, *state: np.ndarray) -> tuple[np.ndarray, ...]:
    """The look ``k``'s estimate and interval written where ``where`` (stopped now, or still open)."""
    used, low, high, centre = state
    return (np.where(where, k, used), np.where(where, mean - half, low), np.where(where, mean + half, high),
            np.where(where, mean, centre))


# ------------------------------------------------------------------------- on a run folder
def per_order(matched: Any) -> tuple[list[int], np.ndarray, np.ndarray]:
    """A comparison's orders, its per-order paired SR difference (pp) and that difference's sampling variance
    (pp^2): :func:`~.estimate.paired` on each order's pairs, clustered by task over its seeds."""
    from tokenworth_agent.results import estimate as E

    orders = matched.orders
    diffs, variances = [], []
    for order in orders:
        own = matched.of_order(order)
        d = E.paired(own.method, own.baseline, own.clusters, binary=True)
        diffs.append(100.0 * float(d.difference))
        variances.append((100.0 * float(d.se)) ** 2 if np.isfinite(d.se) else np.nan)
    return orders, np.asarray(diffs), np.asarray(variances)


def comparisons_of_run(run_dir: str | Path, baseline: str | None = "standard") -> dict[str, Any]:
    """Every arm against the baseline, cell by cell, as ``Matched`` pairs of finished streams; keyed
    ``env/method`` (``env/method@point`` for a budget point of a grid)."""
    from tokenworth_agent.results import compare as C
    from tokenworth_agent.results.runs import streams

    found = streams(run_dir, finished_only=True)
    if not found:
        raise C.CompareError(f"{run_dir}: no finished stream yet; nothing to decide")
    out: dict[str, Any] = {}
    for (env, point), arms in C.cells(found).items():
        label = ",".join(f"{k}={v}" for k, v in point)
        base = C.pick_baseline(arms, baseline, env + (f" at {label}" if label else ""))
        for arm, members in arms.items():
            if arm == base:
                continue
            matched = C.match(members, arms[base])
            if matched is not None:
                out[f"{env}/{arm}" + (f"@{label}" if label else "")] = matched
    return out


def decide(per_order_data: Mapping[str, tuple[Sequence[int], np.ndarray, np.ndarray]], *,
           effect: float = DEFAULT_EFFECT_PP, max_orders: int = DEFAULT_MAX_ORDERS,
           alpha: float = ALPHA) -> dict[str, Decision]:
    """:func:`sequential` over one family given each comparison's ``(orders, differences, variances)``; the
    orders beyond ``max_orders`` are left out, and a comparison with fewer orders than another stops where its
    data end (padded looks repeat its last one, which changes nothing: see :func:`_pad`)."""
    check(effect, max_orders)
    keys = list(per_order_data)
    if not keys:
        return {}
    looks = min(max_orders, max(len(per_order_data[k][1]) for k in keys))
    if looks == 0:
        return {k: Decision(UNDECIDED, 0, (-math.inf, math.inf), math.nan) for k in keys}
    rows = [_pad(per_order_data[k][1][:looks], per_order_data[k][2][:looks], looks) for k in keys]
    outcome = sequential(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]), effect=effect,
                         max_orders=max_orders, alpha=alpha)
    decisions = outcome.decisions()
    out = {}
    for key, decision in zip(keys, decisions):
        have = min(len(per_order_data[key][1]), looks)
        out[key] = dataclasses.replace(decision, orders_used=min(decision.orders_used, have))
    return out


def _pad(d: np.ndarray, v: np.ndarray, looks: int) -> tuple[np.ndarray, np.ndarray]:
    """A comparison with fewer orders than its family: NaN looks, which never cross a boundary (NaN > c is
    False) and so keep it undecided where its data end. Its interval past that is NaN."""
    d, v = np.asarray(d, dtype=np.float64), np.asarray(v, dtype=np.float64)
    missing = looks - len(d)
    return np.r_[d, np.full(missing, np.nan)], np.r_[v, np.full(missing, np.nan)]


def decide_run(run_dir: str | Path, *, baseline: str = "standard", effect: float = DEFAULT_EFFECT_PP,
               max_orders: int = DEFAULT_MAX_ORDERS, alpha: float = ALPHA) -> dict[str, Decision]:
    """The rule replayed over a run folder's finished orders (0, 1, 2, ...): every method against
    ``baseline`` in each env (and budget point), one family.

    Args:
        run_dir: the run folder.
        baseline: the method every other is compared with.
        effect: the smallest difference worth finding, in percentage points.
        max_orders: the orders planned at most (the looks).
        alpha: the family-wise error rate.

    Returns:
        A :class:`Decision` per comparison, keyed ``"<env>/<method>"`` (``"db/tokenworth"``).
    """
    check(effect, max_orders)
    data = {key: per_order(matched) for key, matched in comparisons_of_run(run_dir, baseline).items()}
    return decide(data, effect=effect, max_orders=max_orders, alpha=alpha)


__all__ = ["ALPHA", "DEFAULT_EFFECT_PP", "DEFAULT_MAX_ORDERS", "MIN_ORDERS", "BETTER", "WORSE", "SMALLER", "UNDECIDED",
           "Decision", "Outcome", "check", "boundaries", "spent", "first_look", "sequential", "per_order",
           "comparisons_of_run", "decide", "decide_run"]
