"""Why TokenWorth+'s no-harm guard shut on a seed: its count of the past, split by cause.

The guard (:mod:`tokenworth_jax.plus.guard`) counts each injection r of the lift window by its
outcome against the no-memory probability it assumes, y_r − q_r with q_r = σ(offset_r). In the lab
(:mod:`tokenworth_bench.rank.lab`) the simulator also knows each task's true success probability with the
injected memory, p_r, and without one, p₀_r. The count then splits exactly:

    Σ(y − q)  =  Σ(y − p)  +  Σ(p − p₀)  +  Σ(p₀ − q)
     counted     coin luck    true gain     baseline error

The no-harm target compares realised successes with a no-memory run that draws the same coin u per
task. So it measures the realised gap Σ(1[u < p] − 1[u < p₀]), which is reported beside the split.
The split covers the injections still in the lift window. Older ones (``retired``) are reported as
the guard summed them when they left.

    python -m tokenworth_bench.plus.guard_trace --env db --fits runs/db-base --seeds 4,6,9,18
    python -m tokenworth_bench.plus.guard_trace --env db --seeds 9 --set plus_guard_budget=6
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np

from tokenworth_bench.rank.lab import CONFIGS, Lab, parse_set
from tokenworth_jax.plus.mode import guard_window, null_totals


def window_tasks(injected_tasks: np.ndarray, idx: int, full: bool, size: int) -> np.ndarray:
    """The task index of each row of a ring of ``size`` rows (ring order), the rows pushed in the order of
    ``injected_tasks``; -1 for rows never written."""
    rows = np.full(size, -1, np.int64)
    if not full:
        rows[:idx] = injected_tasks[:idx]
        return rows
    last = injected_tasks[-size:]  # chronological: rows idx..size-1, then 0..idx-1
    rows[idx:] = last[:size - idx]
    rows[:idx] = last[size - idx:]
    return rows


def trace(lab: Lab, seed: int, overrides: dict[str, Any]) -> dict[str, Any]:
    """The guard's count at the end of one seed's run of TokenWorth+ (with ``overrides``), split by cause."""
    state, out, p = lab.final(seed, True, overrides)
    _, _, p0 = lab.final(seed, *CONFIGS["no memory"])  # the same tasks with nothing injected
    _, hp = lab.setup(True, overrides, seed)
    u = np.asarray(lab.sims[seed].outcome_u, np.float64)
    chosen = np.asarray(out.selection.memory_id)
    injected = np.flatnonzero(chosen >= 0)
    mode = state.mode
    y, offset, valid = (np.asarray(a, np.float64) for a in guard_window(mode, null_totals(mode, hp), hp))
    ring = mode.lift_ring
    tasks = window_tasks(injected, int(ring.idx), bool(ring.is_full), len(y))
    rows = tasks[valid > 0]
    y = y[valid > 0]
    if not np.array_equal(y, np.asarray(out.reward)[rows]):
        raise RuntimeError("the lift window does not hold the injected tasks' outcomes in push order")
    q = np.asarray(jax.nn.sigmoid(offset[valid > 0]))
    pr, p0r = p[rows].astype(np.float64), p0[rows].astype(np.float64)
    return dict(
        seed=seed, tasks=len(chosen), injections=len(injected), in_window=len(rows),
        counted=float(np.sum(y - q)), coin_luck=float(np.sum(y - pr)), true_gain=float(np.sum(pr - p0r)),
        baseline_error=float(np.sum(p0r - q)), retired=float(mode.retired.gain),
        realised_gap=int(np.sum((u[injected] < p[injected]).astype(int) - (u[injected] < p0[injected]).astype(int))),
        p0_injected=float(np.mean(p0r)) if len(rows) else None, p0_stream=float(np.mean(p0)))


HEADER = ("| seed | injections | in window | counted | coin luck | true gain | baseline error | retired | realised gap "
          "| p₀ injected | p₀ stream |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def row(r: dict[str, Any]) -> str:
    p0i = "—" if r["p0_injected"] is None else f"{r['p0_injected']:.3f}"
    return (f"| {r['seed']} | {r['injections']} | {r['in_window']} | {r['counted']:+.2f} | {r['coin_luck']:+.2f} | "
            f"{r['true_gain']:+.2f} | {r['baseline_error']:+.2f} | {r['retired']:+.2f} | {r['realised_gap']:+d} | "
            f"{p0i} | {r['p0_stream']:.3f} |")


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="db", choices=("db", "os"))
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--seeds", default="4")
    parser.add_argument("--set", default="",
                        help="KEY=VALUE[;KEY=VALUE] TokenWorth+ overrides (flat hyperparameter names)")
    parser.add_argument("--fits", default=None,
                        help="engine run folders, comma-separated: apply their output budget (tokenworth_bench.rank.lab)")
    parser.add_argument("--out", default=None, help="write <out>.json")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    plus, overrides = parse_set(f"trace:{args.set}")[1]
    if not plus:
        parser.error("--set: the guard is TokenWorth+'s; plus=0 has none to trace")
    lab = Lab(args.env, args.tasks, seeds, fits_from=[Path(p) for p in args.fits.split(",")] if args.fits else ())
    try:
        lab.setup(True, overrides)  # the hyperparameters are validated before any run
    except ValueError as err:
        parser.error(f"--set: {err}")
    results = [trace(lab, s, overrides) for s in seeds]
    print(HEADER)
    for r in results:
        print(row(r))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
