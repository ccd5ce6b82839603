"""`tokenworth export inspect` and `tokenworth view` (tokenworth_agent.results.inspect_export, docs/viewing.md).

Every exported log is read back with inspect_ai's own reader and compared with the run's records, field by
field: the samples in stream order, the conversation as the engine built it (envs.base.conversation, then
each round's reply and observation), the score and the judge's verdict, the injected block, the metadata,
and the accuracy with the estimator's standard error (one seed: s/sqrt(n)). The run is a real, small
`tokenworth run` of the DB benchmark with the simulated backbone.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from inspect_ai.analysis import samples_df
from inspect_ai.log import list_eval_logs, read_eval_log

from tokenworth_agent.cli import app
from tokenworth_agent.envs.base import SYSTEM_PROMPT, conversation
from tokenworth_agent.envs.registry import instructions
from tokenworth_agent.results import runs
from tokenworth_agent.results.record import TaskRecord, read_records
from tests.fakes import task_record
from tests.runfolders import write_run

TASKS = 12


def tokenworth(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir) -> Path:
    """A real run: standard and RAG (which injects memories) over 12 DB tasks, then exported."""
    folder = tmp_path_factory.mktemp("inspect") / "run"
    tokenworth("run", "--methods", "standard,rag", "--limit", str(TASKS), "--out", str(folder), "--no-progress",
               "--data-dir", data_dir)
    tokenworth("export", "inspect", str(folder))
    return folder


class _Env:
    """What envs.base.conversation reads of an environment, for a record's env and task prompt."""

    def __init__(self, record: TaskRecord) -> None:
        self.record = record

    def instructions(self) -> str:
        return instructions(self.record.env)

    def task_prompt(self, task: object) -> str:
        return self.record.task_prompt


def sent_conversation(record: TaskRecord) -> list[tuple[str, str]]:
    """(role, text) of every message the model received or wrote, as the engine builds them."""
    opening = conversation(_Env(record), None, record.injection_text or "")
    messages = [(m["role"], m["content"]) for m in opening]
    for i, entry in enumerate(record.trajectory):
        messages.append(("assistant", entry["reply"]))
        if i + 1 < len(record.trajectory):  # the last observation reached no model call
            messages.append(("user", entry["observation"]))
    return messages


def check_log(path: Path, folder: Path, stream: str) -> None:
    records = read_records(folder / stream / "records.jsonl")
    config = json.loads((folder / "config.json").read_text())
    log = read_eval_log(str(path))
    assert log.status == "success" and log.eval.task == "db" and log.eval.model == "sim/default"
    meta = log.eval.metadata
    assert (meta["env"], meta["method"], meta["seed"], meta["grid_point"]) == ("db", stream, 0, {})
    assert meta["run_config"] == config and meta["harness_version"] == log.eval.packages["tokenworth-agent"]
    assert [s.id for s in log.samples] == [r.index for r in records] == list(range(TASKS))
    for sample, record in zip(log.samples, records):
        assert sample.input == record.task_prompt
        assert [(m.role, m.text) for m in sample.messages] == sent_conversation(record)
        assert sample.output.completion == record.trajectory[-1]["reply"]
        score = sample.scores["reward"]
        assert score.value == record.reward and score.metadata["status"] == record.status
        assert score.metadata["judge"] == record.judge and f"status {record.status}" in score.explanation
        m = sample.metadata
        assert (m["index"], m["task_id"], m["skills"]) == (record.index, record.task_id, record.skill_list)
        assert m["injected_memory_ids"] == record.injected_memory_ids and m["injected"] == bool(record.injected_memory_ids)
        assert m["injection_text"] == record.injection_text and m["decision"] == record.decision
        assert (m["execution_tokens"], m["auxiliary_tokens"], m["rounds"], m["time_s"]) == (
            record.execution_tokens, record.auxiliary_tokens, record.rounds, record.time_s)
        if record.injection_text:  # the block the model read, verbatim, in its first user turn
            assert record.injection_text.rstrip() in sample.messages[1].text
    rewards = np.array([r.reward for r in records], dtype=float)
    [score] = log.results.scores
    assert log.results.completed_samples == TASKS
    assert score.metrics["accuracy"].value == pytest.approx(rewards.mean())
    assert score.metrics["stderr"].value == pytest.approx(rewards.std(ddof=1) / math.sqrt(len(rewards)))


