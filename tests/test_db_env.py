"""DB environment: protocol, observations, MySQL behaviours, judging, guards, gold replay."""

from __future__ import annotations

import hashlib
import os
import random
from decimal import Decimal

import pytest

from tokenworth_agent.benchmarks.db.tasks import ColumnInfo, DBTask, TableInfo
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.benchmarks.db.env import DBEnvironment, answer_matches, parse_action, replay_gold
from tokenworth_agent.sqlite_mysql import MySQLOnSQLite, table_md5
from tokenworth_agent.sqlite_mysql.mysql_sort import std_sort

COLUMNS = (("id", "INT"), ("name", "TEXT"), ("dept", "TEXT"), ("salary", "INT"))
ROWS = (
    (1, "Alice", "Sales", 100),
    (2, "bob", "Sales", 200),
    (3, "Carol", "IT", 200),
    (4, "Dan", "IT", 150),
    (5, "Eve", "HR", 150),
)


def make_task(sql: str = "SELECT 1", direct=None, md5: str | None = None, rows=ROWS) -> DBTask:
    return DBTask(
        sample_index=0,
        instruction="Question?",
        table=TableInfo("staff", tuple(ColumnInfo(n, t) for n, t in COLUMNS), tuple(rows)),
        answer_direct=direct,
        answer_md5=md5,
        answer_sql=sql,
        skill_list=("select",),
        entry_hash=0,
    )


def op(sql: str) -> str:
    return f"Let me look.\nAction: Operation\n```sql\n{sql}\n```"


def answer(text: str) -> str:
    return f"Done.\nAction: Answer\nFinal Answer: {text}"


@pytest.fixture()
def db():
    database = MySQLOnSQLite("staff", "staff", COLUMNS, ROWS, time_limit_s=1.0)
    yield database
    database.close()


@pytest.fixture()
def env():
    environment = DBEnvironment()
    yield environment
    environment.close()


# --- action parsing ------------------------------------------------------------------------


def test_first_action_decides():
    reply = "Action: Answer\nFinal Answer: [(1,)]\nAction: Operation\n```sql\nSELECT 1\n```"
    assert parse_action(reply) == {"kind": "answer", "answer": "[(1,)]"}
    reply = "Action: Operation\n```sql\nSELECT 1\n```\nAction: Answer\nFinal Answer: x"
    assert parse_action(reply)["kind"] == "sql"


def test_operation_takes_first_sql_block_and_flattens_newlines():
    reply = "Action: Operation\n```sql\nSELECT id\nFROM staff\n```\n```sql\nDROP TABLE staff\n```"
    assert parse_action(reply) == {"kind": "sql", "sql": "SELECT id FROM staff"}


def test_operation_without_block_or_answer_without_line_is_invalid():
    assert parse_action("Action: Operation\nSELECT 1")["kind"] == "invalid"
    assert parse_action("Action: Operation\n```sql SELECT 1```")["kind"] == "invalid"
    assert parse_action("Action: Answer [(1,)]")["kind"] == "invalid"
    assert parse_action("I think the answer is 3.")["kind"] == "invalid"


def test_answer_is_rest_of_line_stripped():
    assert parse_action("Action: Answer\nFinal Answer:   [('a', 1)]  \nmore text")["answer"] == "[('a', 1)]"


def test_invalid_reply_ends_task(env):
    env.reset(make_task(direct=[(1,)]))
    result = env.step("no action here")
    assert result.done and result.status == "invalid_action"
    assert env.judge().reward == 0
    with pytest.raises(RuntimeError):
        env.step(answer("[(1,)]"))


def test_round_limit_counts_the_answer(env):
    env.reset(make_task(direct=[(5,)]))
    assert not env.step(op("SELECT COUNT(*) FROM staff")).done
    assert not env.step(op("SELECT 1")).done
    third = env.step(op("SELECT 2"))
    assert third.done and third.status == "round_limit"
    env2 = DBEnvironment(max_rounds=2)
    env2.reset(make_task(direct=[(5,)]))
    env2.step(op("SELECT 1"))
    last = env2.step(answer("[(5,)]"))
    assert last.status == "completed" and env2.judge().reward == 1
    env2.close()


