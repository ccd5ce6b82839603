"""The simulated backbone: :mod:`tokenworth_agent.sim`'s model behind the backbone interface, reading each request's facts."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal, Sequence

from tokenworth_agent.backbones.base import BackboneError, Conversation, Generation, checked_caps
from tokenworth_agent.tasks import Task
from tokenworth_agent.sim import aux
from tokenworth_agent.sim.facts import Facts
from tokenworth_agent.sim.model import Episode, SimParams, decide
from tokenworth_agent.core.plugins import benchmark, names
from tokenworth_agent.sim.replies import thought
from tokenworth_agent.sim.tokens import token_counter


def _apply_stop(text: str, stop: Sequence[str] | None) -> tuple[str, str]:
    """``(text cut at the earliest stop string, that stop string or "")``; the stop string is not
    in the returned text (as vLLM and OpenAI do), but its tokens were decoded."""
    cuts = sorted((text.find(s), s) for s in (stop or ()) if s and s in text)
    return (text[: cuts[0][0]], cuts[0][1]) if cuts else (text, "")


class SimBackbone:
    """The simulated backbone (see :mod:`tokenworth_agent.sim` for its generative model)."""

    name = "sim"
    reads_facts: ClassVar[Literal[True]] = True  # tokenworth_agent.sim.facts: the engine hands it every request's Facts

    def __init__(self, params: SimParams | None = None, seed: int = 0, eos_tokens: int | None = None) -> None:
        """``eos_tokens`` overrides ``params.eos_tokens``; the CLI passes it, so the token rule is
        part of a sim run's identity and a run counted under another rule is not resumed."""
        self.params = params or SimParams()
        if eos_tokens is not None:
            self.params = dataclasses.replace(self.params, eos_tokens=int(eos_tokens))
        self.seed = int(seed)
        self._tokens = token_counter(self.params.tokenizer_model)

    def episode(self, task: Task, memory_skills: Sequence[str] | None, seed: int | None = None) -> Episode:
        return decide(self.params, self.seed if seed is None else seed, task, memory_skills)

    def reply(self, conversation: Conversation, facts: Facts) -> str:
        """The full (uncapped) reply text for one request."""
        task = _checked_task(facts)
        if facts.aux is not None:
            return aux.reply(task, facts, self.params)
        assert facts.round is not None  # Facts are either an auxiliary call or a round
        episode = self.episode(task, facts.memory_skills, facts.seed)
        action = benchmark(task.env).sim_reply(task, episode, facts.round, conversation, self.params)
        opening = thought(task, episode, facts.memory_skills, self.params) if facts.round == 0 else ""
        return opening + action

    def generate(
        self,
        conversations: Sequence[Conversation],
        max_tokens: Sequence[int],
        stop: Sequence[str] | None = None,
        *,
        facts: Sequence[Facts],
    ) -> list[Generation]:
        caps = checked_caps(conversations, max_tokens)
        if len(facts) != len(conversations):
            raise ValueError(f"{len(conversations)} conversations but {len(facts)} facts")
        return [self._finish(self.reply(conversation, item), cap, stop)
                for conversation, cap, item in zip(conversations, caps, facts)]

    def _finish(self, reply: str, cap: int, stop: Sequence[str] | None) -> Generation:
        """Count as an engine would: the text, then the stop string's tokens or the EOS token.

        Whatever does not fit the cap is not decoded: a reply of exactly ``cap`` text tokens ends
        by length, without its EOS, as vLLM's does.
        """
        text, matched = _apply_stop(reply, stop)
        decoded = self._tokens.count(text + matched) + (0 if matched else self.params.eos_tokens)
        if decoded <= cap:
            return Generation(text=text, output_tokens=decoded, finish_reason="stop")
        cut_text, _, _ = self._tokens.truncate(text, cap)
        return Generation(text=cut_text, output_tokens=cap, finish_reason="length")


def _checked_task(facts: Facts) -> Task:
    env = getattr(facts.task, "env", None)
    if env not in names("benchmark") or not _has_replies(env):  # the task's benchmark alone is loaded
        raise BackboneError(f"simulated backbone: a request's task must be a task record of one of "
                            f"{', '.join(simulated())}, got {type(facts.task).__name__}")
    return facts.task


def simulated() -> tuple[str, ...]:
    """The installed benchmarks that bring simulated replies (the others cannot run on ``--backbone sim``)."""
    return tuple(n for n in names("benchmark") if _has_replies(n))


def _has_replies(name: str) -> bool:
    try:
        return benchmark(name).sim_reply is not None
    except ValueError:  # a broken or clashing plugin: not simulated (its own error comes where it is asked for)
        return False


__all__ = ["SimBackbone", "simulated"]
