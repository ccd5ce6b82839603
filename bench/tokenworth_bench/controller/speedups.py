"""Benchmark: relative speedups of the redesigned paths, each pair measured in one process.

Every comparison runs A and B interleaved (A B A B ...), from the same pre-filled state and
over the same window, and reports both wall time and process CPU time (CPU time is the more
robust number on a shared machine; on a quiet one they agree). Pairs:

1. ``incremental``: fused ``tw.run`` per task, full worth vs incremental worth (the incremental scorer);
2. ``host``: the host :class:`tokenworth_jax.Controller` (one fused device call per task)
   vs the same protocol as four separate jitted calls (select, observe, offer, end_task),
   each against the fused ``tw.run`` (issue target: host within 1.3x of ``tw.run``);
3. ``batched``: C configurations over T tasks, ``tw.run_batched`` (``vmap`` and ``map``)
   vs a Python loop of ``tw.run``, full and incremental.

Every task of the window succeeds, so the admission runs on every task.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import tokenworth_jax as tw

from .common import Size, block, db_setup, md_table, prefill, synthetic_stream, write_result


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, dict[str, float]]:
    """Best-of-``repeats`` wall and CPU seconds per function, calls interleaved; one warm-up each."""
    for fn in fns.values():
        block(fn())
    best = {k: [np.inf, np.inf] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            w0, c0 = _clock()
            block(fn())
            w1, c1 = _clock()
            best[k][0] = min(best[k][0], w1 - w0)
            best[k][1] = min(best[k][1], c1 - c0)
    return {k: dict(wall_s=v[0], cpu_s=v[1]) for k, v in best.items()}


def _host_fused(spec: tw.Spec, hp: tw.HParams, state: tw.State, q: np.ndarray, m: np.ndarray) -> Callable[[], Any]:
    def go() -> Any:
        ctl = tw.Controller(spec, hp)
        ctl._state = jax.tree_util.tree_map(jnp.copy, state)  # the pre-filled state (the host donates its buffers)
        for i in range(q.shape[0]):
            ctl.select(q[i])
            ctl.observe(1)
            ctl.offer("memory", key_text=m[i])
            ctl.end_task()
        return ctl.state

    return go


def _host_separate(spec: tw.Spec, hp: tw.HParams, state: tw.State, q: np.ndarray, m: np.ndarray) -> Callable[[], Any]:
    """The pre-fusion host pattern: four jitted calls per task, each result fetched to the host."""

    def go() -> Any:
        s = state
        f = spec.float_dtype
        for i in range(q.shape[0]):
            s, sel = tw.select(s, jnp.asarray(q[i], f), hp, spec)
            jax.device_get(sel)
            s = tw.observe(s, jnp.int32(1), hp, spec)
            s, dec = tw.offer(s, jnp.asarray(m[i], f), jnp.int32(i), hp, spec)
            jax.device_get(dec)
            s = tw.end_task(s, spec)
        return s

    return go


def per_task_ms(r: dict[str, float], n: int) -> dict[str, float]:
    return dict(wall_ms=1e3 * r["wall_s"] / n, cpu_ms=1e3 * r["cpu_s"] / n)


def run(size: Size, out_dir: Path) -> dict[str, Any]:
    spec_full, hp = db_setup(size)
    spec_inc = spec_full._replace(scorer=tw.scorers.incremental())
    n_pre, n_win = size.prefill_tasks, size.window
    stream = synthetic_stream(n_pre + n_win, spec_full.dim, seed=0)
    events = stream.events(n_pre, n_pre + n_win, all_success=True)
    q = np.asarray(stream.queries[n_pre:n_pre + n_win], np.float64)
    m = np.asarray(stream.memories[n_pre:n_pre + n_win], np.float64)
    repeats = max(2, size.window_repeats)
    states = {name: prefill(spec, hp, stream, n_pre) for name, spec in (("full", spec_full), ("incremental", spec_inc))}
    specs = {"full": spec_full, "incremental": spec_inc}

    # 1 + 2: fused run, host fused, host separate; full and incremental
    fns = {}
    for name, spec in specs.items():
        st = states[name]
        fns[f"run/{name}"] = (lambda st=st, spec=spec: tw.run(st, events, hp, spec))
        fns[f"host_fused/{name}"] = _host_fused(spec, hp, st, q, m)
        fns[f"host_separate/{name}"] = _host_separate(spec, hp, st, q, m)
    timed = {k: per_task_ms(v, n_win) for k, v in interleaved(fns, repeats).items()}

    # 3: batched configurations vs a Python loop of tw.run
    C, T = size.speedup_configs, size.speedup_tasks
    bstream = synthetic_stream(T, spec_full.dim, seed=1)
    bevents = bstream.events()
    grid = [tw.hparams("db", eta_max=float(e), gamma=float(g)) for e in np.linspace(0.05, 0.3, 8)
            for g in (0.5, 1.0, 2.0, 4.0)]
    configs = [grid[i % len(grid)] for i in range(C)]
    hps = tw.stack_hparams(configs)
    bfns = {}
    for name, spec in specs.items():
        init = jax.vmap(functools.partial(tw.init, spec))(hps)
        init_one = [tw.init(spec, h) for h in configs]
        for strategy in ("vmap", "map"):
            bfns[f"run_batched[{strategy}]/{name}"] = (
                lambda init=init, spec=spec, strategy=strategy: tw.run_batched(init, bevents, hps, spec, strategy=strategy))
        bfns[f"loop_of_run/{name}"] = (
            lambda init_one=init_one, spec=spec: [tw.run(s, bevents, h, spec) for s, h in zip(init_one, configs)])
    btimed = {k: dict(wall_s=v["wall_s"], cpu_s=v["cpu_s"]) for k, v in interleaved(bfns, 1).items()}

    def ratio(a: str, b: str, table: dict[str, dict[str, float]], key: str) -> float:
        return table[a][key] / table[b][key]

    speedups = {}
    for clock in ("wall_ms", "cpu_ms"):
        speedups[clock] = dict(
            incremental_over_full_run=ratio("run/full", "run/incremental", timed, clock),
            host_separate_over_fused_full=ratio("host_separate/full", "host_fused/full", timed, clock),
            host_separate_over_fused_incremental=ratio("host_separate/incremental", "host_fused/incremental", timed,
                                                       clock),
            host_fused_over_run_full=ratio("host_fused/full", "run/full", timed, clock),
            host_fused_over_run_incremental=ratio("host_fused/incremental", "run/incremental", timed, clock),
        )
    bclock = {"wall_ms": "wall_s", "cpu_ms": "cpu_s"}
    for clock, key in bclock.items():
        for name in specs:
            for strategy in ("vmap", "map"):
                speedups[clock][f"loop_over_batched[{strategy}]/{name}"] = ratio(
                    f"loop_of_run/{name}", f"run_batched[{strategy}]/{name}", btimed, key)
    payload = dict(size=size.name, spec=tw.presets.describe(spec_full), prefill_tasks=n_pre, window=n_win, repeats=repeats,
                   per_task=timed, batched=dict(configs=C, tasks=T, seconds=btimed), speedups=speedups,
                   targets=dict(host_within_1_3x_of_run=dict(
                       full=speedups["cpu_ms"]["host_fused_over_run_full"] <= 1.3,
                       incremental=speedups["cpu_ms"]["host_fused_over_run_incremental"] <= 1.3)))
    write_result(out_dir, "speedups", payload, markdown(payload))
    return payload


def markdown(p: dict[str, Any]) -> str:
    rows = [[k, v["wall_ms"], v["cpu_ms"]] for k, v in p["per_task"].items()]
    text = f"Per task, {p['window']}-task window after {p['prefill_tasks']} tasks, all successes (best of {p['repeats']}):\n\n"
    text += md_table(["path / worth", "wall ms", "CPU ms"], rows)
    b = p["batched"]
    text += f"\n{b['configs']} configurations x {b['tasks']} tasks:\n\n"
    text += md_table(["path / worth", "wall s", "CPU s"], [[k, v["wall_s"], v["cpu_s"]] for k, v in b["seconds"].items()])
    text += "\nSpeedups (ratio of times; > 1 means the second path is faster):\n\n"
    text += md_table(["comparison", "wall", "CPU"],
                     [[k, p["speedups"]["wall_ms"][k], p["speedups"]["cpu_ms"][k]] for k in p["speedups"]["wall_ms"]])
    return text
