"""SR and OutputTok per method over the tasks that every stream of a lockstep run has finished.

``python -m bench.bigcodebench_table RUN METHODS OUT.json`` (METHODS comma-separated): for a run that
was stopped before its end (docs/bigcodebench.md, the simulated backbone's table), every stream's first
K records, K the fewest any stream has, summarised with the harness's own ``summarize``. Prints the
Markdown table and writes ``OUT.json`` (the task count and one row per method).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agent.results.record import read_records
from agent.results.report import markdown_table, summaries_json, summarize


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        raise SystemExit(__doc__)
    run, methods, out = Path(argv[0]), argv[1].split(","), Path(argv[2])
    records = {m: read_records(run / m / "records.jsonl") for m in methods}
    k = min(len(r) for r in records.values())
    if k == 0:
        raise SystemExit(f"{run}: some stream has no finished task yet")
    summaries = summarize({m: r[:k] for m, r in records.items()})
    print(markdown_table(summaries, f"{run.name} · first {k} tasks of the stream").split("### Per-skill")[0])
    rows = [{f: v for f, v in row.items() if f not in ("skill_sr", "skill_counts")} for row in summaries_json(summaries)]
    out.write_text(json.dumps({"tasks": k, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
