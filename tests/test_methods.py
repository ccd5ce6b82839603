"""The five model-writing baselines (Mem0, MemSkill, Reflexion, EvoSC, EvoSkill).

Per method: a hand-checkable case of its update rule with scripted model replies, a malformed
reply, the budget skipping its auxiliary call (per-task accounting, O_max spent, through the
real runner and DB environment), and exact resume (state round trip; a stopped-and-resumed
stream equals an uninterrupted one; a SIGKILLed CLI run resumes to the same records).
"""

from __future__ import annotations

import pickle
from typing import Any, Sequence

import pytest

from tokenworth_agent.policies.auxiliary import AuxRequest, drive
from tokenworth_agent.backbones.base import Generation
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.memory import Memory
from tokenworth_agent.policies import aux_text
from tokenworth_agent.policies.base import Outcome
from tokenworth_agent.policies.evosc import EvoSCPolicy
from tokenworth_agent.policies.memskill import MemSkillPolicy
from tokenworth_agent.policies.registry import METHOD_NAMES, POLICIES, make_policy
from tests.fakes import FakeTask
from tests.test_policies import db_trajectory

DB = Budget.for_env("db")
OK, FAIL = Outcome(1, "completed"), Outcome(0, "completed")
NEW_METHODS = ("mem0", "memskill", "reflexion", "evosc", "evoskill")


def task(i: int, text: str, skills: Sequence[str] = ("select",)) -> FakeTask:
    return FakeTask(i, text, tuple(skills), "db")


class Script:
    """Answers auxiliary requests with the given replies in order (None: skipped), recording them."""

    def __init__(self, *replies: str | None) -> None:
        self.replies = list(replies)
        self.requests: list[AuxRequest] = []

    def __call__(self, request: AuxRequest) -> Generation | None:
        self.requests.append(request)
        text = self.replies.pop(0)
        return None if text is None else Generation(text, len(text.split()), "stop")

    @property
    def purposes(self) -> list[str]:
        return [r.purpose for r in self.requests]


def learn(policy, t, outcome: Outcome, *replies: str | None, injected: Sequence[Memory] = ()) -> tuple[Script, dict]:
    script = Script(*replies)
    drive(policy.update_steps(t, list(injected), outcome, db_trajectory()), script)
    assert not script.replies, f"unused replies: {script.replies}"
    return script, policy.take_log()


def seed_bank(policy, *items: tuple[str, Sequence[str]]) -> list[Memory]:
    return [policy.store.add(Memory(text, text, tuple(skills), f"db-{i}")) for i, (text, skills) in enumerate(items)]


# ------------------------------------------------------------------ registry and shared parsing
def test_the_five_are_opt_in_and_listed_in_run_help() -> None:
    from typer.testing import CliRunner

    from tokenworth_agent.cli import app

    assert all(m in POLICIES for m in NEW_METHODS) and not set(NEW_METHODS) & set(METHOD_NAMES)
    assert METHOD_NAMES == ("standard", "rag", "memrl", "memp", "tokenworth")
    shown = " ".join(CliRunner().invoke(app, ["run", "--help"], terminal_width=400).output.split())
    for method in POLICIES.names:
        assert method in shown


def test_operations_parser_tolerates_decoration_and_drops_bad_targets() -> None:
    reply = ("Here you go:\n- **UPDATE [2]:** merged text about orders\n1. insert: a brand new fact here\n"
             "DELETE 9\nDELETE 1\nUPDATE: no target given at all\nnoop")
    ops = aux_text.operations(reply, shown=2)
    assert [(o.kind, o.target) for o in ops] == [("UPDATE", 1), ("ADD", None), ("DELETE", 0), ("NOOP", None)]
    assert aux_text.operations("ADD: ok", 0) == []  # too short to be a memory
    assert [o.kind for o in aux_text.operations("ADD: a long enough fact\nNOOP", 0, allowed=("UPDATE",))] == ["NOOP"]


