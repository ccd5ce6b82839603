"""The KG reply parsers: every row of docs/kg.md's case table (LAB = strict, and lenient)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyoxigraph as ox
import pytest

from tokenworth_agent.benchmarks.kg.tasks import KGTask
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.benchmarks.kg.env import KGEnvironment
from tokenworth_agent.benchmarks.kg.parsers import LENIENT, STRICT, reply_parser, split_strict, variable_strict
from tokenworth_agent.benchmarks.kg.sparql import OxigraphEndpoint
from tests.kg_fixture import build_fixture_store

DOC = Path(__file__).resolve().parent.parent / "docs" / "kg.md"
_CELL = re.compile(r"`((?:[^`]|``)*)`")
_CALL = re.compile(r"call (\w+) (\[.*\]) → (runs|error)")


def case_table() -> list[tuple[str, str, str]]:
    """(reply, strict outcome, lenient outcome) for each row between the table's markers."""
    text = DOC.read_text(encoding="utf-8")
    body = text[text.index("<!-- parser-cases:start -->"):text.index("<!-- parser-cases:end -->")]
    rows = []
    for line in body.splitlines():
        cells = _CELL.findall(line)
        if line.startswith("| `") and len(cells) == 3:
            reply, strict, lenient = cells
            rows.append((reply.replace("\\n", "\n"), strict, lenient))
    return rows


CASES = case_table()


@pytest.fixture(scope="module")
def task(data_dir: str) -> KGTask:
    return load_tasks("kg", data_dir, limit=1)[0]  # type: ignore[return-value]


@pytest.fixture(scope="module")
def store() -> ox.Store:
    return build_fixture_store()


def test_the_table_is_there_and_holds_the_differences_the_issue_names() -> None:
    replies = [reply for reply, _, _ in CASES]
    assert len(CASES) >= 20
    for reply in ("Action:get_relations(Goat)", "final answer: #3", "FINAL ANSWER: #3", "Action: get_relations(Goat",
                  'Action: get_relations("Goat")'):
        assert reply in replies
    assert sum(strict != lenient for _, strict, lenient in CASES) >= 10


@pytest.mark.parametrize("parser_name", ["strict", "lenient"])
@pytest.mark.parametrize("reply, strict, lenient", CASES, ids=[f"row{i}" for i in range(len(CASES))])
def test_case_table_row(store: ox.Store, task: KGTask, parser_name: str, reply: str, strict: str, lenient: str) -> None:
    expected = strict if parser_name == "strict" else lenient
    parser = reply_parser(parser_name)
    parsed = parser.parse(reply)
    env = KGEnvironment(OxigraphEndpoint(store), parser=parser_name)
    env.reset(task)
    result = env.step(reply)
    if expected == "invalid":
        assert parsed.kind == "invalid"
        assert result.done and result.status == "invalid_action"
    elif expected.startswith("answer #"):
        assert parsed.kind == "answer" and parsed.answer_index == int(expected.split("#")[1])
        assert result.action == {"kind": "answer", "variable": parsed.answer_index}
    else:
        match = _CALL.fullmatch(expected)
        assert match is not None, f"unreadable table cell {expected!r}"
        tool, arguments, effect = match.group(1), json.loads(match.group(2)), match.group(3)
        assert parsed.kind == "action" and parsed.tool == tool
        assert parser.arguments(parsed.argument_text or "", list(task.entity_dict)) == arguments
        assert not result.done
        assert ("executes successfully" in result.observation) is (effect == "runs"), result.observation


def test_environment_defaults_to_labs_parser(store: ox.Store) -> None:
    assert KGEnvironment(OxigraphEndpoint(store)).parser is STRICT
    assert KGEnvironment(OxigraphEndpoint(store), parser="lenient").parser is LENIENT
    with pytest.raises(ValueError, match="unknown KG parser 'loose'"):
        KGEnvironment(OxigraphEndpoint(store), parser="loose")


def test_strict_split_keeps_comma_names_and_strips_nothing_else() -> None:
    names = ["Washington, D.C.", "Goat"]
    assert split_strict("Washington, D.C., location.location.contains", names) == [
        "Washington, D.C.", "location.location.contains"]
    assert split_strict("#0 ,  #1", names) == ["#0", "#1"]
    assert split_strict(" 'Goat' ", names) == [" 'Goat' "]
    assert split_strict("", names) == [] and split_strict(", a", names) == ["a"]


@pytest.mark.parametrize("text, index", [("#3", 3), ("var #3", 3), ("var#3", 3), ("VARIABLE #3", 3),
                                         ("variable#12", 12), ("Goat", None), ("m.03fwl", None)])
def test_strict_variable_prefixes(text: str, index: int | None) -> None:
    assert variable_strict(text) == index


def test_malformed_variable_is_an_error_the_agent_sees(store: ox.Store, task: KGTask) -> None:
    env = KGEnvironment(OxigraphEndpoint(store))
    env.reset(task)
    result = env.step("Action: count(#x)")
    assert not result.done and "cannot read a variable number from '#x'" in result.observation