def test_every_stream_reads_back_as_its_records(run) -> None:
    logs = sorted(Path(p.name.removeprefix("file://")).relative_to(run / "inspect").as_posix()
                  for p in list_eval_logs(str(run / "inspect")))
    assert logs == ["rag.eval", "standard.eval"]
    for stream in ("standard", "rag"):
        check_log(run / "inspect" / f"{stream}.eval", run, stream)
    rag = read_eval_log(str(run / "inspect" / "rag.eval"))
    injected = [s for s in rag.samples if s.metadata["injected"]]
    assert injected, "RAG injected nothing in 12 tasks: the injection checks above saw no block"
    assert all(s.metadata["decision"]["candidate_ids"] for s in injected)  # its candidates and their scores
    # the reward every method got on the task, for filters like "rag failed where standard passed"
    standard = {r.index: r.reward for r in read_records(run / "standard" / "records.jsonl")}
    assert all(s.metadata["method_rewards"] == {"standard": standard[s.id], "rag": s.scores["reward"].value}
               for s in rag.samples)


def test_samples_df_has_one_row_per_record_with_the_reward_as_score(run) -> None:
    frame = samples_df(str(run / "inspect"), quiet=True)
    table = runs.load_run(run)
    assert len(frame) == len(table) == 2 * TASKS
    frame["stream"] = frame["log"].map(lambda p: Path(p.removeprefix("file://")).stem)
    merged = table.merge(frame, left_on=["stream", "index"], right_on=["stream", "metadata_index"], validate="one_to_one")
    assert len(merged) == 2 * TASKS and (merged["reward"] == merged["score_reward"]).all()


def test_a_second_export_gives_the_same_logs(run, tmp_path) -> None:
    path = run / "inspect" / "rag.eval"
    before = path.read_bytes()
    tokenworth("export", "inspect", str(run))  # up to date: left alone
    assert path.read_bytes() == before
    tokenworth("export", "inspect", str(run), "--out", str(tmp_path / "again"))
    for name in ("standard.eval", "rag.eval"):
        first = read_eval_log(str(run / "inspect" / name)).model_dump()
        second = read_eval_log(str(tmp_path / "again" / name)).model_dump()
        assert first == second  # ids, timestamps, every field: nothing comes from the clock


def test_a_partial_run_exports_what_it_holds(run, tmp_path) -> None:
    """A stream stopped after 7 tasks, killed mid-write: its 7 records, status started; a later export follows."""
    from tokenworth_agent.storage.checkpoint import load_checkpoint, save_checkpoint

    folder = tmp_path / "partial"
    shutil.copytree(run, folder, ignore=shutil.ignore_patterns("inspect"))
    records = (folder / "rag" / "records.jsonl").read_text().splitlines(keepends=True)
    (folder / "rag" / "records.jsonl").write_text("".join(records[:7]) + records[7][:40])  # a half-written line
    state = load_checkpoint(folder / "rag" / "checkpoint.pkl")
    save_checkpoint(folder / "rag" / "checkpoint.pkl", {**state, "finished": False, "next_index": 7})
    tokenworth("export", "inspect", str(folder))
    log = read_eval_log(str(folder / "inspect" / "rag.eval"))
    assert log.status == "started" and [s.id for s in log.samples] == list(range(7))
    assert log.results.completed_samples == 7 and log.results.total_samples == TASKS
    assert log.stats.completed_at == "" and log.eval.metadata["finished"] is False
    (folder / "rag" / "records.jsonl").write_text("".join(records[:9]))  # the run went on
    assert "rag" not in read_eval_log(str(folder / "inspect" / "standard.eval")).samples[8].metadata["method_rewards"]
    result = CliRunner().invoke(app, ["export", "inspect", str(folder)])
    assert result.exit_code == 0 and "2 logs written, 0 up to date" in result.output  # standard's: rag's rewards
    assert len(read_eval_log(str(folder / "inspect" / "rag.eval")).samples) == 9
    assert "rag" in read_eval_log(str(folder / "inspect" / "standard.eval")).samples[8].metadata["method_rewards"]