def test_card_parser_needs_skill_and_how() -> None:
    card = aux_text.card("EDIT 2\nSKILL: Check Null Columns!\nWHEN: a column may be NULL\nHOW: filter with IS NULL "
                         "before counting", shown=2)
    assert card == aux_text.Card("check_null_columns", "a column may be NULL", "filter with IS NULL before counting", 1)
    assert aux_text.card("EDIT 5\nSKILL: x_y\nHOW: do the thing carefully", shown=2).edit is None
    assert aux_text.card("SKILL: only a name") is None and aux_text.card("") is None


# ------------------------------------------------------------------ Reflexion
def test_reflexion_reflects_after_a_failure_and_not_after_a_success() -> None:
    policy = make_policy("reflexion", "db", DB, 0)
    script, log = learn(policy, task(0, "count orders shipped"), OK)
    assert script.requests == [] and policy.bank_size() == 0 and log["write"] is None
    script, log = learn(policy, task(1, "count orders shipped late", ("select", "where")), FAIL,
                        "REFLECTION: I forgot the WHERE clause on the ship date.\n"
                        "REFLECTION: Filter first, then count.")
    assert script.purposes == ["reflexion.reflect"] and log["aux"] == {"reflexion.reflect": "ok"}
    [memory] = policy.store.memories
    assert memory.text == ("Lesson from a failed attempt at a similar task: I forgot the WHERE clause on the ship "
                           "date. Filter first, then count.")
    assert memory.key_text == "count orders shipped late" and memory.skills == ("select", "where")
    assert policy.retrieve(task(2, "count orders shipped early")) == [memory]


def test_reflexion_malformed_reply_writes_nothing() -> None:
    policy = make_policy("reflexion", "db", DB, 0)
    _, log = learn(policy, task(0, "q"), FAIL, "REFLECTION: ok")
    assert policy.bank_size() == 0 and log["aux"] == {"reflexion.reflect": "malformed"}


# ------------------------------------------------------------------ Mem0
def test_mem0_update_replaces_a_near_duplicate_and_delete_removes_a_contradicted_memory() -> None:
    policy = make_policy("mem0", "db", DB, 0)
    old, wrong = seed_bank(policy, ("Count shipped orders with COUNT(*) on the orders table", ("select",)),
                           ("Shipped orders are in the archive table", ("select", "where")))
    policy.store.stats["touched"][:] = [0.0, 0.0]
    script, log = learn(policy, task(5, "how many orders shipped late", ("select", "where")), FAIL,
                        "FACT: Count shipped orders with COUNT(*) filtered by ship date",
                        "UPDATE 1: Count shipped orders with COUNT(*) on orders, filtered by ship date\nDELETE 2",
                        injected=[wrong])
    assert script.purposes == ["mem0.extract", "mem0.update"]
    shown = script.requests[1]
    assert "(used in this task, which failed)" in shown.messages[1]["content"]
    assert [m.memory_id for m in policy.store.memories] == [old.memory_id]  # updated in place, wrong one deleted
    [memory] = policy.store.memories
    assert memory.text == "Count shipped orders with COUNT(*) on orders, filtered by ship date"
    assert memory.skills == ("select", "where") and memory.key_text == memory.text
    assert log["operations"] == [{"op": "UPDATE", "id": old.memory_id}, {"op": "DELETE", "id": wrong.memory_id}]


def test_mem0_adds_into_an_empty_bank_without_an_update_call_and_evicts_the_stalest() -> None:
    policy = make_policy("mem0", "db", DB.replace(bank_capacity=2), 0)
    script, _ = learn(policy, task(0, "orders"), OK, "FACT: first fact about orders\nFACT: second fact about orders")
    assert script.purposes == ["mem0.extract"] and policy.bank_size() == 2
    learn(policy, task(1, "customers"), OK, "FACT: a fact about customers", "ADD: a fact about customers")
    assert [m.text for m in policy.store.memories] == ["second fact about orders", "a fact about customers"]


