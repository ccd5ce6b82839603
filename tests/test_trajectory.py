"""Records hold the trajectory; `tokenworth show` renders it; resumed records are not new work."""

from __future__ import annotations


import pytest
from typer.testing import CliRunner

from tokenworth_agent.backbones.base import Generation
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.envs.base import StepResult
from tokenworth_agent.experiment.engine import StreamHook
from tokenworth_agent.policies.standard import StandardPolicy
from tokenworth_agent.experiment.runner import OBSERVATION_CAP, OVER_MAX_TOKENS, run_stream, run_task
from tokenworth_agent.results.record import read_records
from tokenworth_agent.results.show import ShowError, find_record, render
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks, task_record

DB = Budget.for_env("db")


class Scripted(FakeBackbone):
    """Replies from a list, in order; each costs ``tokens`` (default: its words)."""

    def __init__(self, replies, tokens=None):
        super().__init__()
        self.replies, self.tokens = list(replies), tokens

    def _reply(self, item, cap):
        text = self.replies[min(item.round, len(self.replies) - 1)]
        return Generation(text, self.tokens if self.tokens is not None else len(text.split()), "stop")


def one(backbone, env=None, budget=DB):
    return run_task(StandardPolicy("db", budget), env or FakeDBEnv(), backbone, make_tasks(1)[0], 0, budget, seed=0)


def test_rounds_hold_reply_parsed_action_observation_and_finish():
    record = one(Scripted(["Action: Operation\n```sql\nSELECT 1\n```", "Action: Answer\nFinal Answer: ok"]))
    first, second = record.trajectory
    assert first["reply"].startswith("Action: Operation") and first["action"] == {"kind": "sql", "sql": "SELECT 1"}
    assert first["observation"] == "[(0,)]" and first["observation_chars"] == 6 and first["invalid"] is None
    assert first["finish_reason"] == "stop" and first["max_tokens"] == 128 and first["tokens"] == 6
    assert second["action"] == {"kind": "answer", "answer": "ok"}
    assert record.judge["reward"] == 1 and record.error is None
    assert record.task_prompt == make_tasks(1)[0].query_text and record.injection_text == ""
    assert record.instructions_sha256 and record.accounting == "per-call"


def test_an_invalid_action_records_the_parsers_reason_and_fills_error(data_dir):
    from tokenworth_agent.tasks import load_tasks
    from tokenworth_agent.benchmarks.db.env import DBEnvironment

    task = load_tasks("db", data_dir, limit=1)[0]
    env = DBEnvironment(max_rounds=3)
    try:
        record = run_task(StandardPolicy("db", DB), env, Scripted(["I think the answer is five."]), task, 0, DB, 0)
    finally:
        env.close()
    assert record.status == "invalid_action" and record.reward == 0
    [entry] = record.trajectory
    assert entry["invalid"] and entry["action"] is None
    assert record.error == f"invalid action: {entry['invalid']}"


def test_long_observations_are_cut_to_the_cap_with_the_full_length_kept():
    class Verbose(FakeDBEnv):
        def step(self, reply):
            result = super().step(reply)
            return StepResult("x" * 5000, result.done, result.status, result.action) if not result.done else result

    record = one(Scripted(["Action: Operation\n```sql\nSELECT 1\n```", "Action: Answer\nFinal Answer: ok"]), Verbose())
    entry = record.trajectory[0]
    assert entry["observation_chars"] == 5000 and entry["observation"].startswith("x" * OBSERVATION_CAP)
    assert len(entry["observation"]) < 5000


def test_a_reply_over_max_tokens_fails_the_task_instead_of_raising():
    backbone = Scripted(["Action: Answer\nFinal Answer: ok"], tokens=500)  # over the 128 allowed
    record = one(backbone)
    assert record.status == OVER_MAX_TOKENS and record.reward == 0
    assert "500" in record.error and "128" in record.error
    assert record.output_tokens == 500  # booked as reported, never hidden
    assert record.judge["reward"] == 0 and "skipped" in record.judge


