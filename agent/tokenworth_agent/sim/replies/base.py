"""What every environment's replies share: the ``Thought:`` that opens round 0, and the last observation."""

from __future__ import annotations

from typing import Sequence

from tokenworth_agent.backbones.base import BackboneError, Conversation
from tokenworth_agent.sim.model import Episode, SimParams
from tokenworth_agent.tasks import Task

_THOUGHTS = (
    "I need to work out exactly what the task asks for before acting.",
    "The key step here involves {skill}.",
    "I will keep the action minimal and check the result.",
    "Let me make sure the conditions match the instruction.",
    "Following the earlier experience, I will reuse its approach based on {memory_skill}.",
    "That experience handled a similar request, so the same pattern should apply here.",
    "I should double-check every condition and the expected output format once more.",
)


def thought(task: Task, episode: Episode, memory_skills: Sequence[str] | None, params: SimParams) -> str:
    if episode.harmful:
        count = params.thought_sentences_harmful
    elif episode.overlap is not None:
        count = params.thought_sentences_helpful
    else:
        count = params.thought_sentences_base
    if count == 0:
        return ""
    skill = task.skill_list[0] if task.skill_list else "the data"
    memory_skill = sorted(memory_skills)[0] if memory_skills else "a related task"
    # a harmful memory pulls the reasoning towards the memory's own skills
    order = (4, 5, 0, 6, 1, 2) if episode.harmful else (0, 1, 2, 3, 6)
    sentences = [_THOUGHTS[i].format(skill=skill, memory_skill=memory_skill) for i in order]
    while len(sentences) < count:
        sentences += sentences
    return "Thought: " + " ".join(sentences[:count]) + "\n"


def last_observation(conversation: Conversation) -> str:
    """The content of the last user turn (the environment's latest observation)."""
    if not conversation or conversation[-1].get("role") != "user":
        raise BackboneError("the simulated backbone expects the conversation to end with a user turn")
    return str(conversation[-1].get("content", ""))




__all__ = ["last_observation", "thought"]
