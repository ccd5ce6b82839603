"""The sequential rule over task orders (tokenworth_agent.results.sequential) and `tokenworth compare --sequential`.

The simulation (tokenworth_bench.sequential_orders, whose full run is bench/results/stats/sequential_orders.md)
draws whole sequential experiments, vectorised: per-order paired differences ``d = mu + u + e`` (``u`` the
order's own effect, sd TAU; ``e`` the order's sampling noise, sd SE_WITHIN, half of it shared by the family's
comparisons through their common baseline), a family of comparisons like ``make run``'s, orders added one at a
time up to ten.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.runfolders import config, write_stream
from tokenworth_bench.sequential_orders import MAX_ORDERS, SE_WITHIN, TAU, draw, naive

RUNS = 2000


def _draw(seed: int, effects: tuple[float, ...], *, tau: float = TAU) -> tuple[np.ndarray, np.ndarray]:
    return draw(seed, effects, tau=tau, runs=RUNS)


@functools.lru_cache(maxsize=None)
def _run(seed: int, effects: tuple[float, ...], tau: float = TAU):
    from tokenworth_agent.results.sequential import sequential

    d, v = _draw(seed, effects, tau=tau)
    return sequential(d, v, effect=3.0, max_orders=MAX_ORDERS)


@pytest.mark.parametrize("effects", [(0.0,) * 5, (0.0,) * 4])
def test_with_no_difference_the_family_declares_one_at_most_5_percent_of_the_time(effects) -> None:
    outcome = _run(1, effects)
    family = np.mean(np.any(np.abs(outcome.code) == 1, axis=-1))
    assert family <= 0.05, family
    assert family >= 0.03, family  # and not blind: near the level
    # stopping at the first fixed 95 % interval that excludes 0 does not hold that rate, by far
    naive_rate = np.mean(np.any(naive(*_draw(1, effects)), axis=-1))
    assert naive_rate > 0.25, naive_rate


def test_a_true_3_point_difference_is_decided_within_ten_orders_in_80_percent_of_experiments() -> None:
    from tokenworth_agent.results import power

    outcome = _run(2, (3.0,) * 4)
    better = np.mean(outcome.code == 1)
    assert better >= 0.80, better
    assert np.mean(outcome.code == -1) == 0  # never the wrong sign
    # the fixed plan (--plan: the t test over orders at Bonferroni's 0.05/4, 80 % power) needs 11 orders; the
    # rule stops earlier on average, counting an undecided comparison at all ten
    fixed = power.orders_needed(3.0, TAU ** 2, SE_WITHIN ** 2, alpha=0.05 / 4)
    assert fixed == 11
    assert outcome.orders_used.mean() < 9.5 < fixed


def test_futility_stops_a_comparison_shown_smaller_than_the_effect() -> None:
    from tokenworth_agent.results.sequential import sequential

    d, v = _draw(3, (0.0,) * 4, tau=0.5)
    small = sequential(d, v, effect=6.0, max_orders=MAX_ORDERS)
    futile = small.code == 2
    assert futile.mean() > 0.5  # most stop early as "smaller than the effect"
    assert np.all((small.low[futile] > -6.0) & (small.high[futile] < 6.0))
    assert small.orders_used[futile].min() >= 3  # no decision before three orders


def test_the_boundaries_are_calibrated_and_need_three_orders() -> None:
    from scipy import stats

    from tokenworth_agent.results.sequential import boundaries, spent

    c = boundaries(0.05, 10)
    assert np.isinf(c[:2]).all() and np.all(np.diff(c[2:]) < 0)  # strict early, lax late
    # the last boundary sits above the fixed design's t quantile (the looks before cost a little) but not far
    assert stats.t.isf(0.025, 9) < c[-1] < stats.t.isf(0.025 / 3, 9)
    assert spent(0.05, 1.0) == pytest.approx(0.05) and spent(0.05, 0.3) < 0.001


def test_bad_effect_or_max_orders_is_one_error_line(tmp_path) -> None:
    from tokenworth_agent.results.sequential import sequential

    with pytest.raises(ValueError, match="--effect 0: the effect must be a positive"):
        sequential(np.zeros((2, 3)), np.ones((2, 3)), effect=0.0)
    with pytest.raises(ValueError, match="--max-orders 0: must be a whole number of orders, at least 1"):
        sequential(np.zeros((2, 3)), np.ones((2, 3)), max_orders=0)
    for args, named in ((["--effect", "-1"], "error: --effect -1: the effect must be a positive"),
                        (["--max-orders", "0"], "error: --max-orders 0:")):
        result = CliRunner().invoke(_app(), ["compare", str(tmp_path), "--sequential", *args])  # checked first
        assert result.exit_code == 2 and result.output.strip().startswith(named)
        assert len(result.output.strip().splitlines()) == 1
    alone = CliRunner().invoke(_app(), ["compare", str(tmp_path), "--effect", "2"])
    assert alone.exit_code == 2 and alone.output.strip() == ("error: --effect and --max-orders set the sequential "
                                                             "rule; add --sequential")


# ------------------------------------------------------------------------- on a run folder
SHIFTS = {"rag": [(14, 10), (10, 14), (14, 10), (10, 14), (15, 9)],  # ±2 pp, flipping: no decision
          "memp": [(30, 2), (27, 3), (31, 2), (28, 2), (29, 3)]}  # +14, +12, +14.5, +13, +13 pp


@pytest.fixture(scope="module")
def orders_run(tmp_path_factory):
    """A run of five task orders of 200 tasks: rag's difference flips sign, memp's holds."""
    return _orders_run(tmp_path_factory.mktemp("orders") / "run")


def _orders_run(run, orders: int = 5, tasks: int = 200):
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config(orders=list(range(orders)))))
    for k in range(orders):
        rng = np.random.default_rng(200 + k)
        ids = [f"db-{i}" for i in (rng.permutation(tasks) if k else range(tasks))]
        standard = (rng.random(tasks) < 0.4).astype(int)
        write_stream(run, f"order{k}/standard", standard.tolist(), task_ids=ids, order=k)
        for method, shifts in SHIFTS.items():
            up, down = shifts[k]
            own = standard.copy()
            own[np.flatnonzero(standard == 0)[:up]] = 1
            own[np.flatnonzero(standard == 1)[:down]] = 0
            write_stream(run, f"order{k}/{method}", own.tolist(), task_ids=ids, order=k)
    return run


def _app():
    from tokenworth_agent.cli import app

    return app


def test_decide_run_replays_the_rule_over_the_runs_orders(orders_run) -> None:
    from tokenworth_agent.results import estimate as E
    from tokenworth_agent.results.runs import streams
    from tokenworth_agent.results.sequential import Decision, decide_run, sequential

    run = orders_run
    decided = decide_run(run, effect=3.0, max_orders=6)
    assert list(decided) == ["db/rag", "db/memp"] and all(isinstance(d, Decision) for d in decided.values())
    # the same as the core on each order's paired difference (pp) and its squared standard error
    found = {(s.method, s.order): np.asarray(s.rewards()) for s in streams(run)}
    rows = [[E.paired(found[(m, k)], found[("standard", k)]) for k in range(5)] for m in ("rag", "memp")]
    core = sequential(np.array([[100 * p.difference for p in r] for r in rows]),
                      np.array([[(100 * p.se) ** 2 for p in r] for r in rows]), effect=3.0, max_orders=6)
    assert [d.decision for d in decided.values()] == ["undecided", "better"]
    assert [d.orders_used for d in decided.values()] == core.orders_used.tolist() == [5, 4]
    memp = decided["db/memp"]
    assert memp.difference == pytest.approx(core.difference[1]) and memp.difference == pytest.approx(
        np.mean([14.0, 12.0, 14.5, 13.0]))
    assert memp.interval == pytest.approx((core.low[1], core.high[1])) and memp.interval[0] > 0
    # fewer planned looks than orders: only the first max_orders count
    assert decide_run(run, effect=3.0, max_orders=2)["db/rag"].orders_used == 2


def test_compare_sequential_prints_each_decision_and_json_carries_it(orders_run) -> None:
    run = orders_run
    result = CliRunner().invoke(_app(), ["compare", str(run), "--sequential", "--max-orders", "6"])
    assert result.exit_code == 0, result.output
    assert "## Sequential decision over task orders (about orders of this benchmark; effect ±3 pp, at most 6" \
        in result.output
    assert "| db/memp | better | 4 | +13.4 |" in result.output and "| db/rag | undecided | 5 |" in result.output
    rows = json.loads(CliRunner().invoke(_app(), ["compare", str(run), "--json", "--sequential", "--effect",
                                                  "2.5"]).output)
    assert [(r["method"], r["decision"], r["orders_used"]) for r in rows] == [("rag", "undecided", 5),
                                                                            ("memp", "better", 4)]
