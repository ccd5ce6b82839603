"""Prompts and reply parsing shared by the methods that write memories with the model.

One copy of each text idea the five LLM-writing baselines (Mem0, MemSkill, Reflexion, EvoSC,
EvoSkill) need: rendering a finished task for a prompt and robust parsers for the reply forms
they ask for. Each method's prompts (what it asks, in its own words) stay in its own module.
The grammar itself (form names, operation words, the format texts a prompt shows) is
:mod:`tokenworth_agent.core.aux_grammar`, which the simulated backbone (:mod:`tokenworth_agent.sim.aux`) writes with, so it
answers in exactly the grammar these parsers accept.

The forms (``notes``, ``operations``, ``card``) are described in :mod:`tokenworth_agent.core.aux_grammar`. The
parsers accept more than the grammar writes: ``INSERT`` for ``ADD``, ``NONE`` or ``NO-OP`` for
``NOOP``, ``REMOVE`` for ``DELETE``, and a card's first line ``NEW`` / ``EDIT <n>`` may be missing.

Parsing decisions (a small model's reply is often sloppy, never trusted):

* labels are case-insensitive and may be decorated (``- **Fact 2:** ...``, ``1. INSIGHT - ...``);
* a line that does not parse is ignored; a reply with nothing usable is *malformed* and the
  method writes no memory (it never raises);
* an item shorter than :data:`MIN_ITEM_CHARS` is noise and is dropped; a longer one is cut
  to the room one memory has in the injected block (:func:`tokenworth_agent.memory.memory_char_limit`);
* an operation that names a memory number not shown in the prompt is dropped.
* an operation the request does not allow is dropped, except ``NOOP``: "change nothing" is always
  a valid answer (a reply of only ``NOOP`` is not malformed).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from tokenworth_agent.core.aux_grammar import (CARD_FORMAT, FORM_CARD, FORM_NOTES, FORM_OPERATIONS, NOTES_FORMAT,  # noqa: F401
                                OPERATION_WORDS, OPERATIONS_FORMAT)
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.memory import Turn, memory_char_limit

MIN_ITEM_CHARS = 12  # below this a "fact" or "lesson" carries nothing (e.g. "ok", "N/A")
TURN_CHARS = 240  # per reply / observation in a prompt's trajectory
TRAJECTORY_CHARS = 1800  # the whole trajectory in a prompt (keeps small models' context small)

_SYNONYMS = {"INSERT": "ADD", "NONE": "NOOP", "NO-OP": "NOOP", "NO_OP": "NOOP", "REMOVE": "DELETE"}


# ------------------------------------------------------------------ prompts
def chat(system: str, user: str) -> tuple[dict[str, str], ...]:
    return ({"role": "system", "content": system}, {"role": "user", "content": user})


def clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"


def trajectory_text(trajectory: Sequence[Turn], limit: int = TRAJECTORY_CHARS) -> str:
    """The agent's rounds as prompt text: each reply and observation cut to :data:`TURN_CHARS`."""
    lines: list[str] = []
    for turn in trajectory:
        lines.append(f"Round {turn.round + 1} reply: {clip(turn.reply, TURN_CHARS)}")
        if turn.observation.strip():
            lines.append(f"Round {turn.round + 1} result: {clip(turn.observation, TURN_CHARS)}")
    text = "\n".join(lines) or "(the agent produced no reply)"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def outcome_text(reward: int, status: str) -> str:
    return "SUCCESS (the grader accepted the answer)" if reward == 1 else f"FAILURE (grader reward 0, status {status})"


def numbered(texts: Sequence[str], limit: int = 300) -> str:
    """``[1] text`` lines, the numbers the operations grammar refers to."""
    return "\n".join(f"[{i + 1}] {clip(t, limit)}" for i, t in enumerate(texts)) or "(none)"


def task_block(task: Task, trajectory: Sequence[Turn], reward: int, status: str) -> str:
    return (f"Task: {clip(task.query_text, 600)}\n\nWhat the agent did:\n{trajectory_text(trajectory)}\n\n"
            f"Outcome: {outcome_text(reward, status)}")


# ------------------------------------------------------------------ parsing
_DECOR = r"^[ \t>*_#`\-•]*(?:\d+[.)][ \t]*)?[ \t*_`]*"  # bullets, numbering, markdown emphasis


