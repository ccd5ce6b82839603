"""The joint resource budget C = (O_max, J_max, B_max, K_max, L_max) and its accounting.

Three pieces, one idea (every method runs under exactly the same limits):

* :class:`Budget` — the frozen limits of one environment (Table A1 presets via
  :meth:`Budget.for_env`), plus the original harness's per-call cap of 512 new tokens and
  the output-token accounting (below).
* :class:`TokenLedger` — the per-task output-token account. Execution calls (the agent's
  rounds) and auxiliary calls (any extra LLM call a method makes) are tallied separately.
  Counts come from the backbone's own report (``Generation.output_tokens``); nothing is
  re-tokenised here.
* :func:`build_injection_block` — renders at most K_max memories into the text block that
  goes into the first user turn, never longer than L_max characters *including* headings
  and separators. Truncation is deterministic and reported in the returned object.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Sequence, get_args

CallKind = Literal["execution", "auxiliary"]
Accounting = Literal["per-call", "per-task"]
ACCOUNTINGS: tuple[str, ...] = get_args(Accounting)

PER_CALL_CAP = 512  # the original LifelongAgentBench harness caps every call at 512 new tokens

# How O_max is spent (``Budget.accounting``):
#
# * ``"per-call"`` (default): every LLM call, execution or auxiliary, may produce at most
#   O_max tokens (``max_tokens = min(512, O_max)``); the task's total is still recorded. This
#   is the accounting under which the paper's Table 1 is reachable: a perfect agent replaying
#   the gold actions fits the DB budget on 78% of tasks (paper: 65.0% for Qwen2.5-14B), and
#   KG's 15 rounds can each make a tool call. App. C of the paper states per-call limits for
#   its BigCodeBench/ALFWorld adapters. See docs/running.md ("Budget accounting") for the
#   measured ceiling table (``bench/tokenworth_bench/budget_ceiling.py``).
# * ``"per-task"``: the spec's literal reading — all rounds and auxiliary calls of one task
#   share O_max (``max_tokens = min(512, O_max − spent)``; the task ends with
#   ``budget_exhausted`` when nothing is left). Under it the same perfect agent fits only
#   ~57% of DB tasks, below the paper's own 65.0%.
DEFAULT_ACCOUNTING: Accounting = "per-call"


@dataclasses.dataclass(frozen=True)
class Budget:
    """Per-task limits shared by every method on one environment: the budget C = (O_max, J_max, B_max, K_max,
    L_max). A benchmark's ``limits`` are these fields by name (all but ``env`` and ``accounting``).

    Attributes:
        env: the benchmark's name.
        max_output_tokens: O_max, the output tokens a task may spend (per call or per task: ``accounting``).
        max_rounds: J_max, the agent's replies per task, the final answer included.
        bank_capacity: B_max, the most memories a method keeps (a benchmark's default: its controller preset's).
        max_memories: K_max, the memories injected per task.
        max_injected_chars: L_max, the characters of the whole injected block, headings included.
        per_call_cap: the most one model call may write (512, the original harness's cap).
        accounting: ``per-call`` (each call may write min(per_call_cap, O_max)) or ``per-task`` (all calls of a
            task share O_max); the run's ``--budget-accounting``.
        aux_call_cap: the most one auxiliary call (a method's own model call) may write; None: ``per_call_cap``.
    """

    env: str
    max_output_tokens: int  # O_max: summed over rounds and auxiliary calls
    max_rounds: int  # J_max: agent replies, the final answer included
    bank_capacity: int  # B_max
    max_memories: int  # K_max: memories injected per task
    max_injected_chars: int  # L_max: the whole injected block, headings included
    per_call_cap: int = PER_CALL_CAP
    accounting: Accounting = DEFAULT_ACCOUNTING  # how O_max is spent; see DEFAULT_ACCOUNTING
    # The most one auxiliary call (a method's reflection, extraction, ...) may write; None: per_call_cap, as
    # the agent's rounds. App. C caps them at 512 for every method, while a BigCodeBench solution may take 1280
    # and an ALFWorld action call has 128.
    aux_call_cap: int | None = None

    def __post_init__(self) -> None:
        if self.accounting not in ACCOUNTINGS:
            raise ValueError(f"Budget.accounting must be one of {', '.join(ACCOUNTINGS)}, got {self.accounting!r}")
        if self.aux_call_cap is not None and self.aux_call_cap < 1:
            raise ValueError(f"Budget.aux_call_cap must be >= 1 (or None), got {self.aux_call_cap}")
        for field in ("max_output_tokens", "max_rounds", "bank_capacity", "per_call_cap"):
            if getattr(self, field) < 1:
                raise ValueError(f"Budget.{field} must be >= 1, got {getattr(self, field)}")
        for field in ("max_memories", "max_injected_chars"):
            if getattr(self, field) < 0:
                raise ValueError(f"Budget.{field} must be >= 0, got {getattr(self, field)}")

    @classmethod
    def for_env(cls, env: str, accounting: str | None = None) -> "Budget":
        """The preset of ``env``: its benchmark's limits (:attr:`~tokenworth_agent.benchmarks.base.Benchmark.limits`:
        Table A1 for LAB's three, App. C for BigCodeBench and ALFWorld), B_max from the controller's preset table
        unless the benchmark gives its own, with ``accounting`` if given."""
        from tokenworth_agent.core.plugins import PluginError, benchmark
        from tokenworth_jax.presets import capacity  # B_max has one definition: the controller's preset table

        try:
            bench = benchmark(env)
        except PluginError:  # a refused plugin: its own line names it and what to change
            raise
        except ValueError as exc:
            raise ValueError(f"no budget preset for environment {env!r}: {exc}") from None
        limits = dict(bench.limits)
        if "bank_capacity" not in limits:
            limits["bank_capacity"] = capacity(bench.preset)
        preset = Budget(env, **limits)
        return preset if accounting is None else preset.replace(accounting=accounting)

    def replace(self, **changes: int | str) -> "Budget":
        """This budget with ``changes`` (e.g. a grid point's ``max_output_tokens``)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, int | str]:
        """As plain data (a run's ``config.json``)."""
        return dataclasses.asdict(self)

    def allows(self, call_tokens: Sequence[int]) -> bool:
        """Whether calls costing ``call_tokens`` (in order) fit: at most J_max of them and,
        per-task, a sum of at most O_max, or, per-call, each at most min(512, O_max)."""
        if len(call_tokens) > self.max_rounds:
            return False
        if self.accounting == "per-task":
            return sum(call_tokens) <= self.max_output_tokens
        return all(t <= min(self.per_call_cap, self.max_output_tokens) for t in call_tokens)


# The short names of the budget's fields, as grids (``--grid o_max=64,128``), stream folders and figures write them.
BUDGET_AXES: dict[str, str] = {"o_max": "max_output_tokens", "j_max": "max_rounds", "b_max": "bank_capacity",
                               "k_max": "max_memories", "l_max": "max_injected_chars"}


class BudgetExceeded(RuntimeError):
    """A backbone reported more output tokens than the call was allowed."""


@dataclasses.dataclass
class TokenLedger:
    """Output tokens spent on one task, against ``budget.max_output_tokens``.

    Per-task accounting: every call draws from what is left of O_max. Per-call accounting:
    every call gets O_max afresh; ``total`` still sums all calls.
    """

    budget: Budget
    execution_tokens: int = 0
    auxiliary_tokens: int = 0
    execution_calls: int = 0
    auxiliary_calls: int = 0

    @property
    def total(self) -> int:
        return self.execution_tokens + self.auxiliary_tokens

    @property
    def remaining(self) -> int:
        """What the next call may spend: O_max minus the spent total (per-task), or O_max (per-call)."""
        if self.budget.accounting == "per-call":
            return self.budget.max_output_tokens
        return max(0, self.budget.max_output_tokens - self.total)

    @property
    def exhausted(self) -> bool:
        return self.remaining == 0

    def next_max_tokens(self, kind: CallKind = "execution") -> int:
        """``max_tokens`` for the next call of ``kind``: min(its per-call cap, what is left). 0 means stop."""
        cap = self.budget.per_call_cap
        if kind == "auxiliary" and self.budget.aux_call_cap is not None:
            cap = self.budget.aux_call_cap
            if self.budget.accounting == "per-call":
                return cap  # its own per-call cap, above O_max on ALFWorld (512 vs 128 per action call)
        return min(cap, self.remaining)

    def charge(self, output_tokens: int, kind: CallKind, allowed: int) -> None:
        """Book one call's reported output tokens.

        ``allowed`` is the ``max_tokens`` the call was given. A backbone that reports more is
        broken (the budget would silently leak), so that is an error, not a clamp.
        """
        if output_tokens < 0:
            raise ValueError(f"a backbone reported a negative output token count ({output_tokens})")
        if output_tokens > allowed:
            raise BudgetExceeded(
                f"the backbone reported {output_tokens} output tokens for a call capped at {allowed}"
            )
        if kind == "execution":
            self.execution_tokens += output_tokens
            self.execution_calls += 1
        elif kind == "auxiliary":
            self.auxiliary_tokens += output_tokens
            self.auxiliary_calls += 1
        else:
            raise ValueError(f"unknown call kind {kind!r}; expected 'execution' or 'auxiliary'")


# Headings of the injected block. Kept short: every character counts against L_max.
BLOCK_HEADER = "Here are experiences from earlier tasks that were solved successfully. Use them only if they help."
ITEM_HEADING = "Experience {n}:"
TRUNCATION_MARK = " …[truncated]"


@dataclasses.dataclass(frozen=True)
class InjectionBlock:
    """What goes into the prompt, and what was cut to fit."""

    text: str  # "" when nothing is injected
    memory_ids: tuple[int, ...]  # the memories actually present (possibly truncated)
    dropped_ids: tuple[int, ...]  # over K_max, or no room left even for a heading
    truncated_id: int | None  # the memory whose body was cut, if any
    chars_cut: int  # characters removed from that memory's body

    @property
    def length(self) -> int:
        return len(self.text)

    def log(self) -> dict[str, object]:
        return {
            "memory_ids": list(self.memory_ids),
            "length": self.length,
            "dropped_ids": list(self.dropped_ids),
            "truncated_id": self.truncated_id,
            "chars_cut": self.chars_cut,
        }


EMPTY_BLOCK = InjectionBlock("", (), (), None, 0)


def build_injection_block(memories: Sequence[tuple[int, str]], budget: Budget) -> InjectionBlock:
    """Render ``(memory_id, text)`` pairs, best first, into a block of at most L_max chars.

    Rules, in order (deterministic): keep the first K_max memories; add them one by one;
    a memory whose full text does not fit has its body cut from the end and
    :data:`TRUNCATION_MARK` appended, and nothing after it is added; a memory for which
    not even its heading plus a few characters fit is dropped.
    """
    limit = budget.max_injected_chars
    kept = list(memories[: budget.max_memories])
    dropped = [mid for mid, _ in memories[budget.max_memories :]]
    if not kept or limit <= len(BLOCK_HEADER) + 1:
        return InjectionBlock("", (), tuple(mid for mid, _ in memories), None, 0) if memories else EMPTY_BLOCK

    text = BLOCK_HEADER
    present: list[int] = []
    truncated_id: int | None = None
    chars_cut = 0
    min_body = 16  # below this a truncated memory is noise, so it is dropped instead
    for index, (memory_id, body) in enumerate(kept):
        body = body.strip()
        prefix = f"\n\n{ITEM_HEADING.format(n=len(present) + 1)}\n"
        room = limit - len(text) - len(prefix)
        if len(body) <= room:
            text += prefix + body
            present.append(memory_id)
            continue
        room_for_body = room - len(TRUNCATION_MARK)
        if room_for_body >= min_body:
            kept_body = body[:room_for_body].rstrip()
            text += prefix + kept_body + TRUNCATION_MARK
            present.append(memory_id)
            truncated_id = memory_id
            chars_cut = len(body) - len(kept_body)
            dropped.extend(mid for mid, _ in kept[index + 1 :])
        else:
            dropped.extend(mid for mid, _ in kept[index:])
        break
    if not present:
        return InjectionBlock("", (), tuple(dropped), None, 0)
    if len(text) > limit:  # impossible by construction; fail loudly rather than leak budget
        raise RuntimeError(f"injection block of {len(text)} chars exceeds L_max={limit}")
    return InjectionBlock(text, tuple(present), tuple(dropped), truncated_id, chars_cut)
