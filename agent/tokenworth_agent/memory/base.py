"""What every memory is, and the rules that do not depend on the environment (see :mod:`tokenworth_agent.memory`).

:class:`Turn` (one agent round as the runner saw it), :class:`Memory` (one stored experience),
:class:`Step` (one action of a memory), :func:`fit` (a memory's text within its room in the block),
:func:`transcript` (the ``transcript`` format, the same for every environment) and
:func:`writes_memory` (which outcomes write one).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from tokenworth_agent.core.budget import BLOCK_HEADER, ITEM_HEADING, Budget
from tokenworth_agent.core.harness import MEMORY_FROM

OBSERVATION_CHARS = 200  # per observation kept in a DB/KG memory
FINAL_ANSWER = re.compile(r"Final Answer:\s*(.*)", re.I)  # the answer line DB and KG replies end with


@dataclasses.dataclass(frozen=True)
class Turn:
    """One agent round as the runner saw it: what a benchmark's ``compact_memory`` and a method's ``update`` read.

    Attributes:
        round: the round's number, from 0.
        reply: the model's reply, as the environment's ``step`` got it.
        observation: what the environment answered (``StepResult.observation``).
        action: the action the environment parsed from the reply (``StepResult.action``), or None.
        output_tokens: the tokens the reply cost.
        finish_reason: how the reply ended: ``stop``, or ``length`` (cut at its cap).
    """

    round: int
    reply: str
    observation: str
    action: dict[str, Any] | None = None  # as parsed by the environment, when it says
    output_tokens: int = 0
    finish_reason: str = "stop"


@dataclasses.dataclass(frozen=True)
class Memory:
    """One stored experience. ``memory_id`` is assigned by the policy that stores it.

    Attributes:
        text: what is injected, already fitted to the budget's L_max.
        key_text: the source task's question: what similarity-based methods index.
        skills: the source task's ``skill_list`` (only the simulated backbone reads it).
        source_task_id: the ``task_id`` of the task that wrote it.
        memory_id: the id its store gave it (-1 before it is stored).
        action_text: its executable actions alone, one per line ("" where none is known).
    """

    text: str
    key_text: str
    skills: tuple[str, ...]
    source_task_id: str
    memory_id: int = -1
    # The memory's executable actions alone (SQL statements, bash scripts, KG tool calls), one per
    # line: the second text a learned ranker reads (TokenWorth+). "" where none is known.
    action_text: str = ""

    def with_id(self, memory_id: int) -> "Memory":
        """This memory with ``memory_id``."""
        return dataclasses.replace(self, memory_id=memory_id)

    def as_dict(self) -> dict[str, Any]:
        """As plain data (checkpoints, records)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Memory":
        """The memory :meth:`as_dict` wrote."""
        return cls(
            text=data["text"],
            key_text=data["key_text"],
            skills=tuple(data["skills"]),
            source_task_id=data["source_task_id"],
            memory_id=int(data["memory_id"]),
            action_text=str(data.get("action_text", "")),  # absent in checkpoints written before it existed
        )


def memory_char_limit(budget: Budget) -> int:
    """Room for one memory's text inside a single-item block of L_max characters."""
    overhead = len(BLOCK_HEADER) + len("\n\n") + len(ITEM_HEADING.format(n=1)) + len("\n")
    return max(0, budget.max_injected_chars - overhead)


def cut(text: str, limit: int) -> str:
    text = " ".join(text.split()) if "\n" not in text else text.strip()
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"


@dataclasses.dataclass(frozen=True)
class Step:
    """One action of a memory as the model must write it, and what it observed (or ``None``).

    Attributes:
        action: the action exactly as the model must write it to be understood.
        observation: what the environment answered, kept short, or None.
        code: the executable part of ``action`` (SQL, a script, a tool call), if it has one.
    """

    action: str
    observation: str | None = None
    code: str | None = None  # the executable part of ``action`` (SQL, script, tool call), if it has one

    def render(self, with_observation: bool) -> str:
        """The step as a memory's text shows it (its observation on the next line, if asked and there)."""
        if with_observation and self.observation:
            return f"{self.action}\n{self.observation}"
        return self.action


def transcript(question: str, turns: Sequence[Turn]) -> tuple[str, list[Step]]:
    """The raw replies and the observations the model was sent (the last one never was)."""
    steps = [Step(f"assistant: {turn.reply.strip()}",
                  f"user: {turn.observation.strip()}" if position < len(turns) - 1 and turn.observation.strip() else None)
             for position, turn in enumerate(turns)]
    return f"Question: {question.strip()}", steps

HEAD_KEEP = 60  # the question is shortened down to this many characters before any step is cut
CUT_NOTE = "[{n} later step(s) cut to fit]"


def fit(head: str, steps: Sequence[Step], limit: int, *, drop_observations: bool) -> str:
    """The memory text within ``limit`` characters, cut only between steps.

    In order, the first that fits: everything; (``drop_observations``) the actions without
    their observations; the question shortened so that every step stays whole; the question
    cut to :data:`HEAD_KEEP` and the leading steps that fit whole, then a note of how many were
    cut. Only when not even the first step fits whole is it cut inside (it alone exceeds L_max).
    """
    def joined(*parts: str) -> str:
        return "\n".join(parts)

    variants = [True, False] if drop_observations else [True]
    for with_observations in variants:
        text = joined(head, *(s.render(with_observations) for s in steps))
        if len(text) <= limit:
            return text
    with_observations = not drop_observations
    body = joined(*(s.render(with_observations) for s in steps))
    room = limit - len(body) - 1
    if room >= min(len(head), HEAD_KEEP):
        return joined(cut(head, room), body)
    head = cut(head, HEAD_KEEP)
    kept: list[str] = []
    for position, step in enumerate(steps):
        rendered = step.render(with_observations)
        later = len(steps) - position - 1
        note_room = 1 + len(CUT_NOTE.format(n=later)) if later else 0  # room for the note if what follows is cut
        if len(joined(head, *kept, rendered)) + note_room > limit:
            break
        kept.append(rendered)
    if not kept:  # the first step alone is longer than L_max: the one cut inside a step
        return cut(joined(head, steps[0].render(False)), limit)
    if len(kept) < len(steps):
        kept.append(CUT_NOTE.format(n=len(steps) - len(kept)))
    return joined(head, *kept)


def writes_memory(reward: int, status: str | None, memory_from: str = "completed") -> bool:
    """Whether a judged task writes a memory: reward 1, and under ``"completed"`` (LAB's rule)
    also an episode that ended by its own answer/finish action."""
    if memory_from not in MEMORY_FROM:
        raise ValueError(f"memory_from must be one of {', '.join(MEMORY_FROM)}, got {memory_from!r}")
    return reward == 1 and (memory_from == "reward" or status == "completed")


__all__ = ["OBSERVATION_CHARS", "Turn", "Memory", "Step", "memory_char_limit", "cut", "transcript", "fit",
           "writes_memory", "HEAD_KEEP", "CUT_NOTE"]
