"""One token rule for every backbone (docs/backbones.md, "Token rule"): output tokens are every
token the engine decoded, the end-of-sequence token included; prompt and cached tokens are kept in
records and never charged."""

from __future__ import annotations

from tokenworth_agent.policies.auxiliary import AuxRequest, book
from tokenworth_agent.backbones.base import Generation
from tokenworth_agent.core.budget import Budget, TokenLedger
from tokenworth_agent.experiment.episode import round_entry


def test_round_entries_keep_prompt_and_cached_tokens_where_the_engine_reports_them():
    engine = Generation("Action: Answer", 5, "stop", prompt_tokens=812, cached_tokens=640)
    entry = round_entry(engine, 128, {"kind": "answer"}, "ok")
    assert (entry["tokens"], entry["prompt_tokens"], entry["cached_tokens"]) == (5, 812, 640)
    sim = round_entry(Generation("Action: Answer", 5, "stop"), 128, {"kind": "answer"}, "ok")
    assert "prompt_tokens" not in sim and "cached_tokens" not in sim  # nothing invented


def test_prompt_tokens_are_never_charged():
    ledger = TokenLedger(Budget.for_env("db", "per-task"))
    request = AuxRequest("reflection", ({"role": "user", "content": "x"},))
    _, entry = book(ledger, request, "update", 64, Generation("a lesson", 7, "stop", prompt_tokens=900, cached_tokens=0))
    assert ledger.total == 7 and ledger.auxiliary_tokens == 7
    assert (entry["tokens"], entry["prompt_tokens"], entry["cached_tokens"]) == (7, 900, 0)
