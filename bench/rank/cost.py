"""Per-task cost of the learned ranker against today's fused ``tw.run``, same stream, same process.

Both run one ``lax.scan`` over a synthetic DB-shaped stream (D = 512, B_max = 64, K_c = 12;
:func:`bench.controller.common.synthetic_stream`), jitted once, timed as the median of
``--repeats`` runs divided by the task count. The ranker's run includes its own FIFO bank,
cosine recall, the action model's RLS update on every success and the lift's evidence refit on
every injection (:mod:`tokenworth_jax.rank.standalone`). Interleaving the two timings keeps a
shared machine's load out of their ratio.

    python -m bench.rank.cost [--tasks 400] [--repeats 7] [--out bench/results/ranking/cost.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import tokenworth_jax as tw
from bench.controller.common import cpu_model, synthetic_stream
from tokenworth_jax.rank import standalone as S


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
    acts = rng.normal(size=(T, 256))
    acts /= np.linalg.norm(acts, axis=1, keepdims=True)
    words = rng.normal(size=(T, 512))
    words /= np.linalg.norm(words, axis=1, keepdims=True)
    queries, rewards = jnp.asarray(stream.queries), jnp.asarray(stream.rewards)
    spec, hp = tw.preset("db")
    events = tw.Event(query=queries, reward=rewards, memory=queries, memory_id=jnp.arange(T, dtype=jnp.int32))
    dims, rhp = S.Dims(), S.params()
    rstream = S.Stream(keys=queries, words=jnp.asarray(words, jnp.float32), acts=jnp.asarray(acts, jnp.float32))
    paper = jax.jit(lambda: tw.run(tw.init(spec, hp), events, hp, spec))
    ranker = jax.jit(lambda: S.run(S.init(dims, rhp), rstream, rhp, dims, lambda t, m: rewards[t]))
    ms = _median_ms({"tw.run": paper, "rank": ranker}, repeats)
    per_task = {k: v / T for k, v in ms.items()}
    return {"tasks": T, "repeats": repeats, "cpu": cpu_model(), "per_task_ms": per_task,
            "rank_over_tw_run": per_task["rank"] / per_task["tw.run"]}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="bench/results/ranking/cost.json")
    args = parser.parse_args(argv)
    result = measure(args.tasks, args.repeats)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    p = result["per_task_ms"]
    print(f"per task: tw.run {p['tw.run']:.3f} ms, ranker {p['rank']:.3f} ms "
          f"({result['rank_over_tw_run']:.2f}x tw.run)")
    return result


if __name__ == "__main__":
    main()
