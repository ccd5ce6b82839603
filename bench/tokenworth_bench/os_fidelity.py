"""Fidelity check of the OS environment: replay every task's reference solution.

For each task: a fresh sandbox, the init script, then the task's
``ground_truth_command_item`` as one action, a short pause (``--settle``), then the
evaluation script. A faithful
environment passes (nearly) all of them. Tasks whose init script installs packages
(``apt-get install``) need the network in the original; they are excused when they
fail here, and listed by index.

    python -m tokenworth_bench.os_fidelity --data-dir ../shared/data/lifelongagentbench --jobs 2

Writes ``bench/results/os_fidelity.json`` (or ``--out``) and exits non-zero when a
non-excused task fails.
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import concurrent.futures
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.benchmarks.os_env.tasks import OSTask
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.benchmarks.os_env.env import OSEnvironment, TaskInitError

DEFAULT_OUT = RESULTS / "os_fidelity.json"
_NEEDS_NETWORK = re.compile(r"\bapt(-get)?\s+(-\S+\s+)*install\b")


def needs_network(task: OSTask) -> bool:
    """Whether the task's setup downloads packages in the original (offline here)."""
    return bool(task.init and _NEEDS_NETWORK.search(task.init.script))


def replay(task: OSTask, command_timeout: float = 20.0, settle: float = 0.5) -> dict[str, Any]:
    """Init, reference solution, evaluation in one fresh sandbox; the outcome as a record.

    ``settle`` seconds pass between the reference solution and the evaluation. In a
    real episode the agent's "Act: finish" turn (an LLM call) sits there, and in the
    original each ``docker exec`` adds its own latency; a few reference solutions
    background a job and are judged on its result, so without the pause they race.
    """
    record: dict[str, Any] = {"index": task.sample_index, "needs_network": needs_network(task)}
    started = time.monotonic()
    env = OSEnvironment(command_timeout=command_timeout)
    try:
        env.reset(task)
        if task.ground_truth is not None:
            truth = env.execute(task.ground_truth)
            record.update(truth_exit_code=truth.exit_code, truth_timed_out=truth.timed_out)
            time.sleep(settle)
        judgement = env.judge()
        record.update(
            passed=bool(judgement.reward),
            evaluation_exit_code=judgement.details.get("evaluation_exit_code"),
            evaluation_timed_out=judgement.details.get("evaluation_timed_out"),
        )
        if not judgement.reward:
            record["evaluation_output"] = judgement.details.get("evaluation_output", "")
    except TaskInitError as exc:
        record.update(passed=False, error=f"init failed: {exc}")
    except Exception as exc:  # one broken task must not stop the replay of the others
        record.update(passed=False, error=f"{type(exc).__name__}: {exc}")
    finally:
        try:
            env.close()
        except Exception as exc:
            record.update(passed=False, error=f"teardown failed: {exc}")
    record["seconds"] = round(time.monotonic() - started, 3)
    return record


def summarize(records: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    records = sorted(records, key=lambda r: r["index"])
    failed = [r["index"] for r in records if not r["passed"]]
    excused = [i for i in failed if next(r for r in records if r["index"] == i)["needs_network"]]
    return {
        "tasks": len(records),
        "passed": len(records) - len(failed),
        "failed": [i for i in failed if i not in excused],
        "excused_needs_network": excused,
        "network_tasks": [r["index"] for r in records if r["needs_network"]],
        "wall_seconds": round(seconds, 1),
        "mean_task_seconds": round(sum(r["seconds"] for r in records) / max(len(records), 1), 3),
        "records": records,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="dataset folder (default: TOKENWORTH_DATA_DIR or the cache)")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N tasks")
    parser.add_argument("--jobs", type=int, default=2, help="sandboxes run in parallel")
    parser.add_argument("--timeout", type=float, default=20.0, help="per-command timeout in seconds")
    parser.add_argument("--settle", type=float, default=0.5,
                        help="seconds between reference solution and evaluation (stands in for the finish turn)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the JSON result")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")

    tasks = load_tasks("os", args.data_dir, limit=args.limit)
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        records = list(pool.map(lambda t: replay(t, args.timeout, args.settle), tasks))
    summary = summarize(records, time.monotonic() - started)
    summary["settle_seconds"] = args.settle

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"OS fidelity: {summary['passed']}/{summary['tasks']} reference solutions pass; "
        f"excused (need network): {summary['excused_needs_network']}; failed: {summary['failed']}; "
        f"{summary['wall_seconds']} s wall, {summary['mean_task_seconds']} s per task. -> {args.out}"
    )
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
