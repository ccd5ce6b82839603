"""The one interface every backbone implements.

``generate`` is batched: item i of the result answers conversation i. ``output_tokens``
is the count the engine itself reports (vLLM: ``len(output.token_ids)``; OpenAI-compatible
servers: ``usage.completion_tokens``; the simulator: its tokenizer). The budget code never
re-tokenises text. Token rule, shared by every backbone: every token the engine decoded counts,
the end-of-sequence token included (docs/backbones.md, "Token rule").

A backbone sees the conversation and nothing else. The simulated backbone also needs to
know what each request is about (the task, the injected memory's skills, the round); it gets
that through its own typed seam, :mod:`tokenworth_agent.sim.facts`, which no real backbone takes part in.
"""

from __future__ import annotations

import dataclasses
import concurrent.futures
from typing import Mapping, Protocol, Sequence, runtime_checkable

Message = Mapping[str, str]  # {"role": ..., "content": ...}
Conversation = Sequence[Message]


@dataclasses.dataclass(frozen=True)
class Generation:
    """One completion, as a backbone's ``generate`` returns it.

    Attributes:
        text: the reply (cut at a stop string, which is left out).
        output_tokens: the tokens the engine decoded, as it reports them (the end-of-sequence token included).
        finish_reason: ``stop``, ``length`` or an engine-specific reason.
        prompt_tokens: the prompt's tokens, where the engine says (else None).
        cached_tokens: the prompt tokens its prefix cache served, where the engine says (else None).
    """

    text: str
    output_tokens: int
    finish_reason: str  # "stop", "length", or an engine-specific reason
    # The prompt's length and how much of it the engine's prefix cache served, where the engine
    # says (None otherwise). Kept in records for cost analysis; never counted in OutputTok.
    prompt_tokens: int | None = None
    cached_tokens: int | None = None


def prompt_usage(generation: Generation) -> dict[str, int]:
    """The prompt's tokens and prefix-cache hits where the engine reports them, for records.
    Never charged to a ledger: OutputTok counts output tokens only."""
    usage = {"prompt_tokens": generation.prompt_tokens, "cached_tokens": generation.cached_tokens}
    return {key: value for key, value in usage.items() if value is not None}


def checked_caps(conversations: Sequence[Conversation], max_tokens: Sequence[int]) -> list[int]:
    """Validate one ``generate`` batch: a cap per conversation, each at least 1."""
    if len(conversations) != len(max_tokens):
        raise ValueError(f"{len(conversations)} conversations but {len(max_tokens)} max_tokens")
    caps = [int(cap) for cap in max_tokens]
    for cap in caps:
        if cap < 1:
            raise ValueError(f"max_tokens must be at least 1, got {cap}")
    return caps


class BackboneError(RuntimeError):
    """A backbone failed in a way retries could not fix."""


class ServerUnreachable(BackboneError):
    """No request reached the model server for a whole retry window: an outage, not one request's fault.

    The experiment engine stops at once on it (retrying the batch's requests one by one would only
    wait out the window again for each); its message is complete: the URL, the cause and what to do.
    """


@runtime_checkable
class Backbone(Protocol):
    """The interface a backbone implements: a class registered under ``tokenworth.backbones``, built with the run's
    backbone options (``model=...``, ...) as keywords, with ``name`` (the entry's name) and a batched
    :meth:`generate`. A backbone that cannot answer raises :class:`BackboneError` (or :class:`ServerUnreachable`
    when no request gets through)."""

    name: str

    def generate(
        self,
        conversations: Sequence[Conversation],
        max_tokens: Sequence[int],
        stop: Sequence[str] | None = None,
    ) -> list[Generation]:
        """Greedy completions, one per conversation, each capped at its ``max_tokens``."""
        ...


@runtime_checkable
class Submitting(Protocol):
    """A backbone that also answers one request asynchronously, for servers that batch continuously
    (the OpenAI-compatible one). The experiment engine's ``continuous`` schedule uses it; without
    it the engine ticks."""

    def submit(self, conversation: Conversation, max_tokens: int) -> "concurrent.futures.Future[Generation]": ...
