"""How far each ``tw.run_batched`` strategy agrees with separate ``tw.run`` calls: the grid sweep's 4 x 4 grid
(``eta_max`` x ``lambda_krr``) over its two streams (``learns``, ``fails``: :mod:`.grid_sweep`), drawn with several
seeds.

For every stream and seed, the reference is a Python loop of ``tw.run`` (separate runs); ``"map"`` and ``"vmap"``
are compared with it. Reported per strategy: the selections (``selection.memory_id``) that differ, the leaves of
the outputs and final states that are not bit for bit equal, the largest difference of a score before the first
differing selection, and, at each configuration's first differing selection, the gap between the two memories'
scores in ``tw.run``'s own values (a near tie if it is within the scores' differences). ``"loop"`` is ``tw.run``'s
own program (``tests/test_grid_sweep.py`` holds it to bit for bit) and is not run again.

    python -m tokenworth_bench.controller.strategy_agreement [--seeds 0-5] [--tasks 300]

Writes ``bench/results/strategy_agreement/strategy_agreement.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..paths import RESULTS
from .grid_sweep import ETA, LAMBDA, STREAMS, grid, make_stream

OUT = RESULTS / "strategy_agreement"
STRATEGIES = ("map", "vmap")


def compare(ref: Any, out: Any) -> dict[str, Any]:
    """``out`` (a strategy's (states, outputs), C on axis 0) against ``ref`` (separate runs, stacked)."""
    import jax

    got_sel, want_sel = out[1].selection, ref[1].selection
    ids, want_ids = np.asarray(got_sel.memory_id), np.asarray(want_sel.memory_id)
    differ = ids != want_ids
    leaves = [jax.tree_util.keystr(p) for (p, a), b in zip(jax.tree_util.tree_leaves_with_path(out),
                                                             jax.tree_util.tree_leaves(ref))
              if not np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind == "f")]
    scores, want_scores = np.asarray(got_sel.scores), np.asarray(want_sel.scores)
    firsts, drift = [], 0.0
    for c in range(ids.shape[0]):
        n = int(np.argmax(differ[c])) if differ[c].any() else ids.shape[1]
        with np.errstate(invalid="ignore"):  # padding: -inf - -inf
            before = np.abs(scores[c, :n] - want_scores[c, :n])
        drift = max(drift, float(np.max(before[np.isfinite(before)], initial=0.0)))
        if n < ids.shape[1]:
            mine, theirs = int(got_sel.chosen[c, n]), int(want_sel.chosen[c, n])
            gap = (float(abs(want_scores[c, n, theirs] - want_scores[c, n, mine])) if min(mine, theirs) >= 0
                   else None)
            firsts.append(dict(configuration=c, task=n, gap_in_run=gap,
                               score_difference_there=float(np.nanmax(np.abs(np.where(
                                   np.isfinite(want_scores[c, n]), scores[c, n] - want_scores[c, n], 0.0))))))
    return dict(selections_differing=int(differ.sum()), configurations_differing=int(differ.any(axis=1).sum()),
                leaves_not_bitwise=leaves, score_drift_before=drift, first_divergences=firsts)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-5", help="a range a-b or a comma-separated list")
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--streams", default=",".join(STREAMS))
    ap.add_argument("--topics", type=int, default=12, help="how many topics the stream's tasks come from")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    a, _, b = args.seeds.partition("-")
    seeds = list(range(int(a), int(b) + 1)) if b else [int(x) for x in args.seeds.split(",")]

    import jax

    import tokenworth_jax as tw

    spec, _ = tw.preset("db")
    cfgs = grid(ETA, LAMBDA)
    hps = tw.stack_hparams(cfgs)
    states = jax.vmap(lambda h: tw.init(spec, h))(hps)
    rows: list[dict[str, Any]] = []
    for stream in args.streams.split(","):
        for seed in seeds:
            events, reward_fn = make_stream(spec, args.tasks, stream, seed, args.topics)
            t0 = time.perf_counter()
            runs = [tw.run(tw.init(spec, h), events, h, spec, reward_fn) for h in cfgs]
            ref = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *runs)
            row: dict[str, Any] = dict(stream=stream, seed=seed,
                                       success=float(np.mean(np.asarray(ref[1].reward))))
            for strategy in STRATEGIES:
                out = jax.block_until_ready(tw.run_batched(states, events, hps, spec, reward_fn, strategy=strategy))
                row[strategy] = compare(ref, out)
            rows.append(row)
            print(f"{stream} seed {seed}: success {row['success']:.2f}, " + ", ".join(
                f"{s} {row[s]['selections_differing']} selections / {len(row[s]['leaves_not_bitwise'])} leaves"
                for s in STRATEGIES) + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    n = len(cfgs) * args.tasks
    lines = [
        f"# Strategies against separate `tw.run` calls: 4 x 4 grid x {args.tasks} tasks, DB preset",
        "",
        f"`python -m tokenworth_bench.controller.strategy_agreement --seeds {args.seeds} --tasks {args.tasks}`; "
        f"backend {jax.default_backend()}, jax {jax.__version__}, float32. The streams are the grid sweep's "
        "(`tokenworth_bench.controller.grid_sweep`), drawn with each seed. Per strategy: the selections of "
        f"{n:,} whose memory differs from separate runs, the output and state leaves that are not bit for bit "
        "equal, the largest score difference before the first differing selection, and where a configuration "
        "first chose another memory, the two memories' score gap in `tw.run`'s own values.",
        "",
        "| stream | seed | success | " + " | ".join(
            f"`{s}`: selections differing | `{s}`: leaves not bit for bit | `{s}`: score drift before | "
            f"`{s}`: first divergences (configuration, task: gap in `tw.run`)" for s in STRATEGIES) + " |",
        "|---|---:|---:|" + "---:|---:|---:|---|" * len(STRATEGIES),
    ]
    for row in rows:
        cells = []
        for s in STRATEGIES:
            r = row[s]
            firsts = "; ".join(f"{f['configuration']}, {f['task']}: "
                               + ("none chosen" if f["gap_in_run"] is None else f"{f['gap_in_run']:.1e}")
                               for f in r["first_divergences"]) or "-"
            cells.append(f"{r['selections_differing']} | {len(r['leaves_not_bitwise'])} | "
                         f"{r['score_drift_before']:.1e} | {firsts}")
        lines.append(f"| {row['stream']} | {row['seed']} | {row['success']:.2f} | " + " | ".join(cells) + " |")
    total = {s: sum(r[s]["selections_differing"] for r in rows) for s in STRATEGIES}
    lines += ["", "In all: " + ", ".join(f"`{s}` {total[s]} of {n * len(rows):,} selections differ" for s in STRATEGIES)
              + f" ({len(rows)} streams). Load average at the end {os.getloadavg()[0]:.1f}.", ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "strategy_agreement.md").write_text("\n".join(lines))
    (args.out / "strategy_agreement.json").write_text(json.dumps(dict(rows=rows, tasks=args.tasks, seeds=seeds),
                                                                 indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
