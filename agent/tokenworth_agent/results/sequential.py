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

* the estimate is the mean of the ``d_r``, its variance ``s^2 / k``, ``s^2`` the sample variance of the
  ``d_r``: the observed variance, the between-order component and the within-order noise together
  (:func:`~.estimate.over_orders`, the same estimator ``tokenworth compare`` shows over orders); the
  between-order component ``max(0, s^2 - mean(v))`` is reported with it;
* ``T = mean / se`` is compared with a boundary ``c_k`` from a group-sequential design with **alpha
  spending** over the planned looks (Lan & DeMets), the power family ``alpha(t) = alpha t^4`` of Kim & DeMets
  (1987), ``t = k / max_orders``: like O'Brien-Fleming's, it spends almost nothing at the first looks and
  keeps the last boundary near the fixed design's. Among the usual choices (Lan-DeMets O'Brien-Fleming
  type, ``t^2``, ``t^3``, ``t^4``, Hwang-Shih-DeCani -4), all of which hold the error rate, the planning
  simulation found it deciding most often within ten orders (docs/results.md). Because ``s^2`` has only ``k - 1`` degrees of freedom, the boundaries are not the normal ones:
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

from tokenworth_agent.results import estimate as E

ALPHA = 0.05
DEFAULT_EFFECT_PP = 3.0  # the smallest difference worth finding, in percentage points (futility below it)
DEFAULT_MAX_ORDERS = 10  # looks planned: orders at most
MIN_ORDERS = 3  # no decision before this many orders (the variance between orders needs them)
SPENDING_POWER = 4  # alpha t^4: O'Brien-Fleming-like, little spent early (module docstring, docs/results.md)
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
    between_sd: float = math.nan  # the spread between orders at stopping (sd, the difference's units)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """:func:`sequential`'s arrays, each of shape ``(..., comparisons)``."""

    code: np.ndarray  # 1 better, -1 worse, 2 smaller than the effect, 0 undecided
    orders_used: np.ndarray
    low: np.ndarray
    high: np.ndarray
    difference: np.ndarray
    between: np.ndarray  # the between-order variance component at stopping

    def decisions(self) -> list[Decision]:
        """One family's outcome (one-dimensional arrays) as :class:`Decision` objects."""
        return [Decision(_CODES[int(c)], int(k), (float(lo), float(hi)), float(d), math.sqrt(float(b)))
                for c, k, lo, hi, d, b in zip(self.code, self.orders_used, self.low, self.high, self.difference,
                                              self.between)]


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
    """The error allowed by information fraction ``fraction``: Kim and DeMets' power family ``alpha t^rho``
    at :data:`SPENDING_POWER` (module docstring)."""
    return float(alpha * fraction ** SPENDING_POWER)


@functools.lru_cache(maxsize=8)
def _null_statistics(max_orders: int) -> np.ndarray:
    """``|T_k|`` of :data:`CALIBRATION_PATHS` null experiments (iid standard normal per-order differences),
    shape ``(max_orders, paths)``; row ``k - 1`` is look ``k`` (NaN at look 1: no spread yet)."""
    z = np.random.default_rng(CALIBRATION_SEED).standard_normal((max_orders, CALIBRATION_PATHS))
    k = np.arange(1, max_orders + 1)[:, None]
    total, squares = np.cumsum(z, axis=0), np.cumsum(z * z, axis=0)
    mean = total / k
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = np.maximum(squares - k * mean * mean, 0.0) / (k - 1)
        return np.abs(mean) / np.sqrt(variance / k)


