# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Comparing methods on a run: intervals, paired tests, the gain over the stream
#
# A run folder holds one JSON record per task and stream. `tokenworth_agent.results.load_run` turns
# it into a pandas DataFrame (one row per record), and `tokenworth_agent.results.estimate` is the one
# estimator every table of the harness uses: a success rate with its 95 % interval (clustered by
# task when several seeds repeat the same tasks), and the paired difference of two methods on the
# same tasks. This notebook runs a small experiment, reads it back, compares the methods with
# Standard (what `tokenworth compare RUN` prints) and plots each rate and each paired difference
# along the stream with its band; last, from a committed run of five task orders, it draws what holds
# over orders of the benchmark and not only in its own order. How each number is estimated:
# `docs/results.md`.
#
# **The backbone is simulated** (`docs/backbones.md`): the rates are not the paper's. The default
# size is 3 methods x 2 seeds x the first 120 DB tasks (about a minute on a 2-core CPU);
# `TOKENWORTH_NOTEBOOK_FULL=1` runs 5 methods x 3 seeds x all 500 tasks (several minutes), and
# `TOKENWORTH_NOTEBOOK_RUN=DIR` reads a run folder you already have instead.

# %%
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from tokenworth_agent.results import estimate, load_run
from tokenworth_agent.results.compare import along_stream, compare_runs, plan_markdown
from tokenworth_agent.results.report import cumulative_band

FULL = os.environ.get("TOKENWORTH_NOTEBOOK_FULL") == "1"
METHODS = "standard,rag,memrl,memp,tokenworth" if FULL else "standard,rag,memp"
SEEDS, LIMIT = ("0,1,2", None) if FULL else ("0,1", 120)

run = os.environ.get("TOKENWORTH_NOTEBOOK_RUN")
if run is None:
    run = str(Path(tempfile.mkdtemp(prefix="tokenworth-nb04-")) / "run")
    command = [sys.executable, "-m", "tokenworth_agent.cli", "run", "--env", "db", "--methods", METHODS,
               "--seeds", SEEDS, "--out", run, "--no-progress", *(["--limit", str(LIMIT)] if LIMIT else [])]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
print("run folder:", run)

# %% [markdown]
# ## The run as a table
#
# One row per task record: the stream's identity (env, method, seed, grid point), the task (index
# and id), its outcome (reward, status), its tokens, rounds, skills and the memories injected.

# %%
frame = load_run(run)
print(frame.shape)
frame[["stream", "method", "seed", "index", "task_id", "reward", "status", "output_tokens", "rounds",
       "injected_memory_ids"]].head()

# %% [markdown]
# ## Each method's rate with its interval
#
# The seeds run the same tasks, so a task's outcomes are not independent draws: the interval is
# clustered by task (`clusters=task_id`). Treating the pooled records as independent gives the
# narrower, wrong interval in the last column.

# %%
rows = []
for method, part in frame.groupby("method", sort=False):
    rate = estimate.rate(part["reward"], clusters=part["task_id"])
    naive = estimate.rate(part["reward"])
    tokens = estimate.mean(part["output_tokens"], clusters=part["task_id"])
    rows.append({"method": method, "records": rate.n, "tasks": rate.n_clusters, "SR (%)": 100 * rate.mean,
                 "95 % CI": f"[{100 * rate.ci_low:.1f}, {100 * rate.ci_high:.1f}]",
                 "OutputTok": tokens.mean, "tokens 95 % CI": f"[{tokens.ci_low:.1f}, {tokens.ci_high:.1f}]",
                 "CI ignoring the clustering": f"[{100 * naive.ci_low:.1f}, {100 * naive.ci_high:.1f}]"})
rates = pd.DataFrame(rows)
rates

# %% [markdown]
# ## Paired comparison with Standard
#
# Every method against Standard on the tasks both ran (matched by seed and task): the mean paired
# difference in percentage points, its 95 % interval, the p-value of the paired test, the p-value
# adjusted for the number of methods (Holm), a verdict, and the smallest difference this run could
# detect with 80 % power (MDE).

# %%
comparisons = compare_runs([run])
table = pd.DataFrame([c.to_json() for c in comparisons])
table[["method", "baseline", "n_pairs", "difference", "ci", "p_value", "p_adjusted", "verdict", "mde"]]

# %% [markdown]
# ## Along the stream
#
# Top: each method's cumulative SR with its 95 % band (clustered by task over the seeds). Bottom:
# the paired difference to Standard over a sliding window of the stream with its 95 % band: memory
# should help more as the stream goes on, and the band says whether it visibly does.

# %%
fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
colours = {}
for method, part in frame.groupby("method", sort=False):
    seeds = np.stack([g.sort_values("index")["reward"].to_numpy() for _, g in part.groupby("seed")])
    x = np.arange(1, seeds.shape[1] + 1)
    line, = top.plot(x, 100 * np.cumsum(seeds.mean(axis=0)) / x, label=method)
    colours[method] = line.get_color()
    low, high = cumulative_band(seeds)
    top.fill_between(x, low, high, color=colours[method], alpha=0.15, lw=0)
