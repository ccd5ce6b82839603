"""The grid sweep users write: a 4 x 4 grid (``eta_max`` x ``lambda_krr``) over one 300-task DB stream,
with a reward that depends on the memory chosen, three ways:

* ``vmap``: ``jax.jit(jax.vmap(lambda s, h: tw.run(s, events, h, spec, reward_fn)))``, the plain JAX recipe;
* ``loop``: a Python loop of ``tw.run`` over the configurations (one compiled program, called C times);
* ``entry``: ``tw.run_batched(states, events, hps, spec, reward_fn)``, the documented entry point (``"auto"``).

Each path runs in a fresh process (no persistent compilation cache), the paths interleaved, ``--repeats``
rounds. A process reports: the first call's wall time, XLA's backend-compile time summed from
``jax.monitoring`` (``/jax/core/compile/backend_compile_duration``), the steady call's wall and CPU time
(best of ``--steady`` calls), each configuration's success rate, and the compiles a new grid (other values
of the same hyperparameters) causes (must be 0). The parent checks that every path gives the same success
rates and writes ``bench/results/grid_sweep/grid_sweep.{md,json}``.

    python -m tokenworth_bench.controller.grid_sweep [--repeats 2] [--tasks 300]
"""

from __future__ import annotations

from ..paths import RESULTS
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PATHS = ("vmap", "loop", "entry")
ETA = (0.05, 0.10, 0.20, 0.30)
LAMBDA = (0.01, 0.1, 1.0, 10.0)
ETA_NEW = (0.07, 0.15, 0.25, 0.4)  # the second grid: new values, same shapes
LAMBDA_NEW = (0.03, 0.3, 3.0, 30.0)
OUT = RESULTS / "grid_sweep"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def child(path: str, tasks: int, steady: int) -> dict[str, Any]:
    """One path, cold, in this process."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import monitoring

    import tokenworth_jax as tw

    compiles: list[float] = []
    monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiles.append(secs) if event == COMPILE_EVENT else None)

    spec, _ = tw.preset("db")
    rng = np.random.default_rng(0)
    topics = rng.normal(size=(12, spec.dim))  # tasks come from 12 topics: recall has something to find
    topic = rng.integers(0, 12, tasks)
    q = topics[topic] + 0.5 * rng.normal(size=(tasks, spec.dim))
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    events = tw.Event(query=jnp.asarray(q), reward=jnp.asarray(rng.random(tasks) < 0.5, jnp.int32),
                      memory=jnp.asarray(q), memory_id=jnp.arange(tasks, dtype=jnp.int32))

    topic_of = jnp.asarray(topic, jnp.int32)

    def reward_fn(event: tw.Event, sel: tw.Selection) -> jax.Array:
        # a memory helps when it comes from a task of the same topic whose id is a multiple of 3, and hurts when
        # it comes from another topic: the success depends on which memory the controller chose
        chosen = jnp.maximum(sel.memory_id, 0)
        same = (sel.memory_id >= 0) & (topic_of[chosen] == topic_of[event.memory_id])
        hurt = (sel.memory_id >= 0) & ~same
        return jnp.where(same & (chosen % 3 == 0), jnp.int32(1), jnp.where(hurt, jnp.int32(0), event.reward))

    def grid(etas: tuple[float, ...], lambdas: tuple[float, ...]) -> list[tw.HParams]:
        return [tw.hparams("db", eta_max=e, lambda_krr=lam) for e in etas for lam in lambdas]

    vmapped = jax.jit(jax.vmap(lambda s, h: tw.run(s, events, h, spec, reward_fn)))  # one jit for both grids

    def runner(cfgs: list[tw.HParams]) -> Any:
        if path == "loop":
            states = [tw.init(spec, h) for h in cfgs]
            return lambda: [tw.run(s, events, h, spec, reward_fn) for s, h in zip(states, cfgs)]
        hps = tw.stack_hparams(cfgs)
        states = jax.vmap(lambda h: tw.init(spec, h))(hps)
        if path == "vmap":
            return lambda: vmapped(states, hps)
        return lambda: tw.run_batched(states, events, hps, spec, reward_fn)

    def success(out: Any) -> list[float]:
        if path == "loop":
            return [float(np.mean(np.asarray(o.reward))) for _, o in out]
        return np.asarray(out[1].reward).mean(axis=1).astype(float).tolist()

    call = runner(grid(ETA, LAMBDA))
    before = sum(compiles)
    t0, c0 = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(call())
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    compile_s = sum(compiles) - before
    walls, cpus = [], []
    for _ in range(steady):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(call())
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    n_before = len(compiles)
    new = runner(grid(ETA_NEW, LAMBDA_NEW))
    out_new = jax.block_until_ready(new())
    return dict(path=path, first_s=first, first_cpu_s=first_cpu, compile_s=compile_s, steady_wall_s=min(walls), steady_cpu_s=min(cpus),
                success=success(out), success_new_grid=success(out_new), recompiles_new_grid=len(compiles) - n_before,
                strategy=tw.batching.resolve("auto", jax.vmap(lambda h: tw.init(spec, h))(tw.stack_hparams(
                    grid(ETA, LAMBDA)))) if path == "entry" else None,
                backend=jax.default_backend(), jax=jax.__version__)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--steady", type=int, default=2)
    ap.add_argument("--child", choices=PATHS)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.tasks, args.steady)))
        return
    runs: list[dict[str, Any]] = []
    for r in range(args.repeats):
        for path in PATHS:
            proc = subprocess.run([sys.executable, "-m", "tokenworth_bench.controller.grid_sweep", "--child", path,
                                   "--tasks", str(args.tasks), "--steady", str(args.steady)],
                                  capture_output=True, text=True, env={**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "0"})
            if proc.returncode:
                raise SystemExit(f"{path} failed:\n{proc.stderr[-3000:]}")
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"round {r} {path}: {runs[-1]['first_s']:.1f} s first, {runs[-1]['steady_wall_s']:.1f} s steady",
                  flush=True)
    ref = runs[0]
    same = all(x["success"] == ref["success"] and x["success_new_grid"] == ref["success_new_grid"] for x in runs)
    no_recompile = all(x["recompiles_new_grid"] == 0 for x in runs)
    rows = []
    summary = {}
    for path in PATHS:
        xs = [x for x in runs if x["path"] == path]
        s = {k: dict(min=min(x[k] for x in xs), median=statistics.median(x[k] for x in xs))
             for k in ("first_s", "first_cpu_s", "compile_s", "steady_wall_s", "steady_cpu_s")}
        s["total_s"] = dict(min=min(x["first_s"] + x["steady_wall_s"] for x in xs),
                            median=statistics.median(x["first_s"] + x["steady_wall_s"] for x in xs))
        summary[path] = s
        label = {"vmap": "`jax.vmap(tw.run)`", "loop": "Python loop of `tw.run`",
                 "entry": f"`tw.run_batched` (auto = `{xs[0]['strategy']}`)"}[path]
        rows.append(f"| {label} | {s['steady_wall_s']['min']:.1f} / {s['steady_wall_s']['median']:.1f} | "
                    f"{s['steady_cpu_s']['min']:.1f} | {s['compile_s']['min']:.1f} / {s['compile_s']['median']:.1f} | "
                    f"{s['first_s']['min']:.1f} / {s['first_s']['median']:.1f} | {s['first_cpu_s']['min']:.1f} |")
    load = os.getloadavg()
    md = "\n".join([
        "# Grid sweep: 4 x 4 (eta_max x lambda_krr) x %d tasks, DB preset, reward depends on the memory chosen" % args.tasks,
        "",
        f"`python -m tokenworth_bench.controller.grid_sweep --repeats {args.repeats} --tasks {args.tasks}`; "
        f"backend {ref['backend']}, jax {ref['jax']}, {os.cpu_count()} CPUs, load average at the end "
        f"{load[0]:.1f}. Each path cold in its own process, interleaved, {args.repeats} rounds; min / median.",
        "",
        "| path | steady call, wall s | its CPU s | XLA compile s | first call (compile + run), wall s | its CPU s |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Identical success rates on every path and round: **{same}**; compiles for a new grid of values: "
        f"**{'none' if no_recompile else 'some'}**.",
        "",
    ])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grid_sweep.md").write_text(md)
    (args.out / "grid_sweep.json").write_text(json.dumps(dict(runs=runs, summary=summary, identical_success=same,
                                                              no_recompile=no_recompile, loadavg=load), indent=1))
    print(md)
    if not (same and no_recompile):
        raise SystemExit("the paths disagree or a new grid recompiled")


if __name__ == "__main__":
    main()