def test_show_renders_the_conversation_as_sent_and_the_verdict(tmp_path):
    tasks = make_tasks(6)
    run_stream("rag", "db", tasks, FakeBackbone(), DB, 0, tmp_path, env=FakeDBEnv())
    records = read_records(tmp_path / "rag" / "records.jsonl")
    injected = next(r for r in records if r.injection_text)
    # show() takes its instructions from the environment module: the fake's records name env "db"
    text = render(tmp_path, "rag", injected.index)
    assert injected.injection_text in text and "Experience 1:" in text
    assert tasks[injected.index].query_text in text
    for entry in injected.trajectory:
        assert entry["reply"] in text
    assert f"verdict: reward {injected.reward}" in text
    from tokenworth_agent.results.estimate import rate

    stream = rate([r.reward for r in records])  # the header states the stream's SR with its 95 % interval
    assert text.splitlines()[1] == (f"stream SR {100 * stream.mean:.1f} % (95 % CI {100 * stream.ci_low:.1f}–"
                                    f"{100 * stream.ci_high:.1f}) over 6 recorded tasks")
    assert "instructions changed" in text  # the fake env's instructions are not the real DB env's
    assert text.index("── system") < text.index("Experience 1:") < text.index(injected.trajectory[0]["reply"])


def test_show_errors_name_the_problem(tmp_path):
    with pytest.raises(ShowError, match="not a folder"):
        find_record(tmp_path / "nope")
    with pytest.raises(ShowError, match="no <method>/records.jsonl"):
        find_record(tmp_path)
    run_stream("standard", "db", make_tasks(2), FakeBackbone(), DB, 0, tmp_path, env=FakeDBEnv())
    with pytest.raises(ShowError, match="it has: standard"):
        find_record(tmp_path, "rag")
    with pytest.raises(ShowError, match=r"indices: 0\.\.1"):
        find_record(tmp_path, "standard", 7)
    from tokenworth_agent.cli import app

    result = CliRunner().invoke(app, ["show", str(tmp_path), "--task", "7"])
    assert result.exit_code == 2 and "no record for task 7" in result.output


def test_real_db_run_shown_through_the_cli(tmp_path, data_dir):
    from tokenworth_agent.cli import app

    done = CliRunner().invoke(app, ["run", "--methods", "standard", "--limit", "2", "--out", str(tmp_path),
                                    "--data-dir", data_dir, "--no-progress"])
    assert done.exit_code == 0, done.output
    shown = CliRunner().invoke(app, ["show", str(tmp_path), "--task", "1"])
    assert shown.exit_code == 0, shown.output
    from tokenworth_agent.benchmarks.db.env import INSTRUCTIONS

    assert INSTRUCTIONS.splitlines()[0] in shown.output and "instructions changed" not in shown.output
    record = find_record(tmp_path, "standard", 1)
    assert record.trajectory[0]["reply"] in shown.output and "verdict: reward" in shown.output


def test_resumed_records_are_counted_as_done_not_as_new_work(tmp_path):
    tasks = make_tasks(5)
    run_stream("standard", "db", tasks, FakeBackbone(), DB, 0, tmp_path, env=FakeDBEnv(), stop_after=3)

    class Hook(StreamHook):
        def __init__(self):
            self.resumed_with, self.new = None, []

        def resumed(self, records):
            self.resumed_with = [r.index for r in records]

        def __call__(self, record):
            self.new.append(record.index)

    hook = Hook()
    run_stream("standard", "db", tasks, FakeBackbone(), DB, 0, tmp_path, env=FakeDBEnv(), hook=hook)
    assert hook.resumed_with == [0, 1, 2] and hook.new == [3, 4]

    from tokenworth_agent.experiment.progress import Progress

    import io

    bar = Progress("standard", 5, enabled=True, file=io.StringIO(), terminal=True)  # the bar a terminal shows
    bar.resumed([task_record(i, 1) for i in range(3)])
    bar(task_record(3, 0, output_tokens=20))
    assert (bar.bar.initial, bar.bar.n, bar.n, bar.successes) == (3, 4, 4, 3)


def test_show_finds_a_stream_of_a_task_order_and_names_the_order(tmp_path):
    from tests.runfolders import write_run, write_stream

    run = write_run(tmp_path / "run", {})
    write_stream(run, "db/seed0/order2/standard", [1, 0], order=2)  # four folders deep
    text = render(run, "db/seed0/order2/standard", 1)
    assert text.splitlines()[0].startswith("standard · task 1 (db-1) · order 2 · env db")
    write_stream(run, "plain", [1], method="standard")  # no order named: the header as before
    assert " · order" not in render(run, "plain", 0)
