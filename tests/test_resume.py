"""Kill a real run (subprocess + SIGKILL) at several points; the resumed output must equal
an uninterrupted run record by record (wall-clock fields aside)."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.budget import Budget
from agent.checkpoint import RecordLog, load_checkpoint, read_records
from agent.runner import comparable, run_stream
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks

LIMIT = 30
METHODS = ("memrl", "tokenworth")


def cli(out: Path, data_dir: str) -> list[str]:
    return [sys.executable, "-m", "agent.cli", "run", "--env", "db", "--methods", ",".join(METHODS), "--limit",
            str(LIMIT), "--seed", "3", "--out", str(out), "--data-dir", data_dir, "--no-progress"]


def lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def run_and_kill(cmd: list[str], watch: Path, at_lines: int, timeout: float = 120.0) -> None:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    try:
        while lines(watch) < at_lines:
            if proc.poll() is not None:
                raise AssertionError(f"run ended before the kill point: {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError("kill point not reached in time")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_sigkill_at_several_points_then_resume_matches_uninterrupted(tmp_path, data_dir) -> None:
    from agent.backbones.registry import make_backbone
    from agent.data import load_tasks

    out = tmp_path / "killed"
    cmd = cli(out, data_dir)
    for method, at in (("memrl", 7), ("tokenworth", 4), ("tokenworth", 19)):
        run_and_kill(cmd, out / method / "records.jsonl", at)
    finished = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]

    tasks = load_tasks("db", data_dir, limit=LIMIT)
    for method in METHODS:
        reference = run_stream(method, "db", tasks, make_backbone("sim", seed=3), Budget.for_env("db"), 3,
                               tmp_path / "reference")
        resumed = read_records(out / method / "records.jsonl")
        assert len(resumed) == LIMIT
        assert [r["task_id"] for r in resumed] == [t.task_id for t in tasks]  # none lost or duplicated
        for got, want in zip(comparable(resumed), comparable(reference)):
            assert got == want, (method, got["task_id"])
    assert (out / "summary.md").exists() and (out / "cumulative_sr.png").stat().st_size > 0


def test_record_written_after_checkpoint_is_dropped_and_remade(tmp_path) -> None:
    """The crash window between appending a record and saving the checkpoint."""
    tasks = make_tasks(12)
    budget = Budget.for_env("db")
    reference = run_stream("memp", "db", tasks, FakeBackbone(), budget, 0, tmp_path / "ref", env=FakeDBEnv())

    out = tmp_path / "crash"
    run_stream("memp", "db", tasks, FakeBackbone(), budget, 0, out, env=FakeDBEnv(), stop_after=5)
    records_path = out / "memp" / "records.jsonl"
    with open(records_path, "ab") as handle:  # a record (and a torn half line) that no checkpoint covers
        handle.write(b'{"task_id": "db-5", "reward": 1}\n{"task_id": "db-6", "rew')
    state = load_checkpoint(out / "memp" / "checkpoint.pkl")
    assert state["next_index"] == 5
    resumed = run_stream("memp", "db", tasks, FakeBackbone(), budget, 0, out, env=FakeDBEnv())
    assert comparable(resumed) == comparable(reference)


def test_record_log_truncates_to_offset(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    with RecordLog(path) as log:
        log.append({"a": 1})
        offset = log.append({"b": 2})
        log.append({"c": 3})
    with RecordLog(path, resume_offset=offset) as log:
        assert log.offset == offset
        log.append({"d": 4})
    assert read_records(path) == [{"a": 1}, {"b": 2}, {"d": 4}]
    with pytest.raises(Exception, match="shorter"):
        RecordLog(path, resume_offset=10_000)


def test_finished_stream_is_not_rerun(tmp_path) -> None:
    tasks = make_tasks(5)
    backbone = FakeBackbone()
    run_stream("standard", "db", tasks, backbone, Budget.for_env("db"), 0, tmp_path, env=FakeDBEnv())
    calls = len(backbone.calls)
    again = run_stream("standard", "db", tasks, backbone, Budget.for_env("db"), 0, tmp_path, env=FakeDBEnv())
    assert len(again) == 5 and len(backbone.calls) == calls
