"""``build_memory``: the memory a finished task writes, through its benchmark's compact rendering.

Each benchmark renders its compact memory itself (:attr:`~tokenworth_agent.benchmarks.base.Benchmark.compact_memory`:
``compact(question, turns, abstract=...)`` → the head line and the steps). The ``transcript`` format and the
fitting to L_max are the same for every benchmark (:mod:`tokenworth_agent.memory.base`).
"""

from __future__ import annotations

from typing import Callable, Sequence

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.harness import MEMORY_FORMATS
from tokenworth_agent.core.plugins import benchmark, names
from tokenworth_agent.memory.base import Memory, Step, Turn, fit, memory_char_limit, transcript, writes_memory
from tokenworth_agent.tasks import Task

Compact = Callable[..., "tuple[str, list[Step]]"]  # (question, turns, *, abstract) -> (head line, steps)


def build_memory(env: str, task: Task, trajectory: Sequence[Turn], reward: int, budget: Budget, *,
                 status: str | None = "completed", memory_from: str = "completed",
                 memory_format: str = "compact") -> Memory | None:
    """The memory a finished task writes, or ``None`` (not a success by ``memory_from``, or
    nothing usable).

    ``status`` is how the episode ended (``completed`` = by its own answer/finish action).
    ``task`` is a record of ``env``'s benchmark; only ``query_text``, ``task_id`` and
    ``skill_list`` are read from it — never its reference answer.
    """
    if env not in names("benchmark"):
        raise ValueError(f"no memory construction for environment {env!r}; expected one of {sorted(names('benchmark'))}")
    if memory_format not in MEMORY_FORMATS:
        raise ValueError(f"memory_format must be one of {', '.join(MEMORY_FORMATS)}, got {memory_format!r}")
    if not writes_memory(reward, status, memory_from):
        return None
    if memory_format == "transcript":
        head, steps = transcript(task.query_text, trajectory)
    else:
        head, steps = benchmark(env).compact_memory(task.query_text, trajectory, abstract=memory_format == "abstract")
    if not steps:
        return None  # only the question: the trajectory held no usable action
    text = fit(head, steps, memory_char_limit(budget), drop_observations=memory_format != "transcript")
    # only the actions the fitted text still shows, so the second text says nothing the first hides
    actions = "\n".join(s.code for s in steps if s.code and s.action in text)
    return Memory(text=text, key_text=task.query_text, skills=tuple(task.skill_list), source_task_id=task.task_id,
                  action_text=actions)


__all__ = ["Compact", "build_memory"]
