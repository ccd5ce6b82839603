"""Run-level harness options: how faithfully the harness follows LifelongAgentBench (LAB).

One frozen value, :class:`HarnessOptions`, is threaded to every environment
(:func:`agent.envs.registry.make_environment`) and every policy
(:func:`agent.policies.registry.make_policy`), and its :meth:`~HarnessOptions.identity` is
part of each stream's identity, so a run made with other options never resumes into this one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

MEMORY_FROM = ("completed", "reward")  # which successes write a memory
MEMORY_FORMATS = ("compact", "transcript")  # how a memory is rendered for injection
KG_PARSERS = ("strict", "lenient")


@dataclasses.dataclass(frozen=True)
class HarnessOptions:
    memory_from: str = "reward"
    memory_format: str = "compact"
    kg_parser: str = "lenient"
    kg_vocab: str | None = None  # a folder of LAB's KG vocabulary files
    instructions: str | None = None  # a folder holding <env>.txt instruction texts

    def __post_init__(self) -> None:
        for field, allowed in (("memory_from", MEMORY_FROM), ("memory_format", MEMORY_FORMATS),
                               ("kg_parser", KG_PARSERS)):
            if getattr(self, field) not in allowed:
                raise ValueError(f"{field} must be one of {', '.join(allowed)}, got {getattr(self, field)!r}")

    def identity(self, env: str) -> dict[str, Any]:
        """What of these options changes ``env``'s results (JSON-ready)."""
        return dataclasses.asdict(self)


DEFAULT_HARNESS = HarnessOptions()

__all__ = ["HarnessOptions", "DEFAULT_HARNESS", "MEMORY_FROM", "MEMORY_FORMATS", "KG_PARSERS"]
