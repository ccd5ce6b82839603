"""Memory construction and the five policies, on small fakes (no backbone, no real env)."""

import numpy as np
import pytest

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.benchmarks.os_env.memory import abstract_bash, instance_names
from tokenworth_agent.memory import Turn, build_memory, memory_char_limit
from tokenworth_agent.policies.base import Outcome
from tokenworth_agent.policies.memp import MemPPolicy
from tokenworth_agent.policies.memrl import MemRLPolicy, zscore
from tokenworth_agent.policies.rag import RAGPolicy
from tokenworth_agent.policies.standard import StandardPolicy
from tests.fakes import FakeTask

DB = Budget.for_env("db")
OK = Outcome(1, "completed")
FAIL = Outcome(0, "completed")


def db_trajectory(sql: str = "SELECT name FROM t WHERE age > 3") -> list[Turn]:
    return [
        Turn(0, "Action: Operation\n```sql\nSELEC name\n```", "ERROR 1064 (42000): near SELEC", {"kind": "sql", "sql": "SELEC name"}),
        Turn(1, f"Action: Operation\n```sql\n{sql}\n```", "[('alice',), ('bob',)]" + " " * 3 + "x" * 400, {"kind": "sql", "sql": sql}),
        Turn(2, "Action: Answer\nFinal Answer: [('alice',), ('bob',)]", "", {"kind": "answer", "answer": "[('alice',), ('bob',)]"}),
    ]


def task(i: int, text: str, skills=("select",), env: str = "db") -> FakeTask:
    return FakeTask(i, text, tuple(skills), env)


# ------------------------------------------------------------------ memory construction
def test_db_memory_is_compact_demo_without_invalid_actions() -> None:
    t = task(0, "Which names have age over 3?", ("select", "where"))
    memory = build_memory("db", t, db_trajectory(), 1, DB)
    assert memory is not None and memory.skills == ("select", "where") and memory.key_text == t.query_text
    assert "SELEC name" not in memory.text and "ERROR" not in memory.text
    assert "SELECT name FROM t WHERE age > 3" in memory.text and "Final Answer: [('alice',), ('bob',)]" in memory.text
    assert "x" * 250 not in memory.text  # the observation was truncated
    assert memory.text.startswith("Question: Which names")


def test_failed_task_never_writes_and_reference_never_read() -> None:
    class Trap(FakeTask):
        @property
        def answer_sql(self):  # pragma: no cover - must never be touched
            raise AssertionError("memory construction read the reference answer")

    t = Trap(0, "q?", ("select",), "db")
    assert build_memory("db", t, db_trajectory(), 0, DB) is None
    assert build_memory("db", t, db_trajectory(), 1, DB) is not None


def test_memory_text_capped_to_fit_one_block() -> None:
    turns = [Turn(i, "", "[(1,)]", {"kind": "sql", "sql": f"SELECT {'c' * 80} FROM t{i}"}) for i in range(30)]
    memory = build_memory("db", task(0, "long"), turns, 1, DB)
    assert memory is not None and len(memory.text) <= memory_char_limit(DB)


def test_abstract_os_memory_abstracts_users_paths_and_pids() -> None:
    script = ("useradd -m alice && usermod -aG devs alice\nchown alice:devs /home/alice/report.txt\n"
              "kill -9 43125; cat /proc/43125/status")
    turns = [Turn(0, f"Act: bash\n```bash\n{script}\n```", "done", {"kind": "bash", "script": script}),
             Turn(1, "Act: finish", "", {"kind": "finish"})]
    t = task(0, "Create user alice in group devs and give her /home/alice/report.txt", ("useradd",), "os")
    memory = build_memory("os", t, turns, 1, Budget.for_env("os"), memory_format="abstract")
    assert memory is not None
    assert "alice" not in memory.text and "43125" not in memory.text and "devs" not in memory.text
    assert "useradd -m <user>" in memory.text and "/home/<user>/report.txt" in memory.text
    assert "kill -9 <pid>" in memory.text and "/proc/<pid>/status" in memory.text
    assert memory.text.rstrip().endswith("Act: finish")


def test_instance_names_ignores_root_and_keeps_longest_match() -> None:
    users, groups = instance_names(["useradd bob; useradd bobby; chown root:staff /x"])
    assert users == {"bob", "bobby"} and groups == {"staff"}
    assert abstract_bash("echo bobby bob", users, groups) == "echo <user> <user>"


