"""Auxiliary model calls: the extra LLM calls a memory method makes besides the agent's rounds.

A method that reflects, extracts facts, consolidates or writes skills asks for such a call by
*yielding* an :class:`AuxRequest` from its ``retrieve_steps`` / ``update_steps`` coroutine
(:class:`tokenworth_agent.policies.base.MemoryPolicy`) and receives the :class:`Generation`, or
``None`` when the call was not made (see below). The caller, the experiment engine, treats
an auxiliary request as one more pending request of the method's stream: it goes out in the
same batched ``generate`` as every other stream's rounds.

Budget (App. A.2 of the paper): an auxiliary call's output tokens count toward the task's
O_max and toward OutputTok, booked as ``"auxiliary"`` in the task's
:class:`~tokenworth_agent.core.budget.TokenLedger`. Under per-task accounting the call may spend what the
task has left (execution rounds and earlier auxiliary calls included); when nothing is left
the call is **skipped**: the method receives ``None`` and the record's ``aux_calls`` entry
says ``skipped``. Under per-call accounting every call gets min(512, O_max) afresh, as the
agent's rounds do. A budget may cap auxiliary calls apart (``Budget.aux_call_cap``: 512 on
BigCodeBench, whose solutions may take 1280). A method may ask for a smaller cap
(``AuxRequest.max_tokens``).

A backbone that returns more tokens than the call's cap broke the budget: the tokens are
booked as reported (never hidden), the reply is *not* given to the method (it receives
``None``) and the entry names the error; the task's reward is not touched, because the
agent's episode had already been judged or not yet started.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Generator, Mapping, TypeVar

from tokenworth_agent.backbones.base import Generation, prompt_usage
from tokenworth_agent.core.budget import BudgetExceeded, TokenLedger
from tokenworth_agent.sim.facts import AuxHint

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class AuxRequest:
    """One auxiliary call a method asks for: yielded by its ``retrieve_steps`` / ``update_steps``, answered with a
    :class:`~tokenworth_agent.backbones.base.Generation` (or None when the budget skipped it), and charged to the
    task's O_max.

    Attributes:
        purpose: what it is for ("reflection", "extraction", ...): recorded, and read by the simulated backbone.
        messages: the full chat, system prompt included: the method's own prompt.
        max_tokens: the method's own cap, at most what the budget allows; None: the budget's.
        hint: what the simulated backbone reads about the call (``tokenworth_agent.sim.facts.AuxHint``), or None.
    """

    purpose: str  # what it is for ("reflection", "extraction", ...): recorded, and read by the sim backbone
    messages: tuple[Mapping[str, str], ...]  # the full chat, system prompt included: the method's own prompt
    max_tokens: int | None = None  # the method's own cap, at most what the budget allows; None: the budget's
    hint: AuxHint | None = None  # what the simulated backbone reads about the call (tokenworth_agent.sim.facts)

    def __post_init__(self) -> None:
        if not self.purpose:
            raise ValueError("an auxiliary request needs a purpose")
        if not self.messages:
            raise ValueError(f"auxiliary request {self.purpose!r} has no messages")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"auxiliary request {self.purpose!r}: max_tokens must be >= 1, got {self.max_tokens}")


AuxSteps = Generator[AuxRequest, "Generation | None", T]  # a coroutine of a method's phase


def aux_cap(ledger: TokenLedger, request: AuxRequest) -> int:
    """``max_tokens`` for this call; 0 means the budget no longer allows it (skip)."""
    allowed = ledger.next_max_tokens("auxiliary")
    return allowed if request.max_tokens is None else min(allowed, request.max_tokens)


def book(ledger: TokenLedger, request: AuxRequest, phase: str, cap: int,
         generation: Generation | None, *, failed: str | None = None) -> tuple[Generation | None, dict[str, Any]]:
    """Charge one auxiliary call; returns (what the method receives, the record's entry).

    ``failed``: the backbone could not serve this request (nothing is charged; the method gets None).
    """
    entry: dict[str, Any] = {"purpose": request.purpose, "phase": phase, "max_tokens": cap}
    if failed is not None:
        entry.update(tokens=0, reply=None, error=failed)
        return None, entry
    if generation is None:
        entry.update(skipped="the task's output budget was spent", tokens=0, reply=None)
        return None, entry
    entry.update(tokens=generation.output_tokens, finish_reason=generation.finish_reason, reply=generation.text,
                 **prompt_usage(generation))
    try:
        ledger.charge(generation.output_tokens, "auxiliary", cap)
    except BudgetExceeded as exc:
        ledger.charge(generation.output_tokens, "auxiliary", generation.output_tokens)
        entry["error"] = str(exc)
        return None, entry
    return generation, entry


def drive(steps: AuxSteps[T], answer: Callable[[AuxRequest], Generation | None]) -> T:
    """Run a method's phase to its end, answering each request with ``answer`` (one at a time)."""
    try:
        request = next(steps)
        while True:
            request = steps.send(answer(request))
    except StopIteration as stop:
        return stop.value


def without_model(steps: AuxSteps[T]) -> T:
    """Run a phase with every auxiliary call skipped (for callers that have no backbone)."""
    return drive(steps, lambda _request: None)


__all__ = ["AuxRequest", "AuxSteps", "aux_cap", "book", "drive", "without_model"]