def test_mem0_malformed_replies_write_nothing() -> None:
    policy = make_policy("mem0", "db", DB, 0)
    _, log = learn(policy, task(0, "q"), OK, "I could not find any facts.")
    assert policy.bank_size() == 0 and log["aux"] == {"mem0.extract": "malformed"}
    seed_bank(policy, ("an existing fact about orders", ("select",)))
    _, log = learn(policy, task(1, "q"), OK, "FACT: another fact about orders", "UPDATE 7: nothing shown as 7")
    assert policy.bank_size() == 1 and log["aux"]["mem0.update"] == "malformed" and log["operations"] == []


# ------------------------------------------------------------------ EvoSkill
CARD = "NEW\nSKILL: filter_before_count\nWHEN: a count has a condition\nHOW: apply WHERE before COUNT(*)."


def test_evoskill_builds_edits_and_retires_skills() -> None:
    policy = make_policy("evoskill", "db", DB, 0)
    script, log = learn(policy, task(0, "count late orders", ("select", "where")), OK)
    assert script.requests == []  # a success proposes nothing
    _, log = learn(policy, task(1, "count late orders", ("select", "where")), FAIL, CARD)
    [skill] = policy.store.memories
    assert skill.text == ("Skill: filter_before_count\nWhen to use: a count has a condition\n"
                          "How: apply WHERE before COUNT(*).")
    assert log["proposal"] == {"new": skill.memory_id, "skill": "filter_before_count", "evicted": None}
    _, log = learn(policy, task(2, "count early orders", ("select", "order_by")), FAIL,
                   "EDIT 1\nSKILL: filter_then_count\nWHEN: counting with a condition\nHOW: WHERE first, then COUNT.")
    [edited] = policy.store.memories
    assert edited.memory_id == skill.memory_id and edited.skills == ("select", "where", "order_by")
    # online validation: 3 uses, 0 wins (rate 1/5) vs. the no-skill tasks' 1 win in 3 (rate 2/5): retired
    policy = make_policy("evoskill", "db", DB, 0)
    [card] = seed_bank(policy, ("Skill: a\nWhen to use: b\nHow: c", ("select",)))
    policy.baseline = [1.0, 3.0]
    for _ in range(2):
        learn(policy, task(9, "q"), FAIL, None, injected=[card])
    assert policy.bank_size() == 1  # 2 uses < min_uses
    _, log = learn(policy, task(9, "q"), FAIL, None, injected=[card])
    assert log["retired"] == [card.memory_id] and policy.bank_size() == 0 and log["aux"] == {
        "evoskill.propose": "skipped"}


def test_evoskill_malformed_card_writes_nothing() -> None:
    policy = make_policy("evoskill", "db", DB, 0)
    _, log = learn(policy, task(0, "q"), FAIL, "SKILL: no_how_line\nWHEN: never")
    assert policy.bank_size() == 0 and log["aux"] == {"evoskill.propose": "malformed"}


# ------------------------------------------------------------------ EvoSC
def test_evosc_contrasts_a_failure_with_a_pooled_success_and_consolidates_when_full() -> None:
    budget = DB.replace(bank_capacity=6)  # pool 2, experiences 4
    policy = EvoSCPolicy("db", budget, 0, pool_size=2)
    script, _ = learn(policy, task(0, "count orders shipped"), FAIL)
    assert script.requests == [] and policy.bank_size() == 0  # nothing to contrast with yet
    script, _ = learn(policy, task(1, "count orders shipped"), OK)
    assert script.requests == [] and [m.source_task_id for m in policy.pool] == ["db-1"]
    script, log = learn(policy, task(2, "count orders shipped late", ("select", "where")), FAIL,
                        "INSIGHT: the failed query forgot the date filter\nINSIGHT: check every condition first")
    assert script.purposes == ["evosc.contrast"] and log["partner"] == "db-1"
    prompt = script.requests[0].messages[1]["content"]
    assert "Successful solution of a similar task:\nQuestion: count orders shipped" in prompt
    assert [m.text for m in policy.store.memories] == ["the failed query forgot the date filter",
                                                       "check every condition first"]
    script, _ = learn(policy, task(3, "count orders shipped early", ("select", "order_by")), OK,
                      "INSIGHT: both solutions count after filtering\nINSIGHT: both verify the row count")
    assert script.purposes == ["evosc.success"] and policy.bank_size() == 4 and len(policy.pool) == 2
    before = [m.memory_id for m in policy.store.memories]
    script, log = learn(policy, task(4, "count orders shipped", ("select", "group_by")), FAIL,
                        "INSIGHT: a new pitfall about grouping",
                        "INSIGHT: filter by every condition before counting and verify")
    assert script.purposes == ["evosc.contrast", "evosc.consolidate"]
    consolidated = log["consolidated"]
    assert consolidated["from"][0] == before[0] and len(consolidated["from"]) == 4
    texts = [m.text for m in policy.store.memories]
    assert texts == ["filter by every condition before counting and verify", "a new pitfall about grouping"]
    assert policy.store.memories[0].skills == ("select", "where", "order_by")


