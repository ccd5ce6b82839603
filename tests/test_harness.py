"""Harness options: validation, identity, and how they reach environments (instructions, KG)."""

from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.envs.base import conversation, instructions_digest
from tokenworth_agent.envs.registry import make_environment
from tokenworth_agent.benchmarks.kg.ontology import load_kg_vocabulary
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessError, HarnessOptions, harness_from_cli


def test_defaults_are_labs_rules() -> None:
    assert (DEFAULT_HARNESS.memory_from, DEFAULT_HARNESS.memory_format, DEFAULT_HARNESS.kg_parser) == (
        "completed", "compact", "strict")
    assert HarnessOptions().identity("db") == {"memory_from": "completed", "memory_format": "compact",
                                               "instructions_sha256": None}
    assert HarnessOptions().identity("kg")["kg_parser"] == "strict"


@pytest.mark.parametrize("field, value, flag", [("memory_from", "always", "--memory-from"),
                                                ("memory_format", "prose", "--memory-format"),
                                                ("kg_parser", "loose", "--kg-parser")])
def test_unknown_values_name_the_flag(field: str, value: str, flag: str) -> None:
    with pytest.raises(HarnessError, match=f"^{flag} must be one of .*got '{value}'$"):
        harness_from_cli("db", **{field: value})  # a benchmark's own option (KG's) is checked for any run


def test_instructions_file_is_read_hashed_and_used(tmp_path) -> None:
    (tmp_path / "db.txt").write_text("Answer with Action: Operation or Action: Answer.\n")
    options = harness_from_cli("db", instructions=tmp_path)
    text = (tmp_path / "db.txt").read_text()
    assert options.identity("db")["instructions_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    env = make_environment("db", Budget.for_env("db"), harness=options)
    assert env.instructions() == text
    # The memory block and the task go where they always go: after the instructions, then the task turn.
    turns = conversation(env, _first_db_task(), "Here are experiences …")
    assert turns[1]["content"].startswith(text.rstrip()) and turns[1]["content"].rstrip().endswith("experiences …")
    assert turns[3]["content"].startswith(_first_db_task().instruction)
    (tmp_path / "db.txt").write_text("Other words.\n")
    assert options.identity("db")["instructions_sha256"] != hashlib.sha256(text.encode()).hexdigest()


def _first_db_task():
    from tokenworth_agent.tasks import load_tasks
    from tests.conftest import DATA_DIR

    return load_tasks("db", DATA_DIR, limit=1)[0]


def test_instruction_errors_are_one_line(tmp_path) -> None:
    with pytest.raises(HarnessError, match=r"--instructions .*: no os\.txt there"):
        harness_from_cli("os", instructions=tmp_path)
    with pytest.raises(HarnessError, match="not a folder"):
        harness_from_cli("db", instructions=tmp_path / "missing")
    (tmp_path / "db.txt").write_text("  \n")
    with pytest.raises(HarnessError, match="is empty"):
        harness_from_cli("db", instructions=tmp_path)


def write_vocab(folder, relations=("a.b.c",), attributes=("a.b.n",), roles="a a.b.c a.thing\n") -> None:
    folder.mkdir(exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({"relations": list(relations), "attributes": list(attributes)}))
    (folder / "fb_roles").write_text(roles)


def test_kg_vocabulary_is_loaded_checked_and_hashed(tmp_path) -> None:
    write_vocab(tmp_path / "onto")
    vocab = load_kg_vocabulary(str(tmp_path / "onto"))
    assert vocab.relations == {"a.b.c"} and vocab.attributes == {"a.b.n"} and vocab.ranges == {"a.b.c": "a.thing"}
    options = harness_from_cli("kg", kg_vocab=tmp_path / "onto")
    first = options.identity("kg")["kg_vocab_sha256"]
    write_vocab(tmp_path / "onto", relations=("a.b.c", "a.b.d"))
    assert options.identity("kg")["kg_vocab_sha256"] != first
    assert "kg_vocab_sha256" not in options.identity("db")  # DB results do not depend on it


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "fb_roles").unlink(), "no fb_roles there"),
    (lambda f: (f / "vocab.json").write_text("{"), "vocab.json is not JSON"),
    (lambda f: (f / "vocab.json").write_text('{"relations": []}'), "list of strings under 'attributes'"),
    (lambda f: (f / "fb_roles").write_text("only two\n"), "expected 'domain relation range'"),
])
def test_kg_vocabulary_errors_name_the_file(tmp_path, damage, message) -> None:
    write_vocab(tmp_path / "onto")
    damage(tmp_path / "onto")
    with pytest.raises(HarnessError, match=message):
        harness_from_cli("kg", kg_vocab=tmp_path / "onto")
    with pytest.raises(HarnessError, match="not a readable folder"):
        harness_from_cli("kg", kg_vocab=tmp_path / "nowhere")


