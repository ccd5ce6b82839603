"""Per-task cost of TokenWorth+ against the paper's fused ``tw.run``, same stream, same process.

Both run one ``tw.run`` (a ``lax.scan`` of the controller's step) over a synthetic DB-shaped
stream (D = 512, B_max = 64, K_c = 12; :func:`tokenworth_bench.controller.common.synthetic_stream`), jitted
once, timed as the median of ``--repeats`` runs divided by the task count. TokenWorth+'s run adds
the action model's RLS update on every success and the lift's evidence refit on every injection.
Interleaving the two timings keeps a shared machine's load out of their ratio.

    python -m tokenworth_bench.rank.cost [--tasks 400] [--repeats 7] [--out bench/results/ranking/cost.json]
"""

from __future__ import annotations

from ..paths import RESULTS
import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import tokenworth_jax as tw
from tokenworth_bench.controller.common import cpu_model, synthetic_stream


def _median_ms(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    for f in fns.values():
        jax.block_until_ready(f())  # compile
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, f in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(f())
            times[name].append(time.perf_counter() - start)
    return {k: 1e3 * float(np.median(v)) for k, v in times.items()}


def measure(T: int, repeats: int) -> dict[str, Any]:
    stream = synthetic_stream(T, 512)
    rng = np.random.default_rng(0)
    spec, hp = tw.preset("db")
    pspec, php = tw.preset("db", method="tokenworth+")

    def units(n: int, d: int) -> jax.Array:
        v = rng.normal(size=(n, d))
        return jnp.asarray(v / np.linalg.norm(v, axis=1, keepdims=True), jnp.float32)

    queries, rewards, ids = jnp.asarray(stream.queries), jnp.asarray(stream.rewards), jnp.arange(T, dtype=jnp.int32)
    events = tw.Event(query=queries, reward=rewards, memory=queries, memory_id=ids)
    shapes = pspec.mode.shapes
    plus_events = tw.Event(query=tw.Query(queries, {"words": units(T, shapes.word_dim)}), reward=rewards,
                           memory=tw.MemoryText(queries, {"actions": units(T, shapes.action_dim)}), memory_id=ids)
    # hyperparameters and events are arguments (traced), as in a sweep or an agent run
    paper = jax.jit(lambda h, e: tw.run(tw.init(spec, h), e, h, spec))
    plus = jax.jit(lambda h, e: tw.run(tw.init(pspec, h), e, h, pspec))
    ms = _median_ms({"tw.run": lambda: paper(hp, events), "tokenworth+": lambda: plus(php, plus_events)}, repeats)
    per_task = {k: v / T for k, v in ms.items()}
    return {"tasks": T, "repeats": repeats, "cpu": cpu_model(), "per_task_ms": per_task,
            "plus_over_tw_run": per_task["tokenworth+"] / per_task["tw.run"]}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=str(RESULTS / "ranking" / "cost.json"))
    args = parser.parse_args(argv)
    result = measure(args.tasks, args.repeats)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    p = result["per_task_ms"]
    print(f"per task: tw.run {p['tw.run']:.3f} ms, TokenWorth+ {p['tokenworth+']:.3f} ms "
          f"({result['plus_over_tw_run']:.2f}x tw.run)")
    return result


if __name__ == "__main__":
    main()
