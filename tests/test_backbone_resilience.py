"""The OpenAI-compatible backbone against servers that die, restart, hang or refuse.

Every server here is ``tests/openai_stub.py`` on 127.0.0.1, in its own process (so it can be
killed), bounded in requests and lifetime. Waits are short: backoff starts at 0.1-0.2 s.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tokenworth_agent.backbones.base import BackboneError
from tokenworth_agent.backbones.openai_backbone import OpenAIBackbone

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StubProcess:
    def __init__(self, port: int, *args: str) -> None:
        self.port, self.args = port, args
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "StubProcess":
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.openai_stub", "--port", str(self.port), *self.args],
                                     cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", self.proc.stderr.read()
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def wait_dead(self, timeout: float = 60.0) -> None:
        assert self.proc is not None
        self.proc.wait(timeout=timeout)


@pytest.fixture
def stubs():
    made: list[StubProcess] = []

    def make(port: int | None = None, *args: str) -> StubProcess:
        stub = StubProcess(port or free_port(), *args)
        made.append(stub)
        return stub

    yield make
    for stub in made:
        stub.kill()


def conv(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def quick(url: str | list[str], **options) -> OpenAIBackbone:
    lines: list[str] = []
    options = {"backoff_base": 0.2, "backoff_max": 1.0, "retry_for": 20.0, "timeout": 10.0,
               "on_notice": lines.append, **options}
    backbone = OpenAIBackbone("served", base_url=url, **options)
    backbone.printed = lines  # type: ignore[attr-defined]
    return backbone


# ------------------------------------------------------------------------- the backbone alone
def test_server_restart_within_the_retry_window_is_survived(stubs):
    stub = stubs().start()
    with quick(stub.url) as backbone:
        assert backbone.generate([conv("a")], [16])[0].output_tokens == 4
        stub.kill()
        threading.Timer(1.5, lambda: stub.start()).start()  # the "restart" takes 1.5 s
        [reply] = backbone.generate([conv("b")], [16])
        assert reply.text.startswith("Action: Answer") and reply.output_tokens == 4
        assert backbone.printed and all("\n" not in line for line in backbone.printed)
        first = backbone.printed[0]
        assert "attempt 1" in first and stub.url in first and "cannot connect" in first and "retry 1 in" in first
        assert "still be running" not in first  # a refused connection never reached the server


def test_beyond_the_retry_window_one_line_names_url_and_cause(stubs):
    url = f"http://127.0.0.1:{free_port()}/v1"  # nobody listens
    with quick(url, retry_for=1.0) as backbone:
        started = time.monotonic()
        with pytest.raises(BackboneError) as info:
            backbone.generate([conv("x")], [8])
        assert time.monotonic() - started < 5
    message = str(info.value)
    assert "\n" not in message and url in message and "cannot connect" in message and "--retry-for" in message
    assert len(backbone.printed) >= 1


def test_a_hung_server_is_never_silent_and_resends_are_announced(stubs):
    stub = stubs(None, "--hang").start()
    with quick(stub.url, timeout=0.6, notice_every=0.25, retry_for=1.5) as backbone:
        with pytest.raises(BackboneError, match="read timeout") as info:
            backbone.generate([conv("x")], [8])
    assert stub.url in str(info.value)
    assert any("still waiting" in line for line in backbone.printed)
    assert any("may still be running" in line for line in backbone.printed)


def test_404_without_v1_suggests_it(stubs):
    stub = stubs().start()
    bare = stub.url[: -len("/v1")]
    with quick(bare) as backbone, pytest.raises(BackboneError, match=r"(?i)did you mean --base-url .*/v1"):
        backbone.generate([conv("x")], [8])


def test_unknown_model_names_the_flag_and_the_served_models(stubs):
    stub = stubs().start()
    with OpenAIBackbone("wrong-name", base_url=stub.url, on_notice=lambda line: None) as backbone:
        with pytest.raises(BackboneError) as info:
            backbone.generate([conv("x")], [8])
    message = str(info.value)
    assert "--model" in message and "wrong-name" in message and "served" in message and "\n" not in message


def test_a_replica_killed_mid_batch_loses_nothing_and_serves_nothing_twice(stubs, tmp_path):
    """Two replicas; one dies after its 3rd answer while others wait on it. Its unanswered requests
    fail over to the live one at once; every item is answered once, in order."""
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    dying = stubs(None, "--exit-after", "3", "--delay", "0.2", "--log", str(logs[0])).start()
    alive = stubs(None, "--delay", "0.2", "--log", str(logs[1])).start()
    items = [f"item {i}" for i in range(16)]
    with quick([dying.url, alive.url], retry_for=20.0) as backbone:
        out = backbone.generate([conv(t) for t in items], [16] * 16)
        dying.wait_dead(timeout=10)
        later = backbone.generate([conv("after")], [16])  # the dead replica is set aside, not waited for
    assert [g.output_tokens for g in out] == [4] * 16 and later[0].output_tokens == 4
    # A stub logs each answer just after sending it, so on a loaded machine the last line ("after") can land
    # after the client has its answer (a fresh clone read the logs first once): wait for the lines, then compare.
    deadline = time.monotonic() + 10
    while (sum(len(log.read_text().splitlines()) for log in logs if log.exists()) < len(items) + 1
           and time.monotonic() < deadline):  # a stub's log file appears with its first line
        time.sleep(0.05)
    served = [json.loads(line) for log in logs for line in log.read_text().splitlines()]
    assert sorted(served) == sorted(items + ["after"])  # every item answered, none twice
    assert len(logs[0].read_text().splitlines()) == 3
    assert any("failing over to " + alive.url in line for line in backbone.printed)


def test_all_replicas_down_is_one_line_naming_them(stubs):
    urls = [f"http://127.0.0.1:{free_port()}/v1", f"http://127.0.0.1:{free_port()}/v1"]
    with quick(urls, retry_for=1.0, backoff_base=0.1) as backbone:
        with pytest.raises(BackboneError) as info:
            backbone.generate([conv("x")], [8])
    message = str(info.value)
    assert "\n" not in message and all(url in message for url in urls) and "model servers at" in message


def test_max_retries_bounds_the_count(stubs):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with quick(url, max_retries=2, backoff_base=0.01) as backbone:
        with pytest.raises(BackboneError, match="3 attempts.*--max-retries 2"):
            backbone.generate([conv("x")], [8])
        assert backbone.attempts == 3


# ------------------------------------------------------------------------- the whole CLI
# A run that fails is a real CLI process (what it prints on the way out, no traceback, is the claim); a run that
# succeeds runs in this process through the CLI's own app (``cli_here``: tests/cli_here.py's ``run_here``,
# the same command, environment and folder), which saves a fresh interpreter's imports (~5 CPU-seconds). The
# servers, killed and restarted under it, are real processes either way.
def cli_command(out: Path, url: str, *extra: str, limit: int = 4) -> list[str]:
    return [sys.executable, "-m", "tokenworth_agent.cli", "run", "--env", "db", "--methods", "standard", "--backbone",
            "openai", "--model", "served", "--base-url", url, "--limit", str(limit), "--out", str(out),
            "--no-progress", *extra]


def cli(out: Path, url: str, *extra: str, limit: int = 4, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(cli_command(out, url, *extra, limit=limit), cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def cli_here(out: Path, url: str, *extra: str, limit: int = 4):
    """The run of ``cli`` in this process; it asserts exit status 0 (``.stderr`` as ``cli`` gives it)."""
    from tests.cli_here import run_here

    return run_here(cli_command(out, url, *extra, limit=limit), ENV)


def records(out: Path) -> list[dict]:
    path = out / "standard" / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_cli_dead_server_one_line_then_the_right_url_resumes_the_same_folder(tmp_path, stubs, data_dir):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    failed = cli(tmp_path, dead, "--retry-for", "1")
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and dead in last and "cannot connect" in last
    assert records(tmp_path) == []
    stub = stubs().start()  # the server, on another port: base_url is not part of the run's identity
    cli_here(tmp_path, stub.url)  # asserts exit status 0
    assert [r["index"] for r in records(tmp_path)] == [0, 1, 2, 3]
    assert json.loads((tmp_path / "config.json").read_text())["connection"]["base_url"] == stub.url


def test_cli_server_killed_mid_run_and_restarted_within_the_window(tmp_path, stubs, data_dir):
    stub = stubs(None, "--exit-after", "2").start()

    def restart() -> None:  # when the server dies after its 2nd answer, bring it back 1 s later
        stub.wait_dead()
        time.sleep(1.0)
        stub.args = ()
        stub.start()

    watcher = threading.Thread(target=restart, daemon=True)
    watcher.start()
    done = cli_here(tmp_path, stub.url, "--retry-for", "60")  # asserts exit status 0
    watcher.join(timeout=10)
    assert [r["index"] for r in records(tmp_path)] == [0, 1, 2, 3]
    assert "retry 1 in" in done.stderr and stub.url in done.stderr


def test_cli_server_gone_beyond_the_window_ends_in_one_line_and_resumes(tmp_path, stubs, data_dir):
    stub = stubs(None, "--exit-after", "2").start()
    failed = cli(tmp_path, stub.url, "--retry-for", "1")
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and stub.url in last
    partial = records(tmp_path)
    assert [r["index"] for r in partial] == [0, 1]
    stub.args = ()
    stub.start()
    cli_here(tmp_path, stub.url, "--retry-for", "1")  # the same command; asserts exit status 0
    again = records(tmp_path)
    assert [r["index"] for r in again] == [0, 1, 2, 3]
    strip = lambda r: {k: v for k, v in r.items() if k != "time_s"}  # noqa: E731
    assert [strip(r) for r in again[:2]] == [strip(r) for r in partial]
    assert all(r["trajectory"][0]["reply"].startswith("Action: Answer") for r in again)


def test_cli_over_two_replicas_one_dying_mid_run_keeps_every_task_once(tmp_path, stubs, data_dir):
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    dying = stubs(None, "--exit-after", "2", "--log", str(logs[0])).start()
    alive = stubs(None, "--log", str(logs[1])).start()
    cli_here(tmp_path / "run", f"{dying.url},{alive.url}", "--retry-for", "30", limit=6)  # asserts exit status 0
    assert [r["index"] for r in records(tmp_path / "run")] == [0, 1, 2, 3, 4, 5]
    served = [line for log in logs for line in log.read_text().splitlines()]
    assert len(served) == len(set(served)) == 6  # one answer per task's single round, none repeated
    assert len(logs[0].read_text().splitlines()) == 2
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["connection"]["base_url"] == [dying.url, alive.url]


@pytest.mark.parametrize("schedule", ["lockstep", "continuous"])
def test_a_dead_server_costs_one_retry_window_for_all_streams(tmp_path, data_dir, schedule):
    """Nothing listens; five streams. The outage is waited out once for the experiment (about one
    --retry-for), not once for the batch and again per stream (6x), and no task records it as its
    own failure. One error line: the URL, the cause, and "rerun the same command to resume", once."""
    from typer.testing import CliRunner

    from tokenworth_agent.cli import app

    # long enough that a loaded machine's start-up (imports, JAX) cannot blur one window (~8 s)
    # against the six the old code waited (~48 s)
    retry_for = 8.0
    dead = f"http://127.0.0.1:{free_port()}/v1"
    args = ["run", "--methods", "standard", "--seeds", "0,1,2,3,4", "--backbone", "openai", "--model", "served",
            "--base-url", dead, "--retry-for", f"{retry_for:g}", "--limit", "3", "--out", str(tmp_path),
            "--data-dir", data_dir, "--no-progress", "--schedule", schedule]
    started = time.monotonic()
    result = CliRunner().invoke(app, args)
    elapsed = time.monotonic() - started
    assert result.exit_code == 1, result.output
    assert elapsed < 3 * retry_for, f"{elapsed:.1f}s for a {retry_for:g}s retry window"
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert dead in errors[0] and "cannot connect" in errors[0] and ".;" not in errors[0]
    assert errors[0].count("rerun the same command to resume") == 1
    assert not any((tmp_path / f"seed{s}" / "standard" / "records.jsonl").read_bytes()
                   for s in range(5) if (tmp_path / f"seed{s}" / "standard" / "records.jsonl").exists())


def test_repeated_base_url_flags_are_replicas(tmp_path, data_dir):
    from typer.testing import CliRunner

    from tokenworth_agent.cli import app

    urls = [f"http://127.0.0.1:{free_port()}/v1", f"http://127.0.0.1:{free_port()}/v1"]
    result = CliRunner().invoke(app, ["run", "--methods", "standard", "--backbone", "openai", "--model", "served",
                                      "--base-url", urls[0], "--base-url", urls[1], "--retry-for", "1", "--limit",
                                      "1", "--out", str(tmp_path), "--data-dir", data_dir, "--no-progress"])
    assert result.exit_code == 1, result.output
    assert json.loads((tmp_path / "config.json").read_text())["connection"]["base_url"] == urls
    assert "the model servers at" in result.output and all(url in result.output for url in urls)