def test_evosc_malformed_consolidation_falls_back_to_fifo() -> None:
    policy = EvoSCPolicy("db", DB.replace(bank_capacity=3), 0, pool_size=1)
    seed_bank(policy, ("oldest experience text", ("select",)), ("newer experience text", ("where",)))
    policy.pool = [Memory("Question: q\nAction: Answer\nFinal Answer: 1", "q", ("select",), "db-9")]
    _, log = learn(policy, task(5, "q"), FAIL, "INSIGHT: a pitfall worth keeping", "nonsense")
    assert log["aux"] == {"evosc.contrast": "ok", "evosc.consolidate": "malformed"}
    assert [m.text for m in policy.store.memories] == ["newer experience text", "a pitfall worth keeping"]


# ------------------------------------------------------------------ MemSkill
def test_memskill_executes_selected_skills_credits_them_and_designs_a_skill() -> None:
    policy = MemSkillPolicy("db", DB, 0, design_every=3, min_cases=2)
    policy.select = lambda _state: [0, 1]  # insert + update, fixed for the hand check
    script, log = learn(policy, task(0, "count orders", ("select",)), FAIL, "INSERT: count after filtering rows")
    request = script.requests[0]
    assert request.hint.allowed == ("ADD", "UPDATE") and "insert (ADD)" in request.messages[1]["content"]
    [memory] = policy.store.memories
    assert policy.authors == {memory.memory_id: ["insert", "update"]} and log["selected"] == ["insert", "update"]
    _, log = learn(policy, task(1, "count orders again"), FAIL, "UPDATE 1: count after filtering rows by date",
                   injected=[memory])
    assert [m.text for m in policy.store.memories] == ["count after filtering rows by date"]
    assert [s["q"] for s in policy.skills[:2]] == [pytest.approx(-0.3)] * 2  # injected into a failure: r = -1
    script, log = learn(policy, task(2, "sum prices"), FAIL, "NOOP",
                        "NEW\nSKILL: record_filters\nWHEN: a query filters rows\nHOW: store the filter that worked.")
    assert script.purposes == ["memskill.execute", "memskill.design"] and log["designed"]["new"] == "record_filters"
    assert policy.skills[-1] == {"name": "record_filters", "op": "ADD", "when": "a query filters rows",
                                 "how": "store the filter that worked.", "q": 0.5, "primitive": False}
    assert policy.cases == [] and log["operations"] == [{"op": "NOOP"}]


def test_memskill_controller_is_seeded_and_malformed_executor_reply_writes_nothing() -> None:
    a, b, c = (make_policy("memskill", "db", DB, s) for s in (1, 1, 2))
    picks = [[p.select(f"task {i}") for i in range(30)] for p in (a, b, c)]
    assert picks[0] == picks[1] and picks[0] != picks[2]
    a.select = lambda _state: [0, 1]
    _, log = learn(a, task(0, "q"), OK, "I think we should remember this")
    assert a.bank_size() == 0 and log["aux"] == {"memskill.execute": "malformed"}


# ------------------------------------------------------------------ through the runner: budget, resume
def _tasks(data_dir: str, n: int):
    from tokenworth_agent.tasks import load_tasks

    return load_tasks("db", data_dir, limit=n)