def test_prompts(env):
    assert "Action: Operation" in env.instructions() and "Final Answer:" in env.instructions()
    prompt = env.reset(make_task())
    assert prompt == "Question?\nThe name of this table is staff, and the headers of this table are id, name, dept, salary."
    with pytest.raises(TypeError):
        env.reset("not a task")  # type: ignore[arg-type]


# --- observations and errors -----------------------------------------------------------------


def test_observations(env):
    env.reset(make_task())
    assert env.step(op("SELECT id, name FROM staff WHERE id < 3;")).observation == "[(1, 'Alice'), (2, 'bob')]"
    assert env.step(op("UPDATE staff SET salary = 1 WHERE id = 9")).observation == "[]"


def test_decimal_observations(db):
    assert db.run("SELECT SUM(salary), AVG(salary), 7 / 2, COUNT(*) FROM staff") == (
        "[(Decimal('800'), Decimal('160.0000'), Decimal('3.5000'), 5)]"
    )


def test_error_texts(db):
    assert db.run("SELECT * FROM nope") == "1146 (42S02): Table 'staff.nope' doesn't exist"
    assert db.run("SELECT wage FROM staff") == "1054 (42S22): Unknown column 'wage' in 'field list'"
    syntax = db.run("SELEC id FROM staff")
    assert syntax.startswith("1064 (42000): You have an error in your SQL syntax;")
    assert "near 'SELEC id FROM staff'" in syntax


def test_statements_split_on_semicolon_last_result_wins(db):
    assert db.run("UPDATE staff SET salary = 0 WHERE id = 1; SELECT salary FROM staff WHERE id = 1") == "[(0,)]"
    # an error stops the batch; earlier statements stay done
    assert db.run("DELETE FROM staff WHERE id = 5; SELECT * FROM nope; DELETE FROM staff").startswith("1146")
    assert db.run("SELECT COUNT(*) FROM staff") == "[(4,)]"


def test_meta_commands(db):
    assert db.run("SHOW TABLES") == "[('staff',)]"
    assert db.run("DESCRIBE staff").startswith("[('id', 'int', 'YES', '', None, ''), ('name', 'text'")
    assert db.run("DESC nope").startswith("1146")


# --- MySQL behaviours -------------------------------------------------------------------------


def test_text_comparison_is_case_insensitive(db):
    assert db.run("SELECT id FROM staff WHERE name = 'BOB'") == "[(2,)]"
    assert db.run("SELECT COUNT(DISTINCT dept) FROM staff WHERE dept IN ('sales', 'it')") == "[(2,)]"


def test_avg_rounds_to_four_decimals_half_away_from_zero():
    database = MySQLOnSQLite("t", "t", (("v", "INT"),), ((1,), (1,), (0,)))
    # 2/3 = 0.666666... -> 0.6667; a float mean would differ by 3e-5
    assert database.execute("SELECT AVG(v) FROM t") == [(Decimal("0.6667"),)]
    database.run("INSERT INTO t VALUES (-3)")  # mean -1/4 = -0.25 exactly
    assert database.execute("SELECT AVG(v) FROM t") == [(Decimal("-0.2500"),)]
    database.close()


def test_real_written_into_int_column_is_rounded_half_away(db):
    db.run("UPDATE staff SET salary = salary * 1.005 WHERE id IN (1, 2)")  # 100.5, 201.0
    db.run("UPDATE staff SET salary = -2.5 WHERE id = 3")
    db.run("INSERT INTO staff VALUES ('6', 'Fay', 'HR', '7.5')")
    assert db.execute("SELECT id, salary FROM staff WHERE id IN (1, 2, 3, 6)") == [(1, 101), (2, 201), (3, -3), (6, 8)]
    assert db.run("INSERT INTO staff (id) VALUES ('abc')").startswith("1366 (HY000): Incorrect integer value: 'abc'")


def test_group_by_returns_groups_in_first_seen_order(db):
    db.run("INSERT INTO staff VALUES (6, 'Zed', 'Admin', 1)")
    assert db.run("SELECT dept, COUNT(*) FROM staff GROUP BY dept") == (
        "[('Sales', 2), ('IT', 2), ('HR', 1), ('Admin', 1)]"
    )


