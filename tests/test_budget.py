import pytest

from tokenworth_agent.core.budget import (BLOCK_HEADER, TRUNCATION_MARK, Budget, BudgetExceeded, TokenLedger,
                          build_injection_block)


def test_table_a1_presets() -> None:
    got = {env: (b.max_output_tokens, b.max_rounds, b.bank_capacity, b.max_memories, b.max_injected_chars, b.per_call_cap)
           for env in ("db", "os", "kg") for b in [Budget.for_env(env)]}
    assert got == {"db": (128, 3, 64, 1, 900, 512), "os": (512, 5, 64, 1, 800, 512), "kg": (128, 15, 64, 1, 4096, 512)}


def test_budget_is_frozen_and_validated() -> None:
    budget = Budget.for_env("db")
    with pytest.raises(Exception):
        budget.max_rounds = 9  # type: ignore[misc]
    with pytest.raises(ValueError, match="max_rounds"):
        budget.replace(max_rounds=0)
    with pytest.raises(ValueError, match="no budget preset"):
        Budget.for_env("web")


def test_ledger_caps_each_call_by_remaining_and_per_call_cap() -> None:
    ledger = TokenLedger(Budget.for_env("os", accounting="per-task"))  # O_max 512, cap 512
    assert ledger.next_max_tokens() == 512
    ledger.charge(500, "execution", 512)
    assert ledger.next_max_tokens() == 12
    ledger.charge(5, "auxiliary", 12)
    assert (ledger.execution_tokens, ledger.auxiliary_tokens, ledger.total, ledger.remaining) == (500, 5, 505, 7)
    ledger.charge(7, "execution", 7)
    assert ledger.exhausted and ledger.next_max_tokens() == 0
    big = TokenLedger(Budget.for_env("os", accounting="per-task").replace(max_output_tokens=2000))
    assert big.next_max_tokens() == 512


def test_ledger_rejects_overspending_backbone() -> None:
    ledger = TokenLedger(Budget.for_env("db"))
    with pytest.raises(BudgetExceeded):
        ledger.charge(129, "execution", 128)
    with pytest.raises(ValueError):
        ledger.charge(1, "thinking", 128)  # type: ignore[arg-type]


def test_block_keeps_k_max_and_fits_l_max() -> None:
    budget = Budget.for_env("db")  # K_max 1, L_max 900
    block = build_injection_block([(3, "short memory"), (4, "another")], budget)
    assert block.memory_ids == (3,) and block.dropped_ids == (4,)
    assert block.text.startswith(BLOCK_HEADER) and block.text.endswith("short memory")
    assert block.truncated_id is None and block.length == len(block.text)


@pytest.mark.parametrize("limit", [200, 450, 900])
def test_block_truncation_is_deterministic_and_within_limit(limit: int) -> None:
    budget = Budget.for_env("db").replace(max_injected_chars=limit, max_memories=2)
    body = "Z" * 2000
    first = build_injection_block([(1, body), (2, "y")], budget)
    second = build_injection_block([(1, body), (2, "y")], budget)
    assert first == second
    assert len(first.text) <= limit and first.text.endswith(TRUNCATION_MARK)
    assert first.truncated_id == 1 and first.dropped_ids == (2,)
    assert first.chars_cut == 2000 - first.text.count("Z")


def test_block_exactly_at_limit_is_not_truncated() -> None:
    budget = Budget.for_env("db").replace(max_injected_chars=300)
    overhead = len(build_injection_block([(1, "a")], budget).text) - 1
    block = build_injection_block([(1, "b" * (300 - overhead))], budget)
    assert block.length == 300 and block.truncated_id is None


def test_block_second_memory_truncated_first_kept_whole() -> None:
    budget = Budget.for_env("kg").replace(max_injected_chars=400, max_memories=3)
    block = build_injection_block([(1, "a" * 100), (2, "b" * 1000), (3, "c")], budget)
    assert block.memory_ids == (1, 2) and block.truncated_id == 2 and block.dropped_ids == (3,)
    assert "a" * 100 in block.text and len(block.text) <= 400


def test_block_with_no_room_injects_nothing() -> None:
    budget = Budget.for_env("db").replace(max_injected_chars=50)
    block = build_injection_block([(1, "memory")], budget)
    assert block.text == "" and block.memory_ids == () and block.dropped_ids == (1,)
    assert build_injection_block([], budget).text == ""
    assert build_injection_block([(1, "m")], budget.replace(max_memories=0)).memory_ids == ()


def test_per_call_accounting_gives_each_call_o_max_and_keeps_the_total() -> None:
    budget = Budget.for_env("db", accounting="per-call")
    ledger = TokenLedger(budget)
    for _ in range(3):
        assert ledger.next_max_tokens() == 128
        ledger.charge(100, "execution", 128)
    assert ledger.total == 300 and not ledger.exhausted
    with pytest.raises(BudgetExceeded):  # each call is still capped at O_max
        ledger.charge(129, "execution", ledger.next_max_tokens())
    assert TokenLedger(Budget.for_env("os", "per-call").replace(max_output_tokens=2000)).next_max_tokens() == 512


def test_accounting_default_and_validation() -> None:
    assert Budget.for_env("db").accounting == "per-call"  # the default: see agent/tokenworth_agent/core/budget.py
    assert Budget.for_env("db", "per-task").as_dict()["accounting"] == "per-task"
    with pytest.raises(ValueError, match="accounting"):
        Budget.for_env("db", "per-round")
