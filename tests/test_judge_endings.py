"""A BigCodeBench test process that dies is noticed within seconds, its cause recorded, upstream's status kept;
and under the continuous schedule a stream whose judge runs a slow but living test holds no other stream.

Upstream (bigcodebench 0.2.5, ``untrusted_check``) gives a test process that ends without a result the status
``timeout``; before, the judge waited the whole time limit for it (``p.join`` on a pipe the process's helpers
still held), 244 s per such reply at the default limit."""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = pytest.mark.engine  # the BigCodeBench judge's venv (make test-quick leaves it out)

from tokenworth_agent.benchmarks.bigcodebench.judge import CANARY
from tokenworth_agent.envs.base import StepResult
from tests.bigcodebench_fixtures import eval_venv, small_judge
from tests.fakes import FakeDBEnv, make_tasks
from tests.test_experiment import SubmittingBackbone, run_fake, streams_of

TIME_LIMIT = 20.0  # the judge's limit here; a process noticed only at the limit takes longer than this

ENDINGS = {  # the entry point's body -> (status, reason, what the record names)
    "raise SystemExit(0)": ("    raise SystemExit(0)", "fail", "", "SystemExit"),
    "os._exit(0)": ("    import os\n    os._exit(0)", "timeout", "test-exited", "exited with status 0"),
    "SIGKILL": ("    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)", "timeout", "test-killed",
                "killed by SIGKILL"),
    "past the memory limit": ("    blocks = []\n    while True:\n        blocks.append(bytearray(32 << 20))",
                              "timeout", "test-oom", "memory limit"),
}


@pytest.fixture(scope="module")
def judge():
    made = small_judge(eval_venv(), time_limit=TIME_LIMIT, memory_bytes=384 << 20)
    made.preflight()
    return made


def reply(body: str) -> str:
    return f"```python\ndef task_func(values):\n{body}\n```"


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_test_process_that_ends_is_noticed_and_its_cause_recorded(judge, ending) -> None:
    body, status, reason, named = ENDINGS[ending]
    started = time.monotonic()
    verdict = judge._run(CANARY, reply(body))
    seconds = time.monotonic() - started
    assert seconds < TIME_LIMIT / 2, f"{ending}: {seconds:.1f} s, the judge waited for the time limit"
    assert (verdict.status, verdict.reason) == (status, reason), verdict
    assert named in " ".join(verdict.details.values()), verdict.details
    if reason:
        assert set(verdict.details) == {"test_process"}


def test_a_slow_living_test_is_still_a_timeout_at_the_limit() -> None:
    judge = small_judge(eval_venv(), time_limit=3.0)
    verdict = judge._run(CANARY, reply("    import time\n    time.sleep(60)"))
    assert verdict.status == "timeout" and verdict.reason == "" and "test_process" not in verdict.details


class JudgedEnv(FakeDBEnv):
    """The fake DB env whose first answer is judged by the real judge, on a slow but living solution."""

    concurrent_steps = True

    def __init__(self, judge=None) -> None:
        super().__init__()
        self.judge, self.window = judge, None

    def step(self, text: str) -> StepResult:
        if self.judge is not None and self.window is None and "Action: Answer" in text:
            started = time.monotonic()
            verdict = self.judge._run(CANARY, reply("    import time\n    time.sleep(6)\n    return sum(values)"))
            self.window = (started, time.monotonic())
            assert verdict.passed, verdict
        return super().step(text)


def test_under_continuous_other_streams_move_while_one_judge_runs_a_slow_test(tmp_path) -> None:
    judge = small_judge(eval_venv(), time_limit=TIME_LIMIT)
    judge.preflight()
    tasks = make_tasks(6)
    streams = streams_of(["standard"], [0, 1])
    judged = JudgedEnv(judge)
    backbone = SubmittingBackbone()
    stamps: list[tuple[float, int]] = []
    lock = threading.Lock()
    generate = backbone.generate

    def stamped(conversations, max_tokens, *, facts):
        with lock:
            stamps.extend((time.monotonic(), f.seed) for f in facts)
        return generate(conversations, max_tokens, facts=facts)

    backbone.generate = stamped
    result = run_fake(tmp_path, streams, tasks, backbone, envs={"seed0/standard": judged, "seed1/standard":
                                                                JudgedEnv()}, schedule="continuous")
    assert all(len(r) == len(tasks) for r in result.records.values())
    start, end = judged.window
    assert end - start >= 5.5
    during = [seed for at, seed in stamps if start < at < end]
    # seed 1 answers its every remaining request while seed 0's judge runs (2 requests a task here)
    assert during.count(1) >= 2 * len(tasks) - 2, (during, end - start)