def test_order_by_ties_keep_insertion_order_for_small_results(db):
    assert db.execute("SELECT id FROM staff ORDER BY salary DESC") == [(2,), (3,), (4,), (5,), (1,)]


def test_order_by_ties_above_sixteen_rows_are_not_kept_stable():
    rows = [(i, f"n{i}", "d", 5 if i % 2 else 7) for i in range(1, 21)]
    database = MySQLOnSQLite("staff", "staff", COLUMNS, rows)
    got = [r[0] for r in database.execute("SELECT id FROM staff ORDER BY salary ASC")]
    stable = [i for i in range(1, 21, 2)] + [i for i in range(2, 21, 2)]
    assert sorted(got[:10]) == list(range(1, 21, 2)) and got != stable
    expected = std_sort([(r[0], r[3]) for r in rows], lambda a, b: a[1] < b[1])
    assert got == [r[0] for r in expected]
    database.close()


def test_mysql_tie_order_matches_stored_gold_answers(data_dir):
    """Tasks whose stored MySQL answers break ORDER BY ties unlike a stable sort."""
    tasks = load_tasks("db", data_dir)
    env = DBEnvironment()
    for index in (41, 225, 228, 273):
        judgement, observation = replay_gold(tasks[index], env)
        assert judgement.reward == 1, (index, observation[:200])


def test_std_sort_sorts_and_is_unstable_like_libstdcxx():
    rng = random.Random(0)
    for n in (0, 1, 5, 16, 17, 100, 1000):
        values = [rng.randint(0, 9) for _ in range(n)]
        assert std_sort(values, lambda a, b: a < b) == sorted(values)
    keyed = [(1 if i % 2 else 0, i) for i in range(40)]
    result = std_sort(keyed, lambda a, b: a[0] < b[0])
    assert [k for k, _ in result] == sorted(k for k, _ in keyed)
    assert result != sorted(keyed, key=lambda x: x[0])  # not a stable sort


def test_update_join_and_delete_join(db):
    db.run(
        "UPDATE staff s JOIN (SELECT dept, MAX(salary) AS top FROM staff GROUP BY dept) m "
        "ON s.dept = m.dept SET s.salary = m.top WHERE s.salary < m.top"
    )
    assert db.execute("SELECT salary FROM staff") == [(200,), (200,), (200,), (200,), (150,)]
    db.run("DELETE s FROM staff s JOIN (SELECT MIN(id) AS first_id FROM staff) f WHERE s.id = f.first_id")
    assert [r[0] for r in db.execute("SELECT id FROM staff")] == [2, 3, 4, 5]


def test_update_and_delete_with_limit(db):
    db.run("DELETE FROM staff WHERE salary >= 150 ORDER BY salary DESC LIMIT 2")
    assert [r[0] for r in db.execute("SELECT id FROM staff")] == [1, 4, 5]
    db.run("UPDATE staff SET dept = 'X' LIMIT 1")
    assert db.execute("SELECT dept FROM staff") == [("X",), ("IT",), ("HR",)]


def test_update_assignments_see_earlier_ones(db):
    db.run("UPDATE staff SET salary = salary + 1, id = salary WHERE id = 1")
    assert db.execute("SELECT id, salary FROM staff WHERE name = 'Alice'") == [(101, 101)]


def test_target_table_in_subquery_is_refused_like_mysql(db):
    direct = db.run("DELETE FROM staff WHERE salary < (SELECT AVG(salary) FROM staff)")
    assert direct.startswith("1093 (HY000): You can't specify target table 'staff'")
    assert db.run("DELETE FROM staff WHERE salary < (SELECT a FROM (SELECT AVG(salary) AS a FROM staff) t)") == "[]"
    assert [r[0] for r in db.execute("SELECT id FROM staff")] == [2, 3]


def test_mysql_functions(db):
    assert db.execute("SELECT CONCAT_WS('-', name, NULL, dept), IF(salary > 150, 'hi', 'lo') FROM staff LIMIT 1") == [
        ("Alice-Sales", "lo")
    ]
    std = db.execute("SELECT STDDEV(salary), STDDEV_SAMP(salary), VARIANCE(salary) FROM staff")[0]
    assert std[0] == pytest.approx(37.416573867739416) and std[2] == pytest.approx(1400.0)
    assert std[1] == pytest.approx(41.83300132670378)


