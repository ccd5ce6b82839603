"""The estimator (tokenworth_agent.results.estimate): the libraries' own results on the same data, and a coverage
simulation that proves the 95 % intervals cover the truth 93-97 % of the time, where intervals that ignore
the pairing or the clustering do not.

The simulation (:func:`simulate`) draws whole experiments: T tasks from a population (logit-normal
difficulty, shared by the methods and the seeds: outcomes cluster by task), a method whose effect on the
logit scale varies by task, the two methods' outcomes on a task coupled (the same draw of the backbone's
randomness with probability 0.7: correlated pairs), S seeds, and optionally the memory carrying over along
the stream (a success raises the method's next task's logit: serial dependence of the size measured in the
real run, and three times it). The true rates and their difference are the population's, by Gauss-Hermite
quadrature (and an exact recursion over the stream for the carry-over); output tokens get a known additive
difference. Each scenario runs R experiments at once through the estimators' batch axis.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit

from tokenworth_agent.results import estimate as E


# ------------------------------------------------------------------------- the libraries' own results
def _data(seed: int = 0, tasks: int = 120, seeds: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(2, 3, tasks)
    a = (rng.random((seeds, tasks)) < p).astype(float).ravel()
    b = (rng.random((seeds, tasks)) < p * 0.8).astype(float).ravel()
    tokens = (100 + 30 * p + rng.normal(0, 8, (seeds, tasks))).ravel()
    return a, b, tokens, np.tile(np.arange(tasks), seeds)


def _statsmodels_cluster(y: np.ndarray, groups: np.ndarray | None):
    import statsmodels.api as sm

    groups = np.arange(len(y)) if groups is None else groups
    return sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)


def test_one_seed_reduces_to_the_clt_standard_error_and_the_textbook_wilson_interval() -> None:
    from statsmodels.stats.proportion import proportion_confint

    a, _, tokens, _ = _data(tasks=500, seeds=1)
    est = E.rate(a)
    assert est.se == pytest.approx(np.std(a, ddof=1) / np.sqrt(len(a)), rel=1e-12)  # Inspect's stderr()
    assert est.se == pytest.approx(_statsmodels_cluster(a, None).bse[0], rel=1e-12)
    assert (est.ci_low, est.ci_high) == pytest.approx(proportion_confint(a.sum(), len(a), method="wilson"), rel=1e-12)
    assert (est.n, est.n_clusters) == (500, 500)
    tok = E.mean(tokens)
    assert (tok.ci_low, tok.ci_high) == pytest.approx(tuple(stats.ttest_1samp(tokens, 0).confidence_interval()),
                                                      rel=1e-12)


def test_several_seeds_give_statsmodels_cluster_robust_standard_errors() -> None:
    a, _, tokens, task = _data()
    for values, estimator in ((a, E.rate), (tokens, E.mean)):
        est = estimator(values, task)
        fit = _statsmodels_cluster(values, task)
        assert est.se == pytest.approx(fit.bse[0], rel=1e-12)
        assert (est.n, est.n_clusters) == (360, 120)
    tok = E.mean(tokens, task)
    assert (tok.ci_low, tok.ci_high) == pytest.approx(tuple(_statsmodels_cluster(tokens, task).conf_int()[0]),
                                                      rel=1e-12)


def test_the_standard_error_is_inspects_stderr_plain_and_clustered() -> None:
    """The Inspect export shows accuracy ± stderr from rate(): it is the number Inspect itself computes."""
    scorer = pytest.importorskip("inspect_ai.scorer")
    a, _, _, task = _data()
    scores = [scorer.SampleScore(score=scorer.Score(value=float(v)), sample_id=f"s{i}", sample_metadata={"task": int(t)})
              for i, (v, t) in enumerate(zip(a, task))]
    assert E.rate(a).se == pytest.approx(scorer.stderr()(scores), rel=1e-12)
    assert E.rate(a, task).se == pytest.approx(scorer.stderr(cluster="task")(scores), rel=1e-12)


def test_the_rate_interval_is_wilson_at_the_design_effect_adjusted_n() -> None:
    from statsmodels.stats.proportion import proportion_confint

    a, _, _, task = _data()
    est = E.rate(a, task)
    iid_se = np.std(a, ddof=1) / np.sqrt(len(a))
    n_eff = len(a) * (iid_se / est.se) ** 2
    assert 120 < n_eff < 360  # the seeds repeat their task's outcome in part
    expected = proportion_confint(a.mean() * n_eff, n_eff, method="wilson")
    assert (est.ci_low, est.ci_high) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_a_rate_of_zero_or_one_keeps_an_interval_of_positive_width(value: float) -> None:
    from statsmodels.stats.proportion import proportion_confint

    est = E.rate(np.full(1500, value), np.tile(np.arange(500), 3))
    expected = proportion_confint(value * 500, 500, method="wilson")  # the worst case: 500 independent tasks
    assert est.mean == value and est.se == 0.0
    assert (est.ci_low, est.ci_high) == pytest.approx(expected, abs=1e-12)
    assert est.ci_high - est.ci_low > 0.005


def test_paired_tests_match_mcnemar_ttest_rel_and_the_cluster_t_test() -> None:
    from statsmodels.stats.contingency_tables import mcnemar

    a, b, tokens, task = _data(tasks=400, seeds=1)
    diff = E.paired(a, b)
    table = [[np.sum((a == 1) & (b == 1)), np.sum((a == 1) & (b == 0))],
             [np.sum((a == 0) & (b == 1)), np.sum((a == 0) & (b == 0))]]
    assert diff.test == "mcnemar-exact" and diff.p_value == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12)
    assert diff.se == pytest.approx(np.std(a - b, ddof=1) / np.sqrt(400), rel=1e-12)
    assert diff.second_moment == pytest.approx(np.mean(a != b))
    other = tokens[::-1] + 2.0
    tok = E.paired(tokens, other)
    reference = stats.ttest_rel(tokens, other)
    assert tok.test == "paired-t" and tok.p_value == pytest.approx(reference.pvalue, rel=1e-12)
    assert (tok.ci_low, tok.ci_high) == pytest.approx(tuple(reference.confidence_interval()), rel=1e-12)
    a3, b3, tokens3, task3 = _data(tasks=150, seeds=3)
    for x, y in ((a3, b3), (tokens3, tokens3[::-1])):
        clustered = E.paired(x, y, task3)
        fit = _statsmodels_cluster(x - y, task3)
        assert clustered.test == "cluster-t"
        assert clustered.se == pytest.approx(fit.bse[0], rel=1e-12)
        assert clustered.p_value == pytest.approx(fit.pvalues[0], rel=1e-10)
    tok3 = E.paired(tokens3, tokens3[::-1], task3)
    assert (tok3.ci_low, tok3.ci_high) == pytest.approx(tuple(_statsmodels_cluster(tokens3 - tokens3[::-1],
                                                                                   task3).conf_int()[0]), rel=1e-12)


def test_the_paired_rate_interval_is_bonett_price_adjusted_wald() -> None:
    """One seed: Bonett & Price (2012), (n12+1)/(n+2) and (n21+1)/(n+2), up to t/z and (n+2)/(n+1)."""
    a, b, _, _ = _data(tasks=500, seeds=1)
    diff = E.paired(a, b)
    n, up, down = 500, np.sum(a > b), np.sum(a < b)
    p12, p21 = (up + 1) / (n + 2), (down + 1) / (n + 2)
    half = 1.959964 * np.sqrt((p12 + p21 - (p12 - p21) ** 2) / (n + 2))
    assert (diff.ci_low, diff.ci_high) == pytest.approx((p12 - p21 - half, p12 - p21 + half), abs=2e-4)
    none = E.paired(np.zeros(500), np.zeros(500))  # SmolLM2 against SmolLM2: never a success
    assert none.difference == 0.0 and none.p_value == 1.0 and none.ci_low < -0.004 and none.ci_high > 0.004


def test_counts_that_happen_to_be_0_or_1_are_not_successes() -> None:
    """Output tokens all 1 (a budget of one token) are counts: the t test, no pseudo-pairs widening a zero difference."""
    ones = np.ones(20)
    tokens = E.paired(ones, ones, binary=False)
    assert tokens.test == "paired-t" and (tokens.ci_low, tokens.ci_high) == (0.0, 0.0) and tokens.p_value == 1.0
    assert E.paired(ones, ones).test == "mcnemar-exact"  # inferred: 0/1 values read as rewards
    with pytest.raises(ValueError, match="binary=True but the values are not all 0 or 1"):
        E.paired([0, 2], [1, 0], binary=True)


def test_the_difference_of_two_rates_is_newcombes_interval() -> None:
    from statsmodels.stats.proportion import confint_proportions_2indep

    a, b, _, _ = _data(tasks=300, seeds=1)
    est = E.independent_difference(E.rate(a), E.rate(b[:200]))
    expected = confint_proportions_2indep(a.sum(), 300, b[:200].sum(), 200, method="newcomb", compare="diff")
    assert est.mean == pytest.approx(a.mean() - b[:200].mean())
    assert (est.ci_low, est.ci_high) == pytest.approx(tuple(expected), rel=1e-10)


def test_batches_give_each_row_its_own_estimate() -> None:
    a, b, _, task = _data()
    batch = np.stack([a, b])
    assert E.rate(batch, task).se[1] == pytest.approx(E.rate(b, task).se, rel=1e-12)
    assert E.paired(batch, batch[::-1], task).p_value[0] == pytest.approx(E.paired(a, b, task).p_value, rel=1e-12)


def test_bad_input_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="values must lie in"):
        E.rate([0, 2, 1])
    with pytest.raises(ValueError, match="no observations"):
        E.rate([])
    with pytest.raises(ValueError, match="one label per observation"):
        E.rate([0, 1], clusters=[1, 2, 3])
    with pytest.raises(ValueError, match="must match pair by pair"):
        E.paired([0, 1], [0, 1, 1])
    with pytest.raises(ValueError, match="NaN"):
        E.mean([1.0, np.nan])


# ------------------------------------------------------------------------- the coverage simulation
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(80)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()
TOKEN_DIFFERENCE = -3.0


def _expected(logit: float, spread: float) -> float:
    """E[expit(logit + z + spread * w)] over independent standard normal z, w (Gauss-Hermite quadrature)."""
    z, w = np.meshgrid(_NODES, _NODES, indexing="ij")
    return float(np.sum(np.outer(_WEIGHTS, _WEIGHTS) * expit(logit + z + spread * w)))


def population(base: float, effect: float, spread: float, carry: float = 0.0, tasks: int = 1) -> tuple[float, float]:
    """The true success rates of the baseline and of the method over a stream of ``tasks``.

    With ``carry`` (the memory carries over: the method's logit gains ``carry`` after a success) the method's
    rate at task t follows ``pi_t = (1 - pi_{t-1}) A0 + pi_{t-1} A1`` from an empty bank (``pi_{-1} = 0``),
    exactly, since each task's difficulty is independent of the outcomes before it."""
    a0, a1 = _expected(base + effect, spread), _expected(base + effect + carry, spread)
    pi, total = 0.0, 0.0
    for _ in range(tasks):
        pi = (1 - pi) * a0 + pi * a1
        total += pi
    return _expected(base, 0.0), total / tasks


def simulate(rng: np.random.Generator, runs: int, tasks: int, seeds: int, base: float, effect: float, *,
             spread: float = 0.5, carry: float = 0.0, coupling: float = 0.7) -> dict[str, np.ndarray]:
    """``runs`` experiments: rewards and tokens of a baseline and a method, each (runs, seeds * tasks), seed-major."""
    z, w = rng.standard_normal((runs, 1, tasks)), rng.standard_normal((runs, 1, tasks))
    p = expit(base + z)
    u = rng.random((runs, seeds, tasks))
    v = np.where(rng.random((runs, seeds, tasks)) < coupling, u, rng.random((runs, seeds, tasks)))
    logit = base + effect + z + spread * w
    if carry:  # the memory carries over: a success helps the next task of the same stream (seed)
        method = np.empty((runs, seeds, tasks))
        last = np.zeros((runs, seeds))
        for t in range(tasks):
            last = method[:, :, t] = v[:, :, t] < expit(logit[:, :, t] + carry * last)
    else:
        method = v < expit(logit)
    noise, own = rng.standard_normal((runs, seeds, tasks)), rng.standard_normal((runs, seeds, tasks))
    level = 128 + 20 * z
    return {"baseline": (u < p).reshape(runs, -1).astype(float),
            "method": method.reshape(runs, -1).astype(float),
            "baseline_tokens": (level + 15 * noise).reshape(runs, -1),
            "method_tokens": (level + TOKEN_DIFFERENCE + 6 * w + 15 * (0.6 * noise + 0.8 * own)).reshape(runs, -1)}


def coverage(estimate: E.Estimate | E.Difference, truth: float) -> float:
    return float(np.mean((estimate.ci_low <= truth) & (truth <= estimate.ci_high)))


# name: tasks, seeds, base logit, effect logit, effect spread (by task), memory carry-over
SCENARIOS = {
    "one seed": (500, 1, -0.2, 0.15, 0.5, 0.0),
    "three seeds": (500, 3, -0.2, 0.15, 0.5, 0.0),
    "three seeds, effect varying by task": (300, 3, -0.2, 0.15, 1.5, 0.0),
    "three seeds, memory carries over": (500, 3, -0.2, 0.15, 0.5, 0.15),
    "near 0 % (SmolLM2), one seed": (500, 1, -5.5, 0.5, 0.5, 0.0),
    "near 0 %, three seeds": (500, 3, -5.5, 0.5, 0.5, 0.0),
    "near 100 %, three seeds": (500, 3, 5.0, 0.3, 0.5, 0.0),
}
RUNS = 2000


@functools.lru_cache(maxsize=None)  # each scenario is drawn once per session, whichever test asks first
def run_scenario(name: str) -> dict[str, float]:
    tasks, seeds, base, effect, spread, carry = SCENARIOS[name]
    rng = np.random.default_rng(sorted(SCENARIOS).index(name))
    data = simulate(rng, RUNS, tasks, seeds, base, effect, spread=spread, carry=carry)
    clusters = np.tile(np.arange(tasks), seeds) if seeds > 1 else None
    p, q = population(base, effect, spread, carry, tasks)
    baseline, method = E.rate(data["baseline"], clusters), E.rate(data["method"], clusters)
    out = {"rate baseline": coverage(baseline, p), "rate method": coverage(method, q),
           "paired": coverage(E.paired(data["method"], data["baseline"], clusters), q - p),
           "tokens": coverage(E.mean(data["baseline_tokens"], clusters), 128.0),
           "paired tokens": coverage(E.paired(data["method_tokens"], data["baseline_tokens"], clusters),
                                     TOKEN_DIFFERENCE),
           "unpaired (naive)": coverage(E.independent_difference(method, baseline), q - p),
           "discordant pairs": float(np.mean(np.sum(data["method"] != data["baseline"], axis=-1)))}
    if seeds > 1:
        out["rate, clustering ignored (naive)"] = coverage(E.rate(data["baseline"]), p)
        out["paired, clustering ignored (naive)"] = coverage(E.paired(data["method"], data["baseline"]), q - p)
    return out


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_95_percent_intervals_cover_the_truth_93_to_97_percent(name: str) -> None:
    result = run_scenario(name)
    for key in ("rate baseline", "rate method", "tokens", "paired tokens"):
        assert 0.93 <= result[key] <= 0.97, (name, key, result)
    if result["discordant pairs"] >= 10:
        assert 0.93 <= result["paired"] <= 0.97, (name, result)
    else:  # a handful of discordant pairs: no interval is exact there; ours errs on the safe side
        assert result["paired"] >= 0.95, (name, result)
    # ignoring the pairing: far too wide (the methods' outcomes on a task are correlated)
    assert result["unpaired (naive)"] > 0.97, (name, result)


def test_intervals_that_ignore_the_clustering_fail_the_same_test() -> None:
    three = run_scenario("three seeds")
    varying = run_scenario("three seeds, effect varying by task")
    assert three["rate, clustering ignored (naive)"] < 0.93, three
    assert varying["paired, clustering ignored (naive)"] < 0.93, varying
    assert 0.93 <= varying["paired"] <= 0.97 and 0.93 <= three["rate baseline"] <= 0.97


# ------------------------------------------------------------------------- task orders as a random effect
_ORDER_NODES, _ORDER_WEIGHTS = np.polynomial.hermite_e.hermegauss(20)
_ORDER_WEIGHTS = _ORDER_WEIGHTS / _ORDER_WEIGHTS.sum()

# name: tasks, orders, the sd of an order's own effect on the method's logit (0.1: about 2 points, like DB's)
ORDER_SCENARIOS = {"5 orders of 300 tasks, DB-like spread": (300, 5, 0.1),
                   "4 orders of 500 tasks, wide spread": (500, 4, 0.2)}


@functools.lru_cache(maxsize=None)
def run_orders(name: str) -> dict[str, float]:
    """``RUNS`` experiments of one benchmark's tasks (drawn once per experiment) run in several orders, each
    order shifting the method's logit by its own effect (a random effect: which order helps the method).
    The truth over orders of the benchmark: the mean over its tasks of the method's rate averaged over the
    order effect (Gauss-Hermite) less the baseline's."""
    tasks, orders, order_sd = ORDER_SCENARIOS[name]
    base, effect, spread = -0.2, 0.15, 0.5
    rng = np.random.default_rng(50 + sorted(ORDER_SCENARIOS).index(name))
    z, w = rng.standard_normal((RUNS, 1, tasks)), rng.standard_normal((RUNS, 1, tasks))
    shift = order_sd * rng.standard_normal((RUNS, orders, 1))
    u = rng.random((RUNS, orders, tasks))
    v = np.where(rng.random((RUNS, orders, tasks)) < 0.7, u, rng.random((RUNS, orders, tasks)))
    baseline = (u < expit(base + z)).astype(float)
    method = (v < expit(base + effect + z + spread * w + shift)).astype(float)
    truth = (sum(weight * expit(base + effect + z + spread * w + order_sd * node)
                 for node, weight in zip(_ORDER_NODES, _ORDER_WEIGHTS)) - expit(base + z)).mean(axis=(-2, -1))
    per_order = E.paired(method, baseline)  # (runs, orders)
    over = E.over_orders(per_order.difference, per_order.se ** 2)
    pooled = E.paired(method.reshape(RUNS, -1), baseline.reshape(RUNS, -1), np.tile(np.arange(tasks), orders))

    def covers(low: np.ndarray, high: np.ndarray) -> float:
        return float(np.mean((low <= truth) & (truth <= high)))

    return {"over orders": covers(over.ci_low, over.ci_high),
            "one order (naive)": covers(per_order.ci_low[:, 0], per_order.ci_high[:, 0]),
            "pooled over orders (naive)": covers(pooled.ci_low, pooled.ci_high)}


@pytest.mark.parametrize("name", list(ORDER_SCENARIOS))
def test_the_interval_over_orders_covers_the_over_orders_difference_and_one_order_does_not(name: str) -> None:
    result = run_orders(name)
    assert 0.93 <= result["over orders"] <= 0.97, (name, result)
    # one order's interval is about that order; pooling the orders as if they were seeds ignores that an
    # order shifts every task alike: both miss the difference over orders too often
    assert result["one order (naive)"] < 0.93 and result["pooled over orders (naive)"] < 0.93, (name, result)
