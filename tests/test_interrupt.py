"""Ctrl-C never becomes a task outcome: it stops the run between two committed tasks.

Unit tests inject SIGINT into every phase of a task, including inside a SQLite callback
(where sqlite3 turns the KeyboardInterrupt into ``OperationalError``); a slow test sends a
real SIGINT to a real run at many points and checks exit status 130, intact files, and
records equal to an uninterrupted run after resuming. The signalled runs are real CLI processes; the resume that
finishes the folder, which no signal lands in, runs in this process through the CLI's own app (``run_here`` of
tests/cli_here.py), saving a fresh interpreter's imports (~5 CPU-seconds).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.storage.checkpoint import load_checkpoint, read_records
from tokenworth_agent.core.interrupt import InterruptGuard
from tokenworth_agent.experiment.runner import comparable, run_stream
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks
from tests.test_resume import lines
from tests.cli_here import run_here

DB = Budget.for_env("db")
AT_TASK = 3


@pytest.fixture(autouse=True)
def interactive_sigint():
    """Python's own SIGINT handler for each test, whatever this process inherited.

    A test run started as a background job of a non-interactive shell (``cmd &``, nohup) inherits
    SIGINT ignored (POSIX: asynchronous lists ignore SIGINT without job control), so Python never
    installs its handler and no Ctrl-C can reach a run there. These tests are about the terminal
    case; the inherited disposition comes back afterwards."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, inherited)


def sqlite_swallowing_sigint(presses: int) -> None:
    """A SQLite query whose Python progress callback receives SIGINT ``presses`` times.

    Once the handler raises inside the callback (Python's default handler at once, the guard
    at the second press), sqlite3 swallows the KeyboardInterrupt and raises OperationalError.
    """
    connection = sqlite3.connect(":memory:")
    fired: list[int] = []

    def progress() -> int:
        if len(fired) < presses:
            fired.append(1)
            signal.raise_signal(signal.SIGINT)
        return 0

    connection.set_progress_handler(progress, 1)
    connection.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 5000) "
                       "SELECT count(*) FROM c").fetchall()


class InterruptedEnv(FakeDBEnv):
    """Gets SIGINT (``presses`` times) inside SQLite during ``phase`` of task AT_TASK."""

    def __init__(self, phase: str, presses: int = 2) -> None:
        super().__init__()
        self.phase, self.presses, self.fired = phase, presses, False

    def _maybe(self, phase: str) -> None:
        if phase == self.phase and not self.fired and self.task.sample_index == AT_TASK:
            self.fired = True
            sqlite_swallowing_sigint(self.presses)  # twice: sqlite3.OperationalError, not KeyboardInterrupt

    def reset(self, task):
        out = super().reset(task)
        self._maybe("reset")
        return out

    def step(self, reply):
        self._maybe("step")
        return super().step(reply)

    def judge(self):
        self._maybe("judge")
        return super().judge()


class SwallowingBackbone(FakeBackbone):
    """A backbone whose client catches everything (as HTTP clients and retry loops do)."""

    def __init__(self, presses: int = 2) -> None:
        super().__init__()
        self.presses, self.fired = presses, False

    def generate(self, conversations, max_tokens, stop=None, *, facts):
        if not self.fired and facts[0].task.sample_index == AT_TASK:
            self.fired = True
            for _ in range(self.presses):
                try:
                    signal.raise_signal(signal.SIGINT)
                except BaseException:
                    pass  # swallowed: only the guard's flag remembers it
        return super().generate(conversations, max_tokens, stop, facts=facts)


@pytest.fixture(scope="module")
def uninterrupted_memp(tmp_path_factory) -> tuple:
    """The uninterrupted run every case below resumes to (the same tasks, backbone, seed): made once, read only."""
    reference = run_stream("memp", "db", make_tasks(8), FakeBackbone(), DB, 0, tmp_path_factory.mktemp("ref"),
                           env=FakeDBEnv())
    return tuple(comparable(reference))


@pytest.mark.parametrize("presses", [1, 2])
@pytest.mark.parametrize("phase", ["reset", "step", "judge", "backbone"])
def test_sigint_swallowed_by_a_callee_stops_the_run_and_commits_nothing(tmp_path, phase, presses,
                                                                        uninterrupted_memp) -> None:
    tasks = make_tasks(8)
    out = tmp_path / "run"
    env = FakeDBEnv() if phase == "backbone" else InterruptedEnv(phase, presses)
    backbone = SwallowingBackbone(presses) if phase == "backbone" else FakeBackbone()
    with pytest.raises(KeyboardInterrupt):
        run_stream("memp", "db", tasks, backbone, DB, 0, out, env=env)
    records = read_records(out / "memp" / "records.jsonl")
    assert [r["index"] for r in records] == list(range(AT_TASK))  # the interrupted task left no trace
    assert all(r["status"] != "env_error" for r in records)
    assert load_checkpoint(out / "memp" / "checkpoint.pkl")["next_index"] == AT_TASK
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the guard restored Python's handler
    resumed = run_stream("memp", "db", tasks, FakeBackbone(), DB, 0, out, env=FakeDBEnv())
    assert tuple(comparable(resumed)) == uninterrupted_memp


