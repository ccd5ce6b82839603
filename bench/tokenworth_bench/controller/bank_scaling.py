"""Benchmark 3: probe-averaged worth and admission as the bank grows (B = 64 ... 100k).

Each bank size runs in its own subprocess (``python -m tokenworth_bench.controller.bank_scaling
--child ...``) so that its peak memory is its own. The children run one at a time
(``Size.bank_jobs``), except at the smoke test's tiny size, whose times nobody reads (two at
once). The child builds a full bank of B random unit vectors with random statistics, a full
probe ring, and a KRR predictor fitted on a full fast window, then times ``worth`` (jitted)
and ``offer`` after a success (worth + novelty + the admission decision and write).

Memory: XLA allocates outside Python's allocator (tracemalloc sees nothing) and the CPU
client reports no ``memory_stats()``, so we read the process's peak resident set size
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) after building the state and compiling
(the baseline) and again after the timed calls; the growth is the extra peak the
computation needed. Banks above ``Size.worth_chunk`` memories use
``Spec(worth_chunk=...)``, which bounds the score temporaries to
P x chunk x (D + 5) floats.

Incremental worth (the ``incremental`` scorer, one more child per size): the per-task cost is a
whole task inside ``tw.run`` (the new query's row at select, B N D; the offer's candidate
column, statistics part and decision; the cache updated in place), over a few all-success
tasks with no refit due, plus the full cache refresh of each KRR fit amortised over the DB
schedule (1/krr_interval + 1/agop_interval refreshes per task). Standalone ``select`` / ``offer``
calls are also reported; outside a scan they copy the whole cache. The cache's size is reported.

Linearity: least-squares fit of time = a + b B over all sizes (the slope b is the cost per
memory), and the log-log slope between the two largest sizes (1 means linear).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .common import REPO, Size, md_table, write_result


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def child(capacity: int, chunk: int, repeats: int, spec_overrides: dict[str, int],
          incremental: bool = False) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    import tokenworth_jax as tw
    from tokenworth_jax import krr, probes, worth_cache
    from tokenworth_jax.ring import ring_valid

    from .common import time_call

    spec, hp = tw.preset("db", scorer="incremental" if incremental else "full",
                         spec_overrides={**spec_overrides, "capacity": capacity, "worth_chunk": chunk})
    fns = tw.controller(spec.scorer, spec.mode)
    rng = np.random.default_rng(capacity)
    D, F, t = spec.dim, spec.feature_dim, 1000

    def unit(n: int) -> np.ndarray:
        v = rng.normal(size=(n, D))
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    B, N = capacity, spec.fast_window
    # Every random draw on the host first (always in this order, so a size always gets the same numbers), then the
    # state is assembled and its predictor fitted in one compiled program, not op by op (each op its own compile).
    emb = unit(B)
    stats = dict(u=rng.uniform(-1, 3, B).astype(np.float32), h=rng.integers(0, 5, B).astype(np.float32),
                 d=rng.integers(0, 5, B).astype(np.float32), c=rng.integers(0, 10, B).astype(np.float32),
                 last=rng.integers(0, t, B).astype(np.int32), tau=rng.integers(0, t, B).astype(np.int32))
    probe_queries = unit(spec.n_probes)
    # A realistic support set: z of random (query, memory) pairs with plausible statistics.
    qa, ma = unit(N), unit(N)
    tail = np.stack([np.sum(qa * ma, 1), rng.uniform(-1, 3, N), rng.uniform(0, 1, N), rng.uniform(0, 1, N),
                     rng.uniform(0, 1, N)], 1)
    z = np.concatenate([np.abs(qa - ma), tail], 1).astype(np.float32)
    delta = rng.uniform(-1, 1, N).astype(np.float32)
    task_query = unit(1)[0]

    @jax.jit
    def build(state: Any, emb: Any, stats: Any, probe_queries: Any, z: Any, delta: Any, task_query: Any) -> Any:
        bank = state.bank._replace(emb=emb, valid=jnp.ones((B,), bool), ids=jnp.arange(B, dtype=jnp.int32), **stats)
        probe_ring = state.probes._replace(data=tw.Query(probe_queries), is_full=jnp.ones((), bool))
        fast_ring = state.residual.fast._replace(data=(z, delta), is_full=jnp.ones((), bool))
        predictor = krr.fit(z, ring_valid(fast_ring), delta, state.residual.metric, jnp.float32(1.0),
                            jnp.float32(0.01))
        progress = tw.protocol.on_device(tw.protocol.Progress(tw.protocol.JUDGED, 1, False))
        return state._replace(
            bank=bank, probes=probe_ring, residual=state.residual._replace(fast=fast_ring, predictor=predictor,
                                                                           n_fits=jnp.int32(3)),
            clock=state.clock._replace(t=jnp.int32(t)),
            task=state.task._replace(query=tw.Query(task_query), retrieved=jnp.ones((), bool), progress=progress))

    state = build(tw.init(spec, hp), emb, stats, probe_queries, z, delta, task_query)
    e_new = jnp.asarray(unit(1)[0])
    refresh = jax.jit(lambda s: s._replace(scorer=worth_cache.refresh(probes.queries(s.probes, s.task.query)[0].key,
                                                                      s.bank.emb, s.residual.predictor,
                                                                      s.residual.metric)))
    if incremental:
        state = refresh(state)
    state = jax.block_until_ready(state)
    worth = fns.worth
    t0 = time.perf_counter()
    # Lowered with the memory as the public functions pass it to their programs (a bare vector is wrapped in a
    # MemoryText), so the timed calls below run these very executables instead of compiling them a second time.
    memory = tw.MemoryText(key=e_new)
    worth.lower(state, memory, hp, spec).compile()
    fns.offer.lower(state, memory, jnp.int32(B), hp, spec).compile()
    compile_s = time.perf_counter() - t0
    rss_base = _maxrss_mib()
    w_sum, _ = time_call(lambda: worth(state, e_new, hp, spec).bank, repeats)
    o_sum, _ = time_call(lambda: tw.offer(state, e_new, jnp.int32(B), hp, spec), repeats)
    extra: dict[str, Any] = {}
    if incremental:
        # A realistic per-task cost: tw.run over a few all-success tasks (select, observe, offer,
        # end_task in one scan, so the cache is updated in place as in an agent run), with the
        # feedback count placed where no refit is due; the refresh is timed on its own and amortised.
        n_steps = 4
        events = tw.Event(query=jnp.asarray(unit(n_steps)), reward=jnp.asarray(np.ones(n_steps, np.int32)),
                          memory=jnp.asarray(unit(n_steps)),
                          memory_id=jnp.asarray(np.arange(B, B + n_steps, dtype=np.int32)))
        no_refit = state._replace(clock=state.clock._replace(n_feedback=jnp.int32(1001)))
        run_sum, _ = time_call(lambda: tw.run(no_refit, events, hp, spec)[1].decision.code, repeats)
        q = jnp.asarray(unit(1)[0])
        s_sum, _ = time_call(lambda: tw.select(state, q, hp, spec)[1], repeats)
        r_sum, _ = time_call(lambda: refresh(state).scorer.dpart, max(1, repeats // 2))
        per_task = 1 / int(hp.krr_interval) + 1 / int(hp.agop_interval)
        task_ms = run_sum["median_ms"] / n_steps
        extra = dict(select=s_sum, refresh=r_sum, refreshes_per_task=per_task, run_task_ms=task_ms,
                     amortised_task_ms=task_ms + per_task * r_sum["median_ms"],
                     cache_mib=sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(state.scorer)) / 2 ** 20)
    rss_peak = _maxrss_mib()
    dev = jax.devices()[0]
    stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
    P = spec.n_probes + 1
    rows = (chunk if 0 < chunk < B + 1 else B + 1)
    return dict(capacity=B, worth_chunk=chunk, incremental=incremental, **extra, worth=w_sum, offer=o_sum, compile_s=compile_s,
                maxrss_baseline_mib=rss_base, maxrss_peak_mib=rss_peak, maxrss_growth_mib=rss_peak - rss_base,
                score_temporary_mib=P * rows * F * 4 / 2 ** 20, bank_mib=B * D * 4 / 2 ** 20,
                device_memory_stats=stats, device=str(dev))


def run(size: Size, out_dir: Path) -> dict[str, Any]:
    def child_result(B: int, incremental: bool) -> dict[str, Any]:
        chunk = size.worth_chunk if B > size.worth_chunk else 0
        cmd = [sys.executable, "-m", "tokenworth_bench.controller.bank_scaling", "--child", str(B), "--chunk", str(chunk),
               "--repeats", str(size.bank_repeats), "--spec", json.dumps(size.spec_overrides)]
        proc = subprocess.run(cmd + (["--incremental"] if incremental else []), cwd=REPO, capture_output=True,
                              text=True, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"bank-scaling child for B={B} failed:\n{proc.stderr[-4000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    runs = [(B, incremental) for B in size.bank_sizes for incremental in (False, True)]
    # one child at a time unless the size says its timings do not matter (the smoke test's)
    with concurrent.futures.ThreadPoolExecutor(max_workers=size.bank_jobs) as pool:
        done = list(pool.map(lambda run: child_result(*run), runs))
    results = [r for (_, incremental), r in zip(runs, done) if not incremental]
    inc_results = [r for (_, incremental), r in zip(runs, done) if incremental]
    Bs = np.array([r["capacity"] for r in results], float)
    fits = {}
    for key in ("worth", "offer"):
        ms = np.array([r[key]["median_ms"] for r in results])
        slope, intercept = np.polyfit(Bs, ms, 1)
        loglog = float(np.log(ms[-1] / ms[-2]) / np.log(Bs[-1] / Bs[-2])) if len(Bs) >= 2 else None
        fits[key] = dict(intercept_ms=float(intercept), slope_us_per_memory=float(slope * 1e3),
                         loglog_slope_last_two=loglog)
    largest = results[-1]
    inc_largest = inc_results[-1]
    payload = dict(size=size.name, spec_overrides=size.spec_overrides, children_at_once=size.bank_jobs,
                   results=results, incremental=inc_results,
                   fit=fits,
                   incremental_target=dict(capacity=100_000, amortised_task_s=0.15,
                                           measured_s=inc_largest["amortised_task_ms"] / 1e3
                                           if inc_largest["capacity"] == 100_000 else None,
                                           cache_mib=inc_largest["cache_mib"]),
                   target=dict(capacity=100_000, offer_s=0.5,
                               measured_s=largest["offer"]["median_ms"] / 1e3 if largest["capacity"] == 100_000 else None),
                   memory_method="peak RSS (getrusage ru_maxrss) per subprocess; growth = peak after the timed "
                                 "calls minus peak after building the state and compiling")
    rows = [[r["capacity"], r["worth_chunk"], r["worth"]["median_ms"], r["offer"]["median_ms"], r["compile_s"],
             r["maxrss_peak_mib"], r["maxrss_growth_mib"], r["bank_mib"]] for r in results]
    text = md_table(["B", "worth_chunk", "worth ms", "offer ms", "compile s", "peak RSS MiB", "RSS growth MiB",
                     "bank MiB"], rows)
    text += "\n" + "\n".join(
        f"- {k}: time = {f['intercept_ms']:.3g} ms + {f['slope_us_per_memory']:.4g} us x B; "
        f"log-log slope between the two largest sizes {f['loglog_slope_last_two']:.3f}" for k, f in fits.items())
    text += f"\n\nMemory: {payload['memory_method']}.\n"
    text += "\nIncremental worth (the incremental scorer): per-task cost with the refresh amortised over the DB schedule:\n\n"
    text += md_table(["B", "task in tw.run ms", "refresh ms", "amortised task ms", "select ms (standalone)",
                      "offer ms (standalone)", "cache MiB", "peak RSS MiB"],
                     [[r["capacity"], r["run_task_ms"], r["refresh"]["median_ms"], r["amortised_task_ms"],
                       r["select"]["median_ms"], r["offer"]["median_ms"], r["cache_mib"], r["maxrss_peak_mib"]]
                      for r in inc_results])
    write_result(out_dir, "bank_scaling", payload, text)
    return payload


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", type=int, required=True, help="bank capacity B to measure")
    ap.add_argument("--chunk", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--spec", default="{}", help="JSON Spec overrides")
    ap.add_argument("--incremental", action="store_true", help="the incremental scorer (scorer=\"incremental\")")
    a = ap.parse_args(argv)
    print(json.dumps(child(a.child, a.chunk, a.repeats, json.loads(a.spec), a.incremental)))


if __name__ == "__main__":
    main()
