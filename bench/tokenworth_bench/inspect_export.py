"""What exporting a run as Inspect logs costs: time, size, memory (docs/performance.md, "Inspect export").

``python -m tokenworth_bench.inspect_export RUN [--repeats R] [--out bench/results]``

RUN (e.g. make run's ``runs/db-sim-seed0``: 5 streams × 500 DB tasks) is only read: the logs go to a
scratch folder. Each repeat, in a fresh process (imports included, as a user's command pays them):

* ``command``: the whole ``tokenworth export inspect RUN --out SCRATCH`` process, wall clock;
* ``export``: :func:`~tokenworth_agent.results.inspect_export.export_run` alone, every log written (wall
  clock, and the process's CPU time, which the machine's load disturbs less);
* ``up to date``: a second export, which finds every log current and writes nothing;
* ``bundle``: ``tokenworth view --bundle``'s static site (:func:`inspect_ai.log.bundle_log_dir`);
* ``read``: every log read back whole with :func:`inspect_ai.log.read_eval_log`, and
  :func:`inspect_ai.analysis.samples_df` over the folder;
* peak resident memory of the process.

Sizes: each log against its stream's ``records.jsonl``. Kept whole: the longest reply and observation of the
run are found in the logs with every character. Best (least) time of the repeats; the machine's load at the
end is reported beside them. Writes ``<out>/inspect_export.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text

from .paths import RESULTS

_ONE_REPEAT = """
import json, resource, sys, time
from pathlib import Path
run, scratch = Path(sys.argv[1]), Path(sys.argv[2])
began = time.perf_counter()
from tokenworth_agent.results.inspect_export import export_run
from tokenworth_agent.results.inspect_view import bundle
from inspect_ai.log import read_eval_log
from inspect_ai.analysis import samples_df
imported = time.perf_counter()
cpu = time.process_time()
result = export_run(run, scratch / "logs", force=True)
exported = time.perf_counter()
export_cpu = time.process_time() - cpu
again = export_run(run, scratch / "logs")
current = time.perf_counter()
bundle(run, scratch / "site", out=scratch / "logs", say=lambda line: None)
bundled = time.perf_counter()
logs = {p.relative_to(scratch / "logs").as_posix(): read_eval_log(str(p)) for p in result.written}
read = time.perf_counter()
frame = samples_df(str(scratch / "logs"), quiet=True)
framed = time.perf_counter()
longest = {"reply": 0, "observation": 0, "reply_whole": True, "observation_whole": True}
for log in logs.values():
    for sample in log.samples:
        for message in sample.messages:
            kind = (message.metadata or {}).get("kind")
            if kind in ("reply", "observation") and len(message.text) > longest[kind]:
                longest[kind] = len(message.text)
print(json.dumps({"import_s": imported - began, "export_s": exported - imported, "export_cpu_s": export_cpu,
                  "up_to_date_s": current - exported,
                  "bundle_s": bundled - current, "read_s": read - bundled, "samples_df_s": framed - read,
                  "written": len(result.written), "rewritten_when_current": len(again.written),
                  "samples": sum(len(l.samples) for l in logs.values()), "rows": len(frame),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "longest_in_logs": longest}))
