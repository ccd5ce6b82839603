"""Ray scaling: the same ``tokenworth run`` in this process, on one Ray node, and on two Ray nodes.

``python -m tokenworth_bench ray-scaling [--seeds 32] [--tasks 6] [--repeats 2] [--out bench/results/ray]``

Each run is the real CLI (``python -m tokenworth_agent.cli run``, a subprocess) over DB streams (``--methods``
x ``--seeds``, the first ``--tasks`` tasks), ``--backbone openai`` against the batch-economics server
(:mod:`tokenworth_bench.gpu_model_server`, which sleeps each decode step's modelled GPU time), three ways:

* ``local``: no executor flag, one server replica: the in-process engine, every stream in one batch;
* ``ray1``: ``--executor ray`` on a Ray cluster of one node (a real raylet of its own), one replica;
* ``ray2``: ``--executor ray`` on two nodes, one worker each, two replicas (``--base-url`` twice).

The cluster is made by ``tests/ray_nodes.py`` (real raylets owned by a helper process, nothing left
behind), one CPU per node, so Ray places one worker per node.

What is measured. The **served window**: from the first request any replica received to the last
response any replica sent (``first_in``/``last_out`` of each replica's ``/stats``), so the driver's
imports, the cluster join and the workers' start-up (all outside the engine) are not in it; the
subprocess's wall time is reported beside it. Two ratios: the **shrink** = window(ray1) /
window(ray2) (two nodes, each with its own GPU, against one), and the **Ray overhead** =
window(ray1) / window(local) - 1. The modes are interleaved ``--repeats`` times and each ratio is
taken from the medians, so a burst of load on this shared machine hits one sample, not a mode.

Why a batch cap, and which. Without one the cost model makes a batch almost free (a DB sequence adds
~0.3 ms to a ~21 ms step), so a replica is latency-bound and a second one barely helps below several
hundred live streams; a real vLLM is throughput-bound much earlier, because ``max_num_seqs`` and the
KV cache cap the batch. The cap is not tuned for the result: it is
:func:`tokenworth_bench.gpu_model_server.kv_max_num_seqs` (32): the full-context concurrency of Qwen2.5-14B's
KV pool on the modelled 80 GiB card under the project's GPU split. The stream count is chosen so a
replica of the one-node runs is at its cap (``--seeds 32`` x 4 methods = 128 streams, 4 per slot);
below the cap more GPUs do not shorten the window (pack more streams per GPU instead), and the
docs say so.

Fidelity checks written with each run: every mode's records equal the local run's field for field
(but ``time_s``) and its ``summary.md`` is the same; both nodes of ``ray2`` ran streams (each
stream's ``node.json``); the replicas' ``late_s`` (decode loop behind schedule: a loaded machine) and
the local run's harness share (server idle over the window). Methods without a JAX controller by
default: a controller compiles in its first tick, inside the window, once per worker, which is a
start-up cost (10-40 s per worker, reported by the engine-speed bench), not a steady-state one.

Writes ``<out>/ray_scaling.json`` (every run, the ratios, the machine, the commit) and
``<out>/ray_scaling.md``.
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text
from tokenworth_bench.engine_speed import GPUModelServer, commit, machine

REPO = Path(__file__).resolve().parents[2]
MODES = ("local", "ray1", "ray2")
NODES = {"local": 0, "ray1": 1, "ray2": 2}
REPLICAS = {"local": 1, "ray1": 1, "ray2": 2}
METHODS = "standard,rag,memrl,memp"
SHRINK_TARGET, OVERHEAD_TARGET = 1.8, 0.10


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}


def cli_command(args: argparse.Namespace, out: Path, urls: Sequence[str], address: str | None) -> list[str]:
    command = [sys.executable, "-m", "tokenworth_agent.cli", "run", "--env", "db", "--methods", args.methods,
               "--seeds", ",".join(str(s) for s in range(args.seeds)), "--limit", str(args.tasks),
               "--backbone", "openai", "--model", "gpu-model", "--out", str(out), "--no-progress"]
    for url in urls:
        command += ["--base-url", url]
    if args.data_dir:
        command += ["--data-dir", args.data_dir]
    if address is not None:
        command += ["--executor", "ray", "--ray-address", address]
    return command


def served_window(stats: Sequence[dict[str, Any]]) -> float:
    """From the first arrival at any replica to the last response of any replica."""
    if any(s["first_in"] is None or s["last_out"] is None for s in stats):
        raise RuntimeError("a replica served nothing: the run did not reach it")
    return max(s["last_out"] for s in stats) - min(s["first_in"] for s in stats)


def run_mode(mode: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """One run of ``mode`` into ``folder``: its window, wall time and the replicas' counters."""
    from tests.ray_nodes import RayNodes

    nodes = RayNodes(cpus=(1,) * NODES[mode], env=environment()) if NODES[mode] else None
    servers: list[GPUModelServer] = []
    try:
        servers = [GPUModelServer(args.scale, args.tasks, args.data_dir, {"max_num_seqs": args.max_num_seqs})
                   for _ in range(REPLICAS[mode])]
        address = nodes.ready().address if nodes is not None else None
        for server in servers:
            server._get("/stats/reset", method="POST")
        started = time.perf_counter()
        done = subprocess.run(cli_command(args, folder, [s.url for s in servers], address), cwd=REPO,
                              env=environment(), capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"error: the {mode} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        stats = [server._get("/stats") for server in servers]
    finally:
        for server in servers:
            server.close()
        if nodes is not None:
            nodes.close()
    keep = ("requests", "steps", "mean_batch_per_step", "model_s", "busy_s", "late_s", "completion_tokens")
    window = served_window(stats)
    return {"mode": mode, "nodes": NODES[mode], "replicas": len(stats), "window_s": round(window, 2),
            "wall_s": round(wall, 2), "harness_share": round(1 - stats[0]["busy_s"] / window, 3)
            if len(stats) == 1 else None,
            "servers": [{k: stats_value(s, k) for k in keep} for s in stats],
            "cluster_start_s": getattr(nodes, "started_s", None)}


def stats_value(stats: dict[str, Any], key: str) -> Any:
    value = stats[key]
    return round(value, 3) if isinstance(value, float) else value


def same_run(got: Path, reference: Path) -> dict[str, Any]:
    """Records field for field (but time_s), summary.md, and which nodes ran the streams."""
    from tokenworth_agent.results.record import comparable, read_records

    names = sorted(str(p.parent.relative_to(reference)) for p in reference.rglob("records.jsonl"))
    equal = [comparable(read_records(got / n / "records.jsonl")) == comparable(read_records(reference / n /
                                                                                            "records.jsonl"))
             for n in names]
    nodes = set()
    for name in names:
        note = got / name / "node.json"
        if note.exists():
            nodes.add(json.loads(note.read_text())["node_id"])
    return {"streams": len(names), "records_equal": all(equal) and bool(names),
            "summary_equal": (got / "summary.md").read_text() == (reference / "summary.md").read_text(),
            "nodes_that_ran_streams": len(nodes)}


def ratios(runs: list[dict[str, Any]]) -> dict[str, Any]:
    window = {m: statistics.median(r["window_s"] for r in runs if r["mode"] == m) for m in MODES
              if any(r["mode"] == m for r in runs)}
    out: dict[str, Any] = {"median_window_s": {m: round(w, 2) for m, w in window.items()}}
    if "ray1" in window and "ray2" in window:
        out["shrink_two_nodes"] = round(window["ray1"] / window["ray2"], 3)
        out["shrink_target"] = SHRINK_TARGET
    if "ray1" in window and "local" in window:
        out["ray_overhead"] = round(window["ray1"] / window["local"] - 1, 3)
        out["overhead_target"] = OVERHEAD_TARGET
    if "local" in window and "ray2" in window:
        out["two_nodes_vs_local"] = round(window["local"] / window["ray2"], 3)
    # the modelled GPU time of the busiest replica: the shrink the GPUs alone give (no harness in it)
    gpu = {m: statistics.median(max(x["model_s"] for x in r["servers"]) for r in runs if r["mode"] == m)
           for m in window}
    if "ray1" in gpu and "ray2" in gpu:
        out["gpu_time_shrink_two_nodes"] = round(gpu["ray1"] / gpu["ray2"], 3)
    return out


def render(report: dict[str, Any]) -> str:
    r, s = report["ratios"], report["settings"]
    lines = ["# Ray scaling (bench/tokenworth_bench/ray_scaling.py)", "",
             f"`tokenworth run` over {s['streams']} DB streams ({s['methods']} x {s['seeds']} seeds, {s['tasks']} tasks "
             f"each), `--backbone openai` against the batch-economics server (batch cap {s['max_num_seqs']} = the "
             f"KV pool's full-context concurrency, scale {s['scale']:g}); {s['repeats']} interleaved repeat(s), "
             f"medians. Commit {report['commit']}, load average at start {report['load_at_start']}, "
             f"at end {report['machine']['load_avg_at_end']}.", "",
             "| mode | nodes | replicas | served window s | wall s | harness share | late s | mean batch/step "
             "| records equal local | nodes used |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for run in report["runs"]:
        check = run.get("check", {})
        share = "" if run["harness_share"] is None else f"{run['harness_share']:.1%}"
        late = ", ".join(f"{x['late_s']:.1f}" for x in run["servers"])
        batch = ", ".join(f"{x['mean_batch_per_step']:.1f}" for x in run["servers"])
        lines.append(f"| {run['mode']} | {run['nodes']} | {run['replicas']} | {run['window_s']:.1f} | "
                     f"{run['wall_s']:.1f} | {share} | {late} | {batch} | {check.get('records_equal', 'reference')} | "
                     f"{check.get('nodes_that_ran_streams', '')} |")
    lines += ["", f"* Two nodes against one (served window): **{r.get('shrink_two_nodes', 'n/a')}x** "
                  f"(target >= {SHRINK_TARGET}).",
              f"* Ray on one node against the in-process run: **{r.get('ray_overhead', 0):+.1%}** "
              f"(target <= {OVERHEAD_TARGET:.0%}).",
              f"* Two Ray nodes against the in-process run: {r.get('two_nodes_vs_local', 'n/a')}x.",
              f"* Modelled GPU time of the busiest replica, one node against two: "
              f"{r.get('gpu_time_shrink_two_nodes', 'n/a')}x (the part of the shrink the GPUs give; the rest is the "
              "harness, split over two processes).", ""]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tokenworth_bench ray-scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default=METHODS, help=f"methods [{METHODS}]")
    parser.add_argument("--seeds", type=int, default=32, help="seeds per method [32]")
    parser.add_argument("--tasks", type=int, default=6, help="DB tasks per stream [6]")
    parser.add_argument("--scale", type=float, default=1.0, help="the server's time scale [1]")
    parser.add_argument("--max-num-seqs", type=int, default=None,
                        help="the replicas' batch cap [the KV pool's full-context concurrency, 32]")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats of the modes [2]")
    parser.add_argument("--modes", default=",".join(MODES), help=f"modes [{','.join(MODES)}]")
    parser.add_argument("--data-dir", default=None, help="LifelongAgentBench data [$TOKENWORTH_DATA_DIR]")
    parser.add_argument("--out", type=Path, default=RESULTS / "ray", help="result folder")
    parser.add_argument("--render", action="store_true", help="only rewrite the ratios and the table from the JSON")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        parser.error(f"--modes: choose from {', '.join(MODES)} (got {args.modes!r})")
    if args.seeds < 1 or args.tasks < 1 or args.repeats < 1 or not args.scale > 0:
        parser.error("--seeds, --tasks and --repeats must be at least 1, --scale above 0")
    args.modes = modes
    if args.max_num_seqs is None:
        from tokenworth_bench.gpu_model_server import kv_max_num_seqs

        args.max_num_seqs = kv_max_num_seqs()["max_num_seqs"]
    return args


def rerender(out: Path) -> str:
    """Recompute the ratios and the table from ``<out>/ray_scaling.json`` (after a change to either)."""
    report = json.loads((out / "ray_scaling.json").read_text())
    report["ratios"] = ratios(report["runs"])
    atomic_write_json(out / "ray_scaling.json", report)
    text = render(report)
    atomic_write_text(out / "ray_scaling.md", text)
    return text


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    if args.render:
        print(rerender(args.out))
        return None
    if any(NODES[m] for m in args.modes):
        try:
            import ray  # noqa: F401
        except ImportError:
            raise SystemExit("error: the ray modes need Ray: pip install -e './agent[ray]'") from None
    settings = {"methods": args.methods, "seeds": args.seeds, "tasks": args.tasks, "scale": args.scale,
                "max_num_seqs": args.max_num_seqs, "repeats": args.repeats,
                "streams": len(args.methods.split(",")) * args.seeds}
    report: dict[str, Any] = {"settings": settings, "commit": commit(),
                              "load_at_start": [round(x, 2) for x in os.getloadavg()], "runs": []}
    work = Path(tempfile.mkdtemp(prefix="tw-ray-bench-"))
    reference: Path | None = None
    try:
        for repeat in range(args.repeats):
            for mode in args.modes:
                folder = work / f"{mode}-{repeat}"
                run = {"repeat": repeat, **run_mode(mode, args, folder)}
                if mode == "local" and reference is None:
                    reference = folder
                elif reference is not None:
                    run["check"] = same_run(folder, reference)
                report["runs"].append(run)
                print(json.dumps(run), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["ratios"] = ratios(report["runs"])
    report["machine"] = machine()
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out / "ray_scaling.json", report)
    text = render(report)
    atomic_write_text(args.out / "ray_scaling.md", text)
    print(text)
    return report


if __name__ == "__main__":
    main()
