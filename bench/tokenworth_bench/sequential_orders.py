"""The sequential rule over task orders, simulated: its family-wise error rate, the naive rule's, and how many
orders it needs against the fixed plan.

``python -m tokenworth_bench.sequential_orders [--runs N] [--out bench/results]`` draws whole sequential
experiments (:func:`draw`): per-order paired differences ``d = mu + u + e`` in percentage points, ``u`` the
order's own effect (sd ``tau``, the spread between orders), ``e`` the order's sampling noise (sd
``se_within``, half of its variance shared by the family's comparisons through their common baseline), a
family of comparisons like ``make run``'s, orders added one at a time up to ``max_orders``; then replays
:func:`tokenworth_agent.results.sequential.sequential` on them, and the naive rule (:func:`naive`: stop a
comparison the first time its fixed 95 % interval over orders excludes 0). DB's numbers (500 tasks, simulated
backbone): a spread between orders of about 2 points, one order's standard error about 1.5. Writes
``<out>/stats/sequential_orders.{md,json}``; ``tests/test_sequential.py`` asserts the same quantities.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .paths import RESULTS

TAU, SE_WITHIN, MAX_ORDERS = 2.0, 1.5, 10  # DB, 500 tasks, simulated backbone (pp)


def draw(seed: int, effects: Sequence[float], *, tau: float = TAU, se_within: float = SE_WITHIN, runs: int = 2000,
         max_orders: int = MAX_ORDERS) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` families: per-order differences ``(runs, comparisons, orders)`` and their within-order variances."""
    rng = np.random.default_rng(seed)
    m = len(effects)
    shared = rng.standard_normal((runs, 1, max_orders))  # the baseline's own noise, common to the family
    own = rng.standard_normal((runs, m, max_orders))
    noise = se_within * np.sqrt(0.5) * (shared + own)
    d = np.asarray(effects, dtype=np.float64)[None, :, None] + tau * rng.standard_normal((runs, m, max_orders)) + noise
    return d, np.full(d.shape, se_within ** 2)


def naive(d: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per comparison: whether stopping the first time its fixed 95 % interval over orders (t, orders - 1 df;
    :func:`~tokenworth_agent.results.estimate.over_orders`) excludes 0 ever declares a difference."""
    from tokenworth_agent.results import estimate as E

    found = np.zeros(d.shape[:-1], dtype=bool)
    for k in range(2, d.shape[-1] + 1):
        o = E.over_orders(d[..., :k], v[..., :k])
        found |= (o.ci_low > 0) | (o.ci_high < 0)
    return found


def scenario(seed: int, effects: Sequence[float], *, tau: float = TAU, runs: int = 2000,
             effect: float = 3.0) -> dict[str, Any]:
    """One scenario's operating characteristics (fractions; orders as counts)."""
    from tokenworth_agent.results import power
    from tokenworth_agent.results.sequential import sequential

    d, v = draw(seed, effects, tau=tau, runs=runs)
    out = sequential(d, v, effect=effect, max_orders=MAX_ORDERS)
    true = np.asarray(effects) != 0
    found = np.abs(out.code) == 1
    result: dict[str, Any] = {"effects": list(effects), "tau": tau, "se_within": SE_WITHIN, "runs": runs,
                              "max_orders": MAX_ORDERS, "effect_pp": effect,
                              "family_wise_false": float(np.mean(np.any(found & ~true, axis=-1))),
                              "naive_family_wise_false": float(np.mean(np.any(naive(d, v) & ~true, axis=-1)))}
    if true.any():
        right = out.code[:, true] == 1
        result.update({"decided_better": float(np.mean(right)),
                       "mean_orders": float(np.mean(out.orders_used[:, true])),
                       "mean_orders_when_better": float(np.mean(out.orders_used[:, true][right])),
                       "fixed_plan_orders": power.orders_needed(3.0, tau ** 2, SE_WITHIN ** 2,
                                                                alpha=0.05 / len(effects))})
    return result


SCENARIOS = [  # (seed, effects, tau)
    (1, (0.0,) * 5, TAU), (1, (0.0,) * 4, TAU), (4, (0.0,) * 4, 2.5),
    (2, (3.0,) * 4, TAU), (5, (3.0, 0.0, 0.0, 0.0), TAU), (6, (3.0,) * 5, TAU),
    (7, (3.0,) * 4, 2.5), (8, (3.0, 0.0, 0.0, 0.0), 2.5),
]


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["# The sequential rule over task orders, simulated", "",
             f"Per-order differences: true difference + the order's own effect (sd τ) + the order's sampling noise "
             f"(sd {SE_WITHIN} pp, half shared through the baseline); at most {MAX_ORDERS} orders; effect 3 pp; "
             "family-wise α 0.05 (Holm over the family). `python -m tokenworth_bench.sequential_orders`.", "",
             "| Family (pp) | τ (pp) | Runs | Family-wise false (rule) | Family-wise false (naive) "
             "| 3 pp found within 10 orders | Mean orders (3 pp) | Fixed plan (orders) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        effects = ", ".join(f"{e:g}" for e in r["effects"])
        found = r.get("decided_better")
        power_cells = ("— | — | —" if found is None else
                       f"{100 * found:.1f} % | {r['mean_orders']:.2f} | {r['fixed_plan_orders']:g}")
        lines.append(f"| {effects} | {r['tau']:g} | {r['runs']:,} | {100 * r['family_wise_false']:.1f} % "
                     f"| {100 * r['naive_family_wise_false']:.1f} % | {power_cells} |")
    lines += ["", "Mean orders: to a decision, an undecided comparison counted at 10. Fixed plan: the orders the t test "
              "over orders needs for 80 % power at Bonferroni's 0.05/m (`compare --plan`, `power.orders_needed`)."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = [scenario(seed, effects, tau=tau, runs=args.runs) for seed, effects, tau in SCENARIOS]
    folder = args.out / "stats"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sequential_orders.json").write_text(json.dumps(rows, indent=2) + "\n")
    (folder / "sequential_orders.md").write_text(markdown(rows))
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
