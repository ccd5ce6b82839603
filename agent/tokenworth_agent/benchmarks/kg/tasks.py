"""KG tasks (LAB's ``knowledge_graph``): a question answered by tool calls over Freebase, and its gold replay.

The KG tools whose result is a new variable live beside the record because replaying a record's
gold actions needs them, and both the KG environment (its tests and benches) and the simulated
backbone replay them.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.tasks.base import literal, strings, text
from tokenworth_agent.tasks.lab import LabSource


@dataclasses.dataclass(frozen=True)
class KGTask:
    sample_index: int
    question: str
    qid: str
    source: str
    entity_dict: dict[str, str]
    s_expression: str
    action_list: tuple[str, ...]
    answer_list: tuple[str, ...]
    skill_list: tuple[str, ...]
    env: str = "kg"

    @property
    def task_id(self) -> str:
        return f"kg-{self.sample_index}"

    @property
    def query_text(self) -> str:
        return self.question


def decode(row: dict[str, Any], path: Path) -> KGTask:
    i = int(row["sample_index"])
    entities = literal(row["entity_dict"], "entity_dict", i, path, dict)
    answers = literal(row["answer_list"], "answer_list", i, path, (list, tuple))
    return KGTask(
        sample_index=i,
        question=text(row, "question", i, path),
        qid=text(row, "qid", i, path),
        source=text(row, "source", i, path),
        entity_dict=dict(entities),
        s_expression=text(row, "s_expression", i, path),
        action_list=strings(row["action_list"], "action_list", i, path),
        answer_list=tuple(str(a) for a in answers),
        skill_list=strings(row["skill_list"], "skill_list", i, path),
    )


SOURCE = LabSource("kg", decode)


# ------------------------------------------------------------------ the gold replay
KG_VARIABLE_TOOLS = frozenset({"get_neighbors", "intersection", "argmax", "argmin", "count"})
_GOLD_ACTION = re.compile(r"^(\w+)\((.*)\)$")


def kg_gold_calls(task: KGTask, use_entity_names: bool = True) -> list[str]:
    """The gold ``action_list`` as tool calls ``tool(a, b)``, one per action.

    With ``use_entity_names`` a MID from ``entity_dict`` is written as its (first) name, which
    is what the agent is shown; otherwise the record's MIDs are kept. A malformed action is a
    ``ValueError`` naming the task.
    """
    mid_to_name: dict[str, str] = {}
    for name, mid in task.entity_dict.items():
        mid_to_name.setdefault(mid, name)
    calls = []
    for action in task.action_list:
        match = _GOLD_ACTION.match(action.strip())
        if match is None:
            raise ValueError(f"{task.task_id}: gold action {action!r} is not tool(arguments)")
        tool, argument_text = match.groups()
        arguments = [a.strip() for a in argument_text.split(",")]
        if use_entity_names:
            arguments = [mid_to_name.get(a, a) for a in arguments]
        calls.append(f"{tool}({', '.join(arguments)})")
    return calls


def kg_variables_made(calls: Sequence[str]) -> int:
    """How many variables these tool calls make (each call of a :data:`KG_VARIABLE_TOOLS` tool makes one)."""
    return sum(call.split("(", 1)[0].strip() in KG_VARIABLE_TOOLS for call in calls)


def kg_gold_replies(task: KGTask, use_entity_names: bool = True) -> list[str]:
    """The gold actions as agent replies (``Action: tool(...)``), then ``Final Answer: #k``.

    The answer is the last variable made, which is what every record's last action yields.
    """
    calls = kg_gold_calls(task, use_entity_names)
    made = kg_variables_made(calls)
    if made == 0:
        raise ValueError(f"{task.task_id}: the gold actions make no variable to answer with")
    return [f"Action: {call}" for call in calls] + [f"Final Answer: #{made - 1}"]


__all__ = ["KGTask", "decode", "SOURCE", "KG_VARIABLE_TOOLS", "kg_gold_calls", "kg_variables_made", "kg_gold_replies"]
