"""The simulated backbone: its probability model, its replies in each action format, and
its token accounting. The DB replies are checked against SQLite, not against themselves."""

from __future__ import annotations

import dataclasses
import re
import sqlite3

import numpy as np
import pytest

from tokenworth_agent.backbones.base import BackboneError
from tokenworth_agent.backbones.registry import make_backbone
from tokenworth_agent.benchmarks.kg.tasks import kg_gold_calls as kg_calls
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.sim import Facts, SimBackbone, SimParams, decide, skill_overlap
from tokenworth_agent.benchmarks.db.replies import wrong_sql
from tokenworth_agent.sim.tokens import token_counter

USER = [{"role": "system", "content": "sys"}, {"role": "user", "content": "the task"}]


@pytest.fixture(scope="module")
def streams(data_dir):
    return {env: load_tasks(env, data_dir) for env in ("db", "os", "kg")}


@pytest.fixture(scope="module")
def sim():
    return SimBackbone(seed=0)


def _gen(sim, task, round_index, memory=None, conversation=USER, cap=512, seed=None):
    return sim.generate([conversation], [cap], facts=[Facts(task, seed, round=round_index, memory_skills=memory)])[0]


def _first(tasks, predicate):
    return next(t for t in tasks if predicate(t))


# --- parameters and probability model --------------------------------------------------


def test_params_are_frozen_and_validated():
    params = SimParams()
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.gain = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="p0_ranges"):
        SimParams(p0_ranges={"db": (0.9, 0.1)})
    with pytest.raises(ValueError, match="harm"):
        SimParams(harm=-0.1)


def test_skill_overlap_is_jaccard():
    assert skill_overlap(("a", "b"), ("b", "c")) == pytest.approx(1 / 3)
    assert skill_overlap((), ()) == 0.0
    assert skill_overlap(("a",), ("a",)) == 1.0


def test_no_memory_calibration(streams):
    params = SimParams()
    mean_p = {env: np.mean([decide(params, 0, t, None).p for t in ts]) for env, ts in streams.items()}
    assert 0.48 <= mean_p["db"] <= 0.58  # the no-memory DB success rate should be ~45-55%
    assert 0.50 <= mean_p["os"] <= 0.65
    assert 0.25 <= mean_p["kg"] <= 0.38
    draws = np.mean([decide(params, 0, t, None).success for t in streams["db"]])
    assert 0.45 <= draws <= 0.6


def test_memory_acts_through_skills_with_common_random_numbers(streams):
    params = SimParams()
    tasks = streams["db"]
    rng = np.random.default_rng(1)
    helped = hurt = 0
    for task in tasks:
        base = decide(params, 0, task, None)
        same = decide(params, 0, task, task.skill_list)  # J = 1
        disjoint = decide(params, 0, task, ("no_such_skill",))  # J = 0: harmful
        assert same.p >= base.p and disjoint.p <= base.p
        assert disjoint.harmful and not same.harmful
        # the memory moves p only, so outcomes are monotone in p
        assert (not base.success) or same.success
        assert (not disjoint.success) or base.success
        helped += same.success and not base.success
        hurt += base.success and not disjoint.success
        other = tasks[int(rng.integers(len(tasks)))].skill_list
        assert decide(params, 0, task, other) == decide(params, 0, task, other)
    assert helped > 20 and hurt > 20


def test_same_seed_same_run_other_seed_differs(streams):
    tasks = streams["db"][:60]
    a = [SimBackbone(seed=3).reply(USER, Facts(t, round=0)) for t in tasks]
    b = [SimBackbone(seed=3).reply(USER, Facts(t, round=0)) for t in tasks]
    c = [SimBackbone(seed=4).reply(USER, Facts(t, round=0)) for t in tasks]
    assert a == b
    assert a != c
    # a seed in the facts overrides the backbone's
    fact_seeded = [SimBackbone(seed=0).reply(USER, Facts(t, 4, round=0)) for t in tasks]
    assert fact_seeded == c


# --- DB replies, checked against SQLite ------------------------------------------------


def _sqlite_table(task) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    cols = ", ".join(f'"{c.name}" {"INTEGER" if c.type == "INT" else "TEXT"}' for c in task.table.columns)
    db.execute(f'CREATE TABLE "{task.table.name}" ({cols})')
    marks = ", ".join("?" for _ in task.table.columns)
    db.executemany(f'INSERT INTO "{task.table.name}" VALUES ({marks})', task.table.rows)
    return db


def _sql_of(reply: str) -> str:
    match = re.search(r"Action: Operation\n```sql\n(.*?)\n```", reply, re.S)
    assert match, reply
    return match.group(1)