def test_an_experiment_exports_one_log_per_stream_with_its_identity(tmp_path, data_dir) -> None:
    folder = tmp_path / "grid"
    tokenworth("run", "--methods", "standard,rag", "--seeds", "0,1", "--grid", "o_max=64", "--limit", "3",
               "--out", str(folder), "--no-progress", "--data-dir", data_dir)
    tokenworth("export", "inspect", str(folder))
    names = sorted(p.relative_to(folder / "inspect").as_posix() for p in (folder / "inspect").rglob("*.eval"))
    assert names == ["seed0/rag@o_max=64.eval", "seed0/standard@o_max=64.eval", "seed1/rag@o_max=64.eval",
                     "seed1/standard@o_max=64.eval"]
    log = read_eval_log(str(folder / "inspect" / "seed1" / "rag@o_max=64.eval"))
    meta = log.eval.metadata
    assert (meta["method"], meta["seed"], meta["grid_point"], meta["stream"]) == ("rag", 1, {"o_max": 64},
                                                                                  "seed1/rag@o_max=64")
    assert meta["budget"]["max_output_tokens"] == 64 and log.eval.task_args == {"method": "rag", "seed": 1, "o_max": 64}
    standard = read_records(folder / "seed1" / "standard@o_max=64" / "records.jsonl")  # the same seed's, not seed 0's
    assert [s.metadata["method_rewards"]["standard"] for s in log.samples] == [r.reward for r in standard]


def test_long_trajectories_are_kept_whole(tmp_path) -> None:
    """A 300,000-character reply and observation go into the log whole."""
    long_reply, long_observation = "SELECT " + "x" * 300_000, "row " * 75_000
    trajectory = [{"reply": long_reply, "action": {"kind": "sql"}, "invalid": None, "observation": long_observation,
                   "observation_chars": len(long_observation), "tokens": 100, "max_tokens": 128, "finish_reason": "stop"},
                  {"reply": "Action: Answer\nFinal Answer: 1", "action": {"kind": "answer"}, "invalid": None,
                   "observation": "", "observation_chars": 0, "tokens": 5, "max_tokens": 128, "finish_reason": "stop"}]
    folder = write_run(tmp_path / "long", {"standard": [1]})
    record = task_record(0, 1, task_prompt="How many rows?", trajectory=trajectory, rounds=2,
                         stream={"env": "db", "method": "standard", "seed": 0, "budget": {}, "hparams": {}})
    (folder / "standard" / "records.jsonl").write_text(json.dumps(record.to_json()) + "\n")
    tokenworth("export", "inspect", str(folder))
    [sample] = read_eval_log(str(folder / "inspect" / "standard.eval")).samples
    assert sample.messages[4].text == long_reply and sample.messages[5].text == long_observation


