"""Lockstep multi-stream sweeps: grid parsing, batching, and equality with single runs."""

import dataclasses
import json

import pytest

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.experiment import run_experiment, stream_names
from tokenworth_agent.experiment.runner import run_stream
from tokenworth_agent.experiment.sweep import SweepError, SweepResult, configs_from_grid, sweep_streams, table_a3_configs, write_sweep_results
from tests.killing import kill_at
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks

DB = Budget.for_env("db")


def run_sweep(tasks, backbone, configs, out, *, envs=None, plus=False, stop_after=None) -> SweepResult:
    """What ``tokenworth sweep`` runs (tokenworth_agent.cli ``run_sweep_command``): the sweep's streams through the
    experiment engine, then its rows; on DB, seed 0, with the test's backbone and environments."""
    streams = sweep_streams("db", DB, configs, 0, plus=plus)
    names = stream_names(streams)
    result = run_experiment(streams, backbone, out, tasks={"db": tasks}, stop_after=stop_after,
                            environments=dict(zip(names, envs)) if envs is not None else None)
    return SweepResult.from_experiment(result, configs, "db", 0)


def test_grid_product_aliases_and_errors() -> None:
    configs = configs_from_grid(["eta=0.05,0.1", "gamma=0.5,1,2", "krr_interval=25,50"])
    assert len(configs) == 12 and configs[0] == {"eta_max": 0.05, "gamma": 0.5, "krr_interval": 25}
    assert isinstance(configs[0]["krr_interval"], int)
    assert configs_from_grid([]) == [{}]
    for bad, match in [("nope=1", "unknown field"), ("gamma", "NAME=v1"), ("gamma=x", "not a number"),
                       ("krr_interval=2.5", "integers")]:
        with pytest.raises(SweepError, match=match):
            configs_from_grid([bad])
    with pytest.raises(SweepError, match="twice"):
        configs_from_grid(["gamma=1", "gamma=2"])


def test_table_a3_grid_has_the_spec_values() -> None:
    configs = table_a3_configs()
    assert len(configs) == 22 and configs[0] == {}
    assert {"eta_max": 0.30} in configs and {"agop_interval": 400} in configs and {"lambda_w": 0.03} in configs


def test_sixteen_streams_one_batched_call_per_round_and_match_single_runs(tmp_path) -> None:
    tasks = make_tasks(12)
    configs = configs_from_grid(["eta=0.05,0.15,0.3,0.5", "gamma=0.5,1,2,4"])
    assert len(configs) == 16
    backbone = FakeBackbone()
    result = run_sweep(tasks, backbone, configs, tmp_path / "sweep", envs=[FakeDBEnv() for _ in configs])
    # every episode of the fake takes 2 rounds: 2 batched calls per task, each with all 16 streams
    assert backbone.batch_sizes == [16] * (2 * len(tasks))
    preset_index = configs.index({"eta_max": 0.15, "gamma": 1.0})
    single = run_stream("tokenworth", "db", tasks, FakeBackbone(), DB, 0, tmp_path / "preset", env=FakeDBEnv())
    assert [r.reward for r in single] == result.streams[preset_index].rewards
    assert [r.output_tokens for r in single] == result.streams[preset_index].tokens
    table = write_sweep_results(result, tmp_path / "out")
    assert table.count("\n| eta_max=") == 16
    data = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert len(data["streams"]) == 16 and data["max_batch"] == 16


def test_sweep_on_real_db_env_matches_tokenworth_run(tmp_path, data_dir) -> None:
    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.tasks import load_tasks

    tasks = load_tasks("db", data_dir, limit=20)
    backbone = make_backbone("sim", seed=0)
    result = run_sweep(tasks, backbone, [{}, {"eta_max": 0.3}], tmp_path / "sweep")
    single = run_stream("tokenworth", "db", tasks, backbone, DB, 0, tmp_path / "single")
    assert [r.reward for r in single] == result.streams[0].rewards
    assert [r.output_tokens for r in single] == result.streams[0].tokens


# ------------------------------------------------------------------------- resumable sweep folders
def comparable_sweep(result) -> list[dict]:
    return [dataclasses.asdict(s) for s in result.streams]


def test_sweep_checkpoints_every_task_and_resumes_exactly(tmp_path) -> None:
    from tokenworth_agent.storage.checkpoint import load_checkpoint

    tasks = make_tasks(10)
    configs = configs_from_grid(["eta=0.05,0.3", "gamma=0.5,2"])
    reference = run_sweep(tasks, FakeBackbone(), configs, tmp_path / "reference", envs=[FakeDBEnv() for _ in configs])
    out = tmp_path / "sweep"
    for stop in (3, 1, 4):
        run_sweep(tasks, FakeBackbone(), configs, out, envs=[FakeDBEnv() for _ in configs], stop_after=stop)
    # every stream has its own checkpoint, all at task 8
    assert [load_checkpoint(out / f"tokenworth@{label}" / "checkpoint.pkl")["next_index"]
            for label in ("eta_max=0.05,gamma=0.5", "eta_max=0.3,gamma=2.0")] == [8, 8]
    backbone = FakeBackbone()
    resumed = run_sweep(tasks, backbone, configs, out, envs=[FakeDBEnv() for _ in configs])
    assert comparable_sweep(resumed) == comparable_sweep(reference)
    assert backbone.batch_sizes == [4] * 4  # only tasks 8, 9 ran: 2 rounds each, all 4 streams per call