def test_db_success_replays_gold_sql_and_answers_the_observed_rows(streams, sim):
    checked = 0
    for task in streams["db"]:
        if task.is_write or not decide(sim.params, 0, task, None).success:
            continue
        first = _gen(sim, task, 0)
        assert first.text.startswith("Thought: ")
        assert _sql_of(first.text) == task.answer_sql.strip()
        try:
            rows = _sqlite_table(task).execute(_sql_of(first.text).replace("\n", " ")).fetchall()
        except sqlite3.Error:
            continue  # MySQL-only SQL: the DB environment's job, not the simulator's
        conversation = [*USER, {"role": "assistant", "content": first.text}, {"role": "user", "content": repr(rows)}]
        second = _gen(sim, task, 1, conversation=conversation, cap=100_000)
        assert second.text == f"Action: Answer\nFinal Answer: {rows!r}"
        checked += 1
        if checked == 15:
            break
    assert checked == 15


def test_db_failure_emits_a_wrong_query(streams, sim):
    failures = [t for t in streams["db"] if not decide(sim.params, 0, t, None).success][:40]
    assert failures
    for task in failures:
        assert _sql_of(_gen(sim, task, 0).text) != task.answer_sql.strip()
    perturbed = _first(streams["db"], lambda t: " DESC" in t.answer_sql)
    assert "ASC" in wrong_sql(perturbed, 0) and wrong_sql(perturbed, 0) != perturbed.answer_sql
    write = _first(streams["db"], lambda t: t.answer_sql.startswith("INSERT"))
    assert wrong_sql(write, 0).startswith("SELECT")  # an INSERT cannot be perturbed: look instead


def test_harmful_memory_costs_tokens_and_rounds(streams, sim):
    task = _first(streams["db"], lambda t: not decide(sim.params, 0, t, ("zzz",)).success and not t.is_write)
    plain = _gen(sim, task, 0)
    harmful = _gen(sim, task, 0, memory=("zzz",))
    assert harmful.output_tokens > plain.output_tokens
    obs = [*USER, {"role": "assistant", "content": "x"}, {"role": "user", "content": "[(1,)]"}]
    assert _gen(sim, task, 1, memory=("zzz",), conversation=obs).text.startswith("Action: Operation")
    assert _gen(sim, task, 2, memory=("zzz",), conversation=obs).text.startswith("Action: Answer")
    helpful = _gen(sim, task, 0, memory=task.skill_list)
    assert helpful.output_tokens < plain.output_tokens  # a shorter plan with a good memory


# --- OS and KG replies ------------------------------------------------------------------


def test_os_replies(streams, sim):
    ok = _first(streams["os"], lambda t: decide(sim.params, 0, t, None).success)
    reply = _gen(sim, ok, 0).text
    assert f"Act: bash\n```bash\n{ok.ground_truth.script.strip()}\n```" in reply
    assert _gen(sim, ok, 1).text == "Act: finish"
    bad = _first(streams["os"], lambda t: not decide(sim.params, 0, t, None).success)
    reply = _gen(sim, bad, 0).text
    assert "Act: bash" in reply and bad.ground_truth.script.strip() not in reply
    assert _gen(sim, bad, 1).text == "Act: finish"


def test_kg_gold_path_names_entities_and_answers_the_last_variable(streams, sim):
    task = streams["kg"][0]
    calls = kg_calls(task)
    assert calls[0] == "get_relations(Goat)" and calls[-1] == "intersection(#0, #3)"
    ok = _first(streams["kg"], lambda t: decide(sim.params, 0, t, None).success and len(t.action_list) >= 4)
    replies = [_gen(sim, ok, r).text for r in range(len(ok.action_list) + 1)]
    assert replies[0].endswith("Action: " + kg_calls(ok)[0])
    made = sum(a.split("(")[0] in ("get_neighbors", "intersection", "argmax", "argmin", "count") for a in ok.action_list)
    assert replies[-1] == f"Final Answer: #{made - 1}"
    bad = _first(streams["kg"], lambda t: not decide(sim.params, 0, t, None).success and len(t.action_list) >= 4)
    final = _gen(sim, bad, 10).text
    made = sum(a.split("(")[0] in ("get_neighbors", "intersection", "argmax", "argmin", "count") for a in bad.action_list)
    assert final.startswith("Final Answer: #") and final != f"Final Answer: #{made - 1}"


# --- tokens, caps, stops, errors ----------------------------------------------------------


def test_tokens_are_qwen_tokens():
    counter = token_counter()
    assert counter.encode("Hello world") == [9707, 1879]  # Qwen2.5 ids
    assert counter.count("<|im_end|>") == 6  # typed text, not the control token


