"""TokenWorth+'s policy and what it reads, the memory's action text, the ranking instrument and the research lab."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.memory import Memory, Turn, build_memory
from tokenworth_agent.policies.base import Outcome

DB = Budget.for_env("db")


# ------------------------------------------------------------------ the policy's inputs
@dataclasses.dataclass(frozen=True)
class GoldTask:
    sample_index: int
    query_text: str
    skill_list: tuple[str, ...]
    answer_sql: str
    answer_direct: Any
    env: str = "db"

    @property
    def task_id(self) -> str:
        return f"db-{self.sample_index}"


def _episode(i: int) -> tuple[GoldTask, list[Turn], int]:
    kinds = ("COUNT(*)", "name", "AVG(age)")
    sql = f"SELECT {kinds[i % 3]} FROM t{i % 4} WHERE k = {i}" + (" ORDER BY name" if i % 2 else "")
    task = GoldTask(i, f"Question {i}: how many rows of table t{i % 4} match key {i}?", (f"skill{i % 3}", "select"),
                    sql, [(i,)])
    turns = [Turn(0, f"Action: Operation\n```sql\n{sql}\n```", f"[({i},)]", {"kind": "sql", "sql": sql}),
             Turn(1, f"Action: Answer\nFinal Answer: [({i},)]", "", {"kind": "answer", "answer": f"[({i},)]"})]
    return task, turns, int((i * 7) % 3 != 0)


def _drive(policy: Any, scramble: bool) -> list[dict[str, Any]]:
    logs = []
    for i in range(24):
        task, turns, reward = _episode(i)
        if scramble:  # everything a method must not read, changed; the question and trajectory kept
            task = dataclasses.replace(task, sample_index=1000 + 3 * i, skill_list=("x", f"y{i}"),
                                       answer_sql="DROP TABLE t", answer_direct=[("wrong",)])
        memories = policy.retrieve(task)
        policy.update(task, memories, Outcome(reward, "completed"), turns)
        logs.append(policy.take_log())
    return logs


def test_policy_decisions_ignore_skills_task_ids_and_gold_answers() -> None:
    from tokenworth_agent.policies.registry import make_policy

    floor = {"plus_null_first": 5.0}  # 24 tasks: inject after 5 no-memory outcomes (the default 50 would not)
    real = _drive(make_policy("tokenworth+", "db", DB, seed=2, **floor), scramble=False)
    blind = _drive(make_policy("tokenworth+", "db", DB, seed=2, **floor), scramble=True)
    assert [r["selection"] for r in real] == [b["selection"] for b in blind]
    assert [r["admission"] for r in real] == [b["admission"] for b in blind]
    assert [r["plus"] for r in real] == [b["plus"] for b in blind]
    assert any(r["selection"]["memory_id"] is not None for r in real)  # the run did inject memories


def test_policy_reads_only_question_and_memory_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text the controller hashes is a task's question or a memory's action text; and the
    policy's constructor takes no simulator parameters."""
    import inspect

    from tokenworth_agent.policies import tokenworth_plus
    from tokenworth_agent.policies.registry import make_policy
    from tokenworth_jax import host
    from tokenworth_jax.plus import mode

    seen: list[str] = []
    for module, name in ((host, "featurize"), (mode, "word_vector"), (mode, "action_vector")):
        original = getattr(module, name)  # the recall hashing, and the two features TokenWorth+ declares
        monkeypatch.setattr(module, name, lambda text, *a, _f=original, **k: (seen.append(text), _f(text, *a, **k))[1])
    policy = make_policy("tokenworth+", "db", DB, seed=0)
    allowed = set()
    for i in range(10):
        task, turns, reward = _episode(i)
        allowed.add(task.query_text)
        memory = build_memory("db", task, turns, reward, DB)
        allowed.add(memory.action_text if memory else "")
        policy.update(task, policy.retrieve(task), Outcome(reward, "completed"), turns)
    assert seen and set(seen) <= allowed | {""}
    params = set(inspect.signature(tokenworth_plus.TokenWorthPlusPolicy.__init__).parameters)
    assert params == {"self", "env", "budget", "seed", "overrides"}


# ------------------------------------------------------------------ memory action text
def test_memory_action_text_holds_the_actions_the_text_shows() -> None:
    task, turns, _ = _episode(5)
    memory = build_memory("db", task, turns, 1, DB)
    assert memory.action_text == task.answer_sql and task.answer_sql in memory.text
    old = {k: v for k, v in memory.as_dict().items() if k != "action_text"}
    assert Memory.from_dict(old).action_text == ""  # checkpoints from before the field load


