"""GPU smoke check: the CLI's co-location settings on a real GPU, without vLLM or weights.

``python -m tokenworth_bench.gpu_smoke --out DIR`` (``scripts/gpu-smoke.sh`` wraps it and archives DIR):

1. applies the GPU split exactly as ``tokenworth run --backbone vllm`` does
   (:func:`tokenworth_agent.backbones.colocation.apply_colocation`, the JAX share sized from the controller's
   Spec for ``--configs`` streams, or ``--jax-mem-fraction``), *before* JAX starts;
2. checks that JAX sees the GPU and that its allocator limit (``memory_stats()['bytes_limit']``)
   equals the requested share of the GPU's total memory (within 2%);
3. runs the controller (``tw.run``, one configuration) and a ``--configs``-configuration sweep
   (``tw.run_batched``, strategy ``"vmap"``) over a synthetic DB-sized stream, timing the compile
   and the run, and reads the peak device memory, which must stay under the controller's sized need;
   where nvidia-smi lists this process, what it uses beyond XLA's pool (its CUDA context) must fit
   the split's budget of one context (``colocation.CONTEXT_BYTES``);
4. writes ``gpu_smoke.json`` and ``gpu_smoke.md`` to DIR and exits 0 only if every check passed.

``--cpu`` runs the same code on the CPU (no GPU checks) and ``--tiny`` shrinks the Spec, to test
the script itself where there is no GPU.
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import functools
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any


def _block(tree: Any) -> Any:
    import jax

    return jax.block_until_ready(tree)


def _timed(fn: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    out = _block(fn())
    return out, time.perf_counter() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tokenworth_agent.backbones import colocation as co

    result: dict[str, Any] = {"python": platform.python_version(), "checks": {}}
    if args.cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
        plan = None
    else:
        total = co.gpu_total_bytes()
        if total is None:
            raise SystemExit("error: nvidia-smi reports no GPU; run this on the GPU machine (or pass --cpu)")
        plan = co.apply_colocation("vllm", {}, jax_mem_fraction=args.jax_mem_fraction, env="db",
                                   controller_streams=args.configs, total_bytes=total)
        result["plan"] = {"jax_fraction": plan.jax_fraction, "gpu_memory_utilization": plan.gpu_memory_utilization,
                          "total_bytes": plan.total_bytes, "jax_needed_bytes": plan.jax_needed_bytes,
                          "describe": plan.describe()}
        result["env"] = {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "VLLM_"))}

    import jax

    import tokenworth_jax as tw
    from tokenworth_bench.controller.common import TINY_SPEC, synthetic_stream
    from tokenworth_bench.controller.sweep import configs

    result["jax"] = jax.__version__
    device = jax.devices()[0]
    result["device"] = str(device)
    if not args.cpu:
        co.assert_jax_sees_gpu()
        stats = device.memory_stats() or {}
        limit = int(stats.get("bytes_limit", 0))
        wanted = plan.jax_fraction * plan.total_bytes
        result["bytes_limit"] = limit
        result["bytes_limit_over_requested"] = limit / wanted if wanted else None
        result["checks"]["jax_sees_gpu"] = device.platform == "gpu"
        result["checks"]["allocator_limit_is_the_share"] = bool(limit) and abs(limit - wanted) <= 0.02 * wanted

    spec, hp = tw.preset("db", spec_overrides=TINY_SPEC if args.tiny else None)
    events = synthetic_stream(args.tasks, spec.dim, seed=1).events()
    one = jax.jit(lambda s, e: tw.run(s, e, hp, spec))
    state = tw.init(spec, hp)
    _, compile_s = _timed(lambda: one(state, events))
    _, run_s = _timed(lambda: one(state, events))
    result["controller"] = {"tasks": args.tasks, "first_call_s": compile_s, "run_s": run_s,
                            "ms_per_task": 1e3 * run_s / args.tasks}

    hps = tw.stack_hparams(configs(args.configs))
    states = jax.vmap(functools.partial(tw.init, spec))(hps)
    sweep = jax.jit(lambda s, e, h: tw.run_batched(s, e, h, spec, strategy="vmap"))
    _, sweep_compile_s = _timed(lambda: sweep(states, events, hps))
    _, sweep_s = _timed(lambda: sweep(states, events, hps))
    state_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
    result["sweep"] = {"configs": args.configs, "tasks": args.tasks, "first_call_s": sweep_compile_s, "run_s": sweep_s,
                       "config_tasks_per_s": args.configs * args.tasks / sweep_s, "state_bytes_per_config": state_bytes}
    result["checks"]["controller_and_sweep_ran"] = True
    if not args.cpu:
        peak = int((device.memory_stats() or {}).get("peak_bytes_in_use", 0))
        needed = co.controller_needed_bytes(state_bytes, args.configs)
        result["peak_bytes_in_use"] = peak
        result["peak_over_sized_need"] = peak / needed
        result["checks"]["peak_within_the_sized_need"] = 0 < peak <= needed
        # The split budgets one CUDA context per process outside the pools (colocation.CONTEXT_BYTES):
        # what nvidia-smi charges this process beyond the bytes XLA's allocator took from the device.
        stats = device.memory_stats() or {}
        pool = int(stats.get("pool_bytes") or stats.get("bytes_reserved") or peak)
        used = process_used_bytes(os.getpid())
        result["process_used_bytes"], result["pool_bytes"] = used, pool
        if used is not None:
            result["outside_pool_bytes"] = used - pool
            result["checks"]["outside_pool_within_the_context_budget"] = used - pool <= co.CONTEXT_BYTES
    result["ok"] = all(result["checks"].values())
    return result


def process_used_bytes(pid: int) -> int | None:
    """GPU memory nvidia-smi charges to ``pid``; None where it cannot tell (no nvidia-smi, another
    PID namespace in a container)."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
            return int(parts[1]) << 20  # MiB
    return None


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# GPU smoke · {result['device']} · JAX {result['jax']} · Python {result['python']}", ""]
    if "plan" in result:
        lines += [f"- {result['plan']['describe']} (env {result['env']})",
                  f"- allocator limit {result['bytes_limit'] / 2**30:.2f} GiB = "
                  f"{result['bytes_limit_over_requested']:.4f} x the requested share",
                  f"- peak in use {result['peak_bytes_in_use'] / 2**30:.3f} GiB = "
                  f"{result['peak_over_sized_need']:.3f} x the controller's sized need"]
        if result.get("outside_pool_bytes") is not None:
            from tokenworth_agent.backbones.colocation import CONTEXT_BYTES

            lines.append(f"- this process outside XLA's pool (CUDA context, kernel images): "
                         f"{result['outside_pool_bytes'] / 2**30:.2f} GiB (budget per process "
                         f"{CONTEXT_BYTES / 2**30:.2f} GiB)")
    c, s = result["controller"], result["sweep"]
    lines += [f"- controller: {c['tasks']} tasks, first call {c['first_call_s']:.1f} s, "
              f"{c['ms_per_task']:.3f} ms/task after",
              f"- sweep: {s['configs']} configs x {s['tasks']} tasks (vmap), first call {s['first_call_s']:.1f} s, "
              f"run {s['run_s']:.2f} s = {s['config_tasks_per_s']:.0f} config-tasks/s",
              "", "| check | passed |", "|---|---|"]
    lines += [f"| {name} | {'yes' if ok else 'NO'} |" for name, ok in result["checks"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "gpu_smoke")
    parser.add_argument("--configs", type=int, default=256)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--jax-mem-fraction", type=float, default=None)
    parser.add_argument("--cpu", action="store_true", help="run on the CPU, without the GPU checks")
    parser.add_argument("--tiny", action="store_true", help="the benchmarks' tiny Spec (fast compiles, for tests)")
    args = parser.parse_args(argv)
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_smoke.json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result)
    (args.out / "gpu_smoke.md").write_text(text)
    print(text)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
