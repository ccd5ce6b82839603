"""Small fakes of the environment and backbone interfaces, for fast harness tests."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import TYPE_CHECKING, Any, Sequence

from tokenworth_agent.backbones.base import Generation
from tokenworth_agent.envs.base import Environment, Judgement, StepResult
from tokenworth_agent.sim.facts import Facts

if TYPE_CHECKING:
    from tokenworth_agent.results.record import TaskRecord


@dataclasses.dataclass(frozen=True)
class FakeTask:
    sample_index: int
    query_text: str
    skill_list: tuple[str, ...]
    env: str = "db"

    @property
    def task_id(self) -> str:
        return f"{self.env}-{self.sample_index}"


SKILLS = ("select", "where", "group_by", "order_by", "insert", "delete")


def make_tasks(n: int, env: str = "db") -> list[FakeTask]:
    tasks = []
    for i in range(n):
        skills = (SKILLS[i % len(SKILLS)], SKILLS[(i * 7 + 1) % len(SKILLS)])
        words = " ".join(skills)
        tasks.append(FakeTask(i, f"Task {i}: use {words} on the employees table for row {i % 5}", skills, env))
    return tasks


class FakeDBEnv(Environment):
    """Replies: an ```sql block (observation rows, or an error for 'BAD'), or a final answer."""

    name = "db"

    def __init__(self) -> None:
        self.task: FakeTask | None = None
        self.answer: str | None = None
        self.closed = 0

    def instructions(self) -> str:
        return "Answer with Action: Operation and a ```sql block, or Action: Answer and Final Answer: ..."

    def task_prompt(self, task: Any) -> str:
        return task.query_text

    def reset(self, task: Any) -> str:
        self.task, self.answer = task, None
        return self.task_prompt(task)

    def step(self, reply: str) -> StepResult:
        if "Action: Answer" in reply:
            match = re.search(r"Final Answer:\s*(.*)", reply)
            self.answer = match.group(1).strip() if match else None
            return StepResult("", True, "completed", {"kind": "answer", "answer": self.answer})
        sql = re.search(r"```sql\s*(.*?)```", reply, re.S)
        if "Action: Operation" in reply and sql:
            query = sql.group(1).strip()
            obs = "ERROR 1064 (42000): syntax error" if "BAD" in query else f"[({self.task.sample_index},)]"
            return StepResult(obs, False, None, {"kind": "sql", "sql": query})
        return StepResult("", True, "invalid_action", None)

    def judge(self) -> Judgement:
        return Judgement(int(self.answer == "ok"))

    def close(self) -> None:
        self.closed += 1


def _u(*key: object) -> float:
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


class FakeBackbone:
    """Deterministic in (seed, task, memory skills): a memory sharing a skill always helps.

    Round 0 runs a query (a bad one first on odd tasks), the next round answers. Tokens are
    whitespace words, cut at ``max_tokens`` (then reported as exactly the cap).
    """

    name = "fake"
    reads_facts = True  # it plays the task, as the simulator does (tokenworth_agent.sim.facts)

    def __init__(self, verbose_words: int = 10) -> None:
        self.calls: list[dict[str, Any]] = []
        self.verbose_words = verbose_words
        self.batch_sizes: list[int] = []

    def generate(self, conversations: Sequence[Any], max_tokens: Sequence[int], stop: Sequence[str] | None = None,
                 *, facts: Sequence[Facts]) -> list[Generation]:
        assert len(facts) == len(conversations) == len(max_tokens)
        self.batch_sizes.append(len(conversations))
        out = []
        for convo, cap, item in zip(conversations, max_tokens, facts):
            self.calls.append({"task": item.task.task_id, "round": item.round, "cap": cap,
                               "memory_skills": item.memory_skills, "first_user": convo[1]["content"]})
            out.append(self._reply(item, cap))
        return out

    def _reply(self, item: Facts, cap: int) -> Generation:
        task, memory = item.task, item.memory_skills
        helped = memory is not None and bool(set(memory) & set(task.skill_list))
        success = helped or _u(item.seed, task.sample_index) < 0.5
        thought = " ".join(["think"] * (self.verbose_words // (2 if helped else 1)))
        if item.round == 0:
            sql = "SELECT BAD" if task.sample_index % 2 else f"SELECT {task.sample_index}"
            text = f"Thought: {thought}\nAction: Operation\n```sql\n{sql}\n```"
        else:
            text = f"Action: Answer\nFinal Answer: {'ok' if success else 'no'}"
        words = text.split(" ")
        if len(words) > cap:
            return Generation(" ".join(words[:cap]), cap, "length")
        return Generation(text, len(words), "stop")


def task_record(index: int, reward: int, **fields: Any) -> "TaskRecord":
    """A made-up per-task record (summaries and figures under test read only a few of its fields)."""
    from tokenworth_agent.results.record import TaskRecord

    base: dict[str, Any] = dict(method="standard", index=index, task_id=f"db-{index}", env="db", reward=reward,
                                status="completed", rounds=1, output_tokens=10, execution_tokens=10,
                                auxiliary_tokens=0, aux_calls=[], injected_memory_id=None, injected_memory_ids=[],
                                injected_length=0, injection={}, skill_list=["select"], decision={}, bank_size=0,
                                finish_reasons=["stop"], error=None, accounting="per-call", instructions_sha256=None,
                                task_prompt=None, injection_text="", trajectory=[], judge={}, time_s=0.0)
    return TaskRecord(**{**base, **fields})
