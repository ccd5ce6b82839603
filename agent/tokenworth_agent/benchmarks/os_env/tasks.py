"""OS tasks (LAB's ``os_interaction``): a shell task in a fresh sandbox, judged by its evaluation script.

(The module is named ``os_env``, as the environment's is, so that it never reads as the standard library's ``os``.)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tokenworth_agent.tasks.base import column, corrupt, literal, strings, text
from tokenworth_agent.tasks.lab import LabSource


@dataclasses.dataclass(frozen=True)
class CommandItem:
    command_name: str
    script: str


@dataclasses.dataclass(frozen=True)
class OSTask:
    sample_index: int
    instruction: str
    init: CommandItem | None
    evaluation: CommandItem
    ground_truth: CommandItem | None
    skill_list: tuple[str, ...]
    entry_hash: int
    env: str = "os"

    @property
    def task_id(self) -> str:
        return f"os-{self.sample_index}"

    @property
    def query_text(self) -> str:
        return self.instruction


def _command(item: Any) -> CommandItem | None:
    if not item:
        return None
    return CommandItem(command_name=str(item.get("command_name", "bash")), script=str(item["script"]))


def decode(row: dict[str, Any], path: Path) -> OSTask:
    i = int(row["sample_index"])
    evaluation = literal(row["evaluation_info"], "evaluation_info", i, path, dict)
    init = literal(row["initialization_command_item"], "initialization_command_item", i, path, (dict, type(None)))
    with column("initialization_command_item", i, path):
        init_item = _command(init)
    with column("evaluation_info", i, path):
        evaluation_item = _command(evaluation["evaluation_command_item"])
        ground_truth = _command(evaluation.get("ground_truth_command_item"))
    if evaluation_item is None:
        raise corrupt(path, i, "evaluation_info", "has no evaluation command")
    return OSTask(
        sample_index=i,
        instruction=text(row, "instruction", i, path),
        init=init_item,
        evaluation=evaluation_item,
        ground_truth=ground_truth,
        skill_list=strings(row["skill_list"], "skill_list", i, path),
        entry_hash=int(row["raw_entry_hash"]),
    )


SOURCE = LabSource("os", decode)

__all__ = ["CommandItem", "OSTask", "decode", "SOURCE"]
