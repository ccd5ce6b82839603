"""Power: the smallest difference a run can detect, and the tasks and seeds a planned run needs.

Both come from a pilot's paired differences ``d = a - b`` (two methods on the same tasks and seeds) and
statsmodels' power of the one-sample t test (:class:`statsmodels.stats.power.TTestPower`), the test the
comparison makes (its df: tasks - 1). The unit is the task: with ``S`` seeds a task's difference is the
mean of its ``S`` pairs, whose variance is ``between + within / S``:

* ``within`` — the variance of ``d`` between the seeds of one task (the backbone's randomness): the pooled
  within-task variance (needs two seeds or more);
* ``between`` — the variance of the tasks' own expected differences (where the method helps and where it
  hurts): the second moment of the task means, less ``within / S`` (floored at 0).

The variances are taken around 0, not around the observed mean: what a test of "no difference" faces. For 0/1
outcomes the second moment of ``d`` is the *discordance*, the share of pairs where exactly one method succeeds
(MDE ~ 2.8 sqrt(discordance / tasks) at 80 % power and alpha 0.05).

A one-seed pilot cannot split the two: its discordance is ``between + within``. Its plan for ``S`` seeds is a
range (:class:`Plan`): from "seeds independent" (``between = 0``: S seeds count as S times the tasks) to
"seeds repeat the task" (``within = 0``: more seeds do not help at all).

A pilot with several seeds estimates ``between`` as a difference of two noisy moments; a negative estimate is
floored at 0, the most optimistic plan (seeds then count as tasks). So its plan is a range as well: from the
estimate to the one-sided 95 % upper bound of ``between`` (``between_high``: the chi-square upper bound of
the task means' second moment less the chi-square lower bound of ``within / S``; normal-theory, so a guide,
not a guarantee, for 0/1 differences).

**Orders.** A claim about orders of the benchmark (its tasks in other orders) is tested on the per-order
differences (:func:`orders_needed`): their variance is the spread between orders plus one order's sampling
variance (``per_task / tasks``). More tasks or seeds shrink only the second part, so when orders differ no
number of tasks makes one order enough; the orders needed have a floor set by the spread alone.

**Nothing to plan from.** A pilot whose paired differences are all 0 (two methods that agree on every task:
both at 0 %) shows no variance: the MDE and the tasks needed are *unknown* (NaN; :func:`unknown`
says why), not 0 and not 2 tasks.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

ALPHA = 0.05
POWER = 0.8
SEEDS = (1, 2, 3, 5, 10)  # the seed counts a plan is tabulated for


@dataclasses.dataclass(frozen=True)
class Components:
    """The variance of a paired difference, split by task (module docstring); ``seeds`` per task in the pilot."""

    between: float | None  # None: a one-seed pilot cannot tell (``total`` is between + within)
    within: float | None
    total: float  # the second moment of d: between + within (one seed: the discordance)
    tasks: int
    seeds: int
    between_high: float | None = None  # the one-sided 95 % upper bound of ``between`` (several seeds)

    def per_task(self, seeds: int) -> tuple[float, float]:
        """The variance of a task's mean difference over ``seeds`` seeds: (best, worst) case. One-seed pilot:
        seeds independent / seeds repeat the task; several: ``between`` at its estimate / its upper bound."""
        if self.between is None or self.within is None:
            return self.total / seeds, self.total
        high = self.between if self.between_high is None else max(self.between, self.between_high)
        return self.between + self.within / seeds, high + self.within / seeds


def components(d: Any, clusters: Sequence[Any] | np.ndarray | None = None) -> Components:
    """The variance components of paired differences ``d`` (one per pair), grouped by task (``clusters``)."""
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError("power: expected a non-empty one-dimensional array of paired differences")
    if clusters is None:
        return Components(None, None, float(np.mean(d ** 2)), d.size, 1)
    _, inverse, counts = np.unique(np.asarray(clusters), return_inverse=True, return_counts=True)
    tasks = len(counts)
    sums = np.bincount(inverse, weights=d, minlength=tasks)
    means = sums / counts
    seeds = int(round(float(np.mean(counts))))
    total = float(np.mean(d ** 2))
    if seeds < 2:
        return Components(None, None, total, tasks, 1)
    from scipy import stats

    squares = np.bincount(inverse, weights=d ** 2, minlength=tasks)
    df_within = max(1, int(np.sum(counts - 1)))
    within = float(np.sum(squares - counts * means ** 2) / df_within)
    second = float(np.mean(means ** 2))  # estimates between + within / seeds
    between = max(0.0, second - within / seeds)
    # one-sided 95 % bounds (chi-square, normal theory): the means' second moment high, within low
    second_high = tasks * second / float(stats.chi2.ppf(0.05, tasks))
    within_low = within * df_within / float(stats.chi2.ppf(0.95, df_within))
    between_high = max(between, second_high - within_low / seeds)
    return Components(between, within, total, tasks, seeds, between_high)


def _solver() -> Any:
    from statsmodels.stats.power import TTestPower

    return TTestPower()


def unknown(parts: Components) -> str | None:
    """Why the MDE and the plan cannot be computed from ``parts`` (None when they can)."""
    if parts.tasks < 2:
        return "fewer than two tasks paired: no spread to plan from"
    if parts.total <= 0:
        return ("no pair differs (the two methods agree on every task, e.g. both at 0 %): the pilot shows no "
                "variance to plan from")
    return None


def mde(parts: Components, tasks: int | None = None, seeds: int | None = None, *, alpha: float = ALPHA,
        power: float = POWER) -> float:
    """The smallest true difference (in ``d``'s units) that ``tasks`` tasks x ``seeds`` seeds (default: the
    pilot's own) detect with ``power`` at two-sided ``alpha``; with more seeds than the pilot's, the
    conservative end of the range (:meth:`Components.per_task`). NaN where :func:`unknown` says why."""
    tasks, seeds = tasks or parts.tasks, seeds or parts.seeds
    if tasks < 2 or unknown(parts) is not None:
        return math.nan
    variance = parts.per_task(seeds)[1] if seeds != parts.seeds else _observed(parts)
    effect = _solver().solve_power(effect_size=None, nobs=tasks, alpha=alpha, power=power,
                                   alternative="two-sided")
    return float(np.asarray(effect).ravel()[0]) * math.sqrt(variance)  # statsmodels answers a scalar or (1,)


def _observed(parts: Components) -> float:
    """The per-task variance of the pilot's own design (its seeds)."""
    return parts.per_task(parts.seeds)[0]


def tasks_needed(delta: float, parts: Components, seeds: int, *, alpha: float = ALPHA,
                 power: float = POWER) -> tuple[float, float]:
    """Tasks that detect a true difference ``delta`` with ``power`` at ``seeds`` seeds: (best, worst) case
    (:meth:`Components.per_task`). NaN, both, for a pilot without any variance (:func:`unknown`)."""
    if delta <= 0:
        raise ValueError(f"--plan: the difference to detect must be positive, got {delta}")
    if unknown(parts) is not None:
        return math.nan, math.nan
    out = []
    for variance in parts.per_task(seeds):
        nobs = _solver().solve_power(effect_size=delta / math.sqrt(variance), nobs=None, alpha=alpha, power=power,
                                     alternative="two-sided")
        out.append(float(math.ceil(float(np.asarray(nobs).ravel()[0]))))
    return out[0], out[1]


@dataclasses.dataclass(frozen=True)
class Plan:
    """Tasks needed per seed count to detect ``delta``: ``rows`` of (seeds, best, worst)."""

    delta: float
    rows: tuple[tuple[int, float, float], ...]
    known: bool  # the pilot had several seeds (it split the variance; the range is between's uncertainty)
    unknown: str | None = None  # why no plan can be made (then every entry of ``rows`` is NaN)


def plan(delta: float, parts: Components, seeds: Sequence[int] = SEEDS, *, alpha: float = ALPHA,
         power: float = POWER) -> Plan:
    """Tasks needed to detect ``delta`` for each seed count in ``seeds``, at two-sided ``alpha``."""
    rows = tuple((s, *tasks_needed(delta, parts, s, alpha=alpha, power=power)) for s in seeds)
    return Plan(delta, rows, parts.between is not None, unknown(parts))


def orders_needed(delta: float, between: float, within: float, *, alpha: float = ALPHA, power: float = POWER,
                  most: int = 1000) -> float:
    """Task orders that detect a true difference ``delta`` **over orders** with ``power`` at two-sided
    ``alpha``: the one-sample t test on the per-order differences (df: orders - 1), whose variance is
    ``between`` (the spread between orders) plus ``within`` (one order's sampling variance at the planned
    tasks and seeds). At least 2 (one order has no spread to test against); NaN for no variance at all,
    ``inf`` beyond ``most``."""
    if delta <= 0:
        raise ValueError(f"--plan: the difference to detect must be positive, got {delta}")
    variance = between + within
    if not variance > 0 or not math.isfinite(variance):
        return math.nan
    from scipy import stats

    # TTestPower's two-sided power at every order count at once; the first with enough (a search: solve_power
    # is unreliable at 1-3 df)
    k = np.arange(2, most + 1)
    critical, ncp = stats.t.isf(alpha / 2, k - 1), delta / math.sqrt(variance) * np.sqrt(k)
    reached = stats.nct.sf(critical, k - 1, ncp) + stats.nct.cdf(-critical, k - 1, ncp) >= power
    return float(k[np.argmax(reached)]) if reached.any() else math.inf


__all__ = ["ALPHA", "POWER", "SEEDS", "orders_needed", "Components", "components", "unknown", "mde", "tasks_needed", "Plan", "plan"]
