"""What the simulator is told about each request: the one seam between the harness and a simulated backbone.

A real LLM sees only the conversation. The simulator stands in for one by acting on the real
environment, so it must also know which task a request is about, the skills of the memory
that was injected, the round, the run's seed and, for an auxiliary call, what the method asked
for. The harness states this as one :class:`Facts` value per request:

* :class:`tokenworth_agent.experiment.episode.Episode` makes them for the agent's rounds;
* :func:`tokenworth_agent.experiment.task.aux_facts` for auxiliary calls, from the
  :class:`AuxHint` a method puts on its :class:`~tokenworth_agent.policies.auxiliary.AuxRequest`.

Decision: only a backbone that declares it reads them (:class:`FactReader`, ``reads_facts =
True``) receives them; :func:`generate` and :func:`submit` are the one place that decides. A
real backbone's ``generate`` takes the conversations, the caps and the stop strings, and
nothing else: no simulator-only value rides through it. Test doubles that script replies per
task are fact readers too.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import ClassVar, Literal, Protocol, Sequence, runtime_checkable

from tokenworth_agent.backbones.base import Backbone, Conversation, Generation, Submitting
from tokenworth_agent.tasks import Task


@dataclasses.dataclass(frozen=True)
class AuxHint:
    """What a method tells the simulator about one auxiliary call (a real model reads only the prompt).

    Every field is optional but the reply ``form`` (:mod:`tokenworth_agent.core.aux_grammar`); an empty value
    means "not given" and the simulator falls back as :mod:`tokenworth_agent.sim.aux` documents.
    """

    form: str  # the reply grammar the prompt asks for (tokenworth_agent.core.aux_grammar.FORMS)
    label: str | None = None  # notes: the line label (FACT, REFLECTION, INSIGHT)
    limit: int | None = None  # notes: at most this many lines
    source_skills: tuple[str, ...] = ()  # the skills the text is about (empty: the task's own)
    candidates: tuple[tuple[str, ...], ...] = ()  # skills of each memory or card shown, in prompt order
    injected: tuple[int, ...] = ()  # operations: which shown memories were injected (0-based)
    failed: bool = False  # operations: the task failed
    new_texts: tuple[str, ...] = ()  # operations: texts to add when nothing shown matches
    allowed: tuple[str, ...] = ()  # operations the prompt allows (empty: all)


@dataclasses.dataclass(frozen=True)
class Facts:
    """One request's facts (see the module docstring)."""

    task: Task
    seed: int | None = None  # the run's seed; None: the backbone's own
    round: int | None = None  # the agent's 0-based call of the task (an ALFWorld repair call is one); None: auxiliary
    memory_skills: tuple[str, ...] | None = None  # the injected memory's source skills; None: nothing injected
    aux: str | None = None  # an auxiliary call's purpose; None for the agent's rounds
    hint: AuxHint | None = None  # what the method said about its auxiliary call

    def __post_init__(self) -> None:
        if self.round is not None and self.round < 0:
            raise ValueError(f"Facts.round must be >= 0, got {self.round}")
        if (self.aux is None) == (self.round is None):
            raise ValueError("Facts describe exactly one of an agent round (round) and an auxiliary call (aux)")


@runtime_checkable
class FactReader(Protocol):
    """A backbone that reads each request's :class:`Facts` (the simulator, scripted test doubles)."""

    name: str
    reads_facts: ClassVar[Literal[True]]

    def generate(self, conversations: Sequence[Conversation], max_tokens: Sequence[int],
                 stop: Sequence[str] | None = None, *, facts: Sequence[Facts]) -> list[Generation]: ...


AnyBackbone = Backbone | FactReader  # what the engine serves: a real backbone, or one that also reads facts


def generate(backbone: AnyBackbone, conversations: Sequence[Conversation], max_tokens: Sequence[int],
             facts: Sequence[Facts]) -> list[Generation]:
    """One batched call: a fact reader gets the facts, any other backbone the conversations alone."""
    if isinstance(backbone, FactReader):
        return backbone.generate(conversations, max_tokens, facts=facts)
    return backbone.generate(conversations, max_tokens)


def submit(backbone: Submitting, conversation: Conversation, max_tokens: int,
           facts: Facts) -> "concurrent.futures.Future[Generation]":
    """One asynchronous call, for a backbone that offers ``submit``; facts as in :func:`generate`."""
    if isinstance(backbone, FactReader):
        return backbone.submit(conversation, max_tokens, facts=facts)  # type: ignore[attr-defined]
    return backbone.submit(conversation, max_tokens)


__all__ = ["AnyBackbone", "AuxHint", "Facts", "FactReader", "generate", "submit"]