def test_kg_memory_keeps_calls_and_truncated_observations() -> None:
    turns = [
        Turn(0, "Action: get_relations(Barack Obama)", "get_relations(Barack Obama) executes successfully. "
             "Observation: [" + ", ".join(f"rel.{i}" for i in range(200)) + "]",
             {"kind": "tool", "tool": "get_relations", "call": "get_relations(Barack Obama)"}),
        Turn(1, "Action: get_neighbors(Barack Obama, rel.3)", "get_neighbors(Barack Obama, rel.3) executes "
             "successfully. Observation: Variable #0, which are instances of a.b",
             {"kind": "tool", "tool": "get_neighbors", "call": "get_neighbors(Barack Obama, rel.3)"}),
        Turn(2, "Action: count(#7)", "Error in executing 'count(#7)'. Error: Variable #7 is not found",
             {"kind": "tool", "tool": "count", "call": "count(#7)"}),
        Turn(3, "Final Answer: #0", "Final answer: variable #0.", {"kind": "answer", "variable": 0}),
    ]
    memory = build_memory("kg", task(0, "who?", env="kg"), turns, 1, Budget.for_env("kg"))
    assert memory is not None and "Action: get_relations(Barack Obama)" in memory.text
    assert "rel.150" not in memory.text and memory.text.endswith("Final Answer: #0")
    assert "count(#7)" not in memory.text  # a failed call made no variable: left out


# ------------------------------------------------------------------ copyable memories, LAB's success rule
def os_turns(*scripts: str) -> list[Turn]:
    turns = [Turn(i, f"Act: bash\n```bash\n{s}\n```", "The output of the OS is empty.", {"kind": "bash", "script": s})
             for i, s in enumerate(scripts)]
    return turns + [Turn(len(scripts), "Act: finish", "Task finished.", {"kind": "finish"})]


def test_compact_os_memory_is_what_the_os_parser_runs() -> None:
    from tokenworth_agent.benchmarks.os_env.env import parse_action

    memory = build_memory("os", task(0, "Create alice", env="os"), os_turns("useradd -m alice", "passwd -d alice"), 1,
                          Budget.for_env("os"))
    assert memory is not None
    blocks = memory.text.split("\nAct: ")[1:]
    assert [parse_action("Act: " + b).as_dict() for b in blocks] == [
        {"kind": "bash", "script": "useradd -m alice"}, {"kind": "bash", "script": "passwd -d alice"},
        {"kind": "finish"}]
    assert memory.text.endswith("Act: finish") and "<user>" not in memory.text


def test_compact_db_memory_actions_parse_as_the_db_parser_reads_them() -> None:
    from tokenworth_agent.benchmarks.db.env import parse_action

    memory = build_memory("db", task(0, "names?"), db_trajectory(), 1, DB)
    assert memory is not None
    parts = memory.text.split("\nAction: ")[1:]
    parsed = [parse_action("\nAction: " + p.split("\nObservation:")[0]) for p in parts]
    assert parsed == [{"kind": "sql", "sql": "SELECT name FROM t WHERE age > 3"},
                      {"kind": "answer", "answer": "[('alice',), ('bob',)]"}]


@pytest.mark.parametrize("status, memory_from, writes", [
    ("completed", "completed", True), ("round_limit", "completed", False), ("invalid_action", "completed", False),
    ("round_limit", "reward", True), ("invalid_action", "reward", True)])
def test_memory_needs_a_completed_episode_unless_memory_from_reward(status, memory_from, writes) -> None:
    memory = build_memory("db", task(0, "q?"), db_trajectory(), 1, DB, status=status, memory_from=memory_from)
    assert (memory is not None) is writes
    assert build_memory("db", task(0, "q?"), db_trajectory(), 0, DB, status="completed", memory_from=memory_from) is None


def test_policy_candidate_applies_the_runs_harness_options() -> None:
    from tokenworth_agent.core.harness import HarnessOptions

    policy = RAGPolicy("db", DB)
    assert policy.candidate(task(0, "q?"), Outcome(1, "round_limit"), db_trajectory()) is None  # LAB's rule by default
    policy.harness = HarnessOptions(memory_from="reward", memory_format="transcript")
    memory = policy.candidate(task(0, "q?"), Outcome(1, "round_limit"), db_trajectory())
    assert memory is not None and memory.text.startswith("Question: q?\nassistant: Action: Operation")