@pytest.mark.parametrize("method", NEW_METHODS)
def test_the_budget_skips_auxiliary_calls_when_o_max_is_spent(method, data_dir) -> None:
    """Per-task accounting with O_max = 16: the first round spends it all, so every auxiliary call is skipped."""
    from tokenworth_agent.envs.registry import make_environment
    from tokenworth_agent.experiment.runner import run_task
    from tokenworth_agent.sim import SimBackbone

    budget = Budget.for_env("db", "per-task").replace(max_output_tokens=16)
    policy = make_policy(method, "db", budget, 0)
    if method == "evosc":  # give it a contrast partner, so that a failure asks for a contrast
        tasks = _tasks(data_dir, 1)
        policy.pool = [Memory("Question: q\nAction: Answer\nFinal Answer: [(1,)]", tasks[0].query_text,
                              tuple(tasks[0].skill_list), "db-x")]
    env = make_environment("db", budget)
    try:
        records = [run_task(policy, env, SimBackbone(seed=0), t, i, budget, 0)
                   for i, t in enumerate(_tasks(data_dir, 3))]
    finally:
        env.close()
    calls = [c for r in records for c in r.aux_calls]
    assert calls, "the method asked for no auxiliary call"
    for record in records:
        assert record.reward == 0 and record.output_tokens == record.execution_tokens == 16
        assert record.auxiliary_tokens == 0
    for call in calls:
        assert call["skipped"] and call["tokens"] == 0 and call["max_tokens"] == 0 and call["reply"] is None
        assert records[0].decision["aux"].get(call["purpose"], "skipped") == "skipped"
    assert policy.bank_size() == 0


@pytest.mark.parametrize("method", NEW_METHODS)
def test_state_round_trip_and_stopped_stream_resume_exactly(method, tmp_path, data_dir) -> None:
    from tokenworth_agent.storage.checkpoint import load_checkpoint
    from tokenworth_agent.experiment.runner import comparable, run_stream
    from tokenworth_agent.sim import SimBackbone

    tasks = _tasks(data_dir, 24)
    budget = Budget.for_env("db")
    reference = run_stream(method, "db", tasks, SimBackbone(seed=2), budget, 2, tmp_path / "ref")
    assert sum(r.auxiliary_tokens for r in reference) > 0
    out = tmp_path / "stopped"
    for stop in (7, 9):  # two stops, then the rest
        run_stream(method, "db", tasks, SimBackbone(seed=2), budget, 2, out, stop_after=stop)
    state = load_checkpoint(out / method / "checkpoint.pkl")["policy"]
    restored = make_policy(method, "db", budget, 2)
    restored.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert restored.state_dict() == state
    resumed = run_stream(method, "db", tasks, SimBackbone(seed=2), budget, 2, out)
    assert comparable(resumed) == comparable(reference)


def test_sigkill_then_resume_matches_uninterrupted(tmp_path, data_dir) -> None:
    """The killed runs are real CLI processes; the resume that finishes the folder runs in this process through
    the CLI's own app (``run_here``), which saves a fresh interpreter's imports."""
    import os

    from tokenworth_agent.results.record import read_records
    from tokenworth_agent.experiment.runner import comparable, run_stream
    from tokenworth_agent.sim import SimBackbone
    from tests.test_resume import run_and_kill
    from tests.cli_here import run_here

    limit = 30
    cmd = [__import__("sys").executable, "-m", "tokenworth_agent.cli", "run", "--env", "db", "--methods", ",".join(NEW_METHODS),
           "--limit", str(limit), "--seed", "3", "--out", str(tmp_path / "killed"), "--data-dir", data_dir,
           "--no-progress"]
    for method, at in (("mem0", 11), ("memskill", 5), ("reflexion", 17), ("evosc", 23), ("evoskill", 8)):
        run_and_kill(cmd, tmp_path / "killed" / method / "records.jsonl", at)
    run_here(cmd, dict(os.environ))  # the resume no kill lands in, in this process (it asserts exit status 0)
    tasks = _tasks(data_dir, limit)
    for method in NEW_METHODS:
        reference = run_stream(method, "db", tasks, SimBackbone(seed=3), Budget.for_env("db"), 3, tmp_path / "ref")
        resumed = read_records(tmp_path / "killed" / method / "records.jsonl")
        assert [r.task_id for r in resumed] == [t.task_id for t in tasks]
        assert comparable(resumed) == comparable(reference), method


