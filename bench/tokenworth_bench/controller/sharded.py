"""Benchmark 5: the sweep sharded over devices with ``jax.sharding``.

A 1-D ``Mesh`` over the configuration axis; stacked states and hparams get
``NamedSharding(mesh, P("config"))``, the event stream is replicated. The same
``tw.run_batched(..., strategy="vmap")`` (batched ops, refits gated on any configuration due)
then runs one slice of configurations per device: XLA partitions the batched ops over the mesh. The child process also
runs the unsharded computation (everything on device 0) and compares the two.

On a CPU the devices are simulated with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``,
which must be set before JAX initialises, so the measurement runs in a subprocess
(``python -m tokenworth_bench.controller.sharded --child``). On a machine with N real accelerators the
same child runs unchanged with ``--no-force``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .common import REPO, SIZES, Size, md_table, write_result

FLOAT_TOL = 1e-5


def child(size_name: str, n_devices: int) -> dict[str, Any]:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import tokenworth_jax as tw

    from .common import block, db_setup, machine_info, synthetic_stream, time_call
    from .sweep import configs, init_many

    size = SIZES[size_name]
    devices = jax.devices()
    if len(devices) < n_devices:
        raise RuntimeError(f"need {n_devices} devices, JAX sees {len(devices)}: {devices}")
    C, T = size.shard_configs, size.shard_tasks
    if C % n_devices:
        raise ValueError(f"shard_configs={C} must be a multiple of the device count {n_devices}")
    spec, _ = db_setup(size)
    events = synthetic_stream(T, spec.dim, seed=2).events()
    hps = tw.stack_hparams(configs(C))
    fn = jax.jit(lambda s, e, h: tw.run_batched(s, e, h, spec, None, "vmap"))

    mesh = Mesh(np.array(devices[:n_devices]), ("config",))
    by_config = NamedSharding(mesh, PartitionSpec("config"))
    replicated = NamedSharding(mesh, PartitionSpec())
    hps_sh = jax.device_put(hps, by_config)
    states_sh = jax.device_put(init_many(spec, hps), by_config)
    events_sh = jax.device_put(events, replicated)
    sharded, sh_compile = time_call(lambda: fn(states_sh, events_sh, hps_sh), 2)
    out_sh = block(fn(states_sh, events_sh, hps_sh))

    one = devices[0]
    hps_1 = jax.device_put(hps, one)
    states_1 = jax.device_put(init_many(spec, hps), one)
    events_1 = jax.device_put(events, one)
    single, single_compile = time_call(lambda: fn(states_1, events_1, hps_1), 2)
    out_1 = block(fn(states_1, events_1, hps_1))

    leaves_sh = jax.tree_util.tree_leaves(jax.device_get(out_sh))
    leaves_1 = jax.tree_util.tree_leaves(jax.device_get(out_1))
    max_abs, exact_int, float_ok = 0.0, True, True
    for a, b in zip(leaves_sh, leaves_1):
        a, b = np.asarray(a), np.asarray(b)
        if np.issubdtype(a.dtype, np.floating):
            both_nan = np.isnan(a) & np.isnan(b)
            diff = np.where(both_nan, 0.0, np.abs(a.astype(np.float64) - b.astype(np.float64)))
            max_abs = max(max_abs, float(np.nanmax(diff)) if diff.size else 0.0)
            float_ok &= bool(np.allclose(a, b, rtol=FLOAT_TOL, atol=FLOAT_TOL, equal_nan=True))
        else:
            exact_int &= bool(np.array_equal(a, b))
    sharding_of = str(jax.tree_util.tree_leaves(out_sh)[0].sharding)
    return dict(machine=machine_info(), configs=C, tasks=T, devices=n_devices, sharded=sharded,
                sharded_compile_s=sh_compile, single_device=single, single_compile_s=single_compile,
                speedup=single["median_ms"] / sharded["median_ms"], output_sharding=sharding_of,
                equal=dict(integer_leaves_exact=exact_int, float_leaves_close=float_ok, max_abs_diff=max_abs,
                           tolerance=FLOAT_TOL))


def run_child(size: Size, *, force_host_devices: bool = True) -> dict[str, Any]:
    env = dict(os.environ)
    if force_host_devices:
        flag = f"--xla_force_host_platform_device_count={size.shard_devices}"
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flag).strip()
        env["JAX_PLATFORMS"] = "cpu"
    cmd = [sys.executable, "-m", "tokenworth_bench.controller.sharded", "--child", "--size", size.name,
           "--devices", str(size.shard_devices)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"sharded child failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(size: Size, out_dir: Path, *, force_host_devices: bool = True) -> dict[str, Any]:
    res = run_child(size, force_host_devices=force_host_devices)
    child_machine = res.pop("machine")
    payload = dict(size=size.name, child_machine=child_machine, simulated_devices=force_host_devices, **res)
    rows = [["sharded", res["devices"], res["sharded"]["median_ms"] / 1e3, res["sharded_compile_s"]],
            ["single device", 1, res["single_device"]["median_ms"] / 1e3, res["single_compile_s"]]]
    text = md_table(["layout", "devices", "run s", "compile s"], rows)
    text += (f"\n{res['configs']} configs x {res['tasks']} tasks; child devices {child_machine['devices']}; "
             f"speedup {res['speedup']:.2f}x. Sharded == unsharded: {res['equal']}.\n")
    if force_host_devices:
        text += ("\nDevices are simulated host devices (XLA_FLAGS=--xla_force_host_platform_device_count); "
                 "they share the same CPU cores, so no speedup is expected here: this checks the sharded "
                 "program is correct and runs.\n")
    write_result(out_dir, "sharded", payload, text)
    return payload


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", required=True)
    ap.add_argument("--size", default="quick", choices=sorted(SIZES))
    ap.add_argument("--devices", type=int, default=4)
    a = ap.parse_args(argv)
    print(json.dumps(child(a.size, a.devices), default=float))


if __name__ == "__main__":
    main()
