"""How faithfully the SQLite DB environment reproduces the MySQL original.

Replays every task's gold SQL through :class:`agent.envs.db.DBEnvironment` exactly as an
agent would (an Operation with the gold SQL, then for SELECT tasks an Answer holding the
observed rows), judges it with the environment's own grader, and counts the passes. Each
mismatch is printed with its likely cause; the summary goes to
``bench/results/db_fidelity.json``.

    python -m bench.db_fidelity --data-dir /path/to/lifelongagentbench
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

from agent.data import DBTask, load_tasks
from agent.envs.db import DBEnvironment, replay_gold

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "db_fidelity.json"


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


def run(data_dir: str | None, limit: int | None = None) -> dict[str, Any]:
    tasks = load_tasks("db", data_dir, limit=limit)
    env = DBEnvironment()
    started = time.perf_counter()
    mismatches = []
    by_kind = {"select": [0, 0], "write": [0, 0]}
    for task in tasks:
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
    passed = sum(v[0] for v in by_kind.values())
    return {
        "passed": passed,
        "total": len(tasks),
        "select": {"passed": by_kind["select"][0], "total": by_kind["select"][1]},
        "write": {"passed": by_kind["write"][0], "total": by_kind["write"][1]},
        "seconds": round(time.perf_counter() - started, 2),
        "mismatches": mismatches,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="folder holding db_bench/train-00000-of-00001.parquet")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N tasks")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the JSON summary")
    args = parser.parse_args(argv)
    summary = run(args.data_dir, args.limit)
    for item in summary["mismatches"]:
        print(f"[{item['sample_index']}] {item['kind']}: {item['cause']}\n    {item['sql']}")
    print(
        f"gold replay: {summary['passed']}/{summary['total']} judged correct "
        f"(SELECT {summary['select']['passed']}/{summary['select']['total']}, "
        f"write {summary['write']['passed']}/{summary['write']['total']}) in {summary['seconds']} s"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