"""


def _longest_in_records(run: Path) -> dict[str, int]:
    from tokenworth_agent.results.runs import streams

    longest = {"reply": 0, "observation": 0}
    for stream in streams(run):
        for record in stream.records:
            for entry in record.trajectory or []:
                longest["reply"] = max(longest["reply"], len(entry.get("reply", "")))
                longest["observation"] = max(longest["observation"], len(entry.get("observation", "")))
    return longest


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(list(argv) if argv is not None else None)
    from tokenworth_agent.results.runs import streams

    run = args.run
    found = streams(run)
    records = sum(len(s.records) for s in found)
    record_bytes = {s.name: (run / s.name / "records.jsonl").stat().st_size for s in found}
    repeats = []
    commands = []
    for _ in range(args.repeats):
        scratch = Path(tempfile.mkdtemp(prefix="inspect-export-bench-"))
        try:
            began = time.perf_counter()
            subprocess.run([sys.executable, "-m", "tokenworth_agent.cli", "export", "inspect", str(run), "--out",
                            str(scratch / "command")], check=True, capture_output=True, text=True)
            commands.append(time.perf_counter() - began)
            done = subprocess.run([sys.executable, "-c", _ONE_REPEAT, str(run), str(scratch)], check=True,
                                  capture_output=True, text=True)
            repeats.append(json.loads(done.stdout.strip().splitlines()[-1]))
            sizes = {p.relative_to(scratch / "logs").as_posix(): p.stat().st_size
                     for p in (scratch / "logs").rglob("*.eval")}
            site_bytes = sum(p.stat().st_size for p in (scratch / "site").rglob("*") if p.is_file())
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    best = {k: min(r[k] for r in repeats) for k in ("import_s", "export_s", "export_cpu_s", "up_to_date_s", "bundle_s",
                                                     "read_s", "samples_df_s", "peak_rss_mb")}
    in_records = _longest_in_records(run)
    in_logs = repeats[0]["longest_in_logs"]
    report = {"run": str(run), "streams": len(found), "records": records, "repeats": args.repeats,
              "command_s": min(commands), "command_runs_s": commands, **best,
              "runs": repeats, "log_bytes": sizes, "records_bytes": record_bytes,
              "log_total_bytes": sum(sizes.values()), "records_total_bytes": sum(record_bytes.values()),
              "site_bytes": site_bytes, "longest_in_records": in_records, "longest_in_logs": in_logs,
              "kept_whole": all(in_logs[k] == in_records[k] for k in in_records),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "python": platform.python_version(),
              "load_average_at_end": os.getloadavg(), "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out / "inspect_export.json", report)
    mb = 1024 * 1024
    lines = ["# inspect_export", "",
             f"`tokenworth export inspect` of `{run}`: {len(found)} streams, {records:,} records. Best of "
             f"{args.repeats}, each repeat a fresh process; {report['machine']}, {report['when']} UTC, load average at "
             f"the end {', '.join(f'{x:.1f}' for x in report['load_average_at_end'])}.", "",
             "| step | seconds |", "|---|---:|",
             f"| the whole command (`tokenworth export inspect RUN --out DIR`, fresh process) | {report['command_s']:.1f} |",
             f"| imports (harness, inspect_ai, estimator) | {best['import_s']:.1f} |",
             f"| export, every log written | {best['export_s']:.1f} (CPU {best['export_cpu_s']:.1f}) |",
             f"| export again, every log up to date (nothing written) | {best['up_to_date_s']:.2f} |",
             f"| static site (`tokenworth view RUN --bundle DIR`) | {best['bundle_s']:.1f} |",
             f"| read every log back whole (`read_eval_log`) | {best['read_s']:.1f} |",
             f"| `samples_df` over the logs ({repeats[0]['rows']:,} rows) | {best['samples_df_s']:.1f} |", "",
             f"Peak resident memory of the process: {best['peak_rss_mb']:.0f} MB.", "",
             "| stream | log MB | records.jsonl MB |", "|---|---:|---:|"]
    for name, size in sorted(sizes.items()):
        lines.append(f"| {name.removesuffix('.eval')} | {size / mb:.2f} | {record_bytes[name.removesuffix('.eval')] / mb:.2f} |")
    lines += [f"| all | {report['log_total_bytes'] / mb:.2f} | {report['records_total_bytes'] / mb:.2f} |", "",
              f"The static site: {site_bytes / mb:.1f} MB (the viewer's assets and a copy of the logs).", "",
              f"Kept whole: the longest reply ({in_records['reply']:,} characters) and observation "
              f"({in_records['observation']:,}) of the records are in the logs at full length "
              f"({in_logs['reply']:,} and {in_logs['observation']:,}): {'yes' if report['kept_whole'] else 'NO'}."]
    atomic_write_text(args.out / "inspect_export.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


if __name__ == "__main__":  # pragma: no cover
    main()
