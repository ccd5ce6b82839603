"""DB memories (compact): the question, each valid SQL operation with its observation, then the answer."""

from __future__ import annotations

import re
from typing import Sequence

from tokenworth_agent.memory.base import FINAL_ANSWER, OBSERVATION_CHARS, Step, Turn, cut

_SQL_BLOCK = re.compile(r"```sql\s*(.*?)```", re.S | re.I)
_DB_ACTION = re.compile(r"Action:\s*(Operation|Answer)", re.I)


def _db_action(turn: Turn) -> tuple[str, str] | None:
    """("sql", statement) or ("answer", text) from a DB reply, or None if unparseable."""
    action = turn.action or {}
    if action.get("kind") == "invalid":
        return None
    if action.get("sql"):
        return "sql", " ".join(str(action["sql"]).split())
    if "answer" in action and action.get("kind", "answer") == "answer":
        return "answer", str(action["answer"]).strip()
    match = _DB_ACTION.search(turn.reply)
    if not match:
        return None
    if match.group(1).lower() == "operation":
        block = _SQL_BLOCK.search(turn.reply, match.end())
        return ("sql", " ".join(block.group(1).split())) if block else None
    final = FINAL_ANSWER.search(turn.reply, match.end())
    return ("answer", final.group(1).strip()) if final else None


def _looks_like_rows(observation: str) -> bool:
    # The DB environment returns the Python repr of fetched rows ("[...]", "[]" for writes)
    # or the error text; anything else is a failed operation.
    return observation.lstrip().startswith("[")


def _db_steps(turns: Sequence[Turn]) -> list[Step]:
    steps = []
    for turn in turns:
        parsed = _db_action(turn)
        if parsed is None:
            continue  # an invalid action is omitted
        kind, value = parsed
        if kind == "sql":
            if not _looks_like_rows(turn.observation):
                continue  # the operation failed: not part of the demonstration
            steps.append(Step(f"Action: Operation\n```sql\n{value}\n```",
                              f"Observation: {cut(turn.observation, OBSERVATION_CHARS)}", code=value))
        else:
            steps.append(Step(f"Action: Answer\nFinal Answer: {value}"))
    return steps


def compact(question: str, turns: Sequence[Turn], *, abstract: bool = False) -> tuple[str, list[Step]]:
    """(the question line, the steps) of a compact DB memory (``abstract`` changes nothing on DB)."""
    return f"Question: {question.strip()}", _db_steps(turns)
