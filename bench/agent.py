"""Agent-level benchmark: the Table-1-shaped comparison of every policy on DB and OS.

Runs every (environment, seed, method) as the streams of one lockstep experiment
(``tokenworth run --env db,os --seeds 0,1,2``, one process and one model engine) into
``<out>/runs/<envs>-<backbone>-<accounting>-seeds<s>`` (so an interrupted benchmark resumes), then
writes the mean ± std over seeds of SR, OutputTok and ΔTok per method to ``<out>/agent.md`` /
``agent.json`` and a bar plot to ``<out>/agent.png``. ``--budget-accounting`` (per-call, the
default, or per-task) and the OpenAI-backbone flags (``--model``, ``--base-url``, ``--timeout``,
``--retry-for``, ``--max-retries``, ``--concurrency``, ``--extra-body``) and the in-process vLLM
flags (``--jax-mem-fraction``, ``--gpu-memory-utilization``, ``--max-model-len``,
``--tensor-parallel-size``, ``--dtype``, ``--enforce-eager``, ``--no-prefix-caching``,
``--batch-invariant``, ``--engine-arg KEY=VALUE``) are passed to every run.

With ``--backbone vllm`` the process loads one engine, on the first run's first call, and every
later (env, seed) run reuses it (same settings; the seed does not matter to greedy decoding);
it is shut down explicitly when the benchmark ends, also after an error.

With the simulated backbone the numbers measure the harness and the policies under the sim's
documented generative model (``agent/backbones/sim.py``), not an LLM.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agent.budget import ACCOUNTINGS, DEFAULT_ACCOUNTING
from agent.checkpoint import atomic_write_json, atomic_write_text

METHODS = "standard,rag,memrl,memp,tokenworth"


KEYS = ("sr", "output_tok", "delta_tok", "auxiliary_tok")


def aggregate(per_seed: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per method, (mean, population std) over seeds of SR, OutputTok, ΔTok and auxiliary tokens.

    A method missing from some seeds is reported over the seeds that have it (``seeds``)."""
    methods = list(dict.fromkeys(row["method"] for summary in per_seed for row in summary))
    out = []
    for method in methods:
        rows = [row for summary in per_seed for row in summary if row["method"] == method]
        entry: dict[str, Any] = {"method": method, "seeds": len(rows), "tasks": rows[0].get("tasks")}
        for key in KEYS:
            vals = np.array([r[key] for r in rows if r.get(key) is not None], dtype=float)
            entry[key] = (float(vals.mean()), float(vals.std())) if vals.size else None
        out.append(entry)
    return out


def seed_summaries(run_dir: Path, envs: Sequence[str], methods: Sequence[str], seeds: Sequence[int],
                   accounting: str) -> dict[str, list[list[dict[str, Any]]]]:
    """Per env, one summary per seed (a row per finished method) from an experiment's stream records."""
    from agent.budget import Budget
    from agent.experiment import expand, stream_names
    from agent.report import finished_records, summarize

    streams = expand(envs, methods, seeds, {e: Budget.for_env(e, accounting) for e in envs})
    names = dict(zip([(s.env, s.seed, s.method) for s in streams], stream_names(streams)))
    out: dict[str, list[list[dict[str, Any]]]] = {}
    for env in envs:
        for seed in seeds:
            found = finished_records(run_dir, [names[(env, seed, m)] for m in methods])
            by_method = {m: found[names[(env, seed, m)]] for m in methods if names[(env, seed, m)] in found}
            out.setdefault(env, []).append(
                [{"method": s.method, "tasks": s.tasks, "sr": s.sr, "output_tok": s.output_tok,
                  "delta_tok": s.delta_tok, "auxiliary_tok": s.auxiliary_tok} for s in summarize(by_method)])
    return out


def markdown(results: dict[str, list[dict[str, Any]]], backbone: str, seeds: Sequence[int], limit: int | None,
             accounting: str = "per-call") -> str:
    lines = [f"# Agent benchmark · backbone {backbone} · O_max {accounting} · seeds {list(seeds)}"
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


def plot(results: dict[str, list[dict[str, Any]]], path: Path, accounting: str = "per-call") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.5), squeeze=False)
    for ax, (env, rows) in zip(axes[0], results.items()):
        names = [r["method"] for r in rows]
        means = [r["sr"][0] for r in rows]
        stds = [r["sr"][1] for r in rows]
        ax.bar(names, means, yerr=stds, capsize=4, color="tab:blue")
        ax.set_title(f"{env.upper()}: SR, mean ± std over seeds (O_max {accounting})")
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
    parser.add_argument("--budget-accounting", default=DEFAULT_ACCOUNTING, choices=ACCOUNTINGS)
    parser.add_argument("--model", default=None)
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--retry-for", type=float, default=None)
    parser.add_argument("--max-retries", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--extra-body", default=None, help="JSON object added to every openai request")
    parser.add_argument("--jax-mem-fraction", type=float, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=None)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--tensor-parallel-size", type=int, default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--enforce-eager", action="store_true", default=None)
    parser.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    parser.add_argument("--batch-invariant", action="store_true")
    parser.add_argument("--engine-arg", action="append", default=None, help="KEY=VALUE (repeatable)")
    parser.add_argument("--allow-untested-vllm", action="store_true")
    args = parser.parse_args(argv)
    from agent.backbones.vllm_backbone import close_engines
    from agent.cli import ENGINE_FLAGS, run_benchmark

    engine = {name: getattr(args, name) for name in ENGINE_FLAGS}
    try:
        return _run_all(args, engine, run_benchmark)
    finally:
        close_engines()  # one engine per process, shut down explicitly


def _run_all(args: argparse.Namespace, engine: dict[str, Any], run_benchmark: Any) -> dict[str, Any]:
    """Every (env, seed, method) as streams of ONE lockstep experiment, then mean ± std over seeds."""
    connection = dict(timeout=args.timeout, retry_for=args.retry_for, max_retries=args.max_retries,
                      concurrency=args.concurrency, extra_body=args.extra_body)
    accounting = args.budget_accounting
    out = Path(args.out)
    envs = args.envs.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    run_dir = out / "runs" / f"{'+'.join(envs)}-{args.backbone}-{accounting}-seeds{'-'.join(map(str, seeds))}"
    run_benchmark(env=args.envs, methods=args.methods, backbone=args.backbone, seeds=args.seeds, out=run_dir,
                  data_dir=Path(args.data_dir) if args.data_dir else None, limit=args.limit,
                  progress=not args.no_progress, budget_accounting=accounting, model=args.model,
                  base_url=args.base_url, connection=connection, engine=engine)
    results = {env: aggregate(per_seed)
               for env, per_seed in seed_summaries(run_dir, envs, methods, seeds, accounting).items()}
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(results, args.backbone, seeds, args.limit, accounting)
    atomic_write_text(out / "agent.md", table)
    atomic_write_json(out / "agent.json", {"backbone": args.backbone, "accounting": accounting, "seeds": seeds,
                                           "limit": args.limit, "results": results})
    plot(results, out / "agent.png", accounting)
    print(table)
    return results


if __name__ == "__main__":
    main()