top.set_ylim(0, 100)
top.set_ylabel("cumulative SR (%)")
top.legend(fontsize=8)
for c in comparisons:
    x, diff = along_stream(c.matched)
    bottom.plot(x, 100 * diff.difference, color=colours[c.method], label=f"{c.method} − {c.baseline}")
    bottom.fill_between(x, 100 * diff.ci_low, 100 * diff.ci_high, color=colours[c.method], alpha=0.15, lw=0)
bottom.axhline(0, color="black", lw=0.8)
bottom.set_xlabel("task in stream (end of the window)")
bottom.set_ylabel("paired ΔSR (pp)")
bottom.legend(fontsize=8)
fig.tight_layout()

# %% [markdown]
# ## The gain over the stream, and planning a run
#
# The lifelong question in one number per method: SR on the stream's last third minus its first
# third, and that gain minus Standard's (paired), each with its 95 % interval. Then the question to
# ask before spending GPU hours: how many tasks (and seeds) detect a 2-point difference with 80 %
# power, from this pilot's discordance?

# %%
gains = pd.DataFrame([{"method": c.method, "gain (pp)": 100 * c.gain.mean,
                       "gain 95 % CI": f"[{100 * c.gain.ci_low:+.1f}, {100 * c.gain.ci_high:+.1f}]",
                       "gain − standard's (pp)": 100 * c.relative_gain.mean,
                       "95 % CI": f"[{100 * c.relative_gain.ci_low:+.1f}, {100 * c.relative_gain.ci_high:+.1f}]"}
                      for c in comparisons])
print(gains.to_string(index=False))
print()
print(plan_markdown(comparisons, 2.0))

# %% [markdown]
# ## Over task orders: what one order cannot say
#
# Everything above is about **this order**: the tasks came in the benchmark's order, and in a lifelong
# stream the order decides which memories exist when each task arrives. `tokenworth run --orders 5` runs
# the same tasks in five orders; `tokenworth compare` then gives each order's paired difference and the
# difference **over orders of the benchmark** (the mean of the per-order differences, a t interval with
# orders − 1 degrees of freedom from their spread). Running it takes minutes, so this cell reads the
# committed comparison of such a run (`bench/results/stats/db_orders5/compare.json`: 500 DB tasks, seed 0,
# orders 0–4) instead. A forest plot: a point per order, one colour per order in every row, and the
# difference over orders with its 95 % interval. A method whose orders disagree in sign is not shown over
# orders, however clear one order is.

# %%
from tokenworth_agent.results.report import orders_forest

ROOT = Path.cwd() if (Path.cwd() / "tokenworth_jax").exists() else Path.cwd().parent
ORDERS = ROOT / "bench" / "results" / "stats" / "db_orders5" / "compare.json"
over_orders = json.loads(ORDERS.read_text()) if ORDERS.exists() else []
if over_orders:
    orders_forest(over_orders, "DB, simulated backbone, seed 0, orders 0–4: each method against standard")
    print(pd.DataFrame([{"method": c["method"], **{f"order {p['order']}": p["difference"] for p in c["per_order"]},
                         "over orders": round(c["over_orders"]["difference"], 1),
                         "95 % CI": "[{:+.1f}, {:+.1f}]".format(*c["over_orders"]["ci"]),
                         "verdict": c["over_orders"]["verdict"]} for c in over_orders]).to_string(index=False))
else:
    print(f"{ORDERS} is absent (not a checkout of the repository?): no forest plot")

# %%
key = {"rows": int(len(frame)), "methods": sorted(frame["method"].unique().tolist()),
       "seeds": sorted(int(s) for s in frame["seed"].unique()),
       "sr": {r["method"]: r["SR (%)"] for r in rows},
       "ci_width": {r["method"]: float(r["95 % CI"].strip("[]").split(", ")[1]) -
                    float(r["95 % CI"].strip("[]").split(", ")[0]) for r in rows},
       "naive_width": {r["method"]: float(r["CI ignoring the clustering"].strip("[]").split(", ")[1]) -
                       float(r["CI ignoring the clustering"].strip("[]").split(", ")[0]) for r in rows},
       "compared": [c.method for c in comparisons], "tests": sorted({c.sr.test for c in comparisons}),
       "differences": [100 * c.sr.difference for c in comparisons],
       "covers": [bool(c.sr.ci_low <= c.sr.difference <= c.sr.ci_high) for c in comparisons],
       "mde": [100 * c.mde for c in comparisons],
       "orders_methods": [c["method"] for c in over_orders],
       "orders_mean_of_orders": [bool(abs(np.mean([p["difference"] for p in c["per_order"]]) - c["over_orders"]["difference"])
                                      < 1e-9) for c in over_orders]}
print("KEY_OUTPUTS " + json.dumps(key))
