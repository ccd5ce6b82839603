"""DB environment under adversarial input (docs/db-fidelity.md): six ways it went wrong.

Correct answers that used to fail (row order inside derived tables and CTEs), wrong
answers that used to pass (ONLY_FULL_GROUP_BY), reachable internal objects, replies that
ran past the time limit, RecursionError escaping, and a judge quadratic in the answer.
"""

from __future__ import annotations

import dataclasses
import random
import time

import pytest

from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.benchmarks.db import env as db_module
from tokenworth_agent.benchmarks.db.env import DBEnvironment, answer_matches, replay_gold
from tokenworth_agent.sqlite_mysql import Deadline, Limits, MySQLError, MySQLOnSQLite
from tokenworth_agent.sqlite_mysql.database import mysql_filesort
from tokenworth_agent.sqlite_mysql.transpile import SortPlan
from tests.test_db_env import COLUMNS, ROWS, make_task, op
from tokenworth_agent.sqlite_mysql.mysql_sort import std_sort

@pytest.fixture()
def db():
    database = MySQLOnSQLite("staff", "staff", COLUMNS, ROWS, time_limit_s=2.0)
    yield database
    database.close()


def wrapped(sql: str, how: str) -> str:
    sql = sql.strip().rstrip(";")
    return f"SELECT * FROM ({sql}) q" if how == "derived" else f"WITH q AS ({sql}) SELECT * FROM q"


# --- 1. row order inside derived tables and CTEs -------------------------------------------


@pytest.mark.parametrize("how", ["derived", "cte"])
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT dept, COUNT(*) AS n FROM staff GROUP BY dept",  # first-seen group order
        "SELECT dept, COUNT(*) AS n FROM staff GROUP BY dept LIMIT 2",  # LIMIT keeps the first-seen groups
        "SELECT id FROM staff ORDER BY salary DESC",  # ties in scan order
        "SELECT dept, SUM(salary) AS s FROM staff GROUP BY dept ORDER BY s DESC LIMIT 2",
    ],
)
def test_wrapping_a_query_keeps_its_rows_and_order(db, sql, how):
    assert db.run(wrapped(sql, how)) == db.run(sql)


def test_filesort_tie_order_above_sixteen_rows_inside_a_derived_table():
    rows = [(i, f"n{i}", "d", 5 if i % 2 else 7) for i in range(1, 21)]
    database = MySQLOnSQLite("staff", "staff", COLUMNS, rows)
    expected = [r[0] for r in std_sort([(r[0], r[3]) for r in rows], lambda a, b: a[1] < b[1])]
    for how in ("derived", "cte"):
        got = [r[0] for r in database.execute(wrapped("SELECT id FROM staff ORDER BY salary", how))]
        assert got == expected
    database.close()


def test_derived_order_by_is_ignored_where_mysql_ignores_it(db):
    # The outer query groups, so MySQL drops the derived table's ORDER BY (no LIMIT) and
    # groups in scan order; a materialized sorted table would give HR, IT, Sales.
    sql = "SELECT dept, COUNT(*) FROM (SELECT * FROM staff ORDER BY name DESC) q GROUP BY dept"
    assert db.run(sql) == "[('Sales', 2), ('IT', 2), ('HR', 1)]"
    # With LIMIT the ORDER BY chooses the rows, and the table keeps that order.
    sql = "SELECT name FROM (SELECT name FROM staff ORDER BY name DESC LIMIT 2) q"
    assert db.run(sql) == "[('Eve',), ('Dan',)]"


def test_derived_table_errors_are_mysql_errors(db):
    assert db.run("SELECT * FROM (SELECT id, id FROM staff) q").startswith("1060 (42S21): Duplicate column name 'id'")
    assert db.run("SELECT * FROM (SELECT id FROM staff)").startswith("1248 (42000): Every derived table")
    # only queries are materialized: DML inside WITH is SQLite's syntax error, and does not run
    assert db.run("WITH q AS (INSERT INTO staff VALUES (9, 'x', 'y', 1)) SELECT * FROM q").startswith("1064")
    assert db.execute("SELECT COUNT(*) FROM staff") == [(5,)]
    # a correlated derived table cannot be materialized on its own and runs as before
    assert db.run("SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM staff WHERE id < s.id) x) FROM staff s LIMIT 2") == (
        "[(0,), (1,)]"
    )