def test_bad_input_is_one_error_line(tmp_path, run) -> None:
    runner = CliRunner()
    cases = [
        (["export", "inspect", str(tmp_path / "missing")], "is not a folder"),
        (["export", "inspect", str(tmp_path)], "is not a run folder"),
        (["export", "inspect", str(run), "--out", str(run / "config.json")], "is a file"),
        (["view", str(run), "--bundle", str(run)], "is not a bundle tokenworth wrote"),
        (["view", str(run), "--bundle", str(run / "inspect" / "site")], "inside the logs folder"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        lines = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], (args, result.output)
    empty = write_run(tmp_path / "empty", {})
    result = runner.invoke(app, ["export", "inspect", str(empty)])
    assert result.exit_code == 2 and "holds no records yet" in result.output
    twice = write_run(tmp_path / "twice", {"standard": [1, 0, 1]})
    lines = (twice / "standard" / "records.jsonl").read_text().splitlines(keepends=True)
    (twice / "standard" / "records.jsonl").write_text("".join(lines + lines[1:2]))  # task 1 twice
    result = runner.invoke(app, ["export", "inspect", str(twice)])
    assert result.exit_code == 2 and "hold task 1 more than once" in result.output and not (twice / "inspect").exists()


def test_a_plugin_method_and_benchmark_export_like_the_builtins(tmp_path) -> None:
    """The example benchmark (arith) and a method of another distribution, run and exported in a process
    that discovers them as installed plugins."""
    from tests.test_plugins import fake_distribution

    site = tmp_path / "site"
    site.mkdir()
    shutil.copytree(Path(__file__).parents[1] / "examples" / "plugins" / "tokenworth-example-benchmark" /
                    "tokenworth_example_benchmark", site / "tokenworth_example_benchmark")
    (site / "mine_policy.py").write_text("from tokenworth_agent.policies.rag import RAGPolicy\n\n\n"
                                         "class MinePolicy(RAGPolicy):\n    name = 'mine'\n")
    fake_distribution(site, "mine-plugin", {"tokenworth.methods": {"mine": "mine_policy:MinePolicy"},
                                            "tokenworth.benchmarks": {"arith": "tokenworth_example_benchmark:BENCHMARK"}})
    run = ["run", "--env", "arith", "--methods", "mine", "--limit", "5", "--out", "run", "--no-progress"]
    code = (f"import sys; sys.path.insert(0, {str(site)!r}); from tokenworth_agent.cli import app; "
            f"app({run!r}, standalone_mode=False); app(['export', 'inspect', 'run'], standalone_mode=False)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    records = read_records(tmp_path / "run" / "mine" / "records.jsonl")
    log = read_eval_log(str(tmp_path / "run" / "inspect" / "mine.eval"))
    assert log.eval.task == "arith" and log.eval.metadata["method"] == "mine" and log.eval.solver == "mine"
    assert [s.scores["reward"].value for s in log.samples] == [r.reward for r in records] and len(records) == 5
    first_user = log.samples[0].messages[1].text
    assert first_user.startswith("You solve arithmetic questions.")  # the plugin's own instructions
    assert log.samples[0].target == str(records[0].judge["gold"])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_view_serves_the_runs_logs_and_stops_with_its_viewer(run, tmp_path) -> None:
    """`tokenworth view RUN` exports what is stale, starts Inspect View, prints its address, and serves the
    run's logs there; stopping it stops the viewer."""
    folder = tmp_path / "viewed"
    shutil.copytree(run, folder, ignore=shutil.ignore_patterns("inspect"))  # no logs yet: view exports them
    port = _free_port()
    viewer = subprocess.Popen([sys.executable, "-c", "from tokenworth_agent.cli import app; app()", "view",
                               str(folder), "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        address = None
        deadline = time.monotonic() + 180
        while address is None and time.monotonic() < deadline:
            line = viewer.stdout.readline()
            assert line or viewer.poll() is None, "tokenworth view exited before it printed an address"
            if "Inspect View of" in line:
                address = line.split(": ", 1)[1].split()[0]
        assert address == f"http://127.0.0.1:{port}/"
        with urllib.request.urlopen(address + "api/log-files", timeout=30) as answer:
            listed = json.loads(answer.read())
        names = sorted(Path(f["name"].removeprefix("file://")).name for f in listed["files"])
        assert names == ["rag.eval", "standard.eval"] and (folder / "inspect" / "rag.eval").is_file()
    finally:
        viewer.terminate()
        viewer.wait(timeout=30)
    with pytest.raises(OSError):  # the viewer went with it
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_the_export_benchmark_measures_a_run(run, tmp_path) -> None:
    """bench/tokenworth_bench/inspect_export.py (docs/performance.md's numbers) on the small run, once."""
    from tokenworth_bench.inspect_export import main

    report = main([str(run), "--repeats", "1", "--out", str(tmp_path)])
    [measured] = report["runs"]
    assert report["records"] == measured["samples"] == measured["rows"] == 2 * TASKS
    assert measured["written"] == 2 and measured["rewritten_when_current"] == 0 and report["kept_whole"]
    assert set(report["log_bytes"]) == {"standard.eval", "rag.eval"} and all(v > 0 for v in report["log_bytes"].values())
    assert (tmp_path / "inspect_export.md").read_text().startswith("# inspect_export")


def test_a_run_of_several_task_orders_exports_each_orders_logs_with_the_order(tmp_path) -> None:
    from tests.runfolders import write_stream

    folder = write_run(tmp_path / "orders", {})
    for k, (standard, rag) in enumerate([([1, 0, 1], [1, 1, 1]), ([0, 0, 1], [1, 0, 0])]):
        ids = ["db-0", "db-1", "db-2"] if k == 0 else ["db-2", "db-0", "db-1"]
        write_stream(folder, f"order{k}/standard", standard, task_ids=ids, order=k)
        write_stream(folder, f"order{k}/rag", rag, task_ids=ids, order=k)
    tokenworth("export", "inspect", str(folder))
    log = read_eval_log(str(folder / "inspect" / "order1" / "rag.eval"))
    meta = log.eval.metadata
    assert (meta["method"], meta["order"], meta["stream"]) == ("rag", 1, "order1/rag")
    assert log.eval.task_args == {"method": "rag", "seed": 0, "order": 1} and "order1" in log.eval.tags
    # the other methods' rewards are those of the same order
    assert [s.metadata["method_rewards"]["standard"] for s in log.samples] == [0, 0, 1]
    first = read_eval_log(str(folder / "inspect" / "order0" / "rag.eval"))
    assert first.eval.metadata["order"] == 0 and first.eval.task_args == {"method": "rag", "seed": 0}
