"""Standard: no memory at all. The reference point for ΔTok."""

from __future__ import annotations

from typing import Any, Sequence

from tokenworth_agent.tasks import Task
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies.base import MemoryPolicy, Outcome


class StandardPolicy(MemoryPolicy):
    name = "standard"

    def retrieve(self, task: Task) -> list[Memory]:
        return []

    def update(self, task: Task, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"StandardPolicy has no state, got keys {sorted(state)}")