def test_kg_vocabulary_filters_listings_and_sets_types(tmp_path) -> None:
    from tokenworth_agent.tasks import load_tasks
    from tokenworth_agent.benchmarks.kg.env import KGEnvironment
    from tokenworth_agent.benchmarks.kg.sparql import FreebaseQueries, OxigraphEndpoint
    from tests.conftest import DATA_DIR
    from tests.kg_fixture import build_fixture_store

    write_vocab(tmp_path, relations=("food.cheese_milk_source.cheeses",), attributes=(),
                roles="food.cheese_milk_source food.cheese_milk_source.cheeses food.cheese_variety\n")
    vocab = load_kg_vocabulary(str(tmp_path))
    kb = FreebaseQueries(OxigraphEndpoint(build_fixture_store()), relation_vocabulary=vocab.relations,
                         attribute_vocabulary=vocab.attributes, ranges=vocab.ranges)
    env = KGEnvironment(kb)
    env.reset(load_tasks("kg", DATA_DIR, limit=1)[0])
    assert env.step("Action: get_relations(Goat)").observation.endswith("Observation: [food.cheese_milk_source.cheeses]")
    assert env.step("Action: get_neighbors(Goat, food.cheese_milk_source.cheeses)").observation.endswith(
        "Variable #0, which are instances of food.cheese_variety")


def test_kg_factory_takes_parser_vocabulary_and_instructions(tmp_path, monkeypatch) -> None:
    write_vocab(tmp_path / "onto")
    (tmp_path / "kg.txt").write_text("Use the tools.")
    options = HarnessOptions(instructions=str(tmp_path), options={"kg_parser": "lenient", "kg_vocab": str(tmp_path / "onto")})
    env = make_environment("kg", Budget.for_env("kg"), kg_endpoint="http://127.0.0.1:9/sparql", harness=options)
    assert env.parser.name == "lenient" and env.instructions() == "Use the tools."
    assert env.kb.relation_vocabulary == {"a.b.c"} and env.kb.ranges == {"a.b.c": "a.thing"}


def test_cli_run_uses_the_instructions_and_refuses_to_resume_with_others(tmp_path, data_dir) -> None:
    from tokenworth_agent.cli import app

    words = tmp_path / "words"
    words.mkdir()
    (words / "db.txt").write_text("Work with the MySQL table. Reply with Action: Operation or Action: Answer.")
    out = tmp_path / "run"
    args = ["run", "--methods", "standard,rag", "--limit", "3", "--out", str(out), "--data-dir", data_dir,
            "--no-progress", "--instructions", str(words)]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    record = json.loads((out / "standard" / "records.jsonl").read_text().splitlines()[0])
    assert record["instructions_sha256"] == instructions_digest((words / "db.txt").read_text())
    config = json.loads((out / "config.json").read_text())
    assert config["harness"]["memory_from"] == "completed" and config["harness"]["instructions_sha256"]
    (words / "db.txt").write_text("Different words.")
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "different settings" in again.output and "harness" in again.output


@pytest.mark.parametrize("flags, message", [(["--memory-from", "always"], "--memory-from must be one of"),
                                            (["--instructions", "/nonexistent/words"], "not a folder"),
                                            (["--env", "kg", "--kg-endpoint", "http://127.0.0.1:9/sparql",
                                              "--kg-vocab", "/nonexistent"], "not a readable folder")])
def test_cli_rejects_bad_harness_flags_with_one_line(tmp_path, data_dir, flags, message) -> None:
    from tokenworth_agent.cli import app

    result = CliRunner().invoke(app, ["run", "--methods", "standard", "--limit", "1", "--out", str(tmp_path / "r"),
                                      "--data-dir", data_dir, "--no-progress", *flags])
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "r").exists()
