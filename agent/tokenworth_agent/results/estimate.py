"""THE estimator: a rate or mean with its standard error and 95 % interval, and the paired difference.

Every rate, mean and comparison the harness shows (summaries, ``tokenworth compare``, ``tokenworth show``,
the trackers, the figures, the Inspect export) comes from these functions; ``docs/results.md`` ("How the
numbers are estimated") states each choice and its assumptions, and ``tests/test_estimate.py`` checks them
against scipy and statsmodels and by a coverage simulation.

The unit of sampling is the **task**: a stream's tasks stand for the benchmark's population of tasks. With
several seeds the same task appears once per seed, so outcomes are **clustered by task** (pass ``clusters``,
e.g. the task ids); with one observation per task (one seed) ``clusters`` may be left out, and every
formula reduces to the usual one.

* :func:`rate` — the mean of values in [0, 1] (0/1 rewards: a success rate). ``se``: the cluster-robust
  (CR1) standard error of the mean: ``sqrt(G/(G-1) * sum_g (sum_{i in g} (x_i - mean))^2) / n``, which is
  statsmodels' ``OLS(x, 1).fit(cov_type="cluster")`` and, with one value per cluster, exactly the CLT
  standard error ``s/sqrt(n)`` (``ddof=1``) that Inspect's ``stderr()`` reports. Interval: Wilson's score
  interval (``statsmodels.stats.proportion.proportion_confint(method="wilson")``) at the *effective* sample
  size ``n_eff = n / deff`` (:func:`effective_n`: the clustering's design effect taken out; ``n`` itself
  with one value per cluster, so one seed gives the textbook Wilson interval), so a rate of 0 % or 100 %
  gets an interval of positive width (``n_eff`` is then the number of clusters, which assumes the worst:
  every seed repeats its task's outcome).
* :func:`mean` — the mean of any values (output tokens): the same standard error, and the t interval
  ``mean ± t_{G-1} se`` (one seed: ``scipy.stats.ttest_1samp(...).confidence_interval()``).
* :func:`paired` — the mean of ``a - b`` over matched units (two methods on the same tasks and seeds): its
  cluster-robust standard error, a 95 % interval and a two-sided p-value. For 0/1 outcomes the p-value
  is McNemar's exact test with one seed (the exact binomial test on the discordant pairs, as
  ``statsmodels.stats.contingency_tables.mcnemar(exact=True)``), the cluster-robust t test (df G-1) with
  several; the interval is the cluster-robust t interval of the data with one pseudo-pair discordant each
  way added (Bonett & Price's adjusted Wald interval for paired proportions, 2012), which keeps it from
  collapsing to [0, 0] when no pair is discordant. For other values (tokens): ``scipy.stats.ttest_rel``
  with one seed, the cluster-robust t test with several, and the t interval. Whether the outcomes are 0/1
  is the caller's to say (``binary``): output tokens that happen to be all 0 or 1 (a budget of one token)
  are counts, not successes, and get no McNemar test and no pseudo-pairs.
* :func:`over_orders` — a difference over task orders from each order's paired difference and its variance:
  the mean over orders, its standard error from the observed spread of the per-order differences and the t
  interval with ``orders - 1`` df; the between-order variance component.
* :func:`independent_difference` — two estimates of *different* tasks (the stream's last third against its
  first): the MOVER interval from the two intervals (for two rates, Newcombe's hybrid score interval).

Every function takes the observations on the **last axis**: ``values`` of shape ``(..., n)`` estimates
each leading index at once (a simulation's runs, a figure's windows) and returns arrays of that leading
shape; one-dimensional input gives plain floats. ``clusters`` (length ``n``) is shared by the whole batch.
Results are in the values' own units (fractions for rates: the tables multiply by 100).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

LEVEL = 0.95


class Estimate(NamedTuple):
    """A mean with its standard error and interval; ``n`` values in ``n_clusters`` clusters."""

    mean: Any  # float, or an array of the batch's leading shape
    se: Any  # NaN with fewer than two clusters (no spread to estimate)
    ci_low: Any
    ci_high: Any
    n: int
    n_clusters: int


class Difference(NamedTuple):
    """A paired difference ``mean(a - b)``: standard error, interval, two-sided p-value, and how it was tested."""

    difference: Any
    se: Any
    ci_low: Any
    ci_high: Any
    p_value: Any
    n: int  # pairs
    n_clusters: int
    test: str  # "mcnemar-exact", "paired-t" (scipy.stats.ttest_rel) or "cluster-t"
    second_moment: Any  # mean((a - b)^2): the discordance for 0/1 outcomes, what power is planned from


# ------------------------------------------------------------------------- the pieces
def _observations(values: Any, what: str = "values") -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"{what}: no observations (the last axis is empty)")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what}: holds NaN or infinite values")
    return x


def _clusters(clusters: Sequence[Any] | np.ndarray | None, n: int) -> tuple[tuple[np.ndarray, np.ndarray] | None, int]:
    """(The order that sorts the observations by cluster, where each cluster starts in it) and the number of
    clusters; None for the grouping when every observation is a cluster of its own."""
    if clusters is None:
        return None, n
    labels = np.asarray(clusters)
    if labels.shape != (n,):
        raise ValueError(f"clusters: expected one label per observation ({n}), got shape {labels.shape}")
    _, inverse = np.unique(labels, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(inverse[order]) != 0])
    if len(starts) == n:
        return None, n  # every cluster a singleton: the plain formulas
    return (order, starts), len(starts)


def _standard_error(x: np.ndarray, grouping: Any, n_clusters: int) -> np.ndarray:
    """CR1 cluster-robust standard error of the mean over the last axis (see the module docstring)."""
    n = x.shape[-1]
    if n_clusters < 2:
        return np.full(x.shape[:-1], np.nan)
    residuals = x - x.mean(axis=-1, keepdims=True)
    if grouping is None:
        sums_sq = np.sum(residuals ** 2, axis=-1)
    else:
        order, starts = grouping
        sums_sq = np.sum(np.add.reduceat(residuals[..., order], starts, axis=-1) ** 2, axis=-1)
    return np.sqrt(n_clusters / (n_clusters - 1) * sums_sq) / n


def _t_quantile(n_clusters: int, level: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, n_clusters - 1)) if n_clusters >= 2 else np.nan


def _out(value: Any) -> Any:
    """Plain floats for one-dimensional input, arrays for a batch."""
    array = np.asarray(value, dtype=np.float64)
    return float(array) if array.ndim == 0 else array


def wilson(p: Any, n_eff: Any, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's score interval for a proportion ``p`` observed on (a possibly fractional) ``n_eff``."""
    from statsmodels.stats.proportion import proportion_confint

    p, n_eff = np.broadcast_arrays(np.asarray(p, dtype=np.float64), np.asarray(n_eff, dtype=np.float64))
    low, high = proportion_confint(p * n_eff, n_eff, alpha=1 - level, method="wilson")
    # exactly 0 (1) at a rate of 0 (1): the closed form leaves rounding noise of 1e-19 there
    return np.where(p <= 0, 0.0, np.clip(low, 0.0, 1.0)), np.where(p >= 1, 1.0, np.clip(high, 0.0, 1.0))


