"""Benchmark 2: roofline. Floating-point work of each controller step against the time it
takes (from :mod:`per_task`), as GFLOP/s and as a fraction of this machine's measured
float32 matmul throughput (the roof).

FLOP model (F = D + 5 features, N = fast window, S = slow window, K = K_c candidates,
P = n_probes + 1 probes, B = capacity; a subtract, multiply, add, abs, sqrt or exp each
counts one FLOP; a multiply-add two):

* select: recall 2BD; z = |e_q - e_m| 2KD; the metric Gram distances of K queries to N
  support rows 2KNF (matmul) + 5KF + 5NF; kernel and prediction 5KN.
* offer (admission): score matrix cosines 2P(B+1)D, z 2P(B+1)D, Gram 2P(B+1)NF +
  5P(B+1)F + 5NF, kernel and prediction 5P(B+1)N; novelty 2BD.
* KRR fit: exact-difference kernel matrix 4N^2F + 3N^2; Cholesky N^3/3; solve 2N^2.
* AGOP: gradients of S rows against N support rows, 6SNF; G 2SF; then a KRR fit.
* Newton base fit: O(window x 4 x iterations), under 0.1 MFLOP: left out.

Incremental worth (the incremental scorer, :mod:`tokenworth_jax.worth_cache`), Gram form split
into the D part (cached) and the 5 statistics features:

* select: recall 2BD; the query's D-part row over the whole bank: |e_q - e_m| 2BD, a^2 3BD,
  GEMM 2BND, combine 3BN; K candidates' statistics part 10KN + 40K + 3KN, kernel 5KN.
* offer: candidate column 5PD + 2PND + 3PN; statistics part for P(B+1) pairs
  10P(B+1)N + 40P(B+1) + 3P(B+1)N; kernel and prediction 5P(B+1)N; novelty 2BD.
* refresh (every KRR fit): P rows like the select row, 5PBD + 2PBND + 3PBN.

Alongside, XLA's own count (``compiled.cost_analysis()['flops']``) is recorded where the
backend provides it; it counts every branch of a ``lax.cond``, so it overstates steps
whose refits are skipped.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

import tokenworth_jax as tw

from .common import Size, block, md_table, summarise, write_result


def flops(spec: tw.Spec) -> dict[str, float]:
    D, F, N, S = spec.dim, spec.feature_dim, spec.fast_window, spec.slow_window
    K, P, B = min(spec.k_candidates, spec.capacity), spec.n_probes + 1, spec.capacity
    n = P * (B + 1)
    select = 2 * B * D + 2 * K * D + 2 * K * N * F + 5 * K * F + 5 * N * F + 5 * K * N
    offer = 2 * n * D + 2 * n * D + 2 * n * N * F + 5 * n * F + 5 * N * F + 5 * n * N + 2 * B * D
    krr = 4 * N * N * F + 3 * N * N + N ** 3 / 3 + 2 * N * N
    agop = 6 * S * N * F + 2 * S * F + krr
    inc_select = 2 * B * D + 5 * B * D + 2 * B * N * D + 3 * B * N + 10 * K * N + 40 * K + 3 * K * N + 5 * K * N
    inc_offer = 5 * P * D + 2 * P * N * D + 3 * P * N + 10 * n * N + 40 * n + 3 * n * N + 5 * n * N + 2 * B * D
    refresh = 5 * P * B * D + 2 * P * B * N * D + 3 * P * B * N
    return dict(select=float(select), offer=float(offer), krr_fit=float(krr), agop_with_refit=float(agop),
                observe_full_refit=float(krr + agop), incremental_select=float(inc_select),
                incremental_offer=float(inc_offer), incremental_refresh=float(refresh))


def matmul_roof(n: int, repeats: int) -> dict[str, float]:
    """GFLOP/s of an n x n float32 ``jnp.matmul`` (median of ``repeats`` after a warm-up)."""
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    block(mm(a, b))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        block(mm(a, b))
        times.append(time.perf_counter() - t0)
    s = summarise(times)
    return dict(n=n, median_ms=s["median_ms"], gflops=2 * n ** 3 / (s["median_ms"] / 1e3) / 1e9)


def xla_flops(spec: tw.Spec, hp: tw.HParams) -> dict[str, float | None]:
    state = tw.init(spec, hp)
    q = jnp.zeros((spec.dim,), spec.float_dtype)
    out: dict[str, float | None] = {}
    for name, lowered in (("select", lambda: tw.select.lower(state, q, hp, spec)),
                          ("offer", lambda: tw.offer.lower(state, q, jnp.int32(0), hp, spec)),
                          ("observe_all_branches", lambda: tw.observe.lower(state, jnp.int32(1), hp, spec))):
        try:
            cost = lowered().compile().cost_analysis()
            cost = cost[0] if isinstance(cost, (list, tuple)) else cost
            out[name] = float(cost.get("flops")) if cost and cost.get("flops") is not None else None
        except Exception:  # cost analysis is optional per backend
            out[name] = None
    return out


def run(size: Size, out_dir: Path, per_task: dict[str, Any]) -> dict[str, Any]:
    spec = tw.presets.spec_from_dict(per_task["spec"])
    hp = tw.hparams("db")
    counts = flops(spec)
    n = 512 if size.name == "tiny" else 2048
    roof = matmul_roof(n, 3 if size.name == "tiny" else 10)
    j = per_task["jax"]
    times_ms = dict(select=j["select"]["median_ms"], offer=j["offer"]["median_ms"],
                    observe_full_refit=(j["observe_refit"] or {}).get("max_ms"))
    rows, achieved = [], {}
    for step, t in times_ms.items():
        if t is None:
            continue
        gf = counts[step] / (t / 1e3) / 1e9
        achieved[step] = dict(mflop=counts[step] / 1e6, ms=t, gflops=gf, fraction_of_roof=gf / roof["gflops"])
        rows.append([step, counts[step] / 1e6, t, gf, f"{100 * gf / roof['gflops']:.1f}%"])
    fused_flops = (counts["select"] + counts["offer"]) + counts["observe_full_refit"] * 0  # refits amortised below
    payload = dict(
        size=size.name, spec=tw.presets.describe(spec), flops=counts, xla_flops=xla_flops(spec, hp), roof=roof, achieved=achieved,
        notes=("observe_full_refit uses the slowest observe of the window (a base + KRR + AGOP + KRR refit) "
               "against the FLOPs of KRR fit + AGOP with its KRR refit."),
        task_mflop_without_refits=fused_flops / 1e6,
    )
    text = f"Roof: {n}x{n} float32 matmul, {roof['gflops']:.1f} GFLOP/s ({roof['median_ms']:.2f} ms).\n\n"
    text += md_table(["step", "MFLOP", "ms", "GFLOP/s", "of roof"], rows)
    text += f"\nXLA cost_analysis FLOPs (all cond branches): {payload['xla_flops']}\n\n{payload['notes']}\n"
    text += "\nFLOP counts, full vs incremental worth (MFLOP per call; the refresh runs at every KRR fit):\n\n"
    text += md_table(["step", "full", "incremental"],
                     [["select", counts["select"] / 1e6, counts["incremental_select"] / 1e6],
                      ["offer (admission)", counts["offer"] / 1e6, counts["incremental_offer"] / 1e6],
                      ["cache refresh (per KRR fit)", "-", counts["incremental_refresh"] / 1e6]])
    write_result(out_dir, "roofline", payload, text)
    return payload
