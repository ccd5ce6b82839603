"""What ``--track`` costs the engine on the default run.

``python -m tokenworth_bench.tracking_cost [--limit N] [--repeats R] [--out bench/results]``
runs the default experiment (``tokenworth run``: DB, simulated backbone, the five default methods,
seed 0; all 500 tasks unless ``--limit``) once per mode and repeat, each in a fresh process with a
warm XLA compilation cache, the modes interleaved so that a change of the machine's load hits each
alike:

* ``none``: no ``--track`` (the baseline);
* ``tensorboard``: event files in the run folder;
* ``mlflow-local``: MLflow's store inside the run folder (SQLite; it is created during the run);
* ``mlflow-server``: a real ``mlflow server`` on 127.0.0.1 (SQLite store), started here. On a 2-core
  machine the server competes with the run for the CPU; on a cluster it runs elsewhere.

For each it reports the engine's wall time (``ExperimentResult.seconds``: the first task to the last
commit, what logging could slow) and the whole command's (``LaunchResult.seconds``, with the summary
and the tracker's final flush), best of the repeats, and the overhead against ``none``. Writes
``<out>/tracking_cost.{md,json}``. Times depend on the machine and its load.
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import dataclasses
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text

MODES = ("none", "tensorboard", "mlflow-local", "mlflow-server")

_ONE_RUN = """
import json, sys, time
from pathlib import Path
from tokenworth_agent.experiment import DataConfig, OutputConfig, RunConfig, Streams, launch
limit = None if sys.argv[2] == "none" else int(sys.argv[2])
track = tuple(t for t in sys.argv[3].split(",") if t)
result = launch(RunConfig(Streams(), data=DataConfig(limit=limit),
                          output=OutputConfig(out=Path(sys.argv[1]), progress=False, track=track)))
import resource
usage, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"engine_s": result.result.seconds, "command_s": result.seconds, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "children_cpu_s": children.ru_utime + children.ru_stime,
                  "tasks": sum(len(r) for r in result.result.records.values())}))