def test_cap_truncates_consistently(streams, sim):
    task = streams["db"][1]
    full = _gen(sim, task, 0)
    assert full.finish_reason == "stop"
    assert full.output_tokens == token_counter().count(full.text) + 1  # the token rule: the EOS counts
    capped = _gen(sim, task, 0, cap=7)
    assert capped.finish_reason == "length" and capped.output_tokens == 7
    assert full.text.startswith(capped.text)
    assert token_counter().count(capped.text) == 7


def test_the_eos_token_counts_only_where_it_fits(streams, sim):
    task = streams["db"][1]
    text_tokens = token_counter().count(_gen(sim, task, 0).text)
    exact = _gen(sim, task, 0, cap=text_tokens)  # the whole text fits, its EOS does not: an engine stops by length
    assert (exact.finish_reason, exact.output_tokens) == ("length", text_tokens)
    fits = _gen(sim, task, 0, cap=text_tokens + 1)
    assert (fits.finish_reason, fits.output_tokens, fits.text) == ("stop", text_tokens + 1, exact.text)
    plain = SimBackbone(SimParams(eos_tokens=0))  # the old text-only count, for comparison
    assert _gen(plain, task, 0).output_tokens == text_tokens


def test_stop_strings_cut_the_reply(streams, sim):
    task = streams["db"][1]
    out = sim.generate([USER], [512], stop=["```sql"], facts=[Facts(task, round=0)])[0]
    assert out.text.endswith("Action: Operation\n") and "```" not in out.text
    # the stop string's tokens were decoded (and count); no EOS follows a stop string
    assert out.output_tokens == token_counter().count(out.text + "```sql") and out.finish_reason == "stop"


def test_batches_and_bad_input(streams, sim):
    tasks = streams["os"][:5]
    batch = sim.generate([USER] * 5, [512] * 5, facts=[Facts(t, round=0) for t in tasks])
    assert [g.text for g in batch] == [_gen(sim, t, 0).text for t in tasks]
    with pytest.raises(TypeError, match="facts"):
        sim.generate([USER], [10])
    with pytest.raises(ValueError, match="2 conversations but 1 max_tokens"):
        sim.generate([USER, USER], [10], facts=[Facts(tasks[0], round=0)] * 2)
    with pytest.raises(ValueError, match="2 conversations but 1 facts"):
        sim.generate([USER, USER], [10, 10], facts=[Facts(tasks[0], round=0)])
    with pytest.raises(ValueError, match="at least 1"):
        sim.generate([USER], [0], facts=[Facts(tasks[0], round=0)])
    with pytest.raises(ValueError, match="exactly one of an agent round"):
        Facts(tasks[0])
    with pytest.raises(ValueError, match="exactly one of an agent round"):
        Facts(tasks[0], round=0, aux="reflection")
    with pytest.raises(ValueError, match="round must be >= 0"):
        Facts(tasks[0], round=-1)
    with pytest.raises(BackboneError, match="must be a task record of one of alfworld, bigcodebench, db, kg, os"):
        sim.generate([USER], [10], facts=[Facts("not a task", round=0)])  # type: ignore[arg-type]
    with pytest.raises(BackboneError, match="end with a user turn"):
        db_task = streams["db"][1]
        sim.generate([[{"role": "assistant", "content": "x"}]], [10], facts=[Facts(db_task, round=1)])


def test_registry_builds_the_sim():
    backbone = make_backbone("sim", seed=5)
    assert isinstance(backbone, SimBackbone) and backbone.seed == 5
    with pytest.raises(ValueError, match="unknown backbone"):
        make_backbone("gpt")
    with pytest.raises(ValueError, match="unexpected keyword"):
        make_backbone("sim", temperature=1.0)


def test_the_real_db_environment_judges_the_simulated_replies(streams, sim):
    """Success draws mostly pass the real judge and failure draws fail it (a sample)."""
    from tokenworth_agent.envs.base import conversation
    from tokenworth_agent.benchmarks.db.env import DBEnvironment

    outcomes = {True: [], False: []}
    env = DBEnvironment()
    for task in streams["db"][:80]:
        drawn = decide(sim.params, 0, task, None).success
        env.reset(task)
        turns = conversation(env, task)
        for round_index in range(3):
            reply = sim.generate([turns], [100_000], facts=[Facts(task, round=round_index)])[0]
            step = env.step(reply.text)
            turns = [*turns, {"role": "assistant", "content": reply.text}, {"role": "user", "content": step.observation}]
            if step.done:
                break
        outcomes[drawn].append(env.judge().reward)
        env.close()
    assert len(outcomes[True]) > 20 and len(outcomes[False]) > 20
    assert np.mean(outcomes[True]) >= 0.85  # the rest: MySQL behaviour SQLite cannot replay
    assert np.mean(outcomes[False]) <= 0.10
