"""Kill a real run (subprocess + SIGKILL) at several points; the resumed output must equal
an uninterrupted run record by record (wall-clock fields aside).

The killed runs are real CLI processes; the resume that finishes the folder, which no kill lands in, runs in
this process through the CLI's own app (``run_here`` of tests/cli_here.py: the same command, environment
and folder), saving a fresh interpreter's imports (~5 CPU-seconds); the reference is ``run_stream`` here."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.storage.checkpoint import RecordLog, load_checkpoint, read_records
from tokenworth_agent.experiment.runner import comparable, run_stream
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks
from tests.cli_here import run_here
from tests.killing import Watched

LIMIT = 30
METHODS = ("memrl", "tokenworth")


def cli(out: Path, data_dir: str) -> list[str]:
    return [sys.executable, "-m", "tokenworth_agent.cli", "run", "--env", "db", "--methods", ",".join(METHODS), "--limit",
            str(LIMIT), "--seed", "3", "--out", str(out), "--data-dir", data_dir, "--no-progress"]


_WATCHED: dict[Path, Watched] = {}


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def lines(path: Path) -> int:
    """The lines of ``path`` (0 while it does not exist). Polled every few milliseconds while a run goes: the file
    (100 kB by the end) is read again only when it changed (:class:`tests.killing.Watched`)."""
    return _WATCHED.setdefault(path, Watched(path, _count_lines)).get()


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


def test_sigkill_at_several_points_then_resume_matches_uninterrupted(tmp_path, data_dir) -> None:
    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.tasks import load_tasks

    out = tmp_path / "killed"
    cmd = cli(out, data_dir)
    for method, at in (("memrl", 7), ("tokenworth", 4), ("tokenworth", 19)):
        run_and_kill(cmd, out / method / "records.jsonl", at)
    run_here(cmd, dict(os.environ))  # the resume, in this process (it asserts exit status 0)

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


def test_a_first_record_that_no_checkpoint_covers_is_dropped_and_remade(tmp_path) -> None:
    """The same window before the stream's first checkpoint: killed after task 0's record was
    appended and before its checkpoint (tests/test_vllm_engine.py hit it with the real engine).
    Seed 2 makes task 0 succeed and write a memory, so the first checkpoint must hold the state
    from *before* task 0 (a Ray run that lost a node in this window once resumed with task 0's
    memory already in the bank and injected it into task 0 itself)."""
    tasks = make_tasks(6)
    budget = Budget.for_env("db")
    reference = run_stream("memp", "db", tasks, FakeBackbone(), budget, 2, tmp_path / "ref", env=FakeDBEnv())
    assert reference[0].reward == 1 and reference[0].bank_size == 1  # task 0 changes the policy's state

    out = tmp_path / "crash"
    import tokenworth_agent.storage.checkpoint as checkpoint

    class Killed(BaseException):
        pass

    def killed_after_the_first_record(self, state, **kwargs):  # the process dies right after the append
        if state["next_index"] == 1:
            raise Killed
        real_save(self, state, **kwargs)

    real_save = checkpoint.CheckpointWriter.save
    checkpoint.CheckpointWriter.save = killed_after_the_first_record
    try:
        with pytest.raises(Killed):
            run_stream("memp", "db", tasks, FakeBackbone(), budget, 2, out, env=FakeDBEnv())
    finally:
        checkpoint.CheckpointWriter.save = real_save
    assert len(read_records(out / "memp" / "records.jsonl")) == 1  # task 0's record, which no checkpoint covers
    assert load_checkpoint(out / "memp" / "checkpoint.pkl")["next_index"] == 0  # the one saved just before it
    resumed = run_stream("memp", "db", tasks, FakeBackbone(), budget, 2, out, env=FakeDBEnv())
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


def test_checkpoint_is_synced_on_the_injected_clock_and_when_the_stream_stops(tmp_path, monkeypatch) -> None:
    import tokenworth_agent.storage.checkpoint as checkpoint

    now = {"t": 0.0}
    made: list[checkpoint.CheckpointWriter] = []
    real_init = checkpoint.CheckpointWriter.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **{**kwargs, "clock": lambda: now["t"]})
        made.append(self)

    monkeypatch.setattr(checkpoint.CheckpointWriter, "__init__", init)
    real_save = checkpoint.CheckpointWriter.save
    durable_at: list[int] = []

    def save(self, state, **kwargs):
        before = self.durable_saves
        real_save(self, state, **kwargs)
        if self.durable_saves > before:
            durable_at.append(state["next_index"])
        if state["next_index"]:  # not the stream's first checkpoint, saved just before task 0's record
            now["t"] += 2.0  # every task takes two seconds

    monkeypatch.setattr(checkpoint.CheckpointWriter, "save", save)
    run_stream("memp", "db", make_tasks(12), FakeBackbone(), Budget.for_env("db"), 0, tmp_path, env=FakeDBEnv(),
               stop_after=9, durable_every_s=5.0)
    assert durable_at == [4, 7]  # every 5 s of the injected clock (tasks end at t = 0, 2, 4, 6, ...) ...
    assert made[0].durable_saves == 3  # ... plus the flush after task 9, when the call stops
    run_stream("memp", "db", make_tasks(12), FakeBackbone(), Budget.for_env("db"), 0, tmp_path, env=FakeDBEnv(),
               stop_after=1, durable_every_s=5.0)
    assert made[-1].durable_saves == 1  # a call that stops before 5 s still syncs its last checkpoint
    assert load_checkpoint(checkpoint.durable_path(tmp_path / "memp" / "checkpoint.pkl"))["next_index"] == 10


def test_power_loss_falls_back_to_the_durable_checkpoint(tmp_path) -> None:
    """A power cut can leave the newest (unsynced) checkpoint torn or ahead of the records."""
    import shutil

    from tokenworth_agent.storage.checkpoint import durable_path

    tasks = make_tasks(10)
    budget = Budget.for_env("db")
    reference = run_stream("memrl", "db", tasks, FakeBackbone(), budget, 0, tmp_path / "ref", env=FakeDBEnv())
    out = tmp_path / "cut"
    run_stream("memrl", "db", tasks, FakeBackbone(), budget, 0, out, env=FakeDBEnv(), stop_after=4)
    folder = out / "memrl"
    synced = {p.name: p.read_bytes() for p in (folder / "records.jsonl", durable_path(folder / "checkpoint.pkl"))}
    run_stream("memrl", "db", tasks, FakeBackbone(), budget, 0, out, env=FakeDBEnv(), stop_after=3,
               durable_every_s=1e9)
    # the cut: the unsynced checkpoint says 7 tasks, but only the synced records (4 tasks) reached the disk
    (folder / "records.jsonl").write_bytes(synced["records.jsonl"])
    durable_path(folder / "checkpoint.pkl").write_bytes(synced["checkpoint.durable.pkl"])
    assert load_checkpoint(folder / "checkpoint.pkl")["next_index"] == 7
    resumed = run_stream("memrl", "db", tasks, FakeBackbone(), budget, 0, out, env=FakeDBEnv())
    assert comparable(resumed) == comparable(reference)
    shutil.copy(folder / "checkpoint.pkl", tmp_path / "keep.pkl")
    (folder / "checkpoint.pkl").write_bytes(b"\x80torn")  # a torn newest checkpoint: the durable copy is used
    assert load_checkpoint(folder / "checkpoint.pkl")["next_index"] == 10
