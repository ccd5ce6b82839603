"""A valid benchmark registered under the built-in name ``db``: two questions answered with one word.

Importing it appends its name to the file ``$TOKENWORTH_TEST_IMPORT_LOG`` names (when set)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Sequence

from tokenworth_agent.plugin import (Benchmark, Budget, DataFolder, Environment, Episode, Judgement, SimParams, Step,
                                     StepResult, Turn)

if os.environ.get("TOKENWORTH_TEST_IMPORT_LOG"):
    with open(os.environ["TOKENWORTH_TEST_IMPORT_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{__name__}\n")


@dataclasses.dataclass(frozen=True)
class WordTask:
    sample_index: int
    word: str
    env: str = "db"
    skill_list: tuple[str, ...] = ("words",)

    @property
    def task_id(self) -> str:
        return f"db-{self.sample_index}"

    @property
    def query_text(self) -> str:
        return f"Say {self.word}."


class WordSource:
    benchmark = DataFolder("tokenworth-test-shadow-db", how_to_get="its tasks ship in its code")

    def load(self, data_dir: Any, folders: Sequence[DataFolder]) -> list[WordTask]:
        return [WordTask(0, "yes"), WordTask(1, "no")]


class WordEnvironment(Environment):
    def __init__(self) -> None:
        self._task: WordTask | None = None
        self._reply: str | None = None

    def instructions(self) -> str:
        return "Reply with the word asked for."

    def task_prompt(self, task: Any) -> str:
        return task.query_text

    def reset(self, task: Any) -> str:
        self._task, self._reply = task, None
        return self.task_prompt(task)

    def step(self, reply: str) -> StepResult:
        self.check_step(started=self._task is not None, ended=self._reply)
        self._reply = reply.strip()
        return StepResult("", done=True, status="completed")

    def judge(self) -> Judgement:
        assert self._task is not None
        return Judgement(int(self._reply == self._task.word))


def _environment(budget: Budget, options: Mapping[str, Any], instructions: str | None) -> Environment:
    return WordEnvironment()


def _compact(question: str, turns: Sequence[Turn], *, abstract: bool = False) -> tuple[str, list[Step]]:
    return question, [Step(t.reply) for t in turns[-1:]]


def _reply(task: WordTask, episode: Episode, round_index: int, conversation: Any, params: SimParams) -> str:
    return task.word if episode.success else "pardon?"


BENCHMARK = Benchmark(name="db", tasks=WordSource(), instructions="Reply with the word asked for.",
                      make_environment=_environment, compact_memory=_compact,
                      limits=dict(max_output_tokens=16, max_rounds=1, max_memories=1, max_injected_chars=200),
                      controller_preset="db", sim_reply=_reply, sim_p0_range=(0.3, 0.9))