def test_sigint_during_the_commit_is_deferred_until_the_task_is_written(tmp_path, monkeypatch) -> None:
    from tokenworth_agent.storage.checkpoint import CheckpointWriter

    real_save = CheckpointWriter.save

    def save(self, state, **kwargs):
        if state["next_index"] == 2:
            signal.raise_signal(signal.SIGINT)  # lands between the record append and the checkpoint
        real_save(self, state, **kwargs)

    monkeypatch.setattr(CheckpointWriter, "save", save)
    with pytest.raises(KeyboardInterrupt):
        run_stream("rag", "db", make_tasks(5), FakeBackbone(), DB, 0, tmp_path, env=FakeDBEnv())
    assert len(read_records(tmp_path / "rag" / "records.jsonl")) == 2
    assert load_checkpoint(tmp_path / "rag" / "checkpoint.pkl")["next_index"] == 2


def test_first_sigint_only_sets_the_flag_the_second_raises_at_once(capsys) -> None:
    with InterruptGuard() as guard:
        signal.raise_signal(signal.SIGINT)  # nothing is raised inside the callee
        assert guard.requested and "Ctrl-C again" in capsys.readouterr().err
        with InterruptGuard() as inner:  # nested guards share the flag
            with pytest.raises(KeyboardInterrupt):
                inner.check()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # the user insists
        with pytest.raises(KeyboardInterrupt):
            guard.check()  # and a callee that swallowed the second one cannot hide it either


# ------------------------------------------------------------------------- a real run, a real SIGINT
LIMIT = 40
METHODS = ("standard", "memp")


def cli(out: Path, data_dir: str) -> list[str]:
    return [sys.executable, "-m", "tokenworth_agent.cli", "run", "--env", "db", "--methods", ",".join(METHODS), "--limit",
            str(LIMIT), "--seed", "2", "--out", str(out), "--data-dir", data_dir, "--no-progress"]


@pytest.mark.slow(reason="six CLI processes sent SIGINT at chosen tasks, then the resume and a reference run of both "
                         "methods in this process (52 s on a quiet machine, 67 s in CI's loaded run, with the resume "
                         "a seventh process then)")
def test_real_sigint_at_many_points_exits_130_and_resumes_to_identical_records(tmp_path, data_dir) -> None:
    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.tasks import load_tasks

    out = tmp_path / "run"
    cmd = cli(out, data_dir)
    rng = random.Random(0)
    points = [("standard", 3), ("standard", 17), ("memp", 2), ("memp", 9), ("memp", 21), ("memp", 30)]
    interrupted = 0
    for method, at in points:
        watch = out / method / "records.jsonl"
        if lines(watch) >= LIMIT:
            continue
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 180
        # the methods run in lockstep: wait for this process's own first record of the watched method, so
        # the signal never lands in the interpreter's start-up, whatever an earlier process already wrote
        target = max(at, lines(watch) + 1)
        while lines(watch) < target and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.03))  # land anywhere inside the next task (SQLite, sim, policy)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        if proc.returncode == 0:
            continue  # the run finished before the signal
        interrupted += 1
        assert proc.returncode == 130, stderr[-2000:]
        assert "interrupted" in stderr and "Traceback" not in stderr
        for m in METHODS:  # what is on disk is whole: the records the checkpoint covers, nothing more
            state = load_checkpoint(out / m / "checkpoint.pkl")
            records = read_records(out / m / "records.jsonl")
            assert len(records) == (state["next_index"] if state else 0)
            assert [r["index"] for r in records] == list(range(len(records)))
    assert interrupted >= 4
    run_here(cmd, dict(os.environ))  # the resume no signal lands in, in this process (it asserts exit status 0)
    tasks = load_tasks("db", data_dir, limit=LIMIT)
    for method in METHODS:
        reference = run_stream(method, "db", tasks, make_backbone("sim", seed=2), DB, 2, tmp_path / "ref")
        assert comparable(read_records(out / method / "records.jsonl")) == comparable(reference), method
