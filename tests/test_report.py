"""Report helpers: the rolling-window SR behind the second panel of cumulative_sr.png."""

import numpy as np
import pytest
from scipy import stats

from tokenworth_agent.results.report import cumulative_sr, rolling_sr, rolling_window


def test_rolling_sr_is_the_mean_of_the_last_window_tasks() -> None:
    records = [1, 0, 0, 1, 1, 1, 0, 0]
    np.testing.assert_allclose(rolling_sr(records, 4), [50.0, 50.0, 75.0, 75.0, 50.0])
    assert rolling_sr(records[:3], 4).size == 0
    np.testing.assert_allclose(cumulative_sr(records)[-1], 50.0)
    assert rolling_window(60) == 6 and rolling_window(20) == 5 and rolling_window(500) == 50


def test_the_prefix_table_summarises_the_tasks_every_stream_finished(tmp_path) -> None:
    """tokenworth_bench.prefix_table on a stopped run: every stream cut to the fewest finished tasks, the harness's
    own summary of that prefix, and its figure."""
    import json

    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.experiment.runner import run_stream
    from tokenworth_agent.results.record import read_records
    from tokenworth_bench import prefix_table
    from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks

    run = tmp_path / "run"
    for method, n in (("memp", 6), ("standard", 4)):  # standard stopped after 4 tasks
        run_stream(method, "db", make_tasks(n), FakeBackbone(), Budget.for_env("db"), 0, run, env=FakeDBEnv())
    prefix_table.main([str(run), "memp,standard", str(tmp_path / "table")])
    table = json.loads((tmp_path / "table" / "summary.json").read_text())
    assert table["tasks"] == 4
    for row in table["rows"]:
        rewards = [r.reward for r in read_records(run / row["method"] / "records.jsonl")[:4]]
        assert row["tasks"] == 4 and row["sr"] == 100.0 * sum(rewards) / 4
    assert "first 4 tasks" in (tmp_path / "table" / "summary.md").read_text()
    assert (tmp_path / "table" / "cumulative_sr.png").stat().st_size > 0
    (run / "config.json").write_text(json.dumps({"tasks": 4}))  # a run of 4 tasks: every stream finished it
    prefix_table.main([str(run), "memp,standard", str(tmp_path / "table")])
    assert "all 4 tasks" in (tmp_path / "table" / "summary.md").read_text()


# ------------------------------------------------------------------------- every rate with its interval
def test_a_summary_row_carries_its_interval_and_each_skill_its_own() -> None:
    from statsmodels.stats.proportion import proportion_confint

    from tests.fakes import task_record
    from tokenworth_agent.results.report import markdown_table, summarize

    records = [task_record(i, int(i % 3 == 0), output_tokens=10 + i, skill_list=["select"] + (["where"] if i < 8
                                                                                              else [])) for i in range(30)]
    [row] = summarize({"standard": records})
    assert row.sr_ci == pytest.approx(tuple(100 * v for v in proportion_confint(10, 30, method="wilson")))
    assert row.sr_se == pytest.approx(100 * np.std([r.reward for r in records], ddof=1) / np.sqrt(30))
    tokens = [r.output_tokens for r in records]
    assert row.output_tok_ci == pytest.approx(tuple(stats.ttest_1samp(tokens, 0).confidence_interval()))
    assert row.skill_counts["where"] == 8
    assert row.skill_ci["where"] == pytest.approx(tuple(100 * v for v in proportion_confint(3, 8, method="wilson")))
    table = markdown_table([row])
    low, high = row.skill_ci["where"]
    assert f"| where | 8 | 37.5 [{low:.0f}, {high:.0f}] |" in table
    assert f"| standard | 30 | 33.3 | [{row.sr_ci[0]:.1f}, {row.sr_ci[1]:.1f}] |" in table


def test_experiment_rows_cluster_the_interval_by_task_over_seeds() -> None:
    import statsmodels.api as sm

    from tests.fakes import task_record
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.experiment.streams import expand
    from tokenworth_agent.results.report import experiment_rows, experiment_table

    streams = expand(["db"], ["standard"], [0, 1, 2], {"db": Budget.for_env("db")})
    easy = np.random.default_rng(0).random(80) < 0.5
    finished = [(s, [task_record(i, int(easy[i] or (i * (s.seed + 3)) % 7 == 0)) for i in range(80)]) for s in streams]
    [row] = experiment_rows(finished)
    rewards = np.concatenate([[r.reward for r in recs] for _, recs in finished]).astype(float)
    fit = sm.OLS(rewards, np.ones_like(rewards)).fit(cov_type="cluster",
                                                     cov_kwds={"groups": np.tile(np.arange(80), 3)})
    assert row["sr_se"] == pytest.approx(100 * fit.bse[0], rel=1e-12)
    naive = 100 * np.std(rewards, ddof=1) / np.sqrt(240)
    assert row["sr_se"] > 1.3 * naive  # the seeds repeat their task's outcome: not 240 independent draws
    assert row["sr_ci"][0] < row["sr"] < row["sr_ci"][1]
    assert "clustered by task" in experiment_table([row])