@functools.lru_cache(maxsize=64)
def boundaries(alpha: float, max_orders: int) -> np.ndarray:
    """The boundaries ``c_1 .. c_M`` for ``|T|`` (``inf`` where no decision is allowed), two-sided ``alpha``.

    Simulated (:data:`CALIBRATION_PATHS` null experiments of iid normal per-order differences, a fixed seed):
    at each look the boundary is the one that the experiments not stopped before cross with the spending's
    increment. Where that increment is too small to simulate, the marginal t quantile (``k - 1`` df) at the
    increment, which crosses at most as often (conservative)."""
    from scipy import stats

    t = _null_statistics(max_orders)
    n, start = t.shape[1], first_look(max_orders)
    out = np.full(max_orders, np.inf)
    alive = np.ones(n, dtype=bool)
    before = 0.0
    for k in range(start, max_orders + 1):
        now = spent(alpha, k / max_orders)
        increment, before = now - before, now
        hits = int(round(increment * n))
        if hits >= _MONTE_CARLO_HITS:
            left = t[k - 1][alive]
            c = float(np.partition(left, len(left) - hits - 1)[len(left) - hits - 1])  # ``hits`` lie above it
        else:
            c = float(stats.t.isf(increment / 2.0, k - 1))
        out[k - 1] = c
        alive &= t[k - 1] <= c
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
    between = np.full(shape, np.nan)
    # Before the first look the boundary is infinite and an order's spread can be 0: c * se is inf * 0 = NaN,
    # which compares false (nothing stops there), not a warning.
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(1, looks + 1):
            mean = d[..., :k].mean(axis=-1)
            se, spread = E.order_spread(d[..., :k], v[..., :k])  # the one estimator of a difference over orders
            t = np.abs(mean) / se
            open_ = (code == 0) & np.isfinite(mean)  # NaN: this comparison's orders have run out (see _pad)
            while True:  # Holm within the look: each rejection raises the others' share
                remaining = m - np.sum(np.abs(code) == 1, axis=-1, keepdims=True)
                c = table[np.maximum(remaining, 1) - 1, k - 1]
                reject = open_ & (t > c)
                if not reject.any():
                    break
                code = np.where(reject, np.where(mean > 0, 1, -1), code)
                used, low, high, centre, between = _record(reject, k, mean, c * se, spread, used, low, high, centre,
                                                           between)
                open_ &= ~reject
            futile = open_ & (mean - c * se > -effect) & (mean + c * se < effect)
            code = np.where(futile, 2, code)
            used, low, high, centre, between = _record(open_, k, mean, c * se, spread, used, low, high, centre,
                                                       between)
    return Outcome(code, used, low, high, centre, between)


def _record(where: np.ndarray, k: int, mean: np.ndarray, half: np.ndarray, spread: np.ndarray,
            *state: np.ndarray) -> tuple[np.ndarray, ...]:
    """The look ``k``'s estimate, interval and between-order component written where ``where`` (stopped
    now, or still open)."""
    used, low, high, centre, between = state
    return (np.where(where, k, used), np.where(where, mean - half, low), np.where(where, mean + half, high),
            np.where(where, mean, centre), np.where(where, spread, between))


# ------------------------------------------------------------------------- on a run folder
def comparisons_of_streams(found: Sequence[Any], baseline: str | None = "standard") -> dict[str, Any]:
    """Every arm against the baseline, cell by cell, as ``Matched`` pairs of the finished streams among
    ``found`` (a partial order is not a look yet); keyed ``env/method`` (``env/method@point`` at a budget point
    of a grid)."""
    from tokenworth_agent.results import compare as C

    finished = [s for s in found if s.finished]
    if not finished:
        raise C.CompareError("no finished stream yet; nothing to decide")
    out: dict[str, Any] = {}
    for (env, point), arms in C.cells(finished).items():
        label = ",".join(f"{k}={v}" for k, v in point)
        base = C.pick_baseline(arms, baseline, env + (f" at {label}" if label else ""))
        for arm, members in arms.items():
            if arm == base:
                continue
            matched = C.match(members, arms[base])
            if matched is not None:
                out[key(env, arm, label)] = matched
    return out


def key(env: str, arm: str, point: str = "") -> str:
    """A comparison's name in :func:`decide_run`'s answer: ``db/tokenworth``, ``db/tokenworth@o_max=64``."""
    return f"{env}/{arm}" + (f"@{point}" if point else "")


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
    for name, decision in zip(keys, decisions):
        have = min(len(per_order_data[name][1]), looks)
        out[name] = dataclasses.replace(decision, orders_used=min(decision.orders_used, have))
    return out


