"""The eleven-method table (the paper's Table 1 rows plus TokenWorth+): SR ± std, OutputTok, ΔTok, Aux tok.

``python -m bench.methods_table --run db=RUN_DIR --run db=RUN_DIR2 ... --run os=RUN_DIR --out bench/results/methods``

Each ``RUN_DIR`` is a finished ``tokenworth run`` folder (one seed; its ``summary.json``). Per
environment the mean and population std over the folders are written to ``<out>/table.md`` and
``table.json``, rows in the order the first folder lists them. A method missing from some seeds
is reported over the seeds that have it (the ``seeds`` column says how many).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agent.checkpoint import atomic_write_json, atomic_write_text

KEYS = ("sr", "output_tok", "delta_tok", "auxiliary_tok")


def aggregate(per_seed: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per method, (mean, std) over seeds of SR, OutputTok, ΔTok and auxiliary tokens."""
    methods = list(dict.fromkeys(row["method"] for summary in per_seed for row in summary))
    rows = []
    for method in methods:
        found = [row for summary in per_seed for row in summary if row["method"] == method]
        entry: dict[str, Any] = {"method": method, "seeds": len(found), "tasks": found[0]["tasks"]}
        for key in KEYS:
            values = np.asarray([r[key] for r in found if r.get(key) is not None], dtype=np.float64)
            entry[key] = (float(values.mean()), float(values.std())) if values.size else None
        rows.append(entry)
    return rows


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
    parser.add_argument("--run", action="append", required=True, metavar="ENV=DIR",
                        help="a finished run folder of one seed; repeat per seed and environment")
    parser.add_argument("--out", type=Path, default=Path("bench/results/methods"))
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
    results = {env: aggregate(summaries) for env, summaries in by_env.items()}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out / "table.json", {"title": args.title, "runs": args.run, "results": results})
    atomic_write_text(args.out / "table.md", markdown(results, args.title))
    print(markdown(results, args.title))
    return results


if __name__ == "__main__":
    main()
