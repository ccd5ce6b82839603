"""Memories a model can copy: a verbatim copier (tests/copy_backbone.py) with each task's own
gold memory injected passes the task, in DB (all 500), OS (real sandbox) and KG (fixture graph)."""

from __future__ import annotations

import pytest

from tokenworth_agent.backbones.base import Generation
from tokenworth_agent.core.budget import EMPTY_BLOCK, Budget, build_injection_block
from tokenworth_agent.benchmarks.kg.tasks import kg_gold_replies as gold_replies
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.benchmarks.kg.env import KGEnvironment
from tokenworth_agent.sandbox import sandbox_unavailable_reason
from tokenworth_agent.benchmarks.kg.sparql import OxigraphEndpoint
from tokenworth_agent.experiment.episode import Episode, answer
from tokenworth_agent.benchmarks.os_env.memory import instance_names
from tokenworth_agent.memory import build_memory, memory_char_limit
from tokenworth_agent.sim.facts import Facts
from tokenworth_bench.copy_replay import replay_task
from tests.copy_backbone import NOTHING, CopyingBackbone, memory_actions
from tests.kg_fixture import REPLAYED_RECORDS, build_fixture_store

needs_sandbox = pytest.mark.skipif(sandbox_unavailable_reason() is not None,
                                   reason=f"OS sandbox unavailable: {sandbox_unavailable_reason()}")


@pytest.mark.parametrize("memory_format, limit", [("compact", None), ("transcript", 100)])
def test_every_db_task_passes_with_its_own_gold_memory_copied(data_dir: str, memory_format: str, limit) -> None:
    tasks = load_tasks("db", data_dir, limit=limit)
    rows = [replay_task("db", task, memory_format, settle=0) for task in tasks]
    failed = [r["index"] for r in rows if not r["whole"]["passed"]]
    assert not failed, [r for r in rows if r["index"] in failed][:3]


def test_memories_shortened_to_l_max_stay_copyable_until_steps_are_lost(data_dir: str) -> None:
    rows = [replay_task("db", task, "compact", settle=0) for task in load_tasks("db", data_dir, limit=120)]
    shortened = [r for r in rows if r["budget"]["cut"]]
    assert all(r["budget"]["memory_chars"] <= memory_char_limit(Budget.for_env("db")) for r in shortened)
    # Dropping observations and shortening the question keeps every action: still copied to a pass.
    assert any(r["budget"]["passed"] for r in shortened)
    lost = [r for r in rows if not r["budget"]["passed"]]
    assert lost and all(r["budget"]["cut"] and r["whole"]["passed"] for r in lost)
    assert all(r["budget"]["memory_chars"] < r["whole"]["memory_chars"] for r in lost)


def test_copier_without_a_memory_replies_nothing_usable() -> None:
    assert memory_actions("", "db") == []
    backbone = CopyingBackbone()

    class Task:
        env = "db"

    [generation] = backbone.generate([[{}, {"content": "instructions only"}]], [128], facts=[Facts(Task(), round=0)])
    assert generation.text == NOTHING


@needs_sandbox
def test_os_tasks_with_user_names_pass_compact_and_fail_abstract(data_dir: str) -> None:
    tasks = load_tasks("os", data_dir, limit=40)
    named = [t for t in tasks if instance_names([t.ground_truth.script])[0]][:3]
    assert len(named) == 3
    for task in named:
        compact = replay_task("os", task, "compact", settle=0.5)
        assert compact["gold_reward"] == 1 and compact["whole"]["passed"], compact
    # The placeholder version (the paper's abstraction) cannot be run as written.
    abstract = replay_task("os", named[0], "abstract", settle=0.5)
    assert abstract["gold_reward"] == 1 and not abstract["whole"]["passed"]


@pytest.mark.parametrize("index", sorted(REPLAYED_RECORDS))
def test_kg_gold_memory_is_copied_to_reward_one_under_labs_parser(data_dir: str, index: int) -> None:
    task = load_tasks("kg", data_dir)[index]
    env = KGEnvironment(OxigraphEndpoint(build_fixture_store()))  # strict parser: LAB's
    budget = Budget.for_env("kg")
    gold = Episode(env, task, EMPTY_BLOCK, None, budget, seed=0)
    for reply in gold_replies(task):
        request = gold.request()
        gold.feed(request, Generation(reply, len(reply.split()), "stop"))
    assert gold.judge() == 1 and gold.status == "completed"
    memory = build_memory("kg", task, gold.turns, 1, budget, status=gold.status)
    assert memory is not None and memory.text.endswith(gold_replies(task)[-1])
    copied = Episode(env, task, build_injection_block([(0, memory.text)], budget), None, budget, seed=0)
    backbone = CopyingBackbone()
    while (request := copied.request()) is not None:
        copied.feed(request, answer(backbone, [request])[0])
    assert copied.judge() == 1 and copied.status == "completed"
    assert backbone.replies == gold_replies(task)


def test_bench_writes_json_and_markdown_and_keeps_other_envs(tmp_path, data_dir: str) -> None:
    import json

    from tokenworth_bench.copy_replay import main

    out = tmp_path / "copy_replay.json"
    earlier = {"env": "db", "memory_format": "compact", "tasks": 1, "gold_passed": 1, "seconds": 0.1,
               "whole": {"passed": 1, "failed": [], "memories_cut": []},
               "budget": {"passed": 1, "failed": [], "memories_cut": []}}
    out.write_text(json.dumps({"db-compact": earlier}))
    assert main(["--env", "kg", "--data-dir", data_dir, "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert set(results) == {"db-compact", "kg-compact"}
    assert results["kg-compact"]["whole"]["passed"] == results["kg-compact"]["tasks"] == len(REPLAYED_RECORDS)
    assert "| kg | compact | 10 | 10 | 10 |" in out.with_suffix(".md").read_text()
