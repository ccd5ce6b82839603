"""A small valid benchmark: three questions answered with one word. Each broken entry is this benchmark with
one thing wrong, so the one error line it gets is about that thing alone."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from tokenworth_agent.plugin import (Budget, DataFolder, Environment, Episode, Judgement, SimParams, Step, StepResult,
                                     Turn)

WORDS = ("yes", "no", "maybe")


@dataclasses.dataclass(frozen=True)
class WordTask:
    env: str
    sample_index: int
    word: str
    skill_list: tuple[str, ...] = ("words",)

    @property
    def task_id(self) -> str:
        return f"{self.env}-{self.sample_index}"

    @property
    def query_text(self) -> str:
        return f"Say {self.word}."


class WordSource:
    benchmark = DataFolder("tokenworth-test-broken", how_to_get="its tasks ship in its code")

    def __init__(self, env: str) -> None:
        self.env = env

    def load(self, data_dir: Any, folders: Sequence[DataFolder]) -> list[WordTask]:
        return [WordTask(self.env, i, word) for i, word in enumerate(WORDS)]


class WordEnvironment(Environment):
    concurrent_steps = True

    def __init__(self, instructions: str | None) -> None:
        self._instructions = instructions or "Reply with the word asked for."
        self._task: WordTask | None = None
        self._reply: str | None = None

    def instructions(self) -> str:
        return self._instructions

    def task_prompt(self, task: Any) -> str:
        return task.query_text

    def reset(self, task: Any) -> str:
        self._task, self._reply = task, None
        return self.task_prompt(task)

    def step(self, reply: str) -> StepResult:
        self.check_step(started=self._task is not None, ended=self._reply)
        self._reply = reply.strip()
        return StepResult("", done=True, status="completed", action={"kind": "answer", "answer": self._reply})

    def judge(self) -> Judgement:
        assert self._task is not None
        return Judgement(int(self._reply == self._task.word))


def environment(budget: Budget, options: Mapping[str, Any], instructions: str | None) -> Environment:
    return WordEnvironment(instructions)


def compact(question: str, turns: Sequence[Turn], *, abstract: bool = False) -> tuple[str, list[Step]]:
    return question, [Step(t.reply, code=t.reply) for t in turns[-1:]]


def reply(task: WordTask, episode: Episode, round_index: int, conversation: Any, params: SimParams) -> str:
    return task.word if episode.success else "pardon?"


def fields(name: str, **changes: Any) -> dict[str, Any]:
    """The keyword arguments of a valid ``Benchmark`` named ``name``, with ``changes``."""
    return {**dict(name=name, tasks=WordSource(name), instructions="Reply with the word asked for.",
                   make_environment=environment, compact_memory=compact,
                   limits=dict(max_output_tokens=16, max_rounds=1, max_memories=1, max_injected_chars=200),
                   controller_preset="db", sim_reply=reply, sim_p0_range=(0.3, 0.9)), **changes}
