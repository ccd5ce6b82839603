"""ALFWorld memories (compact): the goal, then every command TextWorld executed, each with its observation.

Built from the agent's own trajectory only (the game's walkthrough is no input here): the turns
whose command was admissible, so TextWorld carried it out, each with the engine's answer cut to
:data:`~tokenworth_agent.memory.base.OBSERVATION_CHARS`; repair turns and "Nothing happens." steps are left out.
The fitting to L_max (:func:`tokenworth_agent.memory.base.fit`: observations first, then whole steps from the
end) keeps an experience under App. C's 4,096 characters (L_max 4,200 less the block's headings).
"""

from __future__ import annotations

from typing import Sequence

from tokenworth_agent.memory.base import OBSERVATION_CHARS, Step, Turn, cut


def compact(question: str, turns: Sequence[Turn], *, abstract: bool = False) -> tuple[str, list[Step]]:
    """(the task line, the executed commands) of a compact ALFWorld memory (``abstract`` changes nothing)."""
    steps = []
    for turn in turns:
        action = turn.action or {}
        command = action.get("command")
        if command and action.get("admissible") and action.get("step") is not None:
            steps.append(Step(f"Action: {command}", f"Observation: {cut(turn.observation, OBSERVATION_CHARS)}",
                              code=command))
    return f"Task: {question.strip()}", steps


__all__ = ["compact"]
