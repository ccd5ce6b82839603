"""Shared pieces of the controller benchmarks: sizes, timing, machine facts, result files,
a synthetic pre-featurised stream, and access to the NumPy reference.

Timing rule everywhere: one warm-up call (its wall time, minus the steady-state median, is
reported as the compile time), then ``repeats`` timed calls, each ending in
``jax.block_until_ready``; we report the median.
"""

from __future__ import annotations

from ..paths import RESULTS
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import tokenworth_jax as tw

REPO = Path(__file__).resolve().parents[3]
DEFAULT_OUT = RESULTS


@dataclasses.dataclass(frozen=True)
class Size:
    """How big each benchmark runs. ``tiny`` is for the smoke test, ``quick`` the default."""

    name: str
    spec_overrides: dict[str, int]  # applied to the DB preset's Spec
    prefill_tasks: int  # stream length run before measuring (fills windows and bank)
    window: int  # tasks in the per-phase measurement window (JAX)
    window_repeats: int  # how many times the JAX window is replayed from the same state
    numpy_window: int  # tasks in the NumPy reference's window
    micro_repeats: int  # repeats of single-call timings
    bank_sizes: tuple[int, ...]
    bank_repeats: int
    worth_chunk: int  # chunk used for banks above this many memories (0: never chunk)
    sweep_configs: tuple[int, ...]
    sweep_tasks: int
    sweep_loop_max_configs: int  # the Python-loop baseline times at most this many configs
    numpy_sweep_tasks: int  # tasks the NumPy reference runs for the sweep extrapolation
    shard_devices: int
    shard_configs: int
    shard_tasks: int
    speedup_configs: int = 8  # bench/tokenworth_bench/controller/speedups.py: batched configurations ...
    speedup_tasks: int = 50  # ... over this many tasks
    stream_tasks: int = 500  # bench/tokenworth_bench/controller/per_task.py: the host Controller and the reference over a whole stream
    stream_repeats: int = 3  # host runs of that stream (the reference runs it once: it is ~100x slower)
    bank_jobs: int = 1  # bank-scaling children run at once: 1 for timings; the smoke test runs 2 (its times mean nothing)


TINY_TASKS = 30
TINY_SPEC = dict(dim=32, capacity=8, base_window=16, fast_window=16, slow_window=16, k_candidates=4, n_probes=3)

SIZES: dict[str, Size] = {
    # tiny: every fused tw.run / run_batched in the suite scans TINY_TASKS tasks (the pre-fill, the window, the sweep's
    # and the speedups' streams), so each program compiles once for the whole suite and is reused; 30 + 30 tasks
    # still fill the windows and the bank and put a scheduled refit (task 50) inside the window.
    "tiny": Size("tiny", TINY_SPEC, prefill_tasks=TINY_TASKS, window=TINY_TASKS, window_repeats=2,
                 numpy_window=TINY_TASKS, micro_repeats=5, bank_sizes=(8, 64, 512), bank_repeats=3, worth_chunk=128,
                 sweep_configs=(1, 2), sweep_tasks=TINY_TASKS, sweep_loop_max_configs=2, numpy_sweep_tasks=12,
                 shard_devices=4, shard_configs=4, shard_tasks=12, speedup_configs=2, speedup_tasks=TINY_TASKS,
                 stream_tasks=30, stream_repeats=2, bank_jobs=2),
    "quick": Size("quick", {}, prefill_tasks=400, window=200, window_repeats=3, numpy_window=200, micro_repeats=30,
                  bank_sizes=(64, 1_000, 10_000, 100_000), bank_repeats=3, worth_chunk=4096, sweep_configs=(1, 4),
                  sweep_tasks=50, sweep_loop_max_configs=4, numpy_sweep_tasks=50, shard_devices=4, shard_configs=4,
                  shard_tasks=50, speedup_configs=16, speedup_tasks=100),
    # quick, except that the batched-vs-loop comparison runs at the 256 configurations x 500 tasks
    "c256": Size("c256", {}, prefill_tasks=400, window=200, window_repeats=3, numpy_window=200, micro_repeats=30,
                 bank_sizes=(64, 1_000, 10_000, 100_000), bank_repeats=3, worth_chunk=4096, sweep_configs=(1, 4),
                 sweep_tasks=50, sweep_loop_max_configs=4, numpy_sweep_tasks=50, shard_devices=4, shard_configs=4,
                 shard_tasks=50, speedup_configs=256, speedup_tasks=500),
    "full": Size("full", {}, prefill_tasks=500, window=200, window_repeats=5, numpy_window=200, micro_repeats=100,
                 bank_sizes=(64, 1_000, 3_000, 10_000, 30_000, 100_000), bank_repeats=5, worth_chunk=4096,
                 sweep_configs=(1, 16, 256), sweep_tasks=500, sweep_loop_max_configs=16, numpy_sweep_tasks=100,
                 shard_devices=4, shard_configs=16, shard_tasks=500, speedup_configs=256, speedup_tasks=500),
}


def db_setup(size: Size, **spec_overrides: int) -> tuple[tw.Spec, tw.HParams]:
    """The DB preset (D = 512, B_max = 64, K_c = 12 unless ``size`` shrinks it)."""
    return tw.preset("db", spec_overrides={**size.spec_overrides, **spec_overrides})