def labelled(text: str | None, label: str) -> list[str]:
    """Values of ``LABEL: value`` lines (``LABEL 2: value`` too), cleaned, in order."""
    if not text:
        return []
    pattern = re.compile(_DECOR + re.escape(label) + r"s?[ \t]*\d*[ \t]*[*_`]*[ \t]*[:：\-–][ \t]*(.+)$", re.I | re.M)
    values = []
    for match in pattern.finditer(text):
        value = match.group(1).strip().strip("*_` ")
        if len(value) >= MIN_ITEM_CHARS:
            values.append(value)
    return values


@dataclasses.dataclass(frozen=True)
class Operation:
    kind: str  # ADD, UPDATE, DELETE or NOOP
    target: int | None = None  # 0-based index into the memories shown, for UPDATE/DELETE
    text: str = ""


_OPERATION = re.compile(_DECOR + r"(ADD|INSERT|UPDATE|DELETE|REMOVE|NOOP|NO[-_]OP|NONE)\b[*_`]*"
                        r"[ \t]*(?:\[?[ \t]*(?:memory[ \t]*)?#?(\d+)[ \t]*\]?)?[ \t]*[*_`]*[ \t]*[:：\-–]?[ \t]*(.*)$",
                        re.I | re.M)


def operations(text: str | None, shown: int, *, allowed: Sequence[str] = OPERATION_WORDS) -> list[Operation]:
    """The valid operations in a reply (see the module docstring); ``shown`` memories were numbered 1..shown."""
    if not text:
        return []
    found: list[Operation] = []
    for match in _OPERATION.finditer(text):
        kind = _SYNONYMS.get(match.group(1).upper().replace(" ", ""), match.group(1).upper())
        if kind not in allowed and kind != "NOOP":  # "change nothing" is always a valid answer
            continue
        number, body = match.group(2), match.group(3).strip().strip("*_` ")
        target = int(number) - 1 if number is not None else None
        if kind in ("UPDATE", "DELETE") and (target is None or not 0 <= target < shown):
            continue  # names no memory that was shown: unusable
        if kind in ("ADD", "UPDATE") and len(body) < MIN_ITEM_CHARS:
            continue
        found.append(Operation(kind, target if kind in ("UPDATE", "DELETE") else None, body))
    return found


@dataclasses.dataclass(frozen=True)
class Card:
    name: str
    when: str
    how: str
    edit: int | None = None  # 0-based index of the shown skill it replaces, or None for a new skill

    def render(self) -> str:
        return f"Skill: {self.name}\nWhen to use: {self.when}\nHow: {self.how}"


_EDIT = re.compile(r"^[^\w\n]*EDIT[ \t]*\[?#?(\d+)\]?", re.I | re.M)
_NAME_CHARS = re.compile(r"[^a-z0-9_]+")


def card(text: str | None, shown: int = 0) -> Card | None:
    """A skill card, or None when SKILL or HOW is missing; ``EDIT n`` counts only if n was shown."""
    if not text:
        return None
    names = [v for v in _values(text, "SKILL") if v]
    hows = labelled(text, "HOW")
    if not names or not hows:
        return None
    name = _NAME_CHARS.sub("_", names[0].lower()).strip("_")[:48]
    if not name:
        return None
    whens = labelled(text, "WHEN")
    edit = _EDIT.search(text)
    target = int(edit.group(1)) - 1 if edit else None
    return Card(name, whens[0] if whens else "a task like the one it came from", hows[0],
                target if target is not None and 0 <= target < shown else None)


def _values(text: str, label: str) -> list[str]:
    pattern = re.compile(_DECOR + re.escape(label) + r"[ \t]*[*_`]*[ \t]*[:：\-–][ \t]*(.+)$", re.I | re.M)
    return [m.group(1).strip().strip("*_` ") for m in pattern.finditer(text)]


def fit(text: str, budget: Budget) -> str:
    """Cut a model-written memory to the room one memory has in the injected block."""
    limit = memory_char_limit(budget)
    text = text.strip()
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"


def merged_skills(*groups: Sequence[str]) -> tuple[str, ...]:
    """Skills of a memory that merges several sources: their union, in first-seen order."""
    return tuple(dict.fromkeys(s for group in groups for s in group))


__all__ = ["CARD_FORMAT", "Card", "FORM_CARD", "FORM_NOTES", "FORM_OPERATIONS", "MIN_ITEM_CHARS", "NOTES_FORMAT",
           "OPERATIONS_FORMAT", "Operation", "card", "chat", "clip", "fit", "labelled", "merged_skills", "numbered",
           "operations", "outcome_text", "task_block", "trajectory_text"]
