"""Budget accounting end to end: the perfect-agent ceiling script, and the CLI flag's records."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tokenworth_agent.core.budget import Budget
from tokenworth_bench.budget_ceiling import analyse, fits


def test_fits_under_each_accounting():
    db = Budget.for_env("db")  # O_max 128, J_max 3
    assert fits([100, 100], db, "per-call") and not fits([100, 100], db, "per-task")
    assert fits([60, 60], db, "per-task") and not fits([129], db, "per-call")
    assert not fits([1, 1, 1, 1], db, "per-call")  # J_max
    assert not fits([], db, "per-call")


def test_perfect_agent_on_real_db_tasks_matches_a_capped_run(data_dir):
    from tokenworth_agent.tasks import load_tasks

    row = analyse("db", load_tasks("db", data_dir, limit=20))
    # per-call can only admit more tasks than per-task; the measured run agrees with the fit analysis
    assert 0 < row["ceiling_per-task"] <= row["ceiling_per-call"] <= 100
    assert row["sr_run_per-call"] == pytest.approx(row["ceiling_per-call"])
    assert row["sr_run_per-task"] >= row["ceiling_per-task"]  # a cut answer can still pass the judge


def test_kg_and_os_ceilings_need_no_endpoint_or_sandbox(data_dir):
    from tokenworth_agent.tasks import load_tasks

    for env in ("kg", "os"):
        row = analyse(env, load_tasks(env, data_dir, limit=10))
        assert row["basis"].startswith("reply tokens only") and row["ceiling_per-task"] <= row["ceiling_per-call"]


@pytest.mark.parametrize("accounting", ["per-task", "per-call"])
def test_cli_flag_is_recorded_in_config_records_and_summary(tmp_path, data_dir, accounting):
    from tokenworth_agent.cli import app

    done = CliRunner().invoke(app, ["run", "--methods", "standard", "--limit", "3", "--out", str(tmp_path),
                                    "--data-dir", data_dir, "--no-progress", "--budget-accounting", accounting])
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "config.json").read_text())["budget"]["accounting"] == accounting
    assert all(json.loads(line)["accounting"] == accounting
               for line in (tmp_path / "standard" / "records.jsonl").read_text().splitlines())
    assert json.loads((tmp_path / "summary.json").read_text())[0]["accounting"] == accounting
    assert f"O_max {accounting}" in (tmp_path / "summary.md").read_text()


def test_cli_rejects_an_unknown_accounting(tmp_path):
    from tokenworth_agent.cli import app

    done = CliRunner().invoke(app, ["run", "--limit", "1", "--out", str(tmp_path), "--budget-accounting", "per-round"])
    assert done.exit_code == 2 and "per-call or per-task" in done.output