def test_the_cumulative_band_is_the_rate_interval_of_each_prefix() -> None:
    from tokenworth_agent.results.estimate import rate
    from tokenworth_agent.results.report import cumulative_band

    seeds = (np.random.default_rng(1).random((3, 40)) < 0.4).astype(float)
    low, high = cumulative_band(seeds)
    prefix = rate(seeds[:, :25].ravel(), np.tile(np.arange(25), 3))
    assert (low[24], high[24]) == pytest.approx((100 * prefix.ci_low, 100 * prefix.ci_high))
    one_low, one_high = cumulative_band(seeds[0])
    assert (one_low[9], one_high[9]) == pytest.approx((100 * rate(seeds[0, :10]).ci_low,
                                                       100 * rate(seeds[0, :10]).ci_high))


def test_the_trackers_final_values_are_the_streams_rate_and_interval() -> None:
    from tests.fakes import task_record
    from tokenworth_agent.results.estimate import rate
    from tokenworth_agent.tracking.metrics import Scalars

    rewards = [1, 0, 0, 1, 1, 0, 1, 0, 0, 0]
    scalars = Scalars(len(rewards))
    for i, reward in enumerate(rewards):
        last = scalars(task_record(i, reward))
    expected = rate(rewards)
    assert (last["sr/cumulative"], last["sr/ci_low"], last["sr/ci_high"]) == pytest.approx(
        (expected.mean, expected.ci_low, expected.ci_high))


def test_the_sweep_table_pairs_each_configuration_with_the_preset() -> None:
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.multitest import multipletests

    from tokenworth_agent.experiment.sweep import StreamResult, SweepResult, against_preset, markdown

    rng = np.random.default_rng(3)
    preset = (rng.random(120) < 0.4).astype(int).tolist()
    better = [max(p, int(u < 0.3)) for p, u in zip(preset, rng.random(120))]
    other = (rng.random(120) < 0.4).astype(int).tolist()
    result = SweepResult("db", 0, [StreamResult({}, preset, [10] * 120), StreamResult({"eta_max": 0.1}, better, [9] * 120),
                                   StreamResult({"eta_max": 0.3}, other, [11] * 120)], 1.0, [3])
    none, first, second = against_preset(result)
    assert none is None and first["n_pairs"] == 120
    a, b = np.asarray(better), np.asarray(preset)
    table = [[np.sum(a & b), np.sum(a & (1 - b))], [np.sum((1 - a) & b), np.sum((1 - a) & (1 - b))]]
    assert first["p_value"] == pytest.approx(mcnemar(table, exact=True).pvalue)
    adjusted = multipletests([first["p_value"], second["p_value"]], method="holm")[1]
    assert [first["p_adjusted"], second["p_adjusted"]] == pytest.approx(list(adjusted))
    text = markdown(result)
    assert f"| eta_max=0.1 | {100 * np.mean(better):.1f} |" in text and f"{first['difference']:+.1f}" in text


def test_the_orders_forest_draws_each_order_and_the_interval_over_orders(tmp_path) -> None:
    """One row per method of a run of several orders: a point per order at its difference, the diamond and bar at
    the difference over orders and its interval; a run of one order draws nothing."""
    import matplotlib

    matplotlib.use("Agg")
    from tokenworth_agent.results.report import orders_forest, plot_orders_forest

    def row(method, per_order, over):
        return {"method": method, "baseline": "standard", "per_order": [{"order": k, "difference": d}
                                                                        for k, d in enumerate(per_order)],
                "over_orders": over and {"difference": over[0], "ci": over[1:], "favour": 2,
                                         "verdict": "not shown over orders"}}

    rows = [row("rag", [1.0, -2.0, 3.0], (0.67, -5.0, 6.3)), row("memp", [2.0, 2.5, 1.5], (2.0, 0.8, 3.2)),
            row("one-order", [4.0], None)]
    fig = orders_forest(rows)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["memp − standard", "rag − standard"]
    points = {(round(x, 2), round(y)) for line in ax.get_lines() for x, y in zip(line.get_xdata(), line.get_ydata())
              if line.get_marker() == "o"}
    assert points == {(1.0, 1), (-2.0, 1), (3.0, 1), (2.0, 0), (2.5, 0), (1.5, 0)}  # rag on top, memp below
    bars = sorted(tuple(line.get_xdata()) for line in ax.get_lines() if line.get_marker() in ("None", ""))
    assert (0.8, 3.2) in bars and (-5.0, 6.3) in bars
    assert plot_orders_forest(rows, tmp_path / "forest.png").stat().st_size > 0
    assert orders_forest([rows[-1]]) is None and plot_orders_forest([rows[-1]], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