def effective_n(p: Any, se: Any, n: int, n_clusters: int) -> np.ndarray:
    """``n / deff``, the design effect ``deff = se^2 / (p(1-p)/(n-1))`` being the squared ratio of the standard
    error to the one of ``n`` independent 0/1 values (so one value per cluster gives ``n`` itself); at most
    ``n``. Where it is undefined (a rate of 0 or 1, no spread) the number of clusters: the worst case, every
    value of a cluster the same."""
    p, se = np.asarray(p, dtype=np.float64), np.asarray(se, dtype=np.float64)
    variance = p * (1 - p)
    with np.errstate(divide="ignore", invalid="ignore"):
        n_eff = n * variance / ((n - 1) * se ** 2)
    return np.where((variance > 0) & np.isfinite(n_eff) & (se > 0), np.minimum(n_eff, n), float(n_clusters))


# ------------------------------------------------------------------------- the estimators
def rate(values: Any, clusters: Sequence[Any] | np.ndarray | None = None, *, level: float = LEVEL) -> Estimate:
    """A rate (mean of values in [0, 1]) with its cluster-robust standard error and Wilson interval at the
    effective sample size (module docstring). ``values``: shape ``(..., n)``; ``clusters``: ``n`` labels."""
    x = _observations(values)
    if np.any((x < 0) | (x > 1)):
        raise ValueError("rate: values must lie in [0, 1] (rewards); use mean() for other quantities")
    n = x.shape[-1]
    grouping, n_clusters = _clusters(clusters, n)
    p = x.mean(axis=-1)
    se = _standard_error(x, grouping, n_clusters)
    low, high = wilson(p, effective_n(p, se, n, n_clusters), level)
    return Estimate(_out(p), _out(se), _out(low), _out(high), n, n_clusters)