def test_transcript_holds_raw_replies_and_the_observations_sent() -> None:
    turns = db_trajectory()
    memory = build_memory("db", task(0, "q?"), turns, 1, DB, memory_format="transcript")
    assert memory is not None
    lines = memory.text
    assert "assistant: Action: Operation\n```sql\nSELEC name\n```\nuser: ERROR 1064" in lines  # invalid kept, raw
    assert lines.endswith("assistant: Action: Answer\nFinal Answer: [('alice',), ('bob',)]")  # last reply, no obs


@pytest.mark.parametrize("memory_format", ["compact", "transcript"])
def test_long_memories_stay_within_l_max_and_are_cut_between_steps(memory_format) -> None:
    scripts = [f"echo step{i} " + "x" * 150 for i in range(8)]
    os_budget = Budget.for_env("os")
    memory = build_memory("os", task(0, "Q " * 200, env="os"), os_turns(*scripts), 1, os_budget,
                          memory_format=memory_format)
    assert memory is not None and len(memory.text) <= memory_char_limit(os_budget)
    kept = [s for s in scripts if s in memory.text]
    assert kept == scripts[: len(kept)] and 0 < len(kept) < len(scripts)  # leading steps, each whole
    assert memory.text.endswith("step(s) cut to fit]")


def test_observations_and_question_go_before_any_action_is_cut() -> None:
    turns = [Turn(0, "", "[" + "(1,), " * 300 + "]", {"kind": "sql", "sql": "SELECT a FROM t"}),
             Turn(1, "", "", {"kind": "answer", "answer": "[" + "(1,), " * 100 + "]"})]
    memory = build_memory("db", task(0, "why? " * 200), turns, 1, DB)
    assert memory is not None and len(memory.text) <= memory_char_limit(DB)
    assert "Observation:" not in memory.text and "Action: Operation\n```sql\nSELECT a FROM t\n```" in memory.text
    assert memory.text.endswith("Final Answer: [" + "(1,), " * 99 + "(1,), ]")
    assert memory.text.startswith("Question: why?") and "why? " * 100 not in memory.text


# ------------------------------------------------------------------ policies
def write(policy, i: int, text: str, skills=("select",)) -> None:
    policy.retrieve(task(i, text, skills))
    policy.update(task(i, text, skills), [], OK, db_trajectory(f"SELECT {text.split()[0]} FROM t"))
    policy.take_log()


def test_standard_never_retrieves() -> None:
    policy = StandardPolicy("db", DB)
    write(policy, 0, "anything")
    assert policy.retrieve(task(1, "anything")) == [] and policy.bank_size() == 0


def test_rag_bm25_retrieves_lexical_match_and_fifo_evicts() -> None:
    policy = RAGPolicy("db", DB.replace(bank_capacity=3))
    write(policy, 0, "salary of engineers in department")
    write(policy, 1, "count orders shipped yesterday")
    write(policy, 2, "average rating per movie genre")
    got = policy.retrieve(task(3, "how many orders were shipped"))
    assert [m.source_task_id for m in got] == ["db-1"]
    policy.take_log()
    policy.update(task(3, "how many orders were shipped"), got, FAIL, db_trajectory())
    assert policy.take_log()["write"] is None and policy.bank_size() == 3
    write(policy, 4, "delete stale sessions")
    assert [m.source_task_id for m in policy.store.memories] == ["db-1", "db-2", "db-4"]  # db-0 evicted first
    assert policy.retrieve(task(5, "zebra xylophone")) == []  # no shared term: nothing


def test_memrl_q_update_and_selection_score() -> None:
    policy = MemRLPolicy("db", DB, seed=1, epsilon=0.0, sim_threshold=-1.0)
    write(policy, 0, "count orders shipped yesterday")
    write(policy, 1, "count orders shipped last week")
    got = policy.retrieve(task(2, "count orders shipped yesterday"))
    log = policy.take_log()
    assert len(got) == 1 and log["explore"] is False
    expected = 0.5 * zscore(np.asarray(log["sims"])) + 0.5 * np.clip(zscore(np.asarray(log["q"])), -3, 3)
    np.testing.assert_allclose(log["scores"], expected, atol=1e-6)
    chosen = got[0].memory_id
    policy.update(task(2, "count orders shipped yesterday"), got, FAIL, [])
    i = policy.store.index_of(chosen)
    assert policy.store.stats["q"][i] == pytest.approx(0.3 * (-1.0 - 0.0))
    policy.update(task(3, "x"), got, OK, [])
    assert policy.store.stats["q"][i] == pytest.approx(-0.3 + 0.3 * (1.0 + 0.3))
    # Q now separates: with equal similarity the higher-Q memory wins
    other = 1 - i
    assert policy.store.stats["q"][other] == 0.0


