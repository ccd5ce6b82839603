"""Agent-level benchmark: the Table-1-shaped comparison of every policy on DB and OS.

Runs ``tokenworth run`` once per (environment, seed) into ``<out>/runs/<env>-<backbone>-seed<s>``
(so an interrupted benchmark resumes), then writes the mean ± std over seeds of SR, OutputTok and
ΔTok per method to ``<out>/agent.md`` / ``agent.json`` and a bar plot to ``<out>/agent.png``.

With the simulated backbone the numbers measure the harness and the policies under the sim's
documented generative model (``agent/backbones/sim.py``), not an LLM.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agent.checkpoint import atomic_write_json, atomic_write_text

METHODS = "standard,rag,memrl,memp,tokenworth"


def _load_summary(run_dir: Path) -> list[dict[str, Any]]:
    return json.loads((run_dir / "summary.json").read_text())


def aggregate(per_seed: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Mean and (population) std over seeds of each method's SR, OutputTok and ΔTok."""
    methods = [row["method"] for row in per_seed[0]]
    out = []
    for method in methods:
        rows = [next(r for r in summary if r["method"] == method) for summary in per_seed]
        entry: dict[str, Any] = {"method": method, "seeds": len(rows)}
        for key in ("sr", "output_tok", "delta_tok"):
            vals = np.array([r[key] for r in rows if r.get(key) is not None], dtype=float)
            entry[key] = (float(vals.mean()), float(vals.std())) if vals.size else None
        out.append(entry)
    return out


def markdown(results: dict[str, list[dict[str, Any]]], backbone: str, seeds: Sequence[int], limit: int | None) -> str:
    lines = [f"# Agent benchmark · backbone {backbone} · seeds {list(seeds)}"
             + (f" · first {limit} tasks" if limit else " · full streams"), ""]
    for env, rows in results.items():
        lines += [f"## {env.upper()}", "", "| method | SR (%) | OutputTok | ΔTok vs Standard |", "|---|---:|---:|---:|"]
        for r in rows:
            sr = f"{r['sr'][0]:.1f} ± {r['sr'][1]:.1f}" if r["sr"] else "–"
            tok = f"{r['output_tok'][0]:.1f} ± {r['output_tok'][1]:.1f}" if r["output_tok"] else "–"
            dt = f"{100 * r['delta_tok'][0]:+.1f}% ± {100 * r['delta_tok'][1]:.1f}" if r["delta_tok"] else "–"
            lines.append(f"| {r['method']} | {sr} | {tok} | {dt} |")
        lines.append("")
    return "\n".join(lines)


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.5), squeeze=False)
    for ax, (env, rows) in zip(axes[0], results.items()):
        names = [r["method"] for r in rows]
        means = [r["sr"][0] for r in rows]
        stds = [r["sr"][1] for r in rows]
        ax.bar(names, means, yerr=stds, capsize=4, color="tab:blue")
        ax.set_title(f"{env.upper()}: success rate (mean ± std over seeds)")
        ax.set_ylabel("SR (%)")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="db,os")
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--backbone", default="sim")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks of each stream")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    from agent.cli import run_benchmark

    out = Path(args.out)
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict[str, list[dict[str, Any]]] = {}
    for env in args.envs.split(","):
        per_seed = []
        for seed in seeds:
            run_dir = out / "runs" / f"{env}-{args.backbone}-seed{seed}"
            run_benchmark(env=env, methods=args.methods, backbone=args.backbone, seed=seed, out=run_dir,
                          data_dir=Path(args.data_dir) if args.data_dir else None, limit=args.limit,
                          progress=not args.no_progress)
            per_seed.append(_load_summary(run_dir))
        results[env] = aggregate(per_seed)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "agent.md", markdown(results, args.backbone, seeds, args.limit))
    atomic_write_json(out / "agent.json", {"backbone": args.backbone, "seeds": seeds, "limit": args.limit,
                                           "results": results})
    plot(results, out / "agent.png")
    print(markdown(results, args.backbone, seeds, args.limit))
    return results


if __name__ == "__main__":
    main()
