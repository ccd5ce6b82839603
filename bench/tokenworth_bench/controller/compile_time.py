"""A cold ``tw.Controller`` (DB preset) over its first 30 tasks: XLA's compile time, this tree against a base.

Each side runs in a fresh process with ``PYTHONPATH`` pointing at its tree and no persistent compilation
cache; the sides are interleaved, ``--repeats`` rounds. A process sums XLA's backend-compile time from
``jax.monitoring`` (``/jax/core/compile/backend_compile_duration``, by compiled function), and reports its
import time, its wall time to the 30th task, its steady time per task over the next 100 tasks, and a digest
of every selection and decision (the two trees must make the same ones). Then, for this tree only, the
persistent compilation cache: one process fills a fresh cache directory, a second process is measured.

    python -m tokenworth_bench.controller.compile_time --base /work/wt-base [--repeats 4]

Writes ``bench/results/compile_time/compile_time.{md,json}``. Run as a file with ``--child`` it imports nothing
but ``tokenworth_jax`` (of whichever tree ``PYTHONPATH`` names).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parents[3]
OUT = HERE.parents[2] / "results" / "compile_time"  # bench/results (run as a file, it imports nothing of ours)
EVENT = "/jax/core/compile/backend_compile_duration"
TASKS, STEADY = 30, 100
WORDS = ("orders customers list count total price over under dollars year month city name product table rows "
         "average sum employees salary department join latest").split()


def child() -> dict[str, Any]:
    """The measured process: a cold Controller, 30 tasks, then 100 more timed."""
    t0 = time.perf_counter()
    import hashlib

    import jax
    import numpy as np
    from jax import monitoring

    import tokenworth_jax as tw

    t_import = time.perf_counter() - t0
    c0 = time.process_time()
    compiles: list[tuple[str, float]] = []
    monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiles.append((str(kw.get("fun_name", "")), secs)) if event == EVENT else None)
    rng = np.random.default_rng(0)
    digest = hashlib.sha256()
    ctl = tw.Controller(*tw.preset("db"))

    def task(i: int) -> None:
        q = " ".join(rng.choice(WORDS, 6))
        sel = ctl.select(q)
        digest.update(repr((sel.memory_id, sel.candidate_ids, sel.scores)).encode())
        reward = int(rng.random() < 0.6)
        ctl.observe(reward)
        if reward and rng.random() < 0.8:
            dec = ctl.offer(f"memory of task {i}: {q}", key_text=q)
            digest.update(repr((dec.code, dec.memory_id, dec.v_new)).encode())
        elif rng.random() < 0.5:
            ctl.end_task()

    for i in range(TASKS):
        task(i)
    t_first, cpu_first = time.perf_counter() - t0, time.process_time() - c0
    first = list(compiles)
    t1 = time.perf_counter()
    for i in range(TASKS, TASKS + STEADY):
        task(i)
    per_task = (time.perf_counter() - t1) / STEADY
    by_fn: dict[str, list[float]] = {}
    for name, secs in first:
        by_fn.setdefault(name, []).append(secs)
    return dict(import_s=t_import, wall_to_task_30_s=t_first, cpu_after_import_to_task_30_s=cpu_first, compile_s=sum(s for _, s in first),
                compiles=len(first), by_function={k: dict(n=len(v), s=sum(v)) for k, v in by_fn.items()},
                steady_ms_per_task=per_task * 1e3, later_compiles=len(compiles) - len(first),
                digest=digest.hexdigest(), jax=jax.__version__, backend=jax.default_backend())


def run_child(tree: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    environ.update(PYTHONPATH=str(tree), **(env or {}))
    proc = subprocess.run([sys.executable, str(HERE), "--child"], capture_output=True, text=True, env=environ,
                          cwd=tempfile.gettempdir())
    if proc.returncode:
        raise SystemExit(f"child on {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stats(xs: list[float]) -> dict[str, float]:
    return dict(min=min(xs), median=statistics.median(xs))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, help="the baseline tree (a git worktree of the base commit)")
    ap.add_argument("--base-label", default="eafa24d")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child()))
        return
    if args.base is None:
        ap.error("--base is required")
    sides = {"base": args.base.resolve(), "new": REPO}
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "new": []}
    for r in range(args.repeats):
        for side in (("base", "new") if r % 2 == 0 else ("new", "base")):  # interleaved, alternating first
            runs[side].append(run_child(sides[side]))
            x = runs[side][-1]
            print(f"round {r} {side}: compile {x['compile_s']:.2f} s in {x['compiles']} compiles, "
                  f"wall to task 30 {x['wall_to_task_30_s']:.2f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    same = len({x["digest"] for side in runs.values() for x in side}) == 1
    with tempfile.TemporaryDirectory() as cache:  # the persistent cache: a process fills it, the next reads it
        env = dict(JAX_COMPILATION_CACHE_DIR=cache, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
        cached = [run_child(REPO, env) for _ in range(2)]
    summary = {side: dict(compile_s=stats([x["compile_s"] for x in xs]),
                          wall_to_task_30_s=stats([x["wall_to_task_30_s"] for x in xs]),
                          import_s=stats([x["import_s"] for x in xs]),
                          cpu_after_import_to_task_30_s=stats([x["cpu_after_import_to_task_30_s"] for x in xs]),
                          steady_ms_per_task=stats([x["steady_ms_per_task"] for x in xs]),
                          compiles=xs[0]["compiles"]) for side, xs in runs.items()}
    ratio_min = summary["base"]["compile_s"]["min"] / summary["new"]["compile_s"]["min"]
    ratio_median = summary["base"]["compile_s"]["median"] / summary["new"]["compile_s"]["median"]

    def breakdown(side: str) -> str:
        names = sorted({k for x in runs[side] for k in x["by_function"]},
                       key=lambda k: -statistics.median(x["by_function"].get(k, {"s": 0})["s"] for x in runs[side]))
        return ", ".join(f"`{k}` {statistics.median(x['by_function'].get(k, {'s': 0})['s'] for x in runs[side]):.2f} s"
                         f" ({runs[side][0]['by_function'].get(k, {'n': 0})['n']}x)" for k in names
                         if statistics.median(x["by_function"].get(k, {"s": 0})["s"] for x in runs[side]) >= 0.01)

    b, n = summary["base"], summary["new"]

    def f2(d: dict[str, float]) -> str:
        return f"{d['min']:.2f} / {d['median']:.2f}"

    load = os.getloadavg()
    md = "\n".join([
        "# Cold start: a `tw.Controller` (DB preset) over its first 30 tasks",
        "",
        f"`python -m tokenworth_bench.controller.compile_time --base <worktree of {args.base_label}> --repeats "
        f"{args.repeats}`: each side a fresh process (`PYTHONPATH` = its tree), no persistent compilation cache, "
        f"interleaved; jax {runs['new'][0]['jax']}, backend {runs['new'][0]['backend']}, {os.cpu_count()} CPUs "
        f"(shared with other jobs: load average {load[0]:.1f} at the end). XLA compile = the sum of "
        f"`{EVENT}` events before task 30; min / median of {args.repeats}.",
        "",
        f"| | {args.base_label} | this tree |",
        "|---|---:|---:|",
        f"| XLA compile before task 30, s | {b['compile_s']['min']:.2f} / {b['compile_s']['median']:.2f} | "
        f"{n['compile_s']['min']:.2f} / {n['compile_s']['median']:.2f} |",
        f"| compiles | {b['compiles']} | {n['compiles']} |",
        f"| process wall to task 30 (import included), s | {b['wall_to_task_30_s']['min']:.2f} / "
        f"{b['wall_to_task_30_s']['median']:.2f} | {n['wall_to_task_30_s']['min']:.2f} / "
        f"{n['wall_to_task_30_s']['median']:.2f} |",
        f"| process CPU from the import to task 30, s | {f2(b['cpu_after_import_to_task_30_s'])} | "
        f"{f2(n['cpu_after_import_to_task_30_s'])} |",
        f"| import of jax + the library, s | {b['import_s']['median']:.2f} | {n['import_s']['median']:.2f} |",
        f"| steady host task after 30, ms | {b['steady_ms_per_task']['min']:.2f} / "
        f"{b['steady_ms_per_task']['median']:.2f} | {n['steady_ms_per_task']['min']:.2f} / "
        f"{n['steady_ms_per_task']['median']:.2f} |",
        "",
        f"**Compile time cut {ratio_min:.1f}x (min) / {ratio_median:.1f}x (median).** Same selections and decisions "
        f"on both trees, every run (a digest of each task's selection and decision): **{same}**.",
        "",
        f"Made of ({args.base_label}, median): {breakdown('base')}.",
        f"This tree (median): {breakdown('new')}.",
        "",
        f"With the persistent compilation cache (`JAX_COMPILATION_CACHE_DIR`, minimum compile time and entry size "
        f"0), this tree: the first process compiles {cached[0]['compile_s']:.2f} s (wall to task 30 "
        f"{cached[0]['wall_to_task_30_s']:.2f} s); the second compiles {cached[1]['compile_s']:.2f} s, wall to "
        f"task 30 {cached[1]['wall_to_task_30_s']:.2f} s (import {cached[1]['import_s']:.2f} s).",
        "",
    ])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile_time.md").write_text(md)
    (args.out / "compile_time.json").write_text(json.dumps(dict(runs=runs, summary=summary, same_results=same,
                                                                ratio_min=ratio_min, ratio_median=ratio_median,
                                                                persistent_cache=cached, loadavg=load), indent=1))
    print(md)
    if not same:
        raise SystemExit("the two trees made different selections or decisions")


if __name__ == "__main__":
    main()