def _pad(d: np.ndarray, v: np.ndarray, looks: int) -> tuple[np.ndarray, np.ndarray]:
    """A comparison with fewer orders than its family: NaN looks, which never cross a boundary (NaN > c is
    False) and so keep it undecided where its data end, with the estimate of its last look."""
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
        A :class:`Decision` per comparison, keyed ``"<env>/<method>"`` (``"db/tokenworth"``); a comparison
        whose finished orders are fewer than :data:`MIN_ORDERS` is ``undecided`` (orders_used: those it has).

    Raises:
        ValueError: ``effect`` not positive or ``max_orders`` below 1 (one line naming it).
        tokenworth_agent.results.compare.CompareError: no finished stream, or an env without ``baseline``.
        tokenworth_agent.results.runs.RunError: not a run folder, or a stream that cannot be read.
    """
    from tokenworth_agent.results.runs import streams

    check(effect, max_orders)
    return decide_streams(streams(run_dir, finished_only=True), baseline=baseline, effect=effect,
                          max_orders=max_orders, alpha=alpha)


def decide_streams(found: Sequence[Any], *, baseline: str | None = "standard", effect: float = DEFAULT_EFFECT_PP,
                   max_orders: int = DEFAULT_MAX_ORDERS, alpha: float = ALPHA) -> dict[str, Decision]:
    """:func:`decide_run` on streams already read (``tokenworth compare --sequential`` over several runs)."""
    from tokenworth_agent.results.compare import per_order

    check(effect, max_orders)
    data = {}
    for name, matched in comparisons_of_streams(found, baseline).items():
        orders, diffs, variances = per_order(matched)
        data[name] = (orders, 100.0 * diffs, 1e4 * variances)  # percentage points
    return decide(data, effect=effect, max_orders=max_orders, alpha=alpha)


# ------------------------------------------------------------------------- tokenworth compare --sequential
def render(runs: Sequence[str | Path], baseline: str | None = None, *, as_json: bool = False,
           plan: float | None = None, effect: float | None = None, max_orders: int | None = None) -> str:
    """What ``tokenworth compare --sequential`` prints: compare's tables (:func:`~.compare.render`) and the rule
    replayed over the runs' orders at ``effect`` pp and ``max_orders`` looks (defaults when None); with
    ``as_json``, compare's objects with ``decision``, ``orders_used`` and the interval at stopping."""
    import json

    from tokenworth_agent.results import compare as C
    from tokenworth_agent.results.runs import streams

    effect = DEFAULT_EFFECT_PP if effect is None else effect
    max_orders = DEFAULT_MAX_ORDERS if max_orders is None else max_orders
    try:
        check(effect, max_orders)
    except ValueError as exc:
        raise C.CompareError(str(exc)) from None
    if plan is not None and not plan > 0:
        raise C.CompareError(f"--plan {plan:g}: the difference to plan for must be a positive number of percentage "
                             "points")
    found = [s for run in runs for s in streams(run)]
    comparisons = C.compare(found, baseline)
    decided = decide_streams(found, baseline=comparisons[0].baseline if baseline is None else baseline,
                             effect=effect, max_orders=max_orders)
    if as_json:
        rows = [dict(row, **_decision_json(decided.get(key(c.env, c.method, c.point))))
                for c, row in zip(comparisons, C.json_rows(comparisons, plan))]
        return json.dumps(C.plain(rows), indent=2) + "\n"
    return C.text_of(comparisons, plan) + "\n" + markdown(decided, effect, max_orders)


def _decision_json(decision: Decision | None) -> dict[str, Any]:
    if decision is None:  # no finished order of this comparison
        return {"decision": UNDECIDED, "orders_used": 0, "sequential_interval": None}
    return {"decision": decision.decision, "orders_used": decision.orders_used,
            "sequential_interval": list(decision.interval), "sequential_difference": decision.difference}


def markdown(decided: Mapping[str, Decision], effect: float, max_orders: int) -> str:
    """The rule's table: per comparison the decision, after how many orders, the interval then."""
    from tokenworth_agent.results.compare import _ci, _num

    lines = [f"## Sequential decision over task orders (about orders of this benchmark; effect ±{effect:g} pp, at most "
             f"{max_orders} orders, family-wise α {ALPHA:g} over {len(decided)} comparison"
             f"{'s' if len(decided) != 1 else ''})", "",
             "| Comparison | Decision | Orders used | ΔSR at stopping (pp) | Interval at stopping (pp) |",
             "|---|---|---:|---:|---|"]
    for name, d in decided.items():
        lines.append(f"| {name} | {d.decision} | {d.orders_used} | {_num(d.difference, sign=True)} "
                     f"| {_ci(*d.interval)} |")
    lines += ["", f"Orders replayed in the order they ran (0, 1, 2, ...), one look per finished order; no decision "
              f"before {first_look(max_orders)} orders. Better/worse: ΔSR over orders beyond a group-sequential "
              "boundary (alpha spent as α t⁴ over the planned orders, calibrated for the t statistic, Holm over the "
              "comparisons); smaller than the effect: the interval at stopping lies inside "
              f"(−{effect:g}, {effect:g}) pp; undecided: neither yet. docs/results.md, \"Deciding over task orders\"."]
    return "\n".join(lines) + "\n"


__all__ = ["ALPHA", "DEFAULT_EFFECT_PP", "DEFAULT_MAX_ORDERS", "MIN_ORDERS", "BETTER", "WORSE", "SMALLER", "UNDECIDED",
           "Decision", "Outcome", "check", "boundaries", "spent", "first_look", "sequential", "comparisons_of_streams",
           "key", "decide", "decide_run", "decide_streams", "render", "markdown"]
