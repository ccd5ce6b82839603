"""Run every controller benchmark: ``python -m tokenworth_bench.controller.suite [--full] [--out DIR]``.

The default (``quick``) size finishes in a few minutes on a 2-core CPU; ``--full`` selects
the full sizes (100k-memory bank, 256 configurations x 500 tasks, ...). ``--size tiny`` is
for the smoke test. Results: ``<name>.json`` and ``<name>.md`` per benchmark in ``--out``
(default ``bench/results``), plus ``suite.json`` listing what ran: a partial rerun
(``--only``) merges its entries into the existing ``suite.json`` instead of replacing it. The same command runs
unchanged on a GPU and records the device in every result.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

from . import bank_scaling, per_task, roofline, sharded, speedups, sweep
from .common import DEFAULT_OUT, SIZES, machine_info

BENCHMARKS = ("per_task", "roofline", "bank_scaling", "sweep", "sharded", "speedups")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="tokenworth-bench controller", description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="full sizes (long: see docs/performance.md)")
    ap.add_argument("--size", choices=sorted(SIZES), metavar="SIZE",
                    help=f"explicit size (overrides --full): {', '.join(sorted(SIZES))}")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default bench/results)")
    ap.add_argument("--only", nargs="+", choices=BENCHMARKS, metavar="NAME",  # the choices would fill a line
                    help=f"run only these benchmarks: {', '.join(BENCHMARKS)}")
    ap.add_argument("--real-devices", action="store_true",
                    help="sharded benchmark: use the real devices instead of simulated host devices")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    size = SIZES[args.size or ("full" if args.full else "quick")]
    selected = args.only or list(BENCHMARKS)
    if "roofline" in selected and "per_task" not in selected:
        selected = ["per_task", *selected]  # the roofline divides per-task times
    out: Path = args.out
    ran: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for name in BENCHMARKS:
        if name not in selected:
            continue
        t0 = time.perf_counter()
        print(f"[bench] {name} ({size.name}) ...", flush=True)
        if name == "per_task":
            results[name] = per_task.run(size, out)
        elif name == "roofline":
            results[name] = roofline.run(size, out, results["per_task"])
        elif name == "bank_scaling":
            results[name] = bank_scaling.run(size, out)
        elif name == "sweep":
            results[name] = sweep.run(size, out)
        elif name == "sharded":
            results[name] = sharded.run(size, out, force_host_devices=not args.real_devices)
        elif name == "speedups":
            results[name] = speedups.run(size, out)
        ran[name] = dict(seconds=time.perf_counter() - t0, json=f"{name}.json", markdown=f"{name}.md", size=size.name)
        print(f"[bench] {name} done in {ran[name]['seconds']:.1f} s -> {out / (name + '.md')}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    write_suite(out / "suite.json", size.name, ran)
    return results


def write_suite(path: Path, size: str, ran: dict[str, Any]) -> dict[str, Any]:
    """Merge this run's entries into ``suite.json`` (a partial rerun keeps the others)."""
    previous: dict[str, Any] = {}
    if path.exists():
        try:
            previous = json.loads(path.read_text()).get("ran", {})
        except (json.JSONDecodeError, AttributeError):
            previous = {}
    merged = {**previous, **ran}
    data = dict(size=size, machine=machine_info(), ran={k: merged[k] for k in BENCHMARKS if k in merged})
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return data


if __name__ == "__main__":
    main()