"""


def hook_cost(records: int = 5000) -> dict[str, float]:
    """What the engine's thread does per task with ``--track``: its scalars and one append to the inbox (µs)."""
    from tokenworth_agent.results.record import TaskRecord
    from tokenworth_agent.tracking.courier import Courier
    from tokenworth_agent.tracking.tracker import StreamTrack

    class _Quiet:
        simulated = True

    courier = Courier([], Path(tempfile.gettempdir()), thread=False, inbox_size=records + 10)
    tracker = _Quiet()
    tracker.courier = courier  # type: ignore[attr-defined]
    hook = StreamTrack(tracker, "bench", records)  # type: ignore[arg-type]
    record = TaskRecord(method="tokenworth", index=0, task_id="db-0", env="db", reward=1, status="completed", rounds=1,
                        output_tokens=100, execution_tokens=90, auxiliary_tokens=10, aux_calls=[],
                        injected_memory_id=3, injected_memory_ids=[3], injected_length=200, injection={},
                        skill_list=["select"], decision={"admission": {"memory_id": 7}}, bank_size=12,
                        finish_reasons=[], error=None, accounting="per-call", instructions_sha256=None,
                        task_prompt=None, injection_text=None, trajectory=None, judge=None, time_s=0.01)
    started = time.perf_counter()
    for index in range(records):
        hook(dataclasses.replace(record, index=index))
    per_task = (time.perf_counter() - started) / records * 1e6
    return {"hook_us_per_task": per_task}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(root: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", f"sqlite:///{root / 'store.db'}",
                             "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port",
                             str(port), "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2):
                return proc, uri
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the MLflow server did not start") from None
            time.sleep(0.5)


def _one(out: Path, limit: int | None, mode: str, env: dict[str, str]) -> dict[str, float]:
    track = {"none": "", "tensorboard": "tensorboard"}.get(mode, "mlflow")
    done = subprocess.run([sys.executable, "-c", _ONE_RUN, str(out), "none" if limit is None else str(limit), track],
                          env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{mode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="tasks per stream (default: all 500)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    scratch = Path(tempfile.mkdtemp(prefix="tokenworth-track-bench-"))
    server = None
    try:
        base = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        base.update(JAX_COMPILATION_CACHE_DIR=str(scratch / "xla"), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
        envs = {m: dict(base) for m in modes}
        if "mlflow-server" in modes:
            server, uri = _server(scratch / "server")
            envs["mlflow-server"]["MLFLOW_TRACKING_URI"] = uri
        _one(scratch / "warmup", 3, "none", base)  # fills the compilation cache
        found: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
        for repeat in range(args.repeats):
            for mode in modes:
                found[mode].append(_one(scratch / f"{mode}-{repeat}", args.limit, mode, envs[mode]))
                shutil.rmtree(scratch / f"{mode}-{repeat}", ignore_errors=True)
    finally:
        if server is not None:
            os.killpg(server.pid, 15)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, 9)
                server.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    hook = hook_cost()
    best = {m: {k: min(r[k] for r in runs) for k in ("engine_s", "command_s", "cpu_s")} for m, runs in found.items()}
    median = {m: statistics.median(r["engine_s"] for r in runs) for m, runs in found.items()}
    # each repeat runs every mode back to back, so a mode's run and the baseline run of its repeat saw
    # about the same machine: the mean of those paired ratios, with its standard error, is the estimate
    # least disturbed by the machine's load drifting over the benchmark
    paired = {m: [100.0 * (r["engine_s"] / b["engine_s"] - 1.0) for r, b in zip(runs, found["none"])]
              for m, runs in found.items()} if "none" in found else {}
    ref = best.get("none")
    rows = []
    for mode in modes:
        row = {"mode": mode, **best[mode], "engine_runs_s": [r["engine_s"] for r in found[mode]],
               "command_runs_s": [r["command_s"] for r in found[mode]], "tasks": found[mode][0]["tasks"]}
        if ref is not None:
            row["engine_overhead_pct"] = 100.0 * (best[mode]["engine_s"] / ref["engine_s"] - 1.0)
            row["engine_median_s"] = median[mode]
            row["paired_overhead_pct"] = statistics.fmean(paired[mode])
            row["paired_overhead_se_pct"] = (statistics.stdev(paired[mode]) / len(paired[mode]) ** 0.5
                                             if len(paired[mode]) > 1 else 0.0)
            row["tracker_cpu_s"] = statistics.median(r.get("children_cpu_s", 0.0) for r in found[mode])
            row["engine_median_overhead_pct"] = 100.0 * (median[mode] / median["none"] - 1.0)
            row["command_overhead_pct"] = 100.0 * (best[mode]["command_s"] / ref["command_s"] - 1.0)
            row["cpu_overhead_pct"] = 100.0 * (best[mode]["cpu_s"] / ref["cpu_s"] - 1.0)
        rows.append(row)
    report = {"limit": args.limit, "repeats": args.repeats, "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "python": platform.python_version(), "rows": rows, **hook,
              "load_average_at_end": os.getloadavg(),
              "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out / "tracking_cost.json", report)
    lines = ["# tracking_cost", "",
             f"The default run (`tokenworth run`: DB, sim backbone, 5 methods, seed 0, "
             f"{'all 500' if args.limit is None else args.limit} tasks per stream), one fresh process per run, warm "
             f"XLA cache, modes interleaved; best of {args.repeats}. {report['machine']}, {report['when']} UTC.", "",
             "| mode | engine s | engine overhead | median engine overhead | paired engine overhead | command s | "
             "command overhead | process CPU s | CPU overhead | trackers' CPU s | engine s, every run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        lines.append(f"| {row['mode']} | {row['engine_s']:.2f} | {row.get('engine_overhead_pct', 0):+.1f} % | "
                     f"{row.get('engine_median_overhead_pct', 0):+.1f} % | "
                     f"{row.get('paired_overhead_pct', 0):+.1f} ± {row.get('paired_overhead_se_pct', 0):.1f} % | "
                     f"{row['command_s']:.2f} | {row.get('command_overhead_pct', 0):+.1f} % | {row['cpu_s']:.1f} | "
                     f"{row.get('cpu_overhead_pct', 0):+.1f} % | {row.get('tracker_cpu_s', 0):.1f} | "
                     f"{', '.join(f'{x:.2f}' for x in row['engine_runs_s'])} |")
    lines += ["", f"On the engine's thread a tracked task costs {hook['hook_us_per_task']:.0f} µs (its scalars and one "
              f"append to the courier's inbox; measured over 5,000 tasks in this process). Load average at the end: "
              f"{', '.join(f'{x:.1f}' for x in report['load_average_at_end'])}."]
    lines += ["", "Engine: the first task to the last commit (what logging on the engine's path could slow). Command: "
              "the same plus the summary and the tracker's final flush. Process CPU: user + system time of the run's "
              "process, every thread (the courier's too); the trackers' child processes are the next column "
              "(median). Paired: the mean, over repeats, of a mode's engine time against the baseline run of the "
              "same repeat, ± its standard error. `mlflow-server` runs its server on the same 2 cores (its CPU is "
              "not counted)."]
    atomic_write_text(args.out / "tracking_cost.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


if __name__ == "__main__":  # pragma: no cover
    main()
