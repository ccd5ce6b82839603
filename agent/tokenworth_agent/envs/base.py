"""The one interface the three environments share.

A policy or backbone only ever sees text: the prompt turns (:meth:`Environment.instructions`,
:meth:`Environment.task_prompt`),
observations returned by :meth:`Environment.step`, and the judged reward.

Lifecycle per task::

    env = make_environment("db", budget)   # tokenworth_agent.envs.registry; or DBEnvironment(...), OSEnvironment(...), ...
    prompt = env.reset(task)               # fresh database / sandbox / variable store; returns the task prompt
    result = env.step(reply)               # one agent reply (the whole LLM output text) -> StepResult
                                           #   (.observation, .done, .status, .action)
    verdict = env.judge()                  # Judgement(reward in {0, 1}, details)
    env.close()                            # tear everything down (idempotent)
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
from typing import Any, Literal

from tokenworth_agent.tasks import Task

Status = Literal["completed", "round_limit", "budget_exhausted", "invalid_action", "env_error"]
"""Why an episode ended. An environment's ``step`` ends one with ``completed`` (the agent's own answer or finish
action; ``done`` without a status means it too), ``invalid_action`` (a reply the benchmark's rules end the task
on), ``env_error`` (the environment could not run the action) or ``round_limit`` (it counts J_max itself). The
harness ends one with ``round_limit`` after J_max rounds and ``budget_exhausted`` when O_max is spent (per-task
accounting), and with ``env_error`` when ``reset``, ``step`` or ``judge`` raises."""


@dataclasses.dataclass
class StepResult:
    """What an environment's :meth:`Environment.step` returns for one reply.

    Attributes:
        observation: the environment's answer, sent to the model as the next user turn ("" once done).
        done: whether the episode has ended; then :meth:`Environment.judge` is called.
        status: when done, why (:data:`Status`): ``completed`` (also what ``None`` means), ``invalid_action``,
            ``env_error`` or ``round_limit``.
        action: the action parsed from the reply, for logs and memory construction (e.g.
            ``{"kind": "sql", "sql": ...}``); ``compact_memory`` reads it back from each :class:`Turn`.
        repair: the reply was not a usable action and ``observation`` asks for it again: the next model call
            repairs this round instead of starting a new one (J_max counts rounds without repairs).
    """

    observation: str
    done: bool
    # why the episode ended when done: "completed" (answer/finish), "invalid_action", "env_error"
    status: Status | None = None
    # the parsed action, for logs and memory construction: e.g. {"kind": "sql", "sql": ...}
    action: dict[str, Any] | None = None
    # the reply was not a usable action and ``observation`` is the repair turn: the next model call is that
    # action's one repair call, not a new round (ALFWorld; the episode counts J_max in rounds without these)
    repair: bool = False


@dataclasses.dataclass
class Judgement:
    """The environment's verdict on a task (:meth:`Environment.judge`).

    Attributes:
        reward: 0 or 1, decided by the environment's own grader.
        details: what the records keep of how it decided (the expected and the given answer, ...), JSON-ready.
    """

    reward: int  # 0 or 1, decided by the environment's own grader
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


class InfrastructureError(RuntimeError):
    """The environment's own machinery failed (its evaluator, its sandbox), not the task.

    Raised from ``reset``, ``step`` or ``judge``, it is never a task's outcome: the episode lets it
    through, the run stops with its message, and the task (not recorded) runs again on resume.
    """


class Environment(abc.ABC):
    """One benchmark's environment: a task at a time, reset, stepped with each reply, judged (the module
    docstring shows the lifecycle). Subclasses keep all task state private; a benchmark's
    ``make_environment`` builds one per stream.

    Anything that runs model-written code (SQL, Bash) must run it sandboxed (``tokenworth_agent.sandbox``).

    Attributes:
        name: the benchmark's name.
        concurrent_steps: whether streams may advance instances of it in worker threads, each instance by one
            thread at a time (only where an instance owns no thread-bound resource; default False).
    """

    name: str  # "db", "os" or "kg"
    # Whether streams of this environment may be advanced in worker threads, each instance by one
    # thread at a time (the experiment engine overlaps their resets and steps). True only where an
    # instance owns no thread-bound resource (SQLite connections are bound to their thread).
    concurrent_steps: bool = False

    @abc.abstractmethod
    def instructions(self) -> str:
        """User turn 0: the environment's instructions, including the action format."""

    @abc.abstractmethod
    def task_prompt(self, task: Task) -> str:
        """User turn 2: the task as the agent sees it."""

    @abc.abstractmethod
    def reset(self, task: Task) -> str:
        """Start a task with fresh state. Returns the task prompt (the first observation)."""

    @abc.abstractmethod
    def step(self, reply: str) -> StepResult:
        """Apply one agent reply. Returns the observation and whether the task ended.

        An environment starts its ``step`` with :meth:`check_step`, the one guard they share.
        """

    @staticmethod
    def check_step(*, started: bool, ended: str | None) -> None:
        """Refuse a step before ``reset(task)`` (``started`` false) or after the task ended
        (``ended``: the status it ended with); both are the caller's bug, never an episode outcome."""
        if not started:
            raise RuntimeError("call reset(task) before step()")
        if ended is not None:
            raise RuntimeError(f"the task already ended ({ended}); call reset() for the next one")

    @abc.abstractmethod
    def judge(self) -> Judgement:
        """Grade the task with the environment's own rules. Call once, after the last step."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release everything the task holds. Safe to call twice."""

    def __enter__(self) -> "Environment":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


SYSTEM_PROMPT = "You are a helpful assistant."


def instructions_digest(text: str) -> str:
    """The digest records keep of the constant first user turn (the instructions)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def conversation(env: Environment, task: Task, memory_block: str = "") -> list[dict[str, str]]:
    """The original's conversation shape: instructions, "OK.", then the task.

    Injected experience goes into the first user turn, just before the line that
    introduces the task (the end of the instructions).
    """
    first = env.instructions()
    if memory_block:
        first = f"{first.rstrip()}\n\n{memory_block.rstrip()}\n"
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": first},
        {"role": "assistant", "content": "OK."},
        {"role": "user", "content": env.task_prompt(task)},
    ]
