"""The typed run: RunConfig's defaults are the CLI's, bad values are refused as they are made, and
launch() runs through an executor seam that another executor can fill (workers that each run a
shard of the streams with a backbone of their own) with the same records as the local one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import typer

from tokenworth_agent.cli import ExperimentFlags, app
from tokenworth_agent.experiment import (BackboneConfig, ConfigError, DataConfig, LocalExecutor, OutputConfig, RunConfig, Streams,
                              Sweep, comparable, launch, run_shard, shards)
from tokenworth_agent.results.record import read_records


def test_the_flags_defaults_are_the_typed_runs() -> None:
    """One definition of every default: the CLI's flags build exactly RunConfig() when none is given."""
    flags = ExperimentFlags()
    assert flags.config(Streams()) == RunConfig()
    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    defaults = {p.name: p.default for p in run.params}
    assert defaults["env"] == ",".join(Streams().envs) and defaults["methods"] == ",".join(Streams().methods)
    assert defaults["schedule"] == RunConfig().schedule and defaults["memory_format"] == RunConfig().harness.memory_format


@pytest.mark.parametrize("make, message", [
    (lambda: Streams(envs=("db", "web")), "unknown environment 'web'; choose from alfworld, bigcodebench, db, kg, os"),
    (lambda: Streams(methods=("standard", "standard")), "--methods lists a value twice"),
    (lambda: Streams(seeds=()), "--seeds: name at least one"),
    (lambda: Sweep(grid=("eta=0.1",), table_a3=True), "either --table-a3 or --grid"),
    (lambda: BackboneConfig(name="gpt"), "--backbone 'gpt'"),
    (lambda: BackboneConfig(name="openai"), "--backbone openai needs --model"),
    (lambda: RunConfig(schedule="eager"), "--schedule 'eager'"),
    (lambda: DataConfig(limit=0), "--limit must be at least 1"),
])
def test_a_value_that_cannot_be_right_is_refused_when_made(make, message) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


class ShardedExecutor:
    """What a cluster executor does, in one process: shards of the plan's streams, each run by a worker
    with a backbone of its own made from the plan, the driver holding no stream lock meanwhile."""

    name = "sharded"
    in_process = False

    def __init__(self, count: int) -> None:
        self.count, self.ran = count, []

    def check(self, plan) -> None:
        pass

    def run(self, plan, *, hooks, on_resume):
        results = []
        for shard in shards(plan, self.count):
            self.ran.append(shard.names)
            results.append(run_shard(plan, shard, plan.backbone_spec.make()))
        return results


def test_another_executor_fills_the_seam_with_the_records_of_the_local_one(tmp_path, data_dir) -> None:
    def config(out: Path) -> RunConfig:
        return RunConfig(Streams(methods=("standard", "rag", "tokenworth"), seeds=(0, 1)),
                         data=DataConfig(data_dir=Path(data_dir), limit=4),
                         output=OutputConfig(out=out, progress=False))

    local = launch(config(tmp_path / "local"), executor=LocalExecutor())
    sharded = ShardedExecutor(4)
    spread = launch(config(tmp_path / "spread"), executor=sharded)
    assert len(sharded.ran) == 4 and sorted(n for names in sharded.ran for n in names) == sorted(local.plan.names)
    for name in local.plan.names:
        assert comparable(read_records(tmp_path / "spread" / name / "records.jsonl")) == \
            comparable(read_records(tmp_path / "local" / name / "records.jsonl")), name
    assert spread.summary.table.replace("spread", "local") == local.summary.table
    assert dataclasses.asdict(spread.plan.config)["what"] == dataclasses.asdict(local.plan.config)["what"]


def test_shards_deal_every_stream_once(tmp_path, data_dir) -> None:
    from tokenworth_agent.experiment import make_plan

    plan = make_plan(RunConfig(Streams(methods=("standard", "rag", "memp")), data=DataConfig(data_dir=Path(data_dir),
                                                                                             limit=2),
                               output=OutputConfig(out=tmp_path / "run")))
    for count in (1, 2, 3, 7):
        dealt = [n for shard in shards(plan, count) for n in shard.names]
        assert sorted(dealt) == sorted(plan.names) and len(shards(plan, count)) == min(count, 3)
    assert not (tmp_path / "run").exists()  # a plan writes nothing
