"""What the per-task commit (record + checkpoint) costs in a TokenWorth run.

``python -m tokenworth_bench.checkpoint_cost [--tasks N] [--out bench/results]`` runs the same DB stream
(simulated backbone) three ways in one process, after a warm-up that compiles the controller:

* ``sync_every_task``: the record, the checkpoint and its durable copy fsynced after every task
  (the old commit synced the record and the checkpoint);
* ``group_commit``: the record and checkpoint replaced every task, fsynced every 5 s and at the
  end (:class:`tokenworth_agent.storage.checkpoint.CheckpointWriter`, the default);
* ``no_checkpoint``: checkpoint only at the end (the floor: the cost of the tasks themselves).

It reports ms per task and the commit's share, and the checkpoint's size, to
``<out>/checkpoint_cost.{md,json}``. Times depend on the disk and on the load of the machine.
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    import tokenworth_agent.storage.checkpoint as checkpoint
    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.tasks import load_tasks
    from tokenworth_agent.experiment.runner import run_stream

    tasks = load_tasks("db", args.data_dir, limit=args.tasks)
    budget = Budget.for_env("db")
    backbone = make_backbone("sim", seed=0)
    scratch = Path(tempfile.mkdtemp(prefix="tokenworth-ckpt-bench-", dir=args.out if args.out.exists() else None))
    modes = {"sync_every_task": {"durable_every_s": 0.0}, "group_commit": {},
             "no_checkpoint": {"checkpoint_every": 10**9}}
    try:
        run_stream("tokenworth", "db", tasks[:3], backbone, budget, 0, scratch / "warmup")
        times: dict[str, list[float]] = {m: [] for m in modes}
        for repeat in range(args.repeats):
            for mode, options in modes.items():
                out = scratch / f"{mode}-{repeat}"
                started = time.perf_counter()
                run_stream("tokenworth", "db", tasks, backbone, budget, 0, out, **options)
                times[mode].append((time.perf_counter() - started) / len(tasks) * 1000)
        size = (scratch / f"group_commit-0" / "tokenworth" / "checkpoint.pkl").stat().st_size
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    per_task = {m: min(v) for m, v in times.items()}
    floor = per_task["no_checkpoint"]
    result = {"tasks": len(tasks), "repeats": args.repeats, "checkpoint_bytes": size,
              "ms_per_task": per_task, "commit_ms_per_task": {m: v - floor for m, v in per_task.items()},
              "commit_share": {m: (v - floor) / v for m, v in per_task.items()},
              "durable_every_s": checkpoint.DURABLE_EVERY_S, "machine": platform.processor() or platform.machine()}
    lines = ["# checkpoint_cost", "",
             f"TokenWorth on the first {len(tasks)} DB tasks, simulated backbone; best of {args.repeats} per mode, "
             f"measured in one process (A vs B). Checkpoint size: {size / 1e6:.2f} MB.", "",
             "| commit | ms / task | commit ms / task | commit share |", "|---|---:|---:|---:|"]
    for mode in modes:
        lines.append(f"| {mode} | {per_task[mode]:.1f} | {per_task[mode] - floor:.1f} | "
                     f"{100 * (per_task[mode] - floor) / per_task[mode]:.0f} % |")
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "checkpoint_cost.md", "\n".join(lines) + "\n")
    atomic_write_json(args.out / "checkpoint_cost.json", result)
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
