"""The runner on fakes (budget rules, records, protocol) plus a small real DB + sim run."""

import json

import pytest

from tokenworth_agent.backbones.base import Generation
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.experiment.runner import comparable, injection_for, run_stream, run_task
from tokenworth_agent.policies.rag import RAGPolicy
from tokenworth_agent.policies.standard import StandardPolicy
from tokenworth_agent.sim.facts import Facts
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks

DB = Budget.for_env("db")
DB_PER_TASK = Budget.for_env("db", accounting="per-task")
RECORD_KEYS = {"task_id", "env", "reward", "status", "rounds", "output_tokens", "execution_tokens", "auxiliary_tokens",
               "injected_memory_id", "injected_length", "time_s", "skill_list", "decision", "method", "index"}


def test_record_fields_and_token_accounting() -> None:
    backbone = FakeBackbone()
    record = run_task(StandardPolicy("db", DB_PER_TASK), FakeDBEnv(), backbone, make_tasks(1)[0], 0, DB_PER_TASK,
                      seed=0)
    assert RECORD_KEYS <= set(record.to_json())
    assert record.rounds == 2 and record.status == "completed"
    assert record.output_tokens == record.execution_tokens > 0
    assert [c["cap"] for c in backbone.calls] == [128, 128 - backbone_tokens(backbone, 0)]
    assert record.auxiliary_tokens == 0 and record.injected_memory_id is None
    assert record.accounting == "per-task"


def test_per_call_accounting_gives_every_call_o_max_and_sums_the_total() -> None:
    backbone = FakeBackbone()
    record = run_task(StandardPolicy("db", DB), FakeDBEnv(), backbone, make_tasks(1)[0], 0, DB, seed=0)
    assert DB.accounting == "per-call" and record.accounting == "per-call"
    assert [c["cap"] for c in backbone.calls] == [128, 128]
    assert record.output_tokens == sum(t["tokens"] for t in record.trajectory) > 0


def backbone_tokens(backbone: FakeBackbone, call: int) -> int:
    # the fake counts whitespace words of its reply
    task = make_tasks(1)[0]
    return backbone._reply(Facts(task, 0, round=call), 10_000).output_tokens


def test_budget_exhaustion_ends_task() -> None:
    # round 0 (a valid query) spends exactly O_max: no call is made for the answer
    first = backbone_tokens(FakeBackbone(), 0)
    tight = DB_PER_TASK.replace(max_output_tokens=first)
    backbone = FakeBackbone()
    record = run_task(StandardPolicy("db", tight), FakeDBEnv(), backbone, make_tasks(1)[0], 0, tight, seed=0)
    assert record.status == "budget_exhausted" and record.output_tokens == first
    assert record.rounds == 1 and len(backbone.calls) == 1 and record.reward == 0
    # a reply cut by the cap is whatever the environment makes of it (here: unparseable)
    cut = run_task(StandardPolicy("db", tight), FakeDBEnv(), FakeBackbone(verbose_words=30), make_tasks(1)[0], 0,
                   tight, seed=0)
    assert cut.finish_reasons == ["length"] and cut.output_tokens == first


def test_round_limit() -> None:
    class Stubborn(FakeBackbone):
        def _reply(self, item, cap):
            return Generation("Action: Operation\n```sql\nSELECT 1\n```", 4, "stop")

    budget = DB.replace(max_rounds=2)
    record = run_task(StandardPolicy("db", budget), FakeDBEnv(), Stubborn(), make_tasks(1)[0], 0, budget, seed=0)
    assert record.status == "round_limit" and record.rounds == 2


def test_env_error_is_recorded_not_raised() -> None:
    class Broken(FakeDBEnv):
        def step(self, reply):
            raise OSError("sandbox died")

    record = run_task(StandardPolicy("db", DB), Broken(), FakeBackbone(), make_tasks(1)[0], 0, DB, seed=0)
    assert record.status == "env_error" and "sandbox died" in record.error and record.reward == 0


