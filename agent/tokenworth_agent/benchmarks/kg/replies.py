"""KG replies: the gold tool calls then ``Final Answer: #k`` (:func:`tokenworth_agent.tasks.kg_gold_replies`, the
replay the KG environment's tests use too), or a truncated path that answers with a wrong variable."""

from __future__ import annotations

from typing import Callable

from tokenworth_agent.backbones.base import BackboneError, Conversation
from tokenworth_agent.sim.model import Episode, SimParams
from tokenworth_agent.benchmarks.kg.tasks import KGTask, kg_gold_calls, kg_gold_replies, kg_variables_made


def _gold(replay: Callable[[KGTask], list[str]], task: KGTask) -> list[str]:
    """The gold calls or replies; a malformed record fails this request (BackboneError), not the run."""
    try:
        return replay(task)
    except ValueError as exc:
        raise BackboneError(f"simulated backbone: {exc}") from exc


def reply(task: KGTask, episode: Episode, round_index: int, conversation: Conversation, params: SimParams) -> str:
    if episode.success:
        replies = _gold(kg_gold_replies, task)
        return replies[min(round_index, len(replies) - 1)]
    calls = _gold(kg_gold_calls, task)
    prefix = calls[: max(1, len(calls) // 2)]
    if episode.harmful:  # wasted exploration before the (wrong) path
        prefix = [calls[0]] * params.harmful_extra_rounds + prefix
    if round_index < len(prefix):
        return f"Action: {prefix[round_index]}"
    made = kg_variables_made(prefix)
    return f"Final Answer: #{made - 1 if made else 0}"


__all__ = ["reply"]
