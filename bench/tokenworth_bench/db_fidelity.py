"""How faithfully the SQLite DB environment reproduces the MySQL original.

Replays every task's gold SQL through :class:`tokenworth_agent.benchmarks.db.env.DBEnvironment` exactly as an
agent would (an Operation with the gold SQL, then for SELECT tasks an Answer holding the
observed rows), judges it with the environment's own grader, and counts the passes. Two
more replays wrap each SELECT task's gold query the way a model often writes it, as a
derived table (``SELECT * FROM (<gold>) q``) and as a CTE (``WITH q AS (<gold>) SELECT *
FROM q``); both are correct answers on MySQL, so they must pass too (write tasks are
replayed unwrapped in those runs). Finally the judge is timed on a 300,000-tuple answer.
Each mismatch is printed with its likely cause; the summary goes to
``bench/results/db_fidelity.json``.

    python -m tokenworth_bench.db_fidelity --data-dir /path/to/lifelongagentbench
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.benchmarks.db.tasks import DBTask
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.benchmarks.db.env import DBEnvironment, answer_matches, replay_gold

DEFAULT_OUT = RESULTS / "db_fidelity.json"


def diagnose(task: DBTask, observation: str, details: dict[str, Any]) -> str:
    """A short, mechanical guess at why a replay did not match the stored gold answer."""
    if task.is_write:
        if "error" in details:
            return f"table hash query failed: {details['error']}"
        if observation not in ("[]", ""):
            return f"gold SQL failed here: {observation[:200]}"
        return "final table differs from MySQL's (a write changed different rows or values)"
    if not observation.startswith("["):
        return f"gold SQL failed here: {observation[:200]}"
    expected = task.answer_direct or []
    try:
        import ast

        observed = ast.literal_eval(observation.replace("Decimal(", "(")) if observation else []
    except (ValueError, SyntaxError):
        return "observation is not a literal list of rows"
    if len(observed) != len(expected):
        return f"row count differs: {len(observed)} here, {len(expected)} in MySQL"

    def canon(row: Sequence[Any]) -> tuple:
        return tuple(round(float(v), 4) if isinstance(v, (int, float, str)) and _is_number(v) else v for v in row)

    if sorted(map(canon, observed), key=repr) == sorted(map(canon, expected), key=repr):
        return "same rows, different order (ties or group order)"
    return "row values differ"


def _is_number(value: Any) -> bool:
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


WRAPPINGS = {
    "gold": lambda sql: sql,
    "derived": lambda sql: f"SELECT * FROM ({sql.strip().rstrip(';')}) q",
    "cte": lambda sql: f"WITH q AS ({sql.strip().rstrip(';')}) SELECT * FROM q",
}


def replay(tasks: Sequence[DBTask], wrapping: str) -> dict[str, Any]:
    """Replay every task's gold SQL (SELECT tasks wrapped as ``wrapping`` says)."""
    env = DBEnvironment()
    wrap = WRAPPINGS[wrapping]
    started = time.perf_counter()
    mismatches = []
    by_kind = {"select": [0, 0], "write": [0, 0]}
    for task in tasks:
        if not task.is_write:
            task = dataclasses.replace(task, answer_sql=wrap(task.answer_sql))
        judgement, observation = replay_gold(task, env)
        kind = "write" if task.is_write else "select"
        by_kind[kind][1] += 1
        if judgement.reward:
            by_kind[kind][0] += 1
            continue
        mismatches.append(
            {
                "sample_index": task.sample_index,
                "kind": kind,
                "sql": task.answer_sql,
                "cause": diagnose(task, observation, judgement.details),
                "observation": observation[:500],
            }
        )
    return {
        "passed": sum(v[0] for v in by_kind.values()),
        "total": len(tasks),
        "select": {"passed": by_kind["select"][0], "total": by_kind["select"][1]},
        "write": {"passed": by_kind["write"][0], "total": by_kind["write"][1]},
        "seconds": round(time.perf_counter() - started, 2),
        "mismatches": mismatches,
    }


def _timed(call) -> tuple[Any, float, float]:
    """(result, wall seconds, CPU seconds): CPU time is the fairer number on a shared machine."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, round(time.perf_counter() - wall, 3), round(time.process_time() - cpu, 3)


def judge_timing(tuples: int = 300_000) -> dict[str, Any]:
    """Seconds to judge a ``tuples``-row answer of (int, str) pairs, matching and not, next
    to ``ast.literal_eval`` of the same text (a reference taken in the same process)."""
    import ast

    gold = [(i, f"n{i}") for i in range(tuples)]
    text = repr(gold)
    matched, match_wall, match_cpu = _timed(lambda: answer_matches(text, gold))
    wrong = text.replace(f"'n{tuples - 1}'", "'other'")
    mismatched, mismatch_wall, mismatch_cpu = _timed(lambda: answer_matches(wrong, gold))
    _, eval_wall, eval_cpu = _timed(lambda: ast.literal_eval(text))
    return {
        "tuples": tuples,
        "answer_chars": len(text),
        "seconds_match": match_wall,
        "cpu_seconds_match": match_cpu,
        "seconds_mismatch": mismatch_wall,
        "cpu_seconds_mismatch": mismatch_cpu,
        "seconds_literal_eval_reference": eval_wall,
        "cpu_seconds_literal_eval_reference": eval_cpu,
        "verdicts_right": matched and not mismatched,
    }


def run(data_dir: str | None, limit: int | None = None, judge_tuples: int = 300_000) -> dict[str, Any]:
    tasks = load_tasks("db", data_dir, limit=limit)
    summary = replay(tasks, "gold")
    summary["wrapped"] = {name: replay(tasks, name) for name in ("derived", "cte")}
    summary["judge"] = judge_timing(judge_tuples)
    return summary


def _line(name: str, result: dict[str, Any]) -> str:
    return (
        f"{name}: {result['passed']}/{result['total']} judged correct "
        f"(SELECT {result['select']['passed']}/{result['select']['total']}, "
        f"write {result['write']['passed']}/{result['write']['total']}) in {result['seconds']} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="folder holding db_bench/train-00000-of-00001.parquet")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N tasks")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the JSON summary")
    parser.add_argument("--judge-tuples", type=int, default=300_000, help="size of the timed judge answer")
    args = parser.parse_args(argv)
    summary = run(args.data_dir, args.limit, args.judge_tuples)
    results = {"gold replay": summary, **{f"{k}-wrapped replay": v for k, v in summary["wrapped"].items()}}
    for name, result in results.items():
        for item in result["mismatches"]:
            print(f"[{name}] [{item['sample_index']}] {item['kind']}: {item['cause']}\n    {item['sql']}")
    for name, result in results.items():
        print(_line(name, result))
    judge = summary["judge"]
    print(
        f"judge: {judge['tuples']} tuples ({judge['answer_chars']} characters) in {judge['seconds_match']} s "
        f"({judge['cpu_seconds_match']} s CPU; a wrong answer {judge['seconds_mismatch']} s, "
        f"{judge['cpu_seconds_mismatch']} s CPU; ast.literal_eval of the same text "
        f"{judge['seconds_literal_eval_reference']} s), verdicts right: {judge['verdicts_right']}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