def test_memrl_threshold_and_seeded_epsilon() -> None:
    strict = MemRLPolicy("db", DB, sim_threshold=0.99)
    write(strict, 0, "count orders shipped yesterday")
    assert strict.retrieve(task(1, "average salary by department")) == []

    def picks(seed: int) -> list:
        policy = MemRLPolicy("db", DB, seed=seed, epsilon=0.5, sim_threshold=-1.0)
        for i, text in enumerate(["alpha orders", "beta orders", "gamma orders", "delta orders"]):
            write(policy, i, text)
        out = []
        for j in range(20):
            out.append((policy.retrieve(task(10 + j, "orders"))[0].memory_id, policy.take_log()["explore"]))
        return out

    assert picks(3) == picks(3)
    assert picks(3) != picks(4)
    assert any(e for _, e in picks(3)) and not all(e for _, e in picks(3))


def test_memrl_capacity_evicts_lowest_q() -> None:
    policy = MemRLPolicy("db", DB.replace(bank_capacity=2), epsilon=0.0, sim_threshold=-1.0)
    write(policy, 0, "first memory text")
    write(policy, 1, "second memory text")
    policy.store.stats["q"][:] = [0.5, -0.5]
    write(policy, 2, "third memory text")
    assert [m.source_task_id for m in policy.store.memories] == ["db-0", "db-2"]


def test_memp_deletes_unreliable_memories_and_evicts_worst() -> None:
    policy = MemPPolicy("db", DB.replace(bank_capacity=2))
    write(policy, 0, "count orders shipped")
    [memory] = policy.retrieve(task(1, "count orders shipped"))
    for outcome in (OK, FAIL):
        policy.update(task(1, "q"), [memory], outcome, [])
    assert policy.bank_size() == 1  # hit 2 < 3: kept
    policy.update(task(1, "q"), [memory], FAIL, [])  # hit 3, success 1/3 < 0.5
    assert policy.bank_size() == 0 and policy.take_log()["deleted"] == [memory.memory_id]
    write(policy, 2, "alpha")
    write(policy, 3, "beta")
    policy.store.stats["hit"][:] = [2, 2]
    policy.store.stats["success"][:] = [2, 1]
    write(policy, 4, "gamma")
    assert [m.source_task_id for m in policy.store.memories] == ["db-2", "db-4"]


@pytest.mark.parametrize("cls", [RAGPolicy, MemRLPolicy, MemPPolicy])
def test_state_dict_round_trip_replays_identically(cls) -> None:
    def drive(policy, tasks):
        out = []
        for i, text in tasks:
            got = policy.retrieve(task(i, text))
            policy.update(task(i, text), got, OK if i % 3 else FAIL, db_trajectory(f"SELECT {i}"))
            out.append(policy.take_log())
        return out

    stream = [(i, f"orders shipped {['today', 'late', 'early'][i % 3]} batch {i % 4}") for i in range(12)]
    a = cls("db", DB, seed=5)
    drive(a, stream[:6])
    b = cls("db", DB, seed=5)
    b.load_state_dict(a.state_dict())
    assert drive(a, stream[6:]) == drive(b, stream[6:])


def test_tokenworth_policy_selects_offers_and_checkpoints() -> None:
    from tokenworth_agent.policies.tokenworth import TokenWorthPolicy

    policy = TokenWorthPolicy("db", DB)
    assert policy.retrieve(task(0, "count orders shipped yesterday")) == []
    policy.update(task(0, "count orders shipped yesterday"), [], OK, db_trajectory())
    log = policy.take_log()
    assert log["admission"]["code"] == "ADMITTED_ROOM" and policy.bank_size() == 1
    got = policy.retrieve(task(1, "count orders shipped today"))
    assert len(got) == 1 and got[0].skills == ("select",)
    assert policy.take_log()["selection"]["chosen"] == 0
    policy.update(task(1, "count orders shipped today"), got, FAIL, db_trajectory())
    assert policy.take_log()["admission"] is None  # a failure never offers

    clone = TokenWorthPolicy("db", DB)
    clone.load_state_dict(policy.state_dict())
    for p in (policy, clone):
        p.retrieve(task(2, "count orders"))
    assert policy.take_log() == clone.take_log()
