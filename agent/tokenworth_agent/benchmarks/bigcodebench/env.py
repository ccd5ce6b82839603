"""BigCodeBench (App. C): one reply per task, judged by the official evaluator inside the sandbox.

* **Prompt.** User turn 0 is the official instruct-mode instruction (``bigcodebench generate``,
  0.2.5: :data:`INSTRUCTIONS`), with the memory block after it as on every environment; the task
  turn is the task's ``instruct_prompt``, which ends with the code the solution must start with.
  Upstream sends the two as one message, and pre-fills the assistant turn of chat models with a
  response prefix; this harness keeps its conversation shape (instructions, ``"OK."``, task) and
  no prefill, as upstream does for API models.
* **One round.** J_max = 1: the reply is the solution (:meth:`BigCodeBenchEnvironment.step` judges
  it and the task ends). The action recorded is the sanitised solution, so a memory holds the code
  as the evaluator read it.
* **Judging.** :class:`~tokenworth_agent.benchmarks.bigcodebench.judge.BigCodeBenchJudge`: sanitise, calibrate and
  ``untrusted_check``, in a fresh sandbox. ``pass`` is reward 1; ``fail`` and ``timeout`` are 0.
  A reply without code that defines the entry point ends ``invalid_action`` (still judged, as
  upstream judges it; its raw text is in the record). An evaluator that cannot judge raises
  :class:`~tokenworth_agent.benchmarks.bigcodebench.judge.JudgeError` (an infrastructure error: the run stops).
"""

from __future__ import annotations

from typing import Any

from tokenworth_agent.envs.base import Environment, Judgement, StepResult
from tokenworth_agent.benchmarks.bigcodebench.judge import BigCodeBenchJudge, Verdict
from tokenworth_agent.benchmarks.bigcodebench.tasks import BCBTask

# bigcodebench 0.2.5, provider/utility.py: the instruct-mode instruction prefix
INSTRUCTIONS = ("Please provide a self-contained Python script that solves the following problem in a markdown "
                "code block:")
DETAIL_CHARS = 600  # per test's traceback in the record's judge field


class BigCodeBenchEnvironment(Environment):
    """One BigCodeBench task at a time; every judgement runs in its own sandbox."""

    name = "bigcodebench"
    # a judgement is a sandbox of its own, driven through a pipe: streams may judge in worker threads
    concurrent_steps = True

    def __init__(self, judge: BigCodeBenchJudge, max_rounds: int = 1, instructions: str | None = None) -> None:
        if max_rounds != 1:
            raise ValueError(f"BigCodeBench takes one solution per task (J_max = 1), got max_rounds={max_rounds}")
        self.evaluator = judge
        self._instructions = instructions
        self._task: BCBTask | None = None
        self._status: str | None = None
        self._verdict: Verdict | None = None

    def instructions(self) -> str:
        return INSTRUCTIONS if self._instructions is None else self._instructions

    def task_prompt(self, task: BCBTask) -> str:
        return task.instruct_prompt.strip()

    def reset(self, task: BCBTask) -> str:
        if not isinstance(task, BCBTask):
            raise TypeError(f"BigCodeBenchEnvironment needs a BCBTask, got {type(task).__name__}")
        self._task, self._status, self._verdict = task, None, None
        return self.task_prompt(task)

    def step(self, reply: str) -> StepResult:
        self.check_step(started=self._task is not None, ended=self._status)
        assert self._task is not None
        verdict = self._verdict = self.evaluator.judge(self._task, reply)
        action: dict[str, Any] = {"kind": "solution", "code": verdict.solution}
        if verdict.defines_entry_point:
            self._status = "completed"
        else:
            self._status = "invalid_action"
            action["reason"] = f"the reply holds no code that defines {self._task.entry_point}"
        return StepResult(observation="", done=True, status=self._status, action=action)  # type: ignore[arg-type]

    def judge(self) -> Judgement:
        if self._task is None:
            raise RuntimeError("call reset(task) and step() before judge()")
        verdict = self._verdict
        if verdict is None:  # no reply was given (the budget ran out first)
            return Judgement(reward=0, details={"status": "fail", "reason": "no reply"})
        tests = {name: text[-DETAIL_CHARS:] for name, text in verdict.details.items()}
        return Judgement(reward=int(verdict.passed), details={
            "status": verdict.status, "reason": verdict.reason, "tests": tests, "seconds": verdict.seconds,
            "memory_peak_bytes": verdict.memory_peak_bytes, "cached": verdict.cached})


__all__ = ["BigCodeBenchEnvironment", "INSTRUCTIONS"]
