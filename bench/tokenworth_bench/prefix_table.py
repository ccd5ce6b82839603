"""SR and OutputTok per method over the tasks that every stream of a run has finished.

``python -m tokenworth_bench.prefix_table RUN METHODS OUT_DIR`` (METHODS comma-separated): for a run that was
stopped before its end (the simulated-backbone tables of docs/bigcodebench.md and
bench/results/alfworld_sim/), every stream's first K records, K the fewest any stream has,
summarised with the harness's own ``summarize`` (a finished run: all of them, and the title says so). Writes ``summary.md``, ``summary.json`` (the task
count and one row per method) and ``cumulative_sr.png`` into OUT_DIR, and prints the table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenworth_agent.results.record import read_records
from tokenworth_agent.results.report import markdown_table, plot_cumulative_sr, rewards_of, summaries_json, summarize


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        raise SystemExit(__doc__)
    run, methods, out = Path(argv[0]), argv[1].split(","), Path(argv[2])
    records = {m: read_records(run / m / "records.jsonl") for m in methods}
    k = min(len(r) for r in records.values())
    if k == 0:
        raise SystemExit(f"{run}: some stream has no finished task yet")
    prefix = {m: r[:k] for m, r in records.items()}
    summaries = summarize(prefix)
    first = prefix[methods[0]][0]
    seed = (first.stream or {}).get("seed")
    config = run / "config.json"
    total = json.loads(config.read_text()).get("tasks") if config.exists() else None
    span = f"all {k} tasks of the stream" if k == total else f"first {k} tasks of the stream"
    title = f"{first.env.upper()} · {run.name}{'' if seed is None else f' · seed {seed}'} · {span}"
    table = markdown_table(summaries, title)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(table)
    rows = [{f: v for f, v in row.items() if f not in ("skill_sr", "skill_counts")} for row in summaries_json(summaries)]
    (out / "summary.json").write_text(json.dumps({"tasks": k, "rows": rows}, indent=1) + "\n")
    plot_cumulative_sr({m: rewards_of(r) for m, r in prefix.items()}, out / "cumulative_sr.png", title)
    print(table.split("### Per-skill")[0])


if __name__ == "__main__":
    main(sys.argv[1:])