@pytest.mark.parametrize("how", ["derived", "cte"])
def test_wrapped_gold_replay_on_tasks_that_failed_before(data_dir, how):
    tasks = load_tasks("db", data_dir)
    env = DBEnvironment()
    failing_before = (5, 6, 17, 18, 22, 41, 99, 213, 225, 228, 295, 302, 400, 423)
    for index in failing_before:
        task = tasks[index]
        judgement, observation = replay_gold(dataclasses.replace(task, answer_sql=wrapped(task.answer_sql, how)), env)
        assert judgement.reward == 1, (index, observation[:200])


# --- 2. ONLY_FULL_GROUP_BY ------------------------------------------------------------------


def test_nonaggregated_column_outside_group_by_is_error_1055(db):
    assert db.run("SELECT dept, name, COUNT(*) FROM staff GROUP BY dept") == (
        "1055 (42000): Expression #2 of SELECT list is not in GROUP BY clause and contains nonaggregated column "
        "'staff.name' which is not functionally dependent on columns in GROUP BY clause; this is incompatible "
        "with sql_mode=only_full_group_by"
    )
    assert db.run("SELECT s.dept, s.salary + 1 FROM staff s GROUP BY s.dept").startswith(
        "1055 (42000): Expression #2 of SELECT list"
    )
    assert db.run("SELECT name, COUNT(*) FROM staff").startswith(
        "1140 (42000): In aggregated query without GROUP BY, expression #1 of SELECT list contains nonaggregated "
        "column 'staff.name'"
    )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT dept, COUNT(*) FROM staff GROUP BY dept",
        "SELECT dept AS d, MAX(salary) FROM staff GROUP BY d",
        "SELECT dept, MAX(salary) FROM staff GROUP BY 1",
        "SELECT UPPER(dept), SUM(salary) / COUNT(*) FROM staff GROUP BY dept",
        "SELECT s.dept, COUNT(*) FROM staff AS s GROUP BY dept",
        "SELECT dept, ANY_VALUE(name) FROM staff GROUP BY dept",
        "SELECT salary > 120, COUNT(*) FROM staff GROUP BY salary > 120",
        "SELECT COUNT(*), 'x', (SELECT MAX(id) FROM staff) FROM staff",
        "SELECT name, SUM(salary) OVER (PARTITION BY dept) FROM staff",
    ],
)
def test_full_group_by_accepts_what_mysql_accepts(db, sql):
    assert db.run(sql).startswith("["), db.run(sql)


# --- 3. internal objects -----------------------------------------------------------------------


def test_internal_triggers_cannot_be_dropped_and_keep_working(db):
    assert db.run('DROP TRIGGER "_mysql_int_insert"') == "1360 (HY000): Trigger does not exist"
    assert db.run("DROP TRIGGER _mysql_int_update") == "1360 (HY000): Trigger does not exist"
    assert db.run("DROP TRIGGER IF EXISTS _mysql_int_update") == "[]"
    db.run("INSERT INTO staff VALUES (6, 'Fay', 'HR', '7.5'); UPDATE staff SET salary = 2.5 WHERE id = 1")
    assert db.execute("SELECT salary FROM staff WHERE id IN (1, 6)") == [(3,), (8,)]  # still rounded
    with pytest.raises(Exception, match="(?i)denied|not authorized"):
        db.execute_sqlite('DROP TRIGGER "_mysql_int_insert"')


@pytest.mark.parametrize(
    "sql, error",
    [
        ("SELECT name, sql FROM sqlite_master", "1146 (42S02): Table 'staff.sqlite_master' doesn't exist"),
        ("SELECT * FROM sqlite_temp_master", "1146 (42S02)"),
        ("SELECT * FROM pragma_table_info('staff')", "1064 (42000)"),
        ("SELECT _mysql_int_column('1.5', 'id')", "1305 (42000): FUNCTION staff._mysql_int_column does not exist"),
        ("SELECT * FROM _mysql_derived_1", "1146 (42S02)"),
        ("DROP TABLE _mysql_derived_1", "1103 (42000): Incorrect table name"),
        ("CREATE TABLE _mysql_x (a INT)", "1103 (42000)"),
        ("SELECT printf('%.*c', 1e9, 'x')", "1305 (42000): FUNCTION staff.printf does not exist"),
    ],
)
def test_internal_and_sqlite_objects_are_not_reachable(db, sql, error):
    assert db.run(sql).startswith(error)