# ------------------------------------------------------------------ the instrument
def test_ranking_instrument_measures_j_harm_and_auc() -> None:
    from tokenworth_bench.ranking import pair_auc, summarise, task_rows
    from tests.fakes import task_record

    assert pair_auc([0.9, 0.1, 0.5], [True, False, False]) == 1.0
    assert pair_auc([0.1, 0.9], [True, False]) == 0.0
    assert pair_auc([0.5, 0.5], [True, False]) == 0.5
    assert pair_auc([1.0, 2.0], [True, True]) is None

    def record(i: int, skills: list[str], injected: int | None, wrote: int | None, cands: list[int]):
        sel = {"candidate_ids": cands, "relevance": [1.0 - 0.1 * k for k in range(len(cands))],
               "scores": [0.1 * k for k in range(len(cands))], "memory_id": injected}
        return task_record(i, 0, skill_list=skills, injected_memory_id=injected, stream={"seed": 0},
                           decision={"selection": sel, "admission": None if wrote is None else {"memory_id": wrote}})

    recs = [record(0, ["a", "b"], None, 0, []), record(1, ["c"], None, 1, [0]),
            record(2, ["a", "b"], 0, None, [1, 0]), record(3, ["a", "b"], 1, None, [1, 0])]
    rows = task_rows(recs)
    assert rows[2]["j"] == 1.0 and not rows[2]["harmful"]
    assert rows[3]["j"] == 0.0 and rows[3]["harmful"]
    assert rows[2]["j_top"] == 0.0 and rows[2]["j_best"] == 1.0  # recall order: memory 1 is the most similar
    summary = summarise(rows)
    assert summary["harmful"] == 0.25 and summary["j_chosen"] == 0.5 and summary["injected"] == 0.5


# ------------------------------------------------------------------ the research lab
def test_lab_runs_the_controller_on_the_simulated_db_stream(data_dir) -> None:
    """Smoke: the lab's runs (the controller's own tw.run with the simulator as reward) give sane
    measures; the lab's reward is the simulator's own (tokenworth_bench.controller.simdb, checked against
    sim.decide elsewhere)."""
    from pathlib import Path

    from tokenworth_bench.rank import lab

    if not (Path(data_dir) / "db_bench").exists():
        pytest.skip(f"DB task data not found under {data_dir}")
    db = lab.Lab("db", 40, [0])
    none, paper = (db.run(0, *lab.CONFIGS[name]) for name in ("no memory", "tokenworth"))
    # 40 tasks: a floor of 10 no-memory outcomes (the default 50 would leave nothing injected)
    plus = db.run(0, True, {**lab.CONFIGS["tokenworth+"][1], "plus_null_first": 10.0})
    assert none["injected"] == 0 and plus["injected"] > 0 and paper["injected"] > 0
    for row in (plus, paper):
        assert 0 <= row["harmful"] <= row["injected"] and 0 <= row["j"] <= 1
        assert row["j_best"] >= row["j_top"] - 1e-9 and row["j_best"] >= row["j"] - 1e-9


def test_lab_names_an_unknown_configuration_instead_of_a_traceback(capsys) -> None:
    from tokenworth_bench.rank import lab

    with pytest.raises(SystemExit) as stop:
        lab.main(["--configs", "tokenworth+,cosine"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "unknown 'cosine'" in err and "tokenworth+, tokenworth, no memory" in err and "--set" in err


def test_guard_trace_maps_a_full_ring_back_to_its_tasks() -> None:
    from tokenworth_bench.plus.guard_trace import window_tasks

    injected = np.array([3, 5, 8, 9, 12, 20, 21])
    assert window_tasks(injected[:2], 2, False, 4).tolist() == [3, 5, -1, -1]
    # 7 pushes into 4 rows: rows 0-2 were overwritten by the 5th-7th pushes, row 3 holds the 4th
    assert window_tasks(injected, 3, True, 4).tolist() == [12, 20, 21, 9]


def test_guard_trace_splits_the_guards_count_and_its_realised_gap_matches_the_no_memory_run(data_dir) -> None:
    """The trace's realised gap is counted over the injected tasks only; it must equal the whole run's
    successes less those of the lab's no-memory run (same coins, so the other tasks agree)."""
    from pathlib import Path

    from tokenworth_bench.plus import guard_trace
    from tokenworth_bench.rank import lab

    if not (Path(data_dir) / "db_bench").exists():
        pytest.skip(f"DB task data not found under {data_dir}")
    db = lab.Lab("db", 60, [0])
    floor = {"plus_null_first": 10.0}  # 60 tasks: inject after 10 no-memory outcomes
    r = guard_trace.trace(db, 0, floor)
    plus, none = db.run(0, True, floor), db.run(0, *lab.CONFIGS["no memory"])
    assert r["injections"] > 0 and r["in_window"] == r["injections"] and r["retired"] == 0.0
    assert r["realised_gap"] == round((plus["sr"] - none["sr"]) * 60 / 100)
    assert r["counted"] == pytest.approx(r["coin_luck"] + r["true_gain"] + r["baseline_error"], abs=1e-6)
    assert 0 < r["p0_injected"] < 1 and 0 < r["p0_stream"] < 1


def test_guard_trace_names_a_bad_override_before_running(data_dir, capsys) -> None:
    from pathlib import Path

    from tokenworth_bench.plus import guard_trace

    if not (Path(data_dir) / "db_bench").exists():
        pytest.skip(f"DB task data not found under {data_dir}")
    for bad, says in (("plus_bogus=1", "unknown hyperparameter"), ("plus_guard_sds=-1", "out of range"),
                      ("plus=0", "plus=0 has none to trace")):
        with pytest.raises(SystemExit) as stop:
            guard_trace.main(["--tasks", "20", "--seeds", "0", "--set", bad])
        assert stop.value.code == 2 and says in capsys.readouterr().err
