"""The eleven-method table (the paper's Table 1 rows plus TokenWorth+): SR ± std, OutputTok, ΔTok, Aux tok.

``python -m tokenworth_bench.methods_table --experiment db=DIR:0,1,2 --experiment os=DIR2:0,1,2 --out bench/results/methods``
``python -m tokenworth_bench.methods_table --run db=RUN_DIR --run db=RUN_DIR2 ... --out bench/results/methods``

``--experiment ENV=DIR:SEEDS`` reads one ``tokenworth run --seeds ...`` experiment folder (every
method's stream per seed); ``--run ENV=DIR`` a finished one-seed run folder (its
``summary.json``), repeated per seed. Per environment the mean and population std over seeds
are written to ``<out>/table.md`` and ``table.json``. A method missing from some seeds is
reported over the seeds that have it (the ``seeds`` column says how many).
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text
from tokenworth_bench.agent import aggregate, seed_summaries

METHODS = "standard,rag,memrl,memp,tokenworth,tokenworth+,mem0,memskill,reflexion,evosc,evoskill"

def _cell(pair: tuple[float, float] | None, scale: float = 1.0, fmt: str = "{:.1f}", sign: bool = False) -> str:
    if pair is None:
        return "–"
    mean, std = pair[0] * scale, pair[1] * scale
    return (("{:+.1f}%" if sign else fmt).format(mean)) + f" ± {std:.1f}"


def markdown(results: dict[str, list[dict[str, Any]]], title: str) -> str:
    lines = [f"# {title}", ""]
    for env, rows in results.items():
        lines += [f"## {env.upper()} ({rows[0]['tasks']} tasks)", "",
                  "| method | seeds | SR (%) | OutputTok | ΔTok vs Standard | Aux tok |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| {r['method']} | {r['seeds']} | {_cell(r['sr'])} | {_cell(r['output_tok'])} | "
                         f"{_cell(r['delta_tok'], 100.0, sign=True)} | {_cell(r['auxiliary_tok'])} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", default=[], metavar="ENV=DIR",
                        help="a finished run folder of one seed; repeat per seed and environment")
    parser.add_argument("--experiment", action="append", default=[], metavar="ENV=DIR:SEEDS",
                        help="a finished experiment folder with several seeds (e.g. db=runs/x:0,1,2)")
    parser.add_argument("--methods", default=METHODS, help="the methods of the experiment folders")
    parser.add_argument("--budget-accounting", default="per-call")
    parser.add_argument("--out", type=Path, default=RESULTS / "methods")
    parser.add_argument("--title", default="All methods · backbone sim · O_max per-call")
    args = parser.parse_args(argv)
    by_env: dict[str, list[list[dict[str, Any]]]] = {}
    for spec in args.run:
        env, sep, folder = spec.partition("=")
        if not sep or not folder:
            parser.error(f"--run takes ENV=DIR, got {spec!r}")
        summary = Path(folder) / "summary.json"
        if not summary.is_file():
            parser.error(f"{summary} does not exist: is {folder} a finished run folder?")
        by_env.setdefault(env, []).append(json.loads(summary.read_text()))
    for spec in args.experiment:
        env, sep, rest = spec.partition("=")
        folder, colon, seeds = rest.rpartition(":")
        if not sep or not colon or not folder:
            parser.error(f"--experiment takes ENV=DIR:SEEDS, got {spec!r}")
        per_seed = seed_summaries(Path(folder), [env], args.methods.split(","), [int(x) for x in seeds.split(",")],
                                  args.budget_accounting)[env]
        by_env.setdefault(env, []).extend(per_seed)
    if not by_env:
        parser.error("name at least one --run or --experiment")
    results = {env: aggregate(summaries) for env, summaries in by_env.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out / "table.json", {"title": args.title, "runs": args.run, "results": results})
    atomic_write_text(args.out / "table.md", markdown(results, args.title))
    print(markdown(results, args.title))
    return results


if __name__ == "__main__":
    main()
