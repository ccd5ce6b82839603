"""Report helpers: the rolling-window SR behind the second panel of cumulative_sr.png."""

import numpy as np

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