def test_sweep_refuses_a_folder_holding_another_sweep(tmp_path, data_dir) -> None:
    from typer.testing import CliRunner

    from tokenworth_agent.cli import app

    runner = CliRunner()
    out = tmp_path / "sweep"
    base = ["sweep", "--limit", "3", "--out", str(out), "--data-dir", data_dir, "--no-progress"]
    assert runner.invoke(app, [*base, "--grid", "eta=0.1,0.3"]).exit_code == 0
    before = (out / "sweep.json").read_text()
    other = runner.invoke(app, [*base, "--grid", "gamma=0.5"])
    assert other.exit_code == 2 and "different settings" in other.output and "--overwrite" in other.output
    assert (out / "sweep.json").read_text() == before  # the earlier sweep is intact
    again = runner.invoke(app, [*base, "--grid", "eta=0.1,0.3"])  # the same sweep: finished, nothing re-run
    assert again.exit_code == 0 and json.loads((out / "sweep.json").read_text())["rewards"] == json.loads(before)["rewards"]
    assert runner.invoke(app, [*base, "--grid", "gamma=0.5", "--overwrite"]).exit_code == 0
    assert len(json.loads((out / "sweep.json").read_text())["streams"]) == 1
    foreign = tmp_path / "thesis"
    foreign.mkdir()
    (foreign / "chapter1.tex").write_text("mine")
    refused = runner.invoke(app, ["sweep", "--limit", "3", "--out", str(foreign), "--data-dir", data_dir,
                                  "--no-progress", "--overwrite"])
    assert refused.exit_code == 2 and "not a tokenworth run folder" in refused.output
    assert (foreign / "chapter1.tex").read_text() == "mine"


def test_sweep_interrupt_commits_nothing_of_the_task_in_flight(tmp_path) -> None:
    from tokenworth_agent.storage.checkpoint import load_checkpoint
    from tests.test_interrupt import AT_TASK, InterruptedEnv

    tasks = make_tasks(7)
    configs = [{}, {"eta_max": 0.3}]
    reference = run_sweep(tasks, FakeBackbone(), configs, tmp_path / "reference", envs=[FakeDBEnv() for _ in configs])
    out = tmp_path / "sweep"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tasks, FakeBackbone(), configs, out, envs=[InterruptedEnv("step"), FakeDBEnv()])
    assert [load_checkpoint(out / name / "checkpoint.pkl")["next_index"]
            for name in ("tokenworth", "tokenworth@eta_max=0.3")] == [AT_TASK, AT_TASK]
    resumed = run_sweep(tasks, FakeBackbone(), configs, out, envs=[FakeDBEnv() for _ in configs])
    assert comparable_sweep(resumed) == comparable_sweep(reference)


def test_sweep_sigkill_at_several_points_then_resume_matches_uninterrupted(tmp_path, data_dir) -> None:
    """The killed sweeps are real CLI processes; the resume that finishes the folder runs in this process through
    the CLI's own app (``run_here``), which saves a fresh interpreter's imports."""
    import os
    import sys

    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.tasks import load_tasks
    from tests.cli_here import run_here

    limit = 14
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "tokenworth_agent.cli", "sweep", "--grid", "eta=0.1,0.3", "--limit", str(limit), "--out",
           str(out), "--data-dir", data_dir, "--no-progress"]

    kill_at(cmd, out / "tokenworth@eta_max=0.3" / "checkpoint.pkl", (2, 6, 11))
    run_here(cmd, dict(os.environ))  # the resume no kill lands in, in this process (it asserts exit status 0)
    tasks = load_tasks("db", data_dir, limit=limit)
    reference = run_sweep(tasks, make_backbone("sim", seed=0), configs_from_grid(["eta=0.1,0.3"]), tmp_path / "reference")
    data = json.loads((out / "sweep.json").read_text())
    assert data["rewards"] == [s.rewards for s in reference.streams]
    assert [s["admissions"] for s in data["streams"]] == [s.summary()["admissions"] for s in reference.streams]
    assert [s["output_tok"] for s in data["streams"]] == [s.summary()["output_tok"] for s in reference.streams]


def test_an_older_sweep_folder_is_never_overwritten(tmp_path, data_dir) -> None:
    """A folder from before sweeps were run folders (sweep-config.json, no config.json) is refused, even with --overwrite."""
    from typer.testing import CliRunner

    from tokenworth_agent.cli import app

    out = tmp_path / "sweep-db-seed0"
    out.mkdir()
    (out / "sweep.md").write_text("22 x 500 Table A3")
    (out / "sweep-config.json").write_text("{}")
    refused = CliRunner().invoke(app, ["sweep", "--limit", "2", "--out", str(out), "--data-dir", data_dir,
                                       "--no-progress", "--overwrite"])
    assert refused.exit_code == 2 and "not a tokenworth run folder" in refused.output
    assert (out / "sweep.md").read_text() == "22 x 500 Table A3" and sorted(p.name for p in out.iterdir()
                                                                              if p.name != ".lock") == [
        "sweep-config.json", "sweep.md"]
