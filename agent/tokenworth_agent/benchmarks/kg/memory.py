"""KG memories (compact): the tool calls that succeeded, each with its observation, then the final answer."""

from __future__ import annotations

import re
from typing import Sequence

from tokenworth_agent.memory.base import FINAL_ANSWER, OBSERVATION_CHARS, Step, Turn, cut

_KG_CALL = re.compile(r"Action:\s*([A-Za-z_]+\s*\(.*?\))\s*$", re.M)


def _kg_action(turn: Turn) -> tuple[str, str] | None:
    action = turn.action or {}
    if action.get("call"):
        return "call", str(action["call"]).strip()
    if action.get("kind") == "invalid":
        return None
    if action.get("kind") == "answer" and action.get("variable") is not None:
        return "answer", f"#{action['variable']}"
    if action.get("kind") == "answer" and action.get("answer") is not None:
        return "answer", str(action["answer"]).strip()
    final = FINAL_ANSWER.search(turn.reply)
    if final:
        return "answer", final.group(1).strip()
    call = _KG_CALL.search(turn.reply)
    return ("call", call.group(1).strip()) if call else None

_KG_SUCCESS = "executes successfully"


def _kg_steps(turns: Sequence[Turn]) -> list[Step]:
    steps = []
    for position, turn in enumerate(turns):
        parsed = _kg_action(turn)
        if parsed is None:
            continue
        kind, value = parsed
        if kind == "call":
            if _KG_SUCCESS not in turn.observation:
                continue  # a failed call made no variable: leaving it out keeps the numbering
            steps.append(Step(f"Action: {value}", f"Observation: {cut(turn.observation, OBSERVATION_CHARS)}",
                              code=value))
        elif position == len(turns) - 1:  # only the answer that ended the task (an unknown #k did not)
            steps.append(Step(f"Final Answer: {value}"))
    return steps


def compact(question: str, turns: Sequence[Turn], *, abstract: bool = False) -> tuple[str, list[Step]]:
    """(the question line, the steps) of a compact KG memory (``abstract`` changes nothing on KG)."""
    return f"Question: {question.strip()}", _kg_steps(turns)
