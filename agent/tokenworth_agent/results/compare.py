"""Paired comparisons of methods on the same tasks: ``tokenworth compare``, the end of ``summary.md``.

**Pairing.** Streams are grouped into *cells* by env and budget point of the grid (``o_max=64``); within a
cell each *arm* (a method, or a TokenWorth controller point of a sweep: :attr:`~.runs.Stream.arm`) is paired
with the baseline arm seed by seed, task by task: the tasks both streams ran (a partial stream pairs on its
recorded tasks), matched by their place in the stream and checked by task id. Run folders may differ (a
plugin's run against a built-in run of the same tasks and seeds; a run of ``standard`` alone against a run of
``rag`` alone); two streams that do not share their conditions (:meth:`~.runs.Stream.conditions`: backbone,
budget, harness, task data), their releases (:func:`release_difference`) or their task order are refused with
a :class:`CompareError` naming the difference in one line, never silently paired.

**Per arm** (:class:`Comparison`): the paired difference in SR (percentage points) and in output tokens
(:func:`~.estimate.paired`, clustered by task over seeds), its 95 % interval and p-value; the p-values
adjusted for the number of arms compared with the baseline in the cell (Holm,
``statsmodels.stats.multitest.multipletests``); a verdict (``better`` / ``worse`` at adjusted p < 0.05, else
``no detectable difference``); the minimum detectable effect at 80 % power at the level Holm's first step
tests (``0.05 / m`` for ``m`` comparisons in the cell; :mod:`~.power`), unknown (NaN) when no pair differs;
the lifelong gain (SR on the stream's last third minus its first, and that gain minus the baseline's, each
with its interval: exploratory, untested); and a check of the serial dependence along the stream (the
Driscoll-Kraay/Newey-West standard error, statsmodels' ``cov_type="hac-groupsum"``, at as many lags as the
memory bank holds memories, against the clustered one).

**Task orders.** A run of several orders (``tokenworth run --orders``) pairs within each order (the same task ids
in every order) and pools the orders in the main table, clustered by task over orders and seeds: a claim
about *these orders*. Per arm it adds each order's ΔSR (:func:`per_order`), how many orders favour the arm,
and ΔSR over orders of the benchmark (:func:`~.estimate.over_orders`: the per-order differences' mean, t
interval and test, the between-order variance component), Holm-adjusted, with its verdict
(:attr:`Comparison.orders_verdict`); :func:`orders_table` prints it, labelled as a claim about *orders of
this benchmark*. A one-order run's tables are as before. ``--sequential`` (:mod:`~.sequential`, which
imports this module) replays the sequential rule over the orders.

**Interval and verdict.** The interval (Bonett-Price adjusted Wald, per comparison) and the test (McNemar's
exact or the cluster t test, Holm-adjusted for the verdict) are different procedures and can disagree at the
edge; a row where they do is marked (:meth:`Comparison.marks`: ``†`` the interval and the unadjusted test
disagree, ``‡`` both say "different" but Holm's adjustment does not) and the table's note says why.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from tokenworth_agent.results import estimate as E
from tokenworth_agent.results import power
from tokenworth_agent.results.runs import RunError, Stream, streams as read_streams

DEFAULT_BASELINE = "standard"
ALPHA = 0.05
SERIAL_NOTE_RATIO = 1.15  # a HAC standard error this much above the clustered one is reported ...
SERIAL_NOTE_PLACES = 100  # ... in a stream this long (in shorter ones the HAC error is itself too noisy) ...
# ... and above its own noise: the ratio's standard deviation is about sqrt(L / 3T) at L lags over T places
# (Bartlett kernel), so a note needs the ratio two of those above 1 (1.41 at 64 lags of 500 places)


def serial_threshold(lags: int, places: int) -> float:
    """The ratio of the serial-robust to the clustered standard error above which a table notes it."""
    return max(SERIAL_NOTE_RATIO, 1.0 + 2.0 * math.sqrt(lags / (3.0 * places)))


class CompareError(ValueError):
    """Streams that cannot be compared (no baseline, unpairable conditions or task orders); one line."""


# ------------------------------------------------------------------------- pairing
@dataclasses.dataclass(frozen=True)
class Matched:
    """The pairs of one arm against the baseline in one cell, seed by seed (all arrays of one length)."""

    method: np.ndarray  # rewards of the arm
    baseline: np.ndarray
    method_tokens: np.ndarray
    baseline_tokens: np.ndarray
    task: np.ndarray  # the task id of each pair (the cluster)
    position: np.ndarray  # its place in the stream
    seed: np.ndarray
    bank_capacity: int | None = None  # B_max of the streams' budget: how far a memory can carry over
    order: np.ndarray | None = None  # the task order of each pair (None: all the benchmark's own, 0)

    @property
    def seeds(self) -> list[int]:
        return sorted({int(s) for s in self.seed})

    @property
    def orders(self) -> list[int]:
        return [0] if self.order is None else sorted({int(o) for o in self.order})

    @property
    def clusters(self) -> np.ndarray | None:
        """Task ids when a task appears more than once (several seeds or orders), else None (one pair per task)."""
        return self.task if len(self.seeds) > 1 or len(self.orders) > 1 else None

    def of_order(self, order: int) -> Matched:
        """The pairs of one task order."""
        if self.order is None:
            return self
        keep = self.order == order
        return Matched(self.method[keep], self.baseline[keep], self.method_tokens[keep], self.baseline_tokens[keep],
                       self.task[keep], self.position[keep], self.seed[keep], self.bank_capacity, self.order[keep])


def _where(stream: Stream) -> str:
    return f"{stream.run}/{stream.name}"


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def differences(one: Mapping[str, Any], other: Mapping[str, Any], names: tuple[str, str] = ("one", "the other"),
                limit: int = 3) -> str:
    """The settings two condition dicts disagree on, ``key: a in ONE, b in OTHER`` (the first ``limit``)."""
    a, b = _flat(one), _flat(other)
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    shown = "; ".join(f"{k} {a.get(k, 'unset')!r} in {names[0]}, {b.get(k, 'unset')!r} in {names[1]}"
                      for k in keys[:limit])
    return shown + (f"; and {len(keys) - limit} more" if len(keys) > limit else "")


def _release_conditions(entry: Mapping[str, Any]) -> dict[str, Any]:
    """What of a stream's release entry a paired stream must share: the benchmark's and the backbone's release,
    and the version of every distribution the entry names (the harness's own, ``tokenworth-agent``, made a
    built-in method: at another version the agent loop around the method is other code)."""
    out = {f"releases.{kind}": entry[kind] for kind in ("benchmark", "backbone") if kind in entry}
    for value in entry.values():
        if isinstance(value, str) and " " in value:
            distribution, version = value.rsplit(" ", 1)
            out[f"releases.{distribution}"] = version
    return out


def release_difference(one: Stream, other: Stream) -> str:
    """The releases two streams both record and disagree on (``differences``' form), ``""`` for none. A run's
    ``config.json`` lists only its own streams' releases and a stream made before releases were recorded has
    none: what one side lacks is unknown, not different, and is not compared. Each method's own release is
    its arm's identity, so two methods of other distributions pair."""
    a, b = one.release, other.release
    if a is None or b is None:
        return ""
    mine, theirs = _release_conditions(a), _release_conditions(b)
    shared = set(mine) & set(theirs)
    return differences({k: mine[k] for k in shared}, {k: theirs[k] for k in shared}, (_where(one), _where(other)))


def match(arm: Sequence[Stream], baseline: Sequence[Stream]) -> Matched | None:
    """Pair an arm's streams with the baseline's (one per seed and task order), task by task; None when no seed
    and order is shared."""
    by_seed = {(s.seed, s.order): s for s in baseline}
    columns: dict[str, list[Any]] = {k: [] for k in ("method", "baseline", "method_tokens", "baseline_tokens", "task",
                                                     "position", "seed", "order")}
    for stream in sorted(arm, key=lambda s: (s.order, s.seed)):
        other = by_seed.get((stream.seed, stream.order))
        if other is None:
            continue
        mismatch = (differences(stream.conditions(), other.conditions(), (_where(stream), _where(other)))
                    or release_difference(stream, other))
        if mismatch:
            raise CompareError(f"cannot pair {stream.arm} with {other.arm} ({stream.env}, seed {stream.seed}): "
                               f"{mismatch}; compare streams run under the same settings")
        mine = {r.index: r for r in stream.records}
        theirs = {r.index: r for r in other.records}
        for index in sorted(set(mine) & set(theirs)):
            if mine[index].task_id != theirs[index].task_id:
                raise CompareError(f"cannot pair {_where(stream)} with {_where(other)}: another task order (task "
                                   f"{index} is {mine[index].task_id} in the first, {theirs[index].task_id} in the "
                                   "second)")
            a, b = mine[index], theirs[index]
            for key, value in (("method", a.reward), ("baseline", b.reward), ("method_tokens", a.output_tokens),
                               ("baseline_tokens", b.output_tokens), ("task", a.task_id), ("position", index),
                               ("seed", stream.seed), ("order", stream.order)):
                columns[key].append(value)
    if not columns["task"]:
        return None
    capacity = next((s.budget.get("bank_capacity") for s in arm if s.budget.get("bank_capacity")), None)
    order = np.asarray(columns["order"])
    return Matched(*(np.asarray(columns[k], dtype=np.float64 if k in ("method", "baseline", "method_tokens",
                                                                         "baseline_tokens") else None)
                     for k in ("method", "baseline", "method_tokens", "baseline_tokens", "task", "position",
                               "seed")), bank_capacity=int(capacity) if capacity else None,
                   order=order if np.any(order != 0) else None)


Cell = tuple[str, tuple[tuple[str, Any], ...]]  # (env, budget point)


def cells(found: Iterable[Stream]) -> dict[Cell, dict[str, list[Stream]]]:
    """Streams by cell and arm; the same arm and seed twice in a cell (two runs) is refused."""
    grouped: dict[Cell, dict[str, list[Stream]]] = {}
    for stream in found:
        arms = grouped.setdefault((stream.env, stream.budget_point), {})
        same = [s for s in arms.get(stream.arm, []) if (s.seed, s.order) == (stream.seed, stream.order)]
        if same:
            where = f"seed {stream.seed}" + (f", order {stream.order}" if stream.order else "")
            raise CompareError(f"{stream.arm} ({stream.env}, {where}) is both {_where(same[0])} and "
                               f"{_where(stream)}; pass only one of those run folders")
        arms.setdefault(stream.arm, []).append(stream)
    return grouped


def pick_baseline(arms: Mapping[str, Sequence[Stream]], asked: str | None, where: str) -> str:
    """``asked``, else ``standard``, else the preset point of a sweep (its only arm without overrides)."""
    if asked is not None:
        if asked not in arms:
            raise CompareError(f"--baseline {asked}: {where} has no stream of it; it has {', '.join(arms)}")
        return asked
    if DEFAULT_BASELINE in arms:
        return DEFAULT_BASELINE
    presets = [a for a in arms if "@" not in a]
    if len({a.split("@")[0] for a in arms}) == 1 and len(presets) == 1:
        return presets[0]
    raise CompareError(f"{where} has no {DEFAULT_BASELINE} stream; pass --baseline METHOD (one of {', '.join(arms)})")


# ------------------------------------------------------------------------- comparing
@dataclasses.dataclass(frozen=True)
class Comparison:
    """One arm against the baseline in one cell (fractions inside; :meth:`to_json` writes percentage points)."""

    env: str
    point: str  # the budget point ("" for none)
    method: str
    baseline: str
    runs: tuple[str, ...]
    matched: Matched
    method_sr: E.Estimate
    baseline_sr: E.Estimate
    sr: E.Difference
    tokens: E.Difference
    parts: power.Components
    mde: float  # at ``mde_alpha``; NaN when unknown (``power.unknown(parts)`` says why)
    se_hac: float | None
    gain: E.Estimate  # the arm's SR, last third minus first third
    baseline_gain: E.Estimate
    relative_gain: E.Estimate  # the arm's gain minus the baseline's (paired)
    p_adjusted: float = math.nan
    tokens_p_adjusted: float = math.nan
    family: int = 1  # comparisons in the cell: Holm's m
    hac_lags: int | None = None  # the lags of ``se_hac``
    per_order: tuple[tuple[int, float], ...] = ()  # (order, ΔSR in that order) for each order run
    orders: E.OverOrders | None = None  # ΔSR over orders of the benchmark; None with one order
    orders_p_adjusted: float = math.nan  # the over-orders test, Holm over the cell's comparisons

    @property
    def favour(self) -> int:
        """How many orders favour the method (ΔSR > 0 in that order)."""
        return sum(1 for _, d in self.per_order if d > 0)

    @property
    def orders_verdict(self) -> str | None:
        """Whether the difference holds over orders of the benchmark (None for a run of one order)."""
        if self.orders is None:
            return None
        if not self.orders_p_adjusted < ALPHA:
            return "not shown over orders"
        return "better over orders" if self.orders.mean > 0 else "worse over orders"

    @property
    def mde_alpha(self) -> float:
        """The level of the MDE and the plan: Holm's first step, ``0.05 / m``."""
        return ALPHA / self.family

    def marks(self, tokens: bool = False) -> str:
        """``†`` where the interval and the unadjusted test disagree at 5 %, ``‡`` where both say "different"
        but the Holm-adjusted verdict does not; ``""`` for a row that says one thing (module docstring)."""
        d, adjusted = (self.tokens, self.tokens_p_adjusted) if tokens else (self.sr, self.p_adjusted)
        return _marks(d, adjusted)

    @property
    def verdict(self) -> str:
        return _verdict(self.sr.difference, self.p_adjusted, "better", "worse")

    @property
    def tokens_verdict(self) -> str:
        return _verdict(self.tokens.difference, self.tokens_p_adjusted, "more tokens", "fewer tokens")

    @property
    def serial_ratio(self) -> float | None:
        return None if self.se_hac is None or not self.sr.se else self.se_hac / self.sr.se

    def to_json(self) -> dict[str, Any]:
        """The object ``tokenworth compare --json`` prints (rates and their differences in percentage points)."""
        pp = 100.0
        return {"env": self.env, "point": self.point, "method": self.method, "baseline": self.baseline,
                "seeds": self.matched.seeds, "runs": list(self.runs), "n_pairs": self.sr.n,
                "n_tasks": self.parts.tasks, "difference": pp * self.sr.difference,
                "ci": [pp * self.sr.ci_low, pp * self.sr.ci_high], "se": pp * self.sr.se,
                "p_value": self.sr.p_value, "p_adjusted": self.p_adjusted, "test": self.sr.test,
                "verdict": self.verdict, "disagreement": _disagreement(self.marks()), "comparisons": self.family,
                "mde": pp * self.mde, "mde_alpha": self.mde_alpha, "mde_unknown": power.unknown(self.parts),
                "discordance": self.sr.second_moment,
                "method_sr": pp * self.method_sr.mean, "method_sr_ci": [pp * self.method_sr.ci_low,
                                                                       pp * self.method_sr.ci_high],
                "baseline_sr": pp * self.baseline_sr.mean, "baseline_sr_ci": [pp * self.baseline_sr.ci_low,
                                                                             pp * self.baseline_sr.ci_high],
                "se_hac": None if self.se_hac is None else pp * self.se_hac, "hac_lags": self.hac_lags,
                "tokens": {"difference": self.tokens.difference, "ci": [self.tokens.ci_low, self.tokens.ci_high],
                           "se": self.tokens.se, "p_value": self.tokens.p_value,
                           "p_adjusted": self.tokens_p_adjusted, "test": self.tokens.test,
                           "verdict": self.tokens_verdict, "disagreement": _disagreement(self.marks(tokens=True))},
                "gain": _pp_estimate(self.gain), "baseline_gain": _pp_estimate(self.baseline_gain),
                "gain_vs_baseline": _pp_estimate(self.relative_gain), "gain_status": "exploratory",
                "n_orders": len(self.per_order), "orders": [k for k, _ in self.per_order],
                "per_order": [{"order": k, "difference": pp * d} for k, d in self.per_order],
                **({"over_orders": self._over_orders_json()} if self.orders is not None else {})}

    def _over_orders_json(self) -> dict[str, Any]:
        pp, o = 100.0, self.orders
        assert o is not None
        return {"claim": "orders of this benchmark", "difference": pp * o.mean, "ci": [pp * o.ci_low, pp * o.ci_high],
                "se": pp * o.se, "p_value": o.p_value, "p_adjusted": self.orders_p_adjusted,
                "between_sd": pp * math.sqrt(o.between), "favour": self.favour, "verdict": self.orders_verdict}


def _pp_estimate(estimate: E.Estimate) -> dict[str, Any]:
    return {"difference": 100.0 * estimate.mean, "ci": [100.0 * estimate.ci_low, 100.0 * estimate.ci_high],
            "se": 100.0 * estimate.se}


def _verdict(difference: float, p_adjusted: float, up: str, down: str) -> str:
    if not p_adjusted < ALPHA:
        return "no detectable difference"
    return up if difference > 0 else down


def _marks(d: E.Difference, p_adjusted: float) -> str:
    excludes = bool(d.ci_low > 0 or d.ci_high < 0)
    tested = bool(d.p_value < ALPHA)
    if excludes != tested:
        return "†"
    return "‡" if excludes and not p_adjusted < ALPHA else ""


_DISAGREEMENTS = {"†": "interval-vs-test", "‡": "holm"}


def _disagreement(marks: str) -> str | None:
    """The JSON name of a row's mark (None: interval, test and verdict agree)."""
    return _DISAGREEMENTS.get(marks)


def thirds(position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the pairs on the first and on the last third of the stream's paired places."""
    places = np.unique(position)
    parts = np.array_split(places, 3)
    return np.isin(position, parts[0]), np.isin(position, parts[-1])


def _subset(clusters: np.ndarray | None, mask: np.ndarray) -> np.ndarray | None:
    return None if clusters is None else clusters[mask]


UNKNOWN = E.Estimate(math.nan, math.nan, math.nan, math.nan, 0, 0)  # what a stream of under 3 tasks has of a gain


def lifelong(matched: Matched) -> tuple[E.Estimate, E.Estimate, E.Estimate]:
    """(The arm's gain, the baseline's gain, the arm's gain minus the baseline's): last third minus first;
    :data:`UNKNOWN` (NaN) for a stream of fewer than three paired places."""
    if len(np.unique(matched.position)) < 3:
        return UNKNOWN, UNKNOWN, UNKNOWN
    first, last = thirds(matched.position)
    clusters = matched.clusters
    gains = [E.independent_difference(E.rate(values[last], _subset(clusters, last)),
                                      E.rate(values[first], _subset(clusters, first)))
             for values in (matched.method, matched.baseline)]
    relative = E.independent_difference(
        E.as_estimate(E.paired(matched.method[last], matched.baseline[last], _subset(clusters, last))),
        E.as_estimate(E.paired(matched.method[first], matched.baseline[first], _subset(clusters, first))))
    return gains[0], gains[1], relative


def window_along_stream(tasks: int) -> int:
    """The window of the paired difference along the stream: a fifth of it, between 20 and 100 tasks."""
    return int(min(100, max(20, tasks // 5)))


def along_stream(matched: Matched, window: int | None = None) -> tuple[np.ndarray, E.Difference]:
    """The paired difference over a window of ``window`` consecutive stream places ending at each place
    (x: that place, 1-based), with its 95 % interval (:func:`~.estimate.paired`, clustered by task when
    several seeds); all windows in one batched call when every place holds the same number of pairs."""
    from numpy.lib.stride_tricks import sliding_window_view

    places, counts = np.unique(matched.position, return_counts=True)
    window = min(window or window_along_stream(len(places)), len(places))
    ends = places[window - 1:].astype(int) + 1
    if np.all(counts == counts[0]):
        seeds = int(counts[0])
        order = np.argsort(matched.position, kind="stable")  # place by place, its seeds together

        def windows(values: np.ndarray) -> np.ndarray:  # (windows, window * seeds), place-major
            grid = values[order].reshape(len(places), seeds)
            return sliding_window_view(grid, window, axis=0).transpose(0, 2, 1).reshape(len(ends), window * seeds)

        clusters = np.repeat(np.arange(window), seeds) if seeds > 1 else None
        return ends, E.paired(windows(matched.method), windows(matched.baseline), clusters)
    several = len(matched.seeds) > 1
    parts = []
    for end in range(window, len(places) + 1):
        mask = np.isin(matched.position, places[end - window:end])
        parts.append(E.paired(matched.method[mask], matched.baseline[mask], matched.task[mask] if several else None))
    fields = {f: np.asarray([getattr(p, f) for p in parts]) for f in ("difference", "se", "ci_low", "ci_high",
                                                                        "p_value", "second_moment")}
    return ends, E.Difference(n=parts[0].n, n_clusters=parts[0].n_clusters, test=parts[0].test, **fields)


def serial_lags(places: int, bank_capacity: int | None = None) -> int:
    """The lags of the serial check: as many as the bank holds memories (a memory stored at task t can be
    injected until B_max later stores evict it, so carry-over reaches about B_max places), at most a quarter
    of the stream (beyond, the Bartlett estimate is mostly noise) and at least Newey-West's rule of thumb
    ``floor(4 (T/100)^(2/9))`` (also the choice when B_max is unknown)."""
    rule = int(math.floor(4 * (places / 100) ** (2 / 9)))
    if not bank_capacity:
        return rule
    return max(rule, min(int(bank_capacity), places // 4))


def serial_se(d: np.ndarray, position: np.ndarray, lags: int | None = None) -> float | None:
    """The standard error of ``mean(d)`` robust to serial dependence along the stream: Driscoll-Kraay
    (statsmodels' ``hac-groupsum``: the pairs summed per stream place, i.e. per task, then Newey-West over
    the places at ``lags`` lags, default :func:`serial_lags` without a bank). None for fewer than 3 places."""
    # the one class, not statsmodels.api (which imports every model and the formula layer: half a CPU-second more)
    from statsmodels.regression.linear_model import OLS

    places = len(np.unique(position))
    if places < 3 or not np.any(d != d[0]):
        return None
    order = np.argsort(position, kind="stable")
    lags = serial_lags(places) if lags is None else lags
    fit = OLS(d[order], np.ones(len(d))).fit(cov_type="hac-groupsum",
                                              cov_kwds={"time": position[order].astype(int), "maxlags": lags})
    return float(fit.bse[0])


def per_order(matched: Matched) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Each order's paired ΔSR (a fraction) and its sampling variance: :func:`~.estimate.paired` on the order's
    pairs (clustered by task over its seeds); the inputs of :func:`~.estimate.over_orders` and of the
    sequential rule (:mod:`~.sequential`). The variance is NaN for an order of one task."""
    orders = matched.orders
    diffs, variances = [], []
    for order in orders:
        own = matched.of_order(order)
        d = E.paired(own.method, own.baseline, own.clusters, binary=True)
        diffs.append(float(d.difference))
        variances.append(float(d.se) ** 2)
    return orders, np.asarray(diffs), np.asarray(variances)


def compare_arm(env: str, point: str, method: str, baseline: str, matched: Matched, runs: Sequence[str]) -> Comparison:
    clusters = matched.clusters
    sr = E.paired(matched.method, matched.baseline, clusters, binary=True)
    tokens = E.paired(matched.method_tokens, matched.baseline_tokens, clusters, binary=False)  # counts, never 0/1
    parts = power.components(matched.method - matched.baseline, matched.task)
    gain, baseline_gain, relative = lifelong(matched)
    lags = serial_lags(len(np.unique(matched.position)), matched.bank_capacity)
    orders, diffs, variances = per_order(matched)
    over = (E.over_orders(diffs, variances) if len(orders) > 1 and np.all(np.isfinite(variances)) else None)
    return Comparison(env=env, point=point, method=method, baseline=baseline, runs=tuple(runs), matched=matched,
                      per_order=tuple(zip(orders, (float(d) for d in diffs))), orders=over,
                      method_sr=E.rate(matched.method, clusters), baseline_sr=E.rate(matched.baseline, clusters),
                      sr=sr, tokens=tokens, parts=parts, mde=power.mde(parts),
                      se_hac=serial_se(matched.method - matched.baseline, matched.position, lags), gain=gain,
                      baseline_gain=baseline_gain, relative_gain=relative, hac_lags=lags)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (as ``statsmodels.stats.multitest.multipletests(method="holm")``, which the tests
    check; computed here, as that function collects garbage on every call, a quarter second). A NaN p-value (no
    test: one order has none over orders) stays NaN and is not in the family."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    known = np.flatnonzero(np.isfinite(p))
    order = known[np.argsort(p[known], kind="stable")]
    m = len(order)
    steps = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(steps) if m else steps
    return [float(x) for x in out]


def compare(found: Sequence[Stream], baseline: str | None = None, *, strict: bool = True) -> list[Comparison]:
    """Every arm against the baseline, cell by cell (module docstring). ``strict``: a cell without the
    baseline is an error (``tokenworth compare``); else it is skipped (the summary of a run without it)."""
    out: list[Comparison] = []
    grouped = cells(found)
    if not grouped:
        raise CompareError("no stream holds records yet; nothing to compare")
    for (env, point), arms in grouped.items():
        label = ",".join(f"{k}={v}" for k, v in point)
        where = f"{env}" + (f" at {label}" if label else "")
        try:
            base = pick_baseline(arms, baseline, where)
        except CompareError:
            if strict:
                raise
            continue
        found_here = []
        for arm, members in arms.items():
            if arm == base:
                continue
            matched = match(members, arms[base])
            if matched is None:
                continue
            runs = list(dict.fromkeys(str(s.run) for s in [*members, *arms[base]]))
            found_here.append(compare_arm(env, label, arm, base, matched, runs))
        adjusted = holm([c.sr.p_value for c in found_here])
        tokens_adjusted = holm([c.tokens.p_value for c in found_here])
        orders_adjusted = holm([c.orders.p_value if c.orders is not None else math.nan for c in found_here])
        m = len(found_here)  # the MDE at Holm's first step, the strictest level a verdict here faces
        out += [dataclasses.replace(c, p_adjusted=p, tokens_p_adjusted=t, family=m, orders_p_adjusted=o,
                                    mde=power.mde(c.parts, alpha=ALPHA / m))
                for c, p, t, o in zip(found_here, adjusted, tokens_adjusted, orders_adjusted)]
    if strict and not out:
        raise CompareError("no method shares a seed and a task with the baseline; nothing to compare")
    return out


def compare_runs(runs: Sequence[str | Path], baseline: str | None = None) -> list[Comparison]:
    """:func:`compare` over every stream (finished or partial) of the run folders ``runs``."""
    found: list[Stream] = []
    for run in runs:
        found += read_streams(run)
    return compare(found, baseline)


# ------------------------------------------------------------------------- tables
def _num(value: float, digits: int = 1, sign: bool = False) -> str:
    if value is None or not np.isfinite(value):
        return "—"
    text = f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"
    return text.replace("-", "−")


def _ci(low: float, high: float, digits: int = 1, sign: bool = True) -> str:
    return f"[{_num(low, digits, sign)}, {_num(high, digits, sign)}]"


def _p(value: float) -> str:
    if not np.isfinite(value):
        return "—"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _groups(comparisons: Sequence[Comparison]) -> dict[tuple[str, str, str], list[Comparison]]:
    grouped: dict[tuple[str, str, str], list[Comparison]] = {}
    for c in comparisons:
        grouped.setdefault((c.env, c.point, c.baseline), []).append(c)
    return grouped


def markdown(comparisons: Sequence[Comparison], heading: str = "##") -> str:
    """The comparison tables: one per (env, budget point), then the lifelong gain, then how to read them."""
    lines: list[str] = []
    notes: list[str] = []
    marked: set[str] = set()
    for (env, point, base), rows in _groups(comparisons).items():
        seeds = rows[0].matched.seeds
        where = env.upper() + (f" · {point}" if point else "")
        orders = sorted({k for c in rows for k, _ in c.per_order})
        several = len(orders) > 1
        lines += [f"{heading} Paired comparison against {base} · {where} · seed{'s' if len(seeds) > 1 else ''} "
                  f"{','.join(map(str, seeds))}"
                  + (f" · orders {','.join(map(str, orders))} (about these orders)" if several else ""), "",
                  f"| Method | Pairs | SR (%) | ΔSR (pp) | 95 % CI | p | p (Holm) | Verdict | MDE (pp) "
                  f"| ΔOutputTok | 95 % CI | p (Holm) |",
                  "|---|---:|---:|---:|---|---:|---:|---|---:|---:|---|---:|"]
        base_sr = rows[0].baseline_sr
        lines.append(f"| {base} | — | {_num(100 * base_sr.mean)} {_ci(100 * base_sr.ci_low, 100 * base_sr.ci_high, sign=False)} "
                     "| — | — | — | — | baseline | — | — | — | — |")
        for c in rows:
            sr_mark, tok_mark = c.marks(), c.marks(tokens=True)
            marked |= {sr_mark, tok_mark} - {""}
            lines.append(
                f"| {c.method} | {c.sr.n} | {_num(100 * c.method_sr.mean)} "
                f"{_ci(100 * c.method_sr.ci_low, 100 * c.method_sr.ci_high, sign=False)} "
                f"| {_num(100 * c.sr.difference, sign=True)} | {_ci(100 * c.sr.ci_low, 100 * c.sr.ci_high)} "
                f"| {_p(c.sr.p_value)} | {_p(c.p_adjusted)} | {c.verdict}{' ' + sr_mark if sr_mark else ''} "
                f"| {_num(100 * c.mde)} "
                f"| {_num(c.tokens.difference, sign=True)} | {_ci(c.tokens.ci_low, c.tokens.ci_high)} "
                f"| {_p(c.tokens_p_adjusted)}{' ' + tok_mark if tok_mark else ''} |")
            why = power.unknown(c.parts)
            if why is not None:
                notes.append(f"{c.method} ({where}): MDE and plan unknown: {why}.")
            ratio = c.serial_ratio
            if (ratio is not None and c.parts.tasks >= SERIAL_NOTE_PLACES
                    and ratio > serial_threshold(c.hac_lags or 1, c.parts.tasks)):
                notes.append(f"{c.method} ({where}): the serial-dependence-robust standard error is {ratio:.2f}× the "
                             "clustered one; its interval may be too narrow (docs/results.md, \"Dependence along the "
                             "stream\").")
        lines += ["", _table_note(rows)]
        if several:
            lines += ["", *orders_table(rows, base, heading)]
        lines += ["", f"{heading}# Gain over the stream (exploratory: SR on the last third of the tasks minus the first "
                  "third)", "",
                  f"| Method | Gain (pp) | 95 % CI | Gain − {base}'s (pp) | 95 % CI |", "|---|---:|---|---:|---|"]
        lines.append(f"| {base} | {_num(100 * rows[0].baseline_gain.mean, sign=True)} "
                     f"| {_ci(100 * rows[0].baseline_gain.ci_low, 100 * rows[0].baseline_gain.ci_high)} | — | — |")
        for c in rows:
            lines.append(f"| {c.method} | {_num(100 * c.gain.mean, sign=True)} "
                         f"| {_ci(100 * c.gain.ci_low, 100 * c.gain.ci_high)} "
                         f"| {_num(100 * c.relative_gain.mean, sign=True)} "
                         f"| {_ci(100 * c.relative_gain.ci_low, 100 * c.relative_gain.ci_high)} |")
        lines.append("")
    tests = sorted({c.sr.test for c in comparisons})
    lines += [f"Paired on the tasks both ran (by seed and task). ΔSR: mean paired difference in percentage points, "
              f"95 % interval (per comparison), p from {_test_names(tests)}; p (Holm): adjusted over the methods "
              "compared in the table; verdict at adjusted p < 0.05. MDE: the smallest true ΔSR this run detects "
              "with 80 % power at the level Holm's first step tests (under the table; from its discordance). "
              "ΔOutputTok: mean paired difference in output tokens per task. Gain over the stream: exploratory "
              "(intervals only, no test, no adjustment); the thirds hold different tasks of a fixed order, so a "
              "method's gain mixes what it learns with the order's difficulty, which the baseline faces too. "
              "How each number is estimated: docs/results.md.",
              *[f"{mark} {_MARK_NOTES[mark]}" for mark in sorted(marked)], *(["", *notes] if notes else [])]
    return "\n".join(lines) + "\n"


_MARK_NOTES = {
    "†": ("The 95 % interval and the p-value disagree on whether 0 is excluded: they are two procedures (the interval "
          "is Bonett–Price's adjusted Wald, one pseudo-pair discordant each way added; the test is McNemar's exact "
          "test or the cluster t test), which differ at the 5 % edge. The verdict follows the test; read the row as "
          "borderline."),
    "‡": ("The 95 % interval excludes 0 and the unadjusted p is below 0.05, but Holm's adjusted p is not: the interval "
          "is for this comparison alone, the verdict holds the error rate over all the comparisons of the table."),
}


def orders_table(rows: Sequence[Comparison], base: str, heading: str = "##") -> list[str]:
    """The table of a run of several task orders: each method's ΔSR in each order, how many orders favour it,
    the spread between orders, and ΔSR over orders of the benchmark with its interval, test and verdict."""
    orders = sorted({k for c in rows for k, _ in c.per_order})
    lines = [f"{heading}# Over task orders (about orders of this benchmark: its tasks in any order)", "",
             "| Method | " + " | ".join(f"ΔSR order {k} (pp)" for k in orders)
             + " | Favour | Between-order sd (pp) | ΔSR over orders (pp) | 95 % CI | p (Holm) | Verdict |",
             "|---|" + "---:|" * len(orders) + "---:|---:|---:|---|---:|---|"]
    for c in rows:
        own = dict(c.per_order)
        o = c.orders
        cells_ = " | ".join(_num(100 * own[k], sign=True) if k in own else "—" for k in orders)
        if o is None:
            lines.append(f"| {c.method} | {cells_} | {c.favour}/{len(c.per_order)} | — | — | — | — | — |")
            continue
        lines.append(f"| {c.method} | {cells_} | {c.favour}/{len(c.per_order)} | {_num(100 * math.sqrt(o.between))} "
                     f"| {_num(100 * o.mean, sign=True)} | {_ci(100 * o.ci_low, 100 * o.ci_high)} "
                     f"| {_p(c.orders_p_adjusted)} | {c.orders_verdict} |")
    lines += ["", f"The table above pools the orders run (clustered by task over orders and seeds): its verdict is "
              f"about these {len(orders)} orders. This table is about orders of this benchmark: ΔSR over orders is "
              "the mean of the per-order differences, its interval the t interval (orders − 1 df) from their observed "
              "spread (the between-order variance and each order's sampling noise together); p (Holm) over "
              f"the methods compared with {base}. Favour: orders where the method's ΔSR is above 0. A method whose "
              "difference flips sign between orders is not shown over orders however clear one order is "
              "(docs/results.md, \"Which claim a table states\")."]
    return lines


def _table_note(rows: Sequence[Comparison]) -> str:
    """The level of the MDE and what the serial check saw, for one table."""
    m = rows[0].family
    level = f"α = 0.05/{m} = {ALPHA / m:.4g} (Holm's first step over {m} comparisons)" if m > 1 else "α = 0.05"
    ratios = [r for r in (c.serial_ratio for c in rows) if r is not None]
    lags = sorted({c.hac_lags for c in rows if c.hac_lags is not None})
    serial = ""
    if ratios and lags:
        span = f"{min(ratios):.2f}" + (f"–{max(ratios):.2f}" if max(ratios) - min(ratios) >= 0.005 else "")
        reach = "–".join(map(str, (lags[0], lags[-1]) if len(lags) > 1 else lags))
        serial = (f" Serial check: the Driscoll-Kraay standard error at {reach} lags (the bank's B_max, at most a "
                  f"quarter of the stream) is {span}× the clustered one; it cannot see dependence beyond those lags.")
    return f"MDE at {level}, 80 % power.{serial}"


def _test_names(tests: Sequence[str]) -> str:
    names = {"mcnemar-exact": "McNemar's exact test", "cluster-t": "the cluster-robust t test (clustered by task)",
             "paired-t": "the paired t test"}
    return " / ".join(names.get(t, t) for t in tests)


def _plan_cell(best: float, worst: float) -> str:
    if not (np.isfinite(best) and np.isfinite(worst)):
        return "—"
    return f"{best:,.0f}" if best == worst else f"{best:,.0f}–{worst:,.0f}"


def plan_markdown(comparisons: Sequence[Comparison], delta_pp: float, seeds: Sequence[int] = power.SEEDS) -> str:
    """How many tasks each comparison needs to detect ``delta_pp`` with 80 % power, by seed count, at the level
    of its MDE (Holm's first step)."""
    lines = [f"## Planning: tasks needed to detect {delta_pp:g} pp with 80 % power (two-sided, at Holm's first step)",
             "", "| Env | Method vs baseline | Pilot | Discordance | α | " + " | ".join(
                 f"{s} seed{'s' if s > 1 else ''}" for s in seeds) + " |",
             "|---|---|---|---:|---:|" + "---:|" * len(seeds)]
    one_seed = several = False
    unknown: list[str] = []
    for c in comparisons:
        made = power.plan(delta_pp / 100.0, c.parts, seeds, alpha=c.mde_alpha)
        one_seed |= not made.known and made.unknown is None
        several |= made.known and made.unknown is None
        if made.unknown is not None:
            unknown.append(f"{c.method} vs {c.baseline}: unknown, {made.unknown}.")
        pilot = f"{c.parts.tasks} tasks × {c.parts.seeds} seed{'s' if c.parts.seeds > 1 else ''}"
        if len(c.matched.orders) > 1:  # orders repeat a task like seeds do: this plan is about these orders
            pilot = (f"{c.parts.tasks} tasks × {len(c.matched.seeds)} seed{'s' if len(c.matched.seeds) > 1 else ''}"
                     f" × {len(c.matched.orders)} orders (each a repeat)")
        lines.append(f"| {c.env}{' · ' + c.point if c.point else ''} | {c.method} vs {c.baseline} | {pilot} "
                     f"| {100 * c.parts.total:.1f} % | {c.mde_alpha:.4g} | "
                     + " | ".join(_plan_cell(best, worst) for _, best, worst in made.rows) + " |")
    lines.append("")
    if one_seed:
        lines.append("A one-seed pilot cannot tell how much a task's outcome repeats across seeds: with more seeds the "
                     "range runs from \"seeds independent\" to \"seeds repeat the task\" (more seeds do not help); run "
                     "a pilot with two seeds to narrow it. ")
    if several:
        lines.append("A pilot with several seeds estimates the between-task variance with noise: the range runs from "
                     "its estimate (a negative one set to 0, the most optimistic) to its one-sided 95 % upper bound. ")
    lines += unknown
    lines.append("From the pilot's paired differences (statsmodels TTestPower; docs/results.md, \"Planning a run\").")
    lines += ["", *orders_plan_markdown(comparisons, delta_pp, seeds)]
    return "\n".join(lines) + "\n"


ONE_ORDER = ("a pilot of one task order cannot estimate the spread between orders: its plan is about this order; "
             "run three orders or more (tokenworth run --orders 0,1,2) to plan a conclusion about orders")


def orders_plan(comparison: Comparison, delta_pp: float, seeds: Sequence[int] = power.SEEDS
                ) -> dict[int, tuple[float, float]] | None:
    """Orders needed for a conclusion **about orders** (:func:`~.power.orders_needed`) at the pilot's tasks,
    per seed count: (best, worst) as the within-order variance's range (:meth:`~.power.Components.per_task`
    of the first order's pairs), plus the spread between orders; key 0: unlimited tasks and seeds (the
    spread alone). None for a one-order pilot (:data:`ONE_ORDER`)."""
    c = comparison
    if c.orders is None:
        return None
    first = c.matched.of_order(c.matched.orders[0])
    parts = power.components(first.method - first.baseline, first.task if len(first.seeds) > 1 else None)
    tasks, between = parts.tasks, float(c.orders.between)
    # unlimited tasks: the spread alone; none seen (the estimate errs low): the t test's least, two orders
    alone = power.orders_needed(delta_pp / 100, between, 0.0, alpha=c.mde_alpha) if between > 0 else 2.0
    out = {0: (alone, alone)}
    for s in seeds:
        best, worst = parts.per_task(s)
        out[s] = (power.orders_needed(delta_pp / 100, between, best / tasks, alpha=c.mde_alpha),
                  power.orders_needed(delta_pp / 100, between, worst / tasks, alpha=c.mde_alpha))
    return out


def orders_plan_markdown(comparisons: Sequence[Comparison], delta_pp: float,
                         seeds: Sequence[int] = power.SEEDS) -> list[str]:
    """The plan in orders: how many task orders a conclusion about orders needs (tasks × seeds × orders)."""
    lines = [f"### Orders needed for a conclusion about orders ({delta_pp:g} pp, 80 % power, at Holm's first step)",
             "", "| Env | Method vs baseline | Pilot | Between-order sd (pp) | " + " | ".join(
                 f"{s} seed{'s' if s > 1 else ''}" for s in seeds) + " | unlimited tasks |",
             "|---|---|---|---:|" + "---:|" * (len(seeds) + 1)]
    single = []
    for c in comparisons:
        made = orders_plan(c, delta_pp, seeds)
        if made is None:
            single.append(c)
            continue
        assert c.orders is not None
        seeds_run = len(c.matched.seeds)
        pilot = f"{c.parts.tasks} tasks × {seeds_run} seed{'s' if seeds_run > 1 else ''} × {c.orders.orders} orders"
        lines.append(f"| {c.env}{' · ' + c.point if c.point else ''} | {c.method} vs {c.baseline} | {pilot} "
                     f"| {_num(100 * math.sqrt(c.orders.between))} | "
                     + " | ".join(_plan_cell(*made[s]) for s in seeds) + f" | {_plan_cell(*made[0])} |")
    if len(single) == len(comparisons):
        return [f"Orders: {ONE_ORDER}."]
    lines += ["", "At the pilot's tasks per order: a conclusion about orders is tested on the per-order differences "
              "(t, orders − 1 df), whose variance is the spread between orders plus one order's sampling variance; "
              "more tasks or seeds shrink only the second, so the orders needed never fall below the last column "
              "(the spread alone). The range: the within-order variance as for the tasks above. The sequential rule "
              "(--sequential) decides, on average, before this fixed plan (docs/results.md, \"Deciding over task "
              "orders\")."]
    return lines


def plan_json(comparison: Comparison, delta_pp: float, seeds: Sequence[int] = power.SEEDS) -> dict[str, Any]:
    """The plan of one comparison as ``--json`` prints it (``tasks_needed``: null, and ``unknown`` says why, when the
    pilot shows no variance)."""
    made = power.plan(delta_pp / 100.0, comparison.parts, seeds, alpha=comparison.mde_alpha)
    by_orders = orders_plan(comparison, delta_pp, seeds)
    return {"delta": delta_pp, "alpha": comparison.mde_alpha, "power": power.POWER, "known": made.known,
            "orders_needed": None if by_orders is None else {
                ("unlimited" if s == 0 else str(s)): list(v) for s, v in by_orders.items()},
            "orders_unknown": ONE_ORDER if by_orders is None else None,
            "unknown": made.unknown, "tasks_needed": {str(s): [best, worst] for s, best, worst in made.rows}}


def render(runs: Sequence[str | Path], baseline: str | None = None, *, as_json: bool = False,
           plan: float | None = None) -> str:
    """What ``tokenworth compare`` prints (``--sequential`` adds :func:`~.sequential.render`'s part)."""
    import json

    if plan is not None and not plan > 0:
        raise CompareError(f"--plan {plan:g}: the difference to plan for must be a positive number of percentage points")
    comparisons = compare_runs(runs, baseline)
    if as_json:
        return json.dumps(plain(json_rows(comparisons, plan)), indent=2) + "\n"
    return text_of(comparisons, plan)


def json_rows(comparisons: Sequence[Comparison], plan: float | None = None) -> list[dict[str, Any]]:
    """``compare --json``'s objects (with the plan's when ``plan``)."""
    return [dict(c.to_json(), **({"plan": plan_json(c, plan)} if plan is not None else {})) for c in comparisons]


def text_of(comparisons: Sequence[Comparison], plan: float | None = None) -> str:
    """``compare``'s tables (and the plan's when ``plan``)."""
    text = markdown(comparisons)
    if plan is not None:
        text += "\n" + plan_markdown(comparisons, plan)
    return text


def plain(value: Any) -> Any:
    """JSON-safe: NaN and infinities as null (standard JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


__all__ = ["CompareError", "RunError", "Matched", "Comparison", "match", "cells", "compare", "compare_runs", "holm",
           "lifelong", "thirds", "serial_lags", "serial_threshold", "serial_se", "release_difference", "along_stream", "window_along_stream", "markdown", "plan_markdown", "plan_json", "render", "json_rows", "text_of", "per_order", "orders_table", "differences", "plain"]
