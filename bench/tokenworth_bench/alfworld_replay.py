"""ALFWorld gold replay: every walkthrough wins in the real engine; wrong plans do not.

For each manifest episode (in manifest order, through the project's own environment and engine workers):

* **gold**: the walkthrough, one ``Action:`` reply per command; it must win exactly at its last command,
  with every command admissible when sent;
* **truncated**: the walkthrough without its last command, then nothing (must not win);
* **reversed**: the walkthrough backwards (must not win; a one-command walkthrough has no reversed plan).

(A *shuffled* plan is no "must fail" check: 9 of 334 games in phase 1 won with another valid order.)
Resumable: one JSON line per game in ``<out>.jsonl``; a rerun skips the games already there. Writes
``<out>.json`` (summary) and ``<out>.md``. ``python -m tokenworth_bench alfworld-replay --help``.
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import concurrent.futures
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.benchmarks.alfworld.env import ALFWorldEnvironment
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.benchmarks.alfworld.tasks import ALFWorldTask

OUT = RESULTS / "alfworld_replay"


def play(env: ALFWorldEnvironment, task: ALFWorldTask, commands: Sequence[str]) -> dict[str, Any]:
    """Play ``commands`` from a fresh start of ``task``; stop at a win."""
    env.reset(task)
    admissible, won_at, cpu = [], None, []
    for i, command in enumerate(commands):
        result = env.step(f"Action: {command}")
        if result.repair:  # not admissible: a real agent would get its repair call; here the plan has failed
            admissible.append(False)
            break
        admissible.append(True)
        if result.status == "completed":
            won_at = i
            break
        if result.done:
            break
    judge = env.judge().details
    return {"won": bool(judge["won"]), "won_at": won_at, "admissible": all(admissible) and bool(admissible),
            "steps": judge["steps"], "cpu": judge["engine_cpu_s"]}


def replay(env: ALFWorldEnvironment, task: ALFWorldTask, wrong: bool) -> dict[str, Any]:
    walk = list(task.walkthrough)
    t0 = time.perf_counter()
    gold = play(env, task, walk)
    row: dict[str, Any] = {"index": task.sample_index, "game": task.game, "split": task.split,
                           "task_type": task.task_type, "walkthrough_len": len(walk),
                           "gold_won": gold["won"], "gold_exact": gold["won"] and gold["won_at"] == len(walk) - 1,
                           "gold_admissible": gold["admissible"], "gold_cpu_s": gold["cpu"]}
    if wrong:
        row["truncated_won"] = play(env, task, walk[:-1])["won"] if len(walk) > 1 else None
        row["reversed_won"] = play(env, task, walk[::-1])["won"] if len(walk) > 1 else None
    row["seconds"] = round(time.perf_counter() - t0, 3)
    return row


def summarise(rows: list[dict[str, Any]], total: int) -> dict[str, Any]:
    def count(key: str, split: str | None = None) -> int:
        return sum(bool(r.get(key)) for r in rows if split is None or r["split"] == split)

    splits = sorted({r["split"] for r in rows})
    return {"episodes_in_manifest": total, "games_replayed": len(rows),
            "per_split": {s: {"games": sum(r["split"] == s for r in rows), "gold_wins": count("gold_won", s),
                              "gold_exact": count("gold_exact", s),
                              "truncated_wins": count("truncated_won", s), "reversed_wins": count("reversed_won", s)}
                          for s in splits},
            "gold_wins": count("gold_won"), "gold_exact_and_admissible": sum(r["gold_exact"] and r["gold_admissible"]
                                                                              for r in rows),
            "truncated_wins": count("truncated_won"), "reversed_wins": count("reversed_won"),
            "gold_engine_cpu_s_mean": round(statistics.fmean(r["gold_cpu_s"] for r in rows), 3) if rows else None,
            "failures": [r["game"] for r in rows if not (r["gold_exact"] and r["gold_admissible"])
                         or r.get("truncated_won") or r.get("reversed_won")]}


def write(out: Path, summary: dict[str, Any], wall_s: float) -> None:
    summary = {**summary, "wall_s_this_run": round(wall_s, 1)}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = ["# ALFWorld gold replay (bench/tokenworth_bench/alfworld_replay.py)", "",
             f"{summary['games_replayed']} of {summary['episodes_in_manifest']} manifest episodes replayed in the real "
             "TextWorld engine (the project's environment and engine workers).", "",
             "| split | games | walkthrough wins | wins exactly at its last command | truncated wins | reversed wins |",
             "|---|---:|---:|---:|---:|---:|"]
    for split, c in summary["per_split"].items():
        lines.append(f"| {split} | {c['games']} | {c['gold_wins']} | {c['gold_exact']} | {c['truncated_wins']} | "
                     f"{c['reversed_wins']} |")
    lines += ["", f"Failures: {summary['failures'] or 'none'}. Mean engine CPU per walkthrough (load + steps): "
                  f"{summary['gold_engine_cpu_s_mean']} s."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="tokenworth-bench alfworld-replay", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=None, help="the data root (default: $TOKENWORTH_DATA_DIR)")
    parser.add_argument("--limit", type=int, default=None, help="the first N manifest episodes (default: all 574)")
    parser.add_argument("--no-wrong-plans", action="store_true", help="replay the walkthroughs only")
    parser.add_argument("--workers", type=int, default=2, help="games played at once (engine workers)")
    parser.add_argument("--out", type=Path, default=OUT, help="result path without suffix (.jsonl/.json/.md)")
    args = parser.parse_args(argv)
    tasks = load_tasks("alfworld", args.data_dir)
    total = len(tasks)
    tasks = tasks[: args.limit] if args.limit else tasks
    log = args.out.with_suffix(".jsonl")
    log.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(line)["index"]: json.loads(line) for line in log.read_text().splitlines()} if log.exists() else {}
    todo = [t for t in tasks if t.sample_index not in done]
    lock, started = threading.Lock(), time.perf_counter()
    envs = [ALFWorldEnvironment(max_rounds=Budget.for_env("alfworld").max_rounds) for _ in range(args.workers)]
    free = list(envs)

    def one(task: ALFWorldTask) -> None:
        with lock:
            env = free.pop()
        try:
            row = replay(env, task, not args.no_wrong_plans)
        finally:
            with lock:
                free.append(env)
        with lock:
            done[task.sample_index] = row
            with log.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            if len(done) % 25 == 0:
                print(f"{len(done)} games replayed, {time.perf_counter() - started:.0f} s", flush=True)

    with concurrent.futures.ThreadPoolExecutor(args.workers) as executor:
        for future in [executor.submit(one, t) for t in todo]:
            future.result()
    rows = [done[t.sample_index] for t in tasks if t.sample_index in done]
    summary = summarise(rows, total)
    write(args.out, summary, time.perf_counter() - started)
    print(args.out.with_suffix(".md").read_text())
    return summary


__all__ = ["main", "play", "replay", "summarise"]

if __name__ == "__main__":
    main()