def test_nothing_internal_is_listed_or_named(db):
    assert db.run("SHOW TABLES") == "[('staff',)]"
    assert db.run("SHOW TRIGGERS") == "[]"
    db.run("SELECT * FROM (SELECT dept FROM staff) q")  # creates and drops a temporary table
    assert db.run("SHOW TABLES") == "[('staff',)]"
    with pytest.raises(Exception, match="(?i)denied|not authorized"):
        db.execute_sqlite("SELECT name FROM sqlite_master")
    # DDL on the task table works as in MySQL, and rounding follows the columns
    assert db.run("ALTER TABLE staff DROP COLUMN salary") == "[]"
    assert db.run("ALTER TABLE staff ADD COLUMN bonus INT; UPDATE staff SET bonus = 2.5 WHERE id = 1") == "[]"
    assert db.execute("SELECT bonus FROM staff WHERE id = 1") == [(3,)]


# --- 4. one budget per reply, bounded sizes --------------------------------------------------


class SteppingClock:
    """A fake monotonic clock that advances ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_budget_covers_the_whole_reply_not_each_statement():
    clock = SteppingClock(1.0)
    database = MySQLOnSQLite("staff", "staff", COLUMNS, ROWS, time_limit_s=5.0, clock=clock)
    inserts = "; ".join(f"INSERT INTO staff VALUES ({i}, 'x', 'y', 1)" for i in range(10, 18))
    assert database.run(inserts).startswith("3024 (HY000): Query execution was interrupted")
    added = database.execute_sqlite("SELECT COUNT(*) FROM staff WHERE id >= 10")[0][0]
    assert 0 < added < 8  # the budget ran out part way through the reply
    database.close()


def test_filesort_emulation_checks_the_budget():
    rows = [(i % 3, i) for i in range(6_000)]  # one visible column, one key, one scan position
    plan = SortPlan(visible=0, descending=(False,), positions=1)
    assert len(mysql_filesort(rows, plan, Deadline(100.0, SteppingClock(0.5)))) == 6_000
    with pytest.raises(MySQLError) as raised:
        mysql_filesort(rows, plan, Deadline(1.0, SteppingClock(0.5)))  # ~20 clock reads are needed
    assert raised.value.errno == 3024


def test_oversized_statements_and_results_are_bounded(db):
    in_list = "SELECT * FROM staff WHERE id IN (" + ", ".join(str(i) for i in range(300_000)) + ")"
    assert len(in_list) > 2_000_000
    assert db.run(in_list).startswith("1153 (08S01): Got a packet bigger than 'max_allowed_packet' bytes")
    small = MySQLOnSQLite("staff", "staff", COLUMNS, ROWS, limits=Limits(result_chars=60, rows=12))
    cut = small.run("SELECT a.id, b.id FROM staff a, staff b")
    assert cut.startswith("[(1, 1), (1, 2)") and cut.endswith("(result cut at 60 characters: 7 of 12+ rows shown)")
    assert small.run("SELECT a.id FROM staff a, staff b, staff c ORDER BY a.salary LIMIT 2") == "[(1,), (1,)]"
    small.close()


def test_string_functions_are_linear_and_mysql_shaped(db):
    assert db.run("SELECT INSTR('Hello', 'LL'), REPLACE('aXbX', 'X', '-'), TRIM(BOTH 'ab' FROM 'ababxab')") == (
        "[(3, 'a-b-', 'x')]"
    )
    assert db.run("SELECT FORMAT(1234567.891, 2)") == "[('1,234,567.89',)]"


COUNT_TO = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < {n}) SELECT COUNT(*) FROM r"


def _statement_taking(seconds: float) -> str:
    """A statement that finishes in about ``seconds`` here (calibrated now, so the test does
    not depend on the machine's speed or load)."""
    probe = MySQLOnSQLite("staff", "staff", COLUMNS, ROWS, time_limit_s=60.0)
    started = time.monotonic()
    probe.run(COUNT_TO.format(n=100_000))
    per_row = max(time.monotonic() - started, 1e-3) / 100_000
    probe.close()
    return COUNT_TO.format(n=int(seconds / per_row))


WALL_CLOCK_CASES = {
    # each finishes within the 0.5 s limit alone; eight of them took 8x as long before
    "eight statements of 0.3 s": lambda: "; ".join([_statement_taking(0.3)] * 8),
    "cross join sorted in Python": lambda: "SELECT a.id, b.id, c.id FROM staff a, staff b, staff c ORDER BY a.salary",
    "printf padding": lambda: "SELECT printf('%.*c', 1e9, 'x')",
    "2 MB IN list": lambda: "SELECT * FROM staff WHERE id IN (" + ", ".join(str(i) for i in range(300_000)) + ")",
}


@pytest.mark.parametrize("name", list(WALL_CLOCK_CASES))
def test_every_reply_ends_within_twice_the_limit(name):
    """The only wall-clock test: generous (2x a 0.5 s limit, as the issue's target)."""
    rows = [(i, f"n{i}", "d", i % 7) for i in range(60)]
    sql = WALL_CLOCK_CASES[name]()
    env = DBEnvironment(time_limit_s=0.5)
    env.reset(dataclasses.replace(_task(), table=dataclasses.replace(_task().table, rows=tuple(rows))))
    started = time.monotonic()
    result = env.step(op(sql))
    elapsed = time.monotonic() - started
    assert elapsed <= 1.0, (name, elapsed)
    # a MySQL error, or (a fast machine may finish the cross join) a result cut to size
    assert result.observation[:4] in ("3024", "1153", "1305") or result.observation.endswith("rows shown)")
    env.close()


def _task():
    return make_task(direct=[(1,)])


# --- 5. deep nesting gets a MySQL error, never RecursionError --------------------------------


NESTED = {
    "40 parentheses": "SELECT " + "(" * 40 + "1" + ")" * 40,
    "40 nested subqueries": "SELECT " + "(SELECT " * 40 + "1" + ")" * 40,
    "50 NOT(": "SELECT " + "NOT(" * 50 + "1" + ")" * 50,
    "300 NOT without parentheses": "SELECT " + "NOT " * 300 + "1",
    "3000 minus signs": "SELECT " + "-" * 3000 + "1",
    "60 nested CASE": "SELECT " + "CASE WHEN 1 THEN " * 60 + "1" + " END" * 60,
}


@pytest.mark.parametrize("name", list(NESTED))
def test_deep_nesting_is_a_mysql_error_observation(name):
    env = DBEnvironment()
    env.reset(_task())
    result = env.step(op(NESTED[name]))
    assert result.observation.startswith(("1436 (HY000): Thread stack overrun", "1064 (42000)")), result.observation
    assert env.step(op("SELECT COUNT(*) FROM staff")).observation == "[(5,)]"  # still usable
    env.close()


def test_judge_returns_a_verdict_for_deeply_nested_answers():
    env = DBEnvironment()
    for answer in ("-" * 3000 + "1", "(" * 500 + "1" + ")" * 500, "[" * 300 + "]" * 300, "Decimal('x')"):
        env.reset(_task())
        env.step(f"Done.\nAction: Answer\nFinal Answer: {answer}")
        assert env.judge().reward == 0
    env.close()


# --- 6. the judge is linear in the answer -------------------------------------------------------


def test_large_answer_is_judged_quickly():
    """5,000 tuples took about 80 s with the per-element source lookup; now milliseconds.
    The bound is loose on purpose; ``tokenworth_bench.db_fidelity`` records the 300k-tuple time."""
    gold = [(i, f"name {i}", i / 3) for i in range(5_000)]
    text = repr(gold)
    started = time.monotonic()
    assert answer_matches(text, gold)
    assert not answer_matches(text.replace("'name 4999'", "'name 5000'"), gold)
    assert time.monotonic() - started < 5.0


def test_fast_answer_reader_agrees_with_python_parser():
    rng = random.Random(11)
    atoms = ["1", "-2", "+3", "01", "00", "1.5", "1.", ".5", "1e3", "-1E-2", "'a'", '"b"', "'a,b'", "'x\\'y'",
             "None", "True", "Decimal('2.50')", 'Decimal( "7" )', "Decimal('x')", "'é'", "1_0", "''", "- 4", "'(x)'"]
    checked = 0
    for _ in range(5_000):
        rows = [
            "(" + ", ".join(rng.choice(atoms) for _ in range(rng.randint(1, 3))) + rng.choice([",", ""]) + ")"
            for _ in range(rng.randint(0, 4))
        ]
        text = rng.choice(["[", "("]) + ", ".join(rows) + rng.choice(["", ","]) + rng.choice(["]", ")"])
        fast = db_module._fast_literal_rows(text)
        if fast is db_module._FALLBACK:
            continue
        checked += 1
        assert fast == db_module._ast_literal_rows(text), text
    assert checked > 200
