"""BigCodeBench through the whole harness: `run` with every method and `sweep`, records, resume, summary.

The simulated backbone on three tasks of the CI subset (the stream's first tasks include task 0,
whose tests take a minute), judged for real by the official evaluator in the sandbox.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine  # the BigCodeBench judge's venv (make test-quick leaves it out)

from tokenworth_agent.experiment import plan as plan_module
from tokenworth_agent.experiment.config import DataConfig, HarnessConfig, OutputConfig, RunConfig, Streams, Sweep
from tokenworth_agent.experiment.launch import launch
from tokenworth_agent.policies.registry import POLICIES
from tokenworth_agent.results.record import read_records
from tokenworth_agent.tasks import load_tasks
from tests.bigcodebench_fixtures import ci_subset, eval_venv

TABLE1 = ("standard", "rag", "memrl", "memp", "tokenworth", "mem0", "memskill", "reflexion", "evosc", "evoskill")
METHODS = (*TABLE1, "tokenworth+")
N = 3
SEED = 10  # the simulator's draws on these three tasks: a success, a failure, a success (seed 0: three failures)


@pytest.fixture(scope="module")
def venv():
    return eval_venv()


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> Path:
    """One verdict file for the module: a reply judged in one test is not judged again in the next."""
    return tmp_path_factory.mktemp("bcb") / "verdicts.jsonl"


@pytest.fixture
def three_tasks(data_dir, monkeypatch):
    """The run loads these three tasks (renumbered as a stream) instead of the stream's first ones."""
    tasks = [dataclasses.replace(t, sample_index=i) for i, t in enumerate(ci_subset(load_tasks("bigcodebench",
                                                                                              data_dir), N))]
    real = plan_module.load_tasks

    def load(env, data_dir=None, limit=None):
        return tasks[:limit] if env == "bigcodebench" else real(env, data_dir, limit=limit)

    monkeypatch.setattr(plan_module, "load_tasks", load)
    return tasks


def config(tmp_path: Path, venv, verdicts: Path, what, **data) -> RunConfig:
    return RunConfig(what=what, data=DataConfig(**data),
                     harness=HarnessConfig(options={"bcb_venv": venv.root, "bcb_verdicts": verdicts}),
                     output=OutputConfig(out=tmp_path / "run", progress=False))


class StopAt:
    """A stream hook that interrupts the run once ``stream`` has committed task ``index`` (a Ctrl-C)."""

    def __init__(self, name: str, stream: str, index: int) -> None:
        self.name, self.stream, self.index = name, stream, index

    def resumed(self, records) -> None:
        pass

    def started(self, next_index: int) -> None:
        pass

    def __call__(self, record) -> None:
        if self.name == self.stream and record.index == self.index:
            raise KeyboardInterrupt


def test_every_method_runs_records_and_resumes(tmp_path, venv, verdicts, three_tasks):
    assert set(METHODS) <= set(POLICIES.names)
    run = config(tmp_path, venv, verdicts, Streams(envs=("bigcodebench",), methods=METHODS, seeds=(SEED,)))
    with pytest.raises(KeyboardInterrupt):
        launch(run, hooks=lambda name, spec: StopAt(name, "tokenworth", 1))
    cut = {m: len(read_records(tmp_path / "run" / m / "records.jsonl")) for m in METHODS}
    assert 0 < sum(cut.values()) < N * len(METHODS)
    again = launch(run)  # the same command resumes
    out = tmp_path / "run"
    summary = {row["method"]: row for row in json.loads((out / "summary.json").read_text())}
    for method in METHODS:
        records = read_records(out / method / "records.jsonl")
        assert [r.index for r in records] == list(range(N)), (method, cut)  # none lost, none twice
        for r, task in zip(records, three_tasks, strict=True):
            assert r.env == "bigcodebench" and r.task_id == task.task_id and r.rounds == 1
            assert r.judge["status"] in ("pass", "fail") and r.reward == int(r.judge["status"] == "pass")
            [entry] = r.trajectory
            assert entry["max_tokens"] == 1280 and r.execution_tokens == entry["tokens"] <= 1280
            assert task.canonical_solution.strip() not in (r.task_prompt or "") + (r.injection_text or "")
            assert r.injected_length <= 4096
            assert all(c["max_tokens"] <= 512 for c in r.aux_calls)  # App. C: auxiliary calls capped at 512
            if r.reward:
                assert task.entry_point in entry["action"]["code"]
        assert summary[method]["sr"] == pytest.approx(100 * sum(r.reward for r in records) / N, abs=0.06)
    # the simulator wrote both kinds of reply somewhere, and the evaluator told them apart
    rewards = [r.reward for m in METHODS for r in read_records(out / m / "records.jsonl")]
    assert 0 < sum(rewards) < len(rewards)
    assert any(r.aux_calls for m in ("mem0", "reflexion") for r in read_records(out / m / "records.jsonl"))
    assert all(len(records) == N for records in again.result.records.values()) and again.summary.saved


def test_a_tokenworth_sweep_runs_on_bigcodebench(tmp_path, venv, verdicts, three_tasks):
    for plus in (False, True):
        sweep = Sweep(env="bigcodebench", seed=SEED, grid=("eta_max=0.05,0.1",), plus=plus)
        result = launch(config(tmp_path / str(plus), venv, verdicts, sweep))
        assert len(result.plan.streams) == 2 and result.sweep_table
        for name, records in result.result.records.items():
            assert [r.index for r in records] == list(range(N)), name
            assert all(r.method.startswith("tokenworth") and r.judge["status"] in ("pass", "fail") for r in records)