# ------------------------------------------------------------------ the simulated backbone's auxiliary replies
def _sim_reply(task: Any, purpose: str, hint: Any, cap: int = 128) -> Generation:
    from tokenworth_agent.sim import Facts, SimBackbone

    [generation] = SimBackbone().generate([[{"role": "user", "content": "x"}]], [cap],
                                          facts=[Facts(task, 0, aux=purpose, hint=hint)])
    return generation


def test_sim_answers_auxiliary_forms_in_the_grammar_the_parsers_accept(data_dir) -> None:
    from tokenworth_agent.sim import AuxHint

    [t] = _tasks(data_dir, 1)
    skills = tuple(t.skill_list)
    notes = _sim_reply(t, "reflexion.reflect", AuxHint("notes", label="REFLECTION"))
    lines = aux_text.labelled(notes.text, "REFLECTION")
    assert 1 <= len(lines) <= 2 and all(t.skill_list[0].replace("_", " ") in notes.text for _ in lines)
    ops = _sim_reply(t, "mem0.update", AuxHint("operations", failed=True, injected=(0,),
                                               candidates=(skills, ("other_skill",)), source_skills=skills))
    assert [(o.kind, o.target) for o in aux_text.operations(ops.text, 2)] == [("DELETE", 0), ("ADD", None)]
    ops = _sim_reply(t, "mem0.update", AuxHint("operations", candidates=(("other_skill",), skills),
                                               source_skills=skills))
    assert [(o.kind, o.target) for o in aux_text.operations(ops.text, 2)] == [("UPDATE", 1)]
    card = aux_text.card(_sim_reply(t, "evoskill.propose", AuxHint("card")).text)
    assert card is not None and card.edit is None and t.skill_list[0] in card.name
    short = _sim_reply(t, "evoskill.propose", AuxHint("card"), cap=8)
    assert short.output_tokens == 8 and short.finish_reason == "length" and aux_text.card(short.text) is None
    with pytest.raises(Exception, match="reply form"):
        _sim_reply(t, "x", AuxHint("poem"))
    with pytest.raises(Exception, match="carries no AuxHint"):
        _sim_reply(t, "x", None)


def test_methods_table_reports_mean_and_std_over_seeds(tmp_path) -> None:
    import json

    from tokenworth_bench.methods_table import main

    def summary(folder, sr_std, sr_mem0, aux):
        folder.mkdir()
        rows = [{"method": "standard", "tasks": 4, "sr": sr_std, "output_tok": 100.0, "delta_tok": 0.0,
                 "auxiliary_tok": 0.0},
                {"method": "mem0", "tasks": 4, "sr": sr_mem0, "output_tok": 100.0 + aux, "delta_tok": aux / 100.0,
                 "auxiliary_tok": aux}]
        (folder / "summary.json").write_text(json.dumps(rows))

    summary(tmp_path / "s0", 40.0, 50.0, 20.0)
    summary(tmp_path / "s1", 60.0, 50.0, 40.0)
    results = main(["--run", f"db={tmp_path / 's0'}", "--run", f"db={tmp_path / 's1'}", "--out", str(tmp_path / "t")])
    standard, mem0 = results["db"]
    assert standard["sr"] == (50.0, 10.0) and mem0["sr"] == (50.0, 0.0) and mem0["auxiliary_tok"] == (30.0, 10.0)
    table = (tmp_path / "t" / "table.md").read_text()
    assert "| mem0 | 2 | 50.0 ± 0.0 | 130.0 ± 10.0 | +30.0% ± 10.0 | 30.0 ± 10.0 |" in table
    with pytest.raises(SystemExit):
        main(["--run", f"db={tmp_path / 'missing'}", "--out", str(tmp_path / "t")])
