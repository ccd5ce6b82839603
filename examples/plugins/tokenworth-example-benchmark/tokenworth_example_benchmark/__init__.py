"""An example benchmark: arithmetic questions answered in one line, ``Answer: <integer>``.

Everything a benchmark provides, in one small module (docs/plugins.md, "Add a benchmark"):

* the tasks: a record type (the fields every task has: ``env``, ``sample_index``, ``skill_list``,
  ``task_id``, ``query_text``) and a source that reads them, here from the package's own ``tasks.jsonl``;
* the environment and its judge: one answer per round, at most ``max_rounds`` (J_max) rounds; a reply
  without an ``Answer:`` line is answered with the format and may try again;
* the compact memory a solved task writes (the question and the answer line);
* the simulated replies, so ``--backbone sim`` runs it: the gold answer on a success, a near miss on a failure;
* the budget, and the library preset TokenWorth runs with (DB's);
* one option of its own, ``--arith-strict``: whether anything but the answer line fails the task
  (it enters the run's identity).
"""

from __future__ import annotations

import dataclasses
import json
import re
from importlib import resources
from typing import Any, Mapping, Sequence

from tokenworth_agent.plugin import (Benchmark, BenchmarkOption, Budget, Conversation, DataError, DataFolder, Environment,
                                     Episode, Judgement, SimParams, Step, StepResult, Turn)

NAME = "arith"
ANSWER = re.compile(r"^\s*Answer:\s*(-?\d+)\s*$", re.M)
INSTRUCTIONS = ("You solve arithmetic questions. Think if you need to, then end your reply with one line "
                "`Answer: <integer>`. You have at most 2 replies per question.")


@dataclasses.dataclass(frozen=True)
class ArithTask:
    sample_index: int
    question: str
    answer: int
    skill_list: tuple[str, ...]
    env: str = NAME

    @property
    def task_id(self) -> str:
        return f"{NAME}-{self.sample_index}"

    @property
    def query_text(self) -> str:
        return self.question


class ArithSource:
    """The tasks ship inside the package, so no data root is read (its folder name is only declared)."""

    benchmark = DataFolder(NAME, how_to_get="its tasks ship with the tokenworth-example-benchmark package")

    def load(self, data_dir: Any = None, benchmarks: Sequence[DataFolder] = ()) -> list[ArithTask]:
        text = resources.files(__package__).joinpath("tasks.jsonl").read_text(encoding="utf-8")
        tasks = []
        for number, line in enumerate(text.splitlines(), 1):
            try:
                row = json.loads(line)
                tasks.append(ArithTask(int(row["id"]), str(row["question"]), int(row["answer"]), tuple(row["skills"])))
            except (ValueError, KeyError, TypeError) as exc:
                raise DataError(f"tasks.jsonl:{number}: not a task ({exc})") from None
        return tasks


class ArithEnvironment(Environment):
    name = NAME
    concurrent_steps = True  # no thread-bound state

    def __init__(self, max_rounds: int, strict: bool = False, instructions: str | None = None) -> None:
        self.max_rounds, self.strict, self._instructions = max_rounds, strict, instructions or INSTRUCTIONS
        self._task: ArithTask | None = None
        self._given: int | None = None
        self._rounds = 0
        self._ended: str | None = None

    def instructions(self) -> str:
        return self._instructions

    def task_prompt(self, task: Any) -> str:
        return f"Question: {task.question}"

    def reset(self, task: Any) -> str:
        self._task, self._given, self._rounds, self._ended = task, None, 0, None
        return self.task_prompt(task)

    def step(self, reply: str) -> StepResult:
        self.check_step(started=self._task is not None, ended=self._ended)
        self._rounds += 1
        found = ANSWER.findall(reply)
        if found and (not self.strict or reply.strip() == f"Answer: {found[-1]}"):
            self._given, self._ended = int(found[-1]), "completed"
            return StepResult("", done=True, status="completed", action={"kind": "answer", "answer": self._given})
        if self._rounds >= self.max_rounds:
            self._ended = "round_limit"
            return StepResult("", done=True, status="round_limit")
        return StepResult("End your reply with one line `Answer: <integer>`.", done=False)

    def judge(self) -> Judgement:
        assert self._task is not None
        return Judgement(int(self._given == self._task.answer), {"given": self._given, "gold": self._task.answer})


def compact(question: str, turns: Sequence[Turn], *, abstract: bool = False) -> tuple[str, list[Step]]:
    """(the question, the answer line it was solved with); nothing instance-specific to abstract."""
    answers = [(t.action or {}).get("answer") for t in turns]
    steps = [Step(f"Answer: {a}", code=f"Answer: {a}") for a in answers if a is not None]
    return f"Question: {question.strip()}", steps[-1:]


def reply(task: ArithTask, episode: Episode, round_index: int, conversation: Conversation, params: SimParams) -> str:
    """The gold answer on a success; a near miss (off by one more each round) on a failure."""
    if episode.success:
        return f"Answer: {task.answer}"
    return f"Answer: {task.answer + 1 + round_index}"


def _environment(budget: Budget, options: Mapping[str, Any], instructions: str | None) -> Environment:
    return ArithEnvironment(budget.max_rounds, strict=bool(options.get("arith_strict")), instructions=instructions)


BENCHMARK = Benchmark(
    name=NAME, tasks=ArithSource(), instructions=INSTRUCTIONS, make_environment=_environment, compact_memory=compact,
    limits=dict(max_output_tokens=64, max_rounds=2, max_memories=1, max_injected_chars=600),
    controller_preset="db",  # TokenWorth's hyperparameters and B_max: the library's DB preset
    sim_reply=reply, sim_p0_range=(0.30, 0.90),
    options=(BenchmarkOption("arith_strict", bool, False, "arith: a reply must be the answer line alone.",
                             identity=True),),
    description="An example: arithmetic questions with one answer line (60 tasks)")