def test_memory_injected_into_first_user_turn_with_skills_in_the_facts() -> None:
    tasks = make_tasks(8)
    policy, env, backbone = RAGPolicy("db", DB), FakeDBEnv(), FakeBackbone()
    records = [run_task(policy, env, backbone, t, i, DB, seed=0) for i, t in enumerate(tasks)]
    injected = [r for r in records if r.injected_memory_id is not None]
    assert injected, "RAG never retrieved anything"
    for record in injected:
        calls = [c for c in backbone.calls if c["task"] == record.task_id]
        assert "Experience 1:" in calls[0]["first_user"] and calls[0]["memory_skills"]
        assert record.injected_length <= DB.max_injected_chars
    # the memory's skills come from its source task, not the current one
    source = {m.memory_id: m for m in policy.store.memories}
    skills_of_task = {t.task_id: tuple(t.skill_list) for t in tasks}
    checked = 0
    for record in injected:
        memory = source.get(record.injected_memory_id)
        if memory is not None:  # still in the bank (FIFO may have dropped it since)
            call = next(c for c in backbone.calls if c["task"] == record.task_id)
            assert tuple(call["memory_skills"]) == memory.skills == skills_of_task[memory.source_task_id]
            checked += 1
    assert checked > 0
    assert all(r.decision["chosen_ids"] == r.injected_memory_ids for r in injected)


def test_injection_truncation_is_logged() -> None:
    policy = RAGPolicy("db", DB)
    tasks = make_tasks(3)
    for i, t in enumerate(tasks[:2]):
        run_task(policy, FakeDBEnv(), FakeBackbone(), t, i, DB, seed=0)
    tiny = DB.replace(max_injected_chars=150)
    injected, block, skills = injection_for(policy, tasks[2], tiny)
    if injected:
        assert block.length <= 150 and block.truncated_id == injected[0].memory_id and block.chars_cut > 0


def test_run_stream_is_deterministic_and_seeded(tmp_path) -> None:
    tasks = make_tasks(20)
    a = run_stream("memrl", "db", tasks, FakeBackbone(), DB, 7, tmp_path / "a", env=FakeDBEnv())
    b = run_stream("memrl", "db", tasks, FakeBackbone(), DB, 7, tmp_path / "b", env=FakeDBEnv())
    c = run_stream("memrl", "db", tasks, FakeBackbone(), DB, 8, tmp_path / "c", env=FakeDBEnv())
    assert comparable(a) == comparable(b)
    assert [r.reward for r in a] != [r.reward for r in c] or comparable(a) != comparable(c)
    assert [r.index for r in a] == list(range(20))
    lines = (tmp_path / "a" / "memrl" / "records.jsonl").read_text().splitlines()
    assert [json.loads(x)["task_id"] for x in lines] == [t.task_id for t in tasks]


def test_checkpoint_refuses_a_different_run(tmp_path) -> None:
    tasks = make_tasks(4)
    run_stream("rag", "db", tasks, FakeBackbone(), DB, 0, tmp_path, env=FakeDBEnv(), stop_after=2)
    with pytest.raises(RuntimeError, match="different run"):
        run_stream("rag", "db", tasks, FakeBackbone(), DB, 1, tmp_path, env=FakeDBEnv())


def test_real_db_env_with_sim_backbone_all_methods(tmp_path, data_dir) -> None:
    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.tasks import load_tasks
    from tokenworth_agent.experiment.runner import METHOD_NAMES

    tasks = load_tasks("db", data_dir, limit=25)
    backbone = make_backbone("sim", seed=0)
    for method in METHOD_NAMES:
        records = run_stream(method, "db", tasks, backbone, DB, 0, tmp_path)
        assert len(records) == 25
        for r in records:
            assert DB.allows([t["tokens"] for t in r.trajectory]) and r.rounds <= DB.max_rounds
            assert r.output_tokens == sum(t["tokens"] for t in r.trajectory)
            assert r.injected_length <= DB.max_injected_chars
            assert r.status in {"completed", "round_limit", "budget_exhausted", "invalid_action", "env_error"}
        if method == "standard":
            assert all(r.injected_memory_id is None for r in records)
            assert 0 < sum(r.reward for r in records) < 25
        else:
            assert any(r.injected_memory_id is not None for r in records), method
