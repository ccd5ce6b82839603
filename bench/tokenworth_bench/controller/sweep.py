"""Benchmark 4: sweep throughput. C configurations x T tasks through the fused step over a
pre-featurised stream, as one compiled call: ``tw.run_batched`` with its two strategies
(``"map"``: a loop over configurations inside the program, the CPU default; ``"vmap"``:
batched array ops with refits gated on any configuration due), and a plain
``jax.vmap(run)`` (every refit runs at every step under vmap; timed only where 2 <= C and C x T <= 2000).

Compared against (a) a Python loop over configurations, each a jitted ``tw.run`` (the loop
times at most ``Size.sweep_loop_max_configs`` configurations and extrapolates linearly to
C, saying so), and (b) the NumPy reference, timed on one configuration for
``Size.numpy_sweep_tasks`` tasks and extrapolated to C x T (it says so).

Configurations cycle through the sensitivity grid of the paper's Table A3 (:data:`GRID`).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any, Callable

import jax

import tokenworth_jax as tw

from .common import Size, block, db_setup, md_table, reference_module, synthetic_stream, time_call, write_result

# Table A3: one hyperparameter at a time away from the DB default (spec §9).
GRID: tuple[tuple[str, float], ...] = (
    ("eta_max", 0.05), ("eta_max", 0.10), ("eta_max", 0.20), ("eta_max", 0.30),
    ("lambda_w", 0.03), ("lambda_w", 0.3), ("lambda_w", 1.0),
    ("beta_w", 0.25), ("beta_w", 0.75), ("beta_w", 1.0),
    ("base_interval", 25), ("base_interval", 100),
    ("beta_m", 0.10), ("beta_m", 0.50), ("beta_m", 0.75),
    ("krr_interval", 25), ("krr_interval", 100),
    ("agop_interval", 100), ("agop_interval", 400),
    ("gamma", 0.5), ("gamma", 2.0),
)


def configs(n: int) -> list[tw.HParams]:
    """The default first, then the Table A3 grid, cycled to ``n`` configurations."""
    out = [tw.hparams("db")]
    i = 0
    while len(out) < n:
        name, value = GRID[i % len(GRID)]
        out.append(tw.hparams("db", **{name: value}))
        i += 1
    return out[:n]


def vmapped_run(spec: tw.Spec) -> Callable[..., Any]:
    """jit(vmap(run)) over (state, hparams); the event stream is shared by all configurations."""
    return jax.jit(jax.vmap(lambda s, e, h: tw.run(s, e, h, spec), in_axes=(0, None, 0)))


def init_many(spec: tw.Spec, hps: tw.HParams) -> tw.State:
    return jax.vmap(functools.partial(tw.init, spec))(hps)


def run(size: Size, out_dir: Path) -> dict[str, Any]:
    spec, _ = db_setup(size)
    T = size.sweep_tasks
    stream = synthetic_stream(T, spec.dim, seed=1)
    events = stream.events()
    fn = vmapped_run(spec)
    rows, results = [], []
    for C in size.sweep_configs:
        cfgs = configs(C)
        hps = tw.stack_hparams(cfgs)
        states = block(init_many(spec, hps))
        reps = 1 if C * T >= 20_000 else 2
        bm, bm_compile = time_call(lambda: tw.run_batched(states, events, hps, spec, strategy="map"), reps)
        bv, bv_compile = time_call(lambda: tw.run_batched(states, events, hps, spec, strategy="vmap"), reps)
        if C >= 2 and C * T <= 2_000:  # plain vmap runs every refit at every step (and C = 1 hits a slow batch-of-one path)
            vm, vm_compile = time_call(lambda: fn(states, events, hps), reps)
        else:
            vm, vm_compile = None, None
        n_loop = min(C, size.sweep_loop_max_configs)

        def loop() -> Any:
            return [tw.run(tw.init(spec, h), events, h, spec) for h in cfgs[:n_loop]]

        lp, lp_compile = time_call(loop, 1 if n_loop * T >= 20_000 else 2)
        loop_s = lp["median_ms"] / 1e3 * C / n_loop
        vm_s = vm["median_ms"] / 1e3 if vm else None
        map_s, bvmap_s = bm["median_ms"] / 1e3, bv["median_ms"] / 1e3
        res = dict(configs=C, tasks=T, batched_map_s=map_s, batched_map_compile_s=bm_compile,
                   batched_map_config_tasks_per_s=C * T / map_s, batched_vmap_s=bvmap_s,
                   batched_vmap_compile_s=bv_compile, batched_vmap_config_tasks_per_s=C * T / bvmap_s,
                   vmap_s=vm_s, vmap_compile_s=vm_compile,
                   vmap_config_tasks_per_s=C * T / vm_s if vm_s else None, loop_s=loop_s, loop_timed_configs=n_loop,
                   loop_extrapolated=n_loop < C, loop_compile_s=lp_compile, loop_config_tasks_per_s=C * T / loop_s)
        results.append(res)
    # NumPy reference: one configuration, extrapolated.
    ref_mod = reference_module()
    nT = min(size.numpy_sweep_tasks, T)
    ref = ref_mod.ReferenceController(spec, configs(1)[0])
    t0 = time.perf_counter()
    for i in range(nT):
        r = int(stream.rewards[i])
        ref.step(stream.queries[i], r, stream.memories[i] if r else None, int(stream.ids[i]))
    numpy_per_task = (time.perf_counter() - t0) / nT
    for res in results:
        res["numpy_s_extrapolated"] = numpy_per_task * res["configs"] * res["tasks"]
        res["numpy_config_tasks_per_s"] = 1.0 / numpy_per_task
        rows.append([res["configs"], res["tasks"], res["batched_map_s"], res["batched_map_config_tasks_per_s"],
                     res["batched_vmap_s"], res["batched_vmap_config_tasks_per_s"],
                     res["vmap_s"] if res["vmap_s"] else "–",
                     res["vmap_config_tasks_per_s"] if res["vmap_config_tasks_per_s"] else "–",
                     res["loop_s"], f"{res['loop_config_tasks_per_s']:.4g}" + (" (extrap.)" if res["loop_extrapolated"] else ""),
                     res["numpy_s_extrapolated"], res["numpy_config_tasks_per_s"]])
    target = next((r for r in results if r["configs"] == 256 and r["tasks"] == 500), None)
    payload = dict(size=size.name, spec=tw.presets.describe(spec), results=results, numpy_tasks_timed=nT,
                   numpy_per_task_ms=numpy_per_task * 1e3,
                   target=dict(configs=256, tasks=500, seconds=60.0,
                               measured_s=target["batched_map_s"] if target else None),
                   notes=("batched map/vmap: tw.run_batched with strategy='map' / 'vmap'; plain vmap: one "
                          "jit(vmap(lax.scan)) call (only where 2 <= C and C x T <= 2000); loop: a Python loop of jitted tw.run per config "
                          "(timed on loop_timed_configs, scaled linearly to C); NumPy: the float64 reference on one "
                          f"config for {nT} tasks, scaled linearly to C x T."))
    text = md_table(["C", "T", "batched map s", "map cfg-tasks/s", "batched vmap s", "vmap-gated cfg-tasks/s",
                     "plain vmap s", "plain vmap cfg-tasks/s", "loop s", "loop cfg-tasks/s",
                     "NumPy s (extrap.)", "NumPy cfg-tasks/s"], rows)
    text += f"\n{payload['notes']}\n"
    write_result(out_dir, "sweep", payload, text)
    return payload