# ----------------------------------------------------------------------------- machine

def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    import jaxlib

    return dict(
        jax=jax.__version__, jaxlib=jaxlib.__version__, numpy=np.__version__, python=platform.python_version(),
        backend=jax.default_backend(), devices=[str(d) for d in jax.devices()],
        device_kind=jax.devices()[0].device_kind, cpu_model=cpu_model(), cpu_count=os.cpu_count(),
        platform=platform.platform(), xla_flags=os.environ.get("XLA_FLAGS", ""),
    )


# ----------------------------------------------------------------------------- timing

def block(x: Any) -> Any:
    return jax.block_until_ready(x)


def summarise(seconds: list[float]) -> dict[str, float]:
    """Median (the reported number), plus min/max/mean and count, all in milliseconds."""
    ms = [s * 1e3 for s in seconds]
    return dict(median_ms=statistics.median(ms), min_ms=min(ms), max_ms=max(ms), mean_ms=statistics.fmean(ms),
                n=len(ms))


def time_call(fn: Callable[[], Any], repeats: int) -> tuple[dict[str, float], float]:
    """(summary of ``repeats`` timed calls, compile seconds = first call minus the median)."""
    t0 = time.perf_counter()
    block(fn())
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        block(fn())
        times.append(time.perf_counter() - t0)
    summary = summarise(times)
    return summary, max(0.0, first - summary["median_ms"] / 1e3)


# ----------------------------------------------------------------------------- results

def write_result(out_dir: Path, name: str, payload: dict[str, Any], markdown: str) -> dict[str, Path]:
    """Write ``name.json`` (payload + machine) and ``name.md`` (a heading, the machine, tables)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine_info(), **payload}
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(payload, indent=2, default=_json_default) + "\n")
    m = payload["machine"]
    head = (f"# {name}\n\nsize `{payload.get('size', '?')}`; jax {m['jax']} on {m['backend']} "
            f"({', '.join(m['devices'])}); CPU {m['cpu_model']}, {m['cpu_count']} cores.\n\n")
    md_path.write_text(head + markdown.rstrip() + "\n")
    return dict(json=json_path, md=md_path)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- streams

@dataclasses.dataclass(frozen=True)
class Stream:
    """A pre-featurised stream: queries (T, D) around a few topics, the memory each task would
    offer (its own query, as the agent harness keys memories by the source query), ids = task
    index, and rewards drawn with a topic-dependent success rate."""

    queries: np.ndarray
    memories: np.ndarray
    ids: np.ndarray
    rewards: np.ndarray

    def events(self, start: int = 0, stop: int | None = None, *, all_success: bool = False) -> tw.Event:
        sl = slice(start, stop)
        rewards = np.ones_like(self.rewards[sl]) if all_success else self.rewards[sl]
        return tw.Event(query=jnp.asarray(self.queries[sl]), reward=jnp.asarray(rewards),
                        memory=jnp.asarray(self.memories[sl]), memory_id=jnp.asarray(self.ids[sl]))


def synthetic_stream(T: int, dim: int, *, seed: int = 0, n_topics: int = 24, noise: float = 0.8) -> Stream:
    rng = np.random.default_rng(seed)

    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    centres = unit(rng.normal(size=(n_topics, dim)))
    topic = rng.integers(0, n_topics, size=T)
    queries = unit(centres[topic] + noise * rng.normal(size=(T, dim)) / np.sqrt(dim)).astype(np.float32)
    p = np.linspace(0.35, 0.85, n_topics)[topic]
    rewards = (rng.random(T) < p).astype(np.int32)
    return Stream(queries=queries, memories=queries.copy(), ids=np.arange(T, dtype=np.int32), rewards=rewards)


def prefill(spec: tw.Spec, hp: tw.HParams, stream: Stream, n: int) -> tw.State:
    """The state after running the first ``n`` tasks of ``stream`` through the fused step."""
    state, _ = tw.run(tw.init(spec, hp), stream.events(0, n), hp, spec)
    return block(state)


def state_facts(state: tw.State, spec: tw.Spec) -> dict[str, Any]:
    c, res, base = jax.device_get((state.clock, state.residual, state.base))
    return dict(t=int(c.t), n_feedback=int(c.n_feedback), n_krr_fits=int(res.n_fits), n_base_fits=int(base.n_fits),
                n_agop=int(res.n_agop), bank_valid=int(np.sum(jax.device_get(state.bank.valid))), capacity=spec.capacity,
                base_window_full=bool(state.base.window.is_full), fast_window_full=bool(state.residual.fast.is_full),
                slow_window_full=bool(state.residual.slow.is_full), probe_ring_full=bool(state.probes.is_full))


# ----------------------------------------------------------------------------- reference

def reference_module() -> Any:
    """The float64 NumPy reference, :mod:`tokenworth_jax.reference_numpy` (installed with the package)."""
    from tokenworth_jax import reference_numpy

    return reference_numpy


def reference_prefill(spec: tw.Spec, hp: tw.HParams, stream: Stream, n: int) -> Any:
    ref = reference_module().ReferenceController(spec, hp)
    for i in range(n):
        r = int(stream.rewards[i])
        ref.step(stream.queries[i], r, stream.memories[i] if r else None, int(stream.ids[i]))
    return ref