# --- guards ---------------------------------------------------------------------------------


def test_runaway_query_is_interrupted():
    database = MySQLOnSQLite("staff", "staff", COLUMNS, ROWS, time_limit_s=0.3)
    text = database.run("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r")
    assert text.startswith("3024 (HY000): Query execution was interrupted")
    assert database.run("SELECT COUNT(*) FROM staff") == "[(5,)]"  # still usable
    database.close()


def test_attach_and_pragma_are_denied(db, tmp_path):
    target = tmp_path / "escape.db"
    assert db.run(f"ATTACH DATABASE '{target}' AS x").startswith("1064")
    with pytest.raises(Exception, match="(?i)denied|not authorized"):
        db.execute_sqlite(f"ATTACH DATABASE '{target}' AS x")
    with pytest.raises(Exception, match="(?i)denied|not authorized"):
        db.execute_sqlite("PRAGMA table_info(staff)")
    with pytest.raises(Exception, match="(?i)denied|not authorized|no such function"):
        db.execute_sqlite("SELECT load_extension('x')")
    assert not target.exists() and os.listdir(tmp_path) == []


# --- judging ---------------------------------------------------------------------------------


def test_md5_rule_against_hand_computation():
    rows = [(1, "a", None), (2, "b", "c")]
    row_hashes = sorted(
        [hashlib.md5(b"1,a").hexdigest()[:5], hashlib.md5(b"2,b,c").hexdigest()[:5]]
    )  # CONCAT_WS skips the NULL
    assert table_md5(rows) == hashlib.md5(",".join(row_hashes).encode()).hexdigest()
    assert table_md5([]) is None


def test_write_task_judged_by_table_hash(env):
    after = [r for r in ROWS if r[0] != 5]
    expected = table_md5(after)
    task = make_task("DELETE FROM staff WHERE id = 5", md5=expected)
    env.reset(task)
    env.step(op("DELETE FROM staff WHERE name = 'eve'"))
    assert env.step("garbled final reply").status == "invalid_action"
    assert env.judge().reward == 1  # answer text is ignored for writes
    env.reset(task)
    env.step(op("DELETE FROM staff WHERE id = 4"))
    env.step(answer("done"))
    assert env.judge().reward == 0


def test_select_task_pass_and_fail(env):
    task = make_task(direct=[("Sales", 300.0), ("IT", 350.0)])
    env.reset(task)
    obs = env.step(op("SELECT dept, SUM(salary) FROM staff WHERE dept <> 'HR' GROUP BY dept")).observation
    assert obs == "[('Sales', Decimal('300')), ('IT', Decimal('350'))]"
    env.step(answer(obs))
    assert env.judge().reward == 1
    env.reset(task)
    env.step(answer("[('IT', 350), ('Sales', 300)]"))  # wrong order
    assert env.judge().reward == 0


@pytest.mark.parametrize(
    "text, gold, ok",
    [
        ("[(1, 'x')]", [(1, "x")], True),
        ("[(1.0000004, 'x')]", [(1, "x")], True),
        ("[(1.01, 'x')]", [(1, "x")], False),
        ("[(Decimal('2.5000'),)]", [(2.5,)], True),
        ("(Alice, 30)", [("Alice", 30)], True),  # the original's loose reading
        ("[('Smith, John', 3)]", [("Smith, John", 3)], True),  # comma inside a string
        ('[("O\'Brien",)]', [("O'Brien",)], True),
        ("5", [(5,)], True),
        ("[]", [], True),
        ("", [], True),
        ("[(1,), (2,)]", [(1,)], False),
        ("[(1, 'X')]", [(1, "x")], False),  # strings compare exactly
        ("[(1, 'x'", [(1, "x")], False),
    ],
)
def test_answer_matching(text, gold, ok):
    assert answer_matches(text, gold) is ok


# --- the real data --------------------------------------------------------------------------


def test_sampled_gold_replay(data_dir):
    tasks = load_tasks("db", data_dir)
    sample = random.Random(1234).sample(tasks, 60)
    env = DBEnvironment()
    passed = sum(replay_gold(task, env)[0].reward for task in sample)
    assert passed >= 59, f"only {passed}/60 gold replays judged correct"
