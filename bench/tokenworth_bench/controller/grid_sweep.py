"""The grid sweep users write: a 4 x 4 grid (``eta_max`` x ``lambda_krr``) over one 300-task DB stream,
with a reward that depends on the memory chosen, three ways:

* ``vmap``: ``jax.jit(jax.vmap(lambda s, h: tw.run(s, events, h, spec, reward_fn)))``, the plain JAX recipe;
* ``loop``: a Python loop of ``tw.run`` over the configurations (one compiled program, called C times);
* ``entry``: ``tw.run_batched(states, events, hps, spec, reward_fn)``, the documented entry point (``"auto"``).

Two streams (``--streams``), the same 300 tasks from 12 topics, each task succeeding on its own with
probability 1/2; what differs is what an injected memory does:

* ``learns`` (the headline): a memory from a task of the same topic whose id is a multiple of 3 makes the
  task succeed; any other memory leaves the task's own outcome. The controller learns which memories help:
  success about 0.8 (1/2 without memories).
* ``fails``: the same, but a memory from another topic makes the task fail. The first memory admitted is
  injected into every later task and fails most of them, so few successes offer memories: success about 0.05.
  (The figures before 0.3.0 were measured on this stream alone.)

The cost of a task depends on the stream (a success offers a memory, whose admission computes the worth of
the whole bank), so every figure is given with its stream's success rate.

Each path runs in a fresh process (no persistent compilation cache), the paths and the streams interleaved,
``--repeats`` rounds. A process reports: the first call's wall time, XLA's backend-compile time summed from
``jax.monitoring`` (``/jax/core/compile/backend_compile_duration``), the steady call's wall and CPU time
(best of ``--steady`` calls), each configuration's success rate, its memory ids chosen (C x T), and the
compiles a new grid (other values of the same hyperparameters) causes (must be 0). The parent counts, for
every path, the selections whose memory differs from the Python loop of ``tw.run`` (separate runs), checks
that ``tw.run_batched`` (on the CPU ``"loop"``, ``tw.run``'s own program) has none, and writes
``bench/results/grid_sweep/grid_sweep.{md,json}``.

    python -m tokenworth_bench.controller.grid_sweep [--repeats 3] [--tasks 300] [--streams learns,fails]
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

import numpy as np
from typing import Any

PATHS = ("vmap", "loop", "entry")
STREAMS = ("learns", "fails")
ETA = (0.05, 0.10, 0.20, 0.30)
LAMBDA = (0.01, 0.1, 1.0, 10.0)
ETA_NEW = (0.07, 0.15, 0.25, 0.4)  # the second grid: new values, same shapes
LAMBDA_NEW = (0.03, 0.3, 3.0, 30.0)
OUT = RESULTS / "grid_sweep"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def make_stream(spec: Any, tasks: int, stream: str, seed: int = 0, topics: int = 12) -> tuple[Any, Any]:
    """The events of ``tasks`` DB-preset tasks from ``topics`` topics (``seed`` draws them) and the ``reward_fn``
    of ``stream`` (the module docstring)."""
    import jax
    import jax.numpy as jnp

    import tokenworth_jax as tw

    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(topics, spec.dim))  # tasks come from a few topics: recall has something to find
    topic = rng.integers(0, topics, tasks)
    q = centres[topic] + 0.5 * rng.normal(size=(tasks, spec.dim))
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    events = tw.Event(query=jnp.asarray(q), reward=jnp.asarray(rng.random(tasks) < 0.5, jnp.int32),
                      memory=jnp.asarray(q), memory_id=jnp.arange(tasks, dtype=jnp.int32))

    topic_of = jnp.asarray(topic, jnp.int32)

    def reward_fn(event: tw.Event, sel: tw.Selection) -> jax.Array:
        # a memory helps when it comes from a task of the same topic whose id is a multiple of 3; on the "fails"
        # stream one from another topic hurts: the success depends on which memory the controller chose
        chosen = jnp.maximum(sel.memory_id, 0)
        same = (sel.memory_id >= 0) & (topic_of[chosen] == topic_of[event.memory_id])
        hurt = (sel.memory_id >= 0) & ~same if stream == "fails" else jnp.zeros((), bool)
        return jnp.where(same & (chosen % 3 == 0), jnp.int32(1), jnp.where(hurt, jnp.int32(0), event.reward))

    return events, reward_fn


def grid(etas: tuple[float, ...], lambdas: tuple[float, ...]) -> list[Any]:
    """The configurations of an ``eta_max`` x ``lambda_krr`` grid, DB preset."""
    import tokenworth_jax as tw

    return [tw.hparams("db", eta_max=e, lambda_krr=lam) for e in etas for lam in lambdas]


def child(path: str, tasks: int, steady: int, stream: str = "learns") -> dict[str, Any]:
    """One path over one stream, cold, in this process."""
    import jax
    from jax import monitoring

    import tokenworth_jax as tw

    compiles: list[float] = []
    monitoring.register_event_duration_secs_listener(
        lambda event, secs, **kw: compiles.append(secs) if event == COMPILE_EVENT else None)

    spec, _ = tw.preset("db")
    events, reward_fn = make_stream(spec, tasks, stream)

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

    def outputs(out: Any) -> Any:  # the StepOutput, (C, T, ...)
        if path == "loop":
            return jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *[o for _, o in out])
        return out[1]

    def success(out: Any) -> list[float]:
        return np.asarray(outputs(out).reward).mean(axis=1).astype(float).tolist()

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
    return dict(path=path, stream=stream, first_s=first, first_cpu_s=first_cpu, compile_s=compile_s,
                steady_wall_s=min(walls), steady_cpu_s=min(cpus), success=success(out),
                memory_ids=np.asarray(outputs(out).selection.memory_id).tolist(),
                success_new_grid=success(out_new), recompiles_new_grid=len(compiles) - n_before,
                strategy=tw.batching.resolve("auto", jax.vmap(lambda h: tw.init(spec, h))(tw.stack_hparams(
                    grid(ETA, LAMBDA)))) if path == "entry" else None,
                backend=jax.default_backend(), jax=jax.__version__)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--steady", type=int, default=2)
    ap.add_argument("--streams", default=",".join(STREAMS), help="comma-separated, of " + ", ".join(STREAMS))
    ap.add_argument("--child", choices=PATHS)
    ap.add_argument("--stream", choices=STREAMS, default=STREAMS[0], help="(the child's)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.tasks, args.steady, args.stream)))
        return
    streams = [x for x in args.streams.split(",") if x]
    if not streams or set(streams) - set(STREAMS):
        raise SystemExit(f"--streams must name some of {STREAMS}, got {args.streams!r}")
    runs: list[dict[str, Any]] = []
    for r in range(args.repeats):
        for stream in streams:
            for path in PATHS:
                load = os.getloadavg()[0]
                proc = subprocess.run([sys.executable, "-m", "tokenworth_bench.controller.grid_sweep", "--child", path,
                                       "--stream", stream, "--tasks", str(args.tasks), "--steady", str(args.steady)],
                                      capture_output=True, text=True,
                                      env={**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "0"})
                if proc.returncode:
                    raise SystemExit(f"{path} on {stream} failed:\n{proc.stderr[-3000:]}")
                runs.append({**json.loads(proc.stdout.strip().splitlines()[-1]), "round": r, "load_before": load})
                print(f"round {r} {stream} {path}: {runs[-1]['first_s']:.1f} s first, "
                      f"{runs[-1]['steady_wall_s']:.1f} s steady (load {load:.1f})", flush=True)
    loads = [x["load_before"] for x in runs] + [os.getloadavg()[0]]
    no_recompile = all(x["recompiles_new_grid"] == 0 for x in runs)
    summary: dict[str, Any] = {}
    sections, entry_exact = [], True
    for stream in streams:
        mine = [x for x in runs if x["stream"] == stream]
        separate = np.asarray(next(x for x in mine if x["path"] == "loop")["memory_ids"])  # separate tw.run calls
        success = float(np.mean(next(x for x in mine if x["path"] == "loop")["success"]))
        per_config = next(x for x in mine if x["path"] == "loop")["success"]
        rows, summary[stream] = [], dict(success=success, success_per_configuration=per_config)
        for path in PATHS:
            xs = [x for x in mine if x["path"] == path]
            differ = max(int((np.asarray(x["memory_ids"]) != separate).sum()) for x in xs)
            entry_exact &= path != "entry" or differ == 0
            s_: dict[str, Any] = {k: dict(min=min(x[k] for x in xs), median=statistics.median(x[k] for x in xs))
                                  for k in ("first_s", "first_cpu_s", "compile_s", "steady_wall_s", "steady_cpu_s")}
            s_["success"] = float(np.mean(xs[0]["success"]))
            s_["selections_unlike_separate_runs"] = differ
            summary[stream][path] = s_
            label = {"vmap": "`jax.vmap(tw.run)`", "loop": "Python loop of `tw.run`",
                     "entry": f"`tw.run_batched` (auto = `{xs[0]['strategy']}`)"}[path]
            rows.append(f"| {label} | {s_['success']:.2f} | {differ} | "
                        f"{s_['steady_wall_s']['min']:.1f} / {s_['steady_wall_s']['median']:.1f} | "
                        f"{s_['steady_cpu_s']['min']:.1f} / {s_['steady_cpu_s']['median']:.1f} | "
                        f"{s_['compile_s']['min']:.1f} / {s_['compile_s']['median']:.1f} | "
                        f"{s_['first_s']['min']:.1f} / {s_['first_s']['median']:.1f} | "
                        f"{s_['first_cpu_s']['min']:.1f} / {s_['first_cpu_s']['median']:.1f} |")
        n = separate.size
        sections += [
            f"## Stream `{stream}`: success {success:.2f} (per configuration {min(per_config):.2f}-{max(per_config):.2f})",
            "",
            f"| path | success | selections unlike separate `tw.run` calls (of {n:,}) | steady call, wall s | "
            "its CPU s | XLA compile s | first call (compile + run), wall s | its CPU s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    ref = runs[0]
    md = "\n".join([
        "# Grid sweep: 4 x 4 (eta_max x lambda_krr) x %d tasks, DB preset, reward depends on the memory chosen"
        % args.tasks,
        "",
        f"`python -m tokenworth_bench.controller.grid_sweep --repeats {args.repeats} --tasks {args.tasks} --streams "
        f"{','.join(streams)}`; backend {ref['backend']}, jax {ref['jax']}, {os.cpu_count()} CPUs shared with "
        f"other jobs: load average (1 min) {min(loads):.1f}-{max(loads):.1f} at the processes' starts (median "
        f"{statistics.median(loads):.1f}). Each path cold in its own process, paths and streams interleaved, "
        f"{args.repeats} rounds; min / median. The streams (the module docstring): `learns`, where injected memories "
        "help and the controller learns which, and `fails`, where the first memory admitted is injected into every "
        "later task and fails it.",
        "",
        *sections,
        "A selection unlike separate runs: `selection.memory_id` differs from the Python loop of `tw.run` (the "
        "strategies' guarantees: `tw.run_batched`'s docstring). Compiles for a new grid of values: "
        f"**{'none' if no_recompile else 'some'}**.",
        "",
    ])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grid_sweep.md").write_text(md)
    kept = [{k: v for k, v in x.items() if k != "memory_ids"} for x in runs]  # compared above; 4,800 ids a run
    (args.out / "grid_sweep.json").write_text(json.dumps(dict(runs=kept, summary=summary, no_recompile=no_recompile,
                                                              loads=loads), indent=1))
    print(md)
    if not (entry_exact and no_recompile):
        raise SystemExit("tw.run_batched's selections differ from separate runs, or a new grid recompiled")


if __name__ == "__main__":
    main()