def mean(values: Any, clusters: Sequence[Any] | np.ndarray | None = None, *, level: float = LEVEL) -> Estimate:
    """A mean with its cluster-robust standard error and t interval (df = clusters - 1)."""
    x = _observations(values)
    n = x.shape[-1]
    grouping, n_clusters = _clusters(clusters, n)
    m = x.mean(axis=-1)
    se = _standard_error(x, grouping, n_clusters)
    half = _t_quantile(n_clusters, level) * se
    return Estimate(_out(m), _out(se), _out(m - half), _out(m + half), n, n_clusters)


def _binary(*arrays: np.ndarray) -> bool:
    return all(bool(np.all((a == 0) | (a == 1))) for a in arrays)


def paired(a: Any, b: Any, clusters: Sequence[Any] | np.ndarray | None = None, *, binary: bool | None = None,
           level: float = LEVEL) -> Difference:
    """The paired difference ``mean(a - b)`` of matched observations (module docstring).

    ``a`` and ``b``: the same shape ``(..., n)``, observation ``i`` of each on the same unit (task, seed);
    ``clusters``: ``n`` labels (the task of each pair) when a task appears several times; ``binary``: the
    values are 0/1 outcomes (rewards: McNemar and the adjusted interval) or not (tokens: the t test); None
    infers it from the values, which only rewards should rely on."""
    from scipy import stats

    x, y = _observations(a, "a"), _observations(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired: a and b must match pair by pair (shapes {x.shape} and {y.shape})")
    n = x.shape[-1]
    grouping, n_clusters = _clusters(clusters, n)
    d = x - y
    difference = d.mean(axis=-1)
    se = _standard_error(d, grouping, n_clusters)
    second_moment = np.mean(d ** 2, axis=-1)
    if binary is None:
        binary = _binary(x, y)
    elif binary and not _binary(x, y):
        raise ValueError("paired: binary=True but the values are not all 0 or 1")
    with np.errstate(divide="ignore", invalid="ignore"):
        t = difference / se
    # no spread (se 0): every pair differs alike, p 1 when by nothing, else 0; one pair (se NaN): unknown
    t_p = np.where(se > 0, 2 * stats.t.sf(np.abs(t), max(n_clusters - 1, 1)),
                   np.where(se == 0, np.where(difference == 0, 1.0, 0.0), np.nan))
    if binary:
        if grouping is None:
            test = "mcnemar-exact"
            ups, downs = np.sum(d > 0, axis=-1), np.sum(d < 0, axis=-1)
            p_value = np.minimum(1.0, 2 * stats.binom.cdf(np.minimum(ups, downs), ups + downs, 0.5))
        else:
            test, p_value = "cluster-t", t_p
        # one pseudo-pair discordant each way, each a cluster of its own (Bonett & Price's adjusted Wald)
        shape = d.shape[:-1] + (1,)
        augmented = np.concatenate([d, np.ones(shape), -np.ones(shape)], axis=-1)
        if grouping is None:
            aug_grouping, aug_clusters = None, n + 2
        else:
            order, starts = grouping
            aug_grouping = (np.r_[order, n, n + 1], np.r_[starts, n, n + 1])
            aug_clusters = n_clusters + 2
        centre = augmented.mean(axis=-1)
        half = _t_quantile(n_clusters, level) * _standard_error(augmented, aug_grouping, aug_clusters)
        low, high = np.clip(centre - half, -1.0, 1.0), np.clip(centre + half, -1.0, 1.0)
    else:
        if grouping is None:
            test = "paired-t"
            with np.errstate(divide="ignore", invalid="ignore"):
                p_value = stats.ttest_rel(x, y, axis=-1).pvalue if n > 1 else np.full(d.shape[:-1], np.nan)
            p_value = np.where(np.isnan(p_value) & (se == 0), np.where(difference == 0, 1.0, 0.0), p_value)
        else:
            test, p_value = "cluster-t", t_p
        half = _t_quantile(n_clusters, level) * se
        low, high = difference - half, difference + half
    return Difference(_out(difference), _out(se), _out(low), _out(high), _out(p_value), n, n_clusters, test,
                      _out(second_moment))


class OverOrders(NamedTuple):
    """A difference over task orders (:func:`over_orders`): the mean of the per-order differences."""

    mean: Any
    se: Any  # NaN with one order (no spread between orders to estimate)
    ci_low: Any
    ci_high: Any
    p_value: Any  # the t test of "no difference over orders" (df: orders - 1)
    between: Any  # the between-order variance component (method of moments, floored at 0)
    orders: int


def order_spread(d: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(The standard error of the mean of per-order differences ``d``, the between-order variance component)
    from ``d`` and the within-order variances ``v`` (last axis: orders): ``sqrt(s^2 / K)`` and
    ``max(0, s^2 - mean(v))`` (:func:`over_orders`); NaN with one order. No input checks (the sequential
    rule passes NaN for orders not run yet)."""
    k = d.shape[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        s2 = d.var(axis=-1, ddof=1) if k > 1 else np.full(d.shape[:-1], np.nan)
    return np.sqrt(s2 / k), np.fmax(0.0, s2 - v.mean(axis=-1))


def over_orders(differences: Any, variances: Any, *, level: float = LEVEL) -> OverOrders:
    """The difference **over task orders of the benchmark** from ``K`` per-order differences (last axis) and
    their within-order sampling variances (each one's squared :func:`paired` standard error).

    Model: ``d_r = mu + u_r + e_r``, ``u_r`` the order's own effect (variance ``between``), ``e_r`` its
    sampling noise; the tasks are the benchmark's (the same ids in every order), and ``mu`` is the difference
    over orders on them. The sample variance ``s^2`` of the ``d_r`` is the observed variance, between-order
    component and within-order noise together: ``var(mean) = s^2 / K``, the interval and the test t with
    ``K - 1`` df (few orders: wide). The between-order component is ``max(0, s^2 - mean(v))`` (method of
    moments); ``v_r`` (each order's squared :func:`paired` standard error) also counts the spread of the
    tasks' own differences, which is the same in every order, so this component errs low, and ``mean(v)``
    is not a floor on ``s^2`` (such a floor made the interval over orders cover 96-98 % in the coverage
    simulation, not 95 %)."""
    from scipy import stats

    d, v = _observations(differences, "differences"), _observations(variances, "variances")
    if d.shape != v.shape:
        raise ValueError(f"over_orders: differences and variances must match (shapes {d.shape} and {v.shape})")
    k = d.shape[-1]
    mean_ = d.mean(axis=-1)
    if k < 2:
        nan = np.full(mean_.shape, np.nan)
        return OverOrders(_out(mean_), _out(nan), _out(nan), _out(nan), _out(nan), _out(nan), k)
    se, between = order_spread(d, v)
    half = float(stats.t.isf((1 - level) / 2, k - 1)) * se
    with np.errstate(divide="ignore", invalid="ignore"):
        p_value = np.where(se > 0, 2 * stats.t.sf(np.abs(mean_ / se), k - 1),
                           np.where(mean_ == 0, 1.0, 0.0))
    return OverOrders(_out(mean_), _out(se), _out(mean_ - half), _out(mean_ + half), _out(p_value),
                      _out(between), k)


def independent_difference(second: Estimate, first: Estimate) -> Estimate:
    """``second.mean - first.mean`` for two estimates of *different* tasks (independent samples), with the
    MOVER interval (Zou & Donner, 2008) built from the two intervals: for two Wilson intervals of rates that
    is Newcombe's hybrid score interval (``statsmodels``' ``confint_proportions_2indep(method="newcomb")``
    with one seed), for two paired differences the interval of their difference. Standard error:
    ``sqrt(se1^2 + se2^2)``."""
    d = np.asarray(second.mean) - np.asarray(first.mean)
    low = d - np.sqrt((np.asarray(second.mean) - second.ci_low) ** 2 + (first.ci_high - np.asarray(first.mean)) ** 2)
    high = d + np.sqrt((second.ci_high - np.asarray(second.mean)) ** 2 + (np.asarray(first.mean) - first.ci_low) ** 2)
    se = np.sqrt(np.asarray(second.se) ** 2 + np.asarray(first.se) ** 2)
    return Estimate(_out(d), _out(se), _out(low), _out(high), second.n + first.n,
                    second.n_clusters + first.n_clusters)


def as_estimate(difference: Difference) -> Estimate:
    """A paired difference as an :class:`Estimate` (to combine it with :func:`independent_difference`)."""
    return Estimate(difference.difference, difference.se, difference.ci_low, difference.ci_high, difference.n,
                    difference.n_clusters)


__all__ = ["LEVEL", "Estimate", "Difference", "OverOrders", "rate", "mean", "paired", "over_orders", "order_spread", "independent_difference", "as_estimate", "wilson",
           "effective_n"]
