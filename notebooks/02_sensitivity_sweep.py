# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Sensitivity sweep (the shape of the paper's Table A3) in one compiled call
#
# The default DB configuration and each of the 21 one-at-a-time changes of Table A3 run
# over the DB stream as **one** compiled `tw.run_batched` call (a `lax.scan` over tasks of all
# 22 configurations). **The backbone is simulated**: success comes from the skill-overlap
# model of `tokenworth_agent.sim`, evaluated in JAX by `bench/tokenworth_bench/controller/simdb.py`, so absolute
# success rates differ from the paper's (no token budget, no real grader); compare the
# *shape* of each curve. The same sweep through the real DB environment and the token budget
# is `tokenworth sweep --env db --table-a3` (bench/results/table_a3_sim/).
#
# All 500 tasks with one seed by default (about a minute on a laptop CPU);
# `TOKENWORTH_NOTEBOOK_FULL=1` averages three seeds. At fewer tasks most panels would be flat:
# an interval of 100 or 400 tasks changes nothing before the stream reaches it.

# %%
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path.cwd() if (Path.cwd() / "tokenworth_jax").exists() else Path.cwd().parent
sys.path.insert(0, str(ROOT))
import tokenworth_jax as tw  # noqa: E402
from tokenworth_bench.controller import simdb  # noqa: E402
from tokenworth_bench.controller.sweep import GRID  # noqa: E402

FULL = os.environ.get("TOKENWORTH_NOTEBOOK_FULL") == "1"
N_TASKS = 500  # the whole stream: intervals of 100-400 tasks need that long to act at all
SEEDS = (0, 1, 2) if FULL else (0,)

# The paper's numbers (spec §9); the default scores 65.0.
PAPER_DEFAULT = 65.0
PAPER = {
    ("eta_max", 0.05): 62.4, ("eta_max", 0.10): 63.8, ("eta_max", 0.20): 64.2, ("eta_max", 0.30): 64.0,
    ("lambda_w", 0.03): 64.8, ("lambda_w", 0.3): 62.6, ("lambda_w", 1.0): 63.0,
    ("beta_w", 0.25): 64.2, ("beta_w", 0.75): 62.8, ("beta_w", 1.0): 62.6,
    ("base_interval", 25): 65.2, ("base_interval", 100): 62.4,
    ("beta_m", 0.10): 64.4, ("beta_m", 0.50): 64.6, ("beta_m", 0.75): 62.2,
    ("krr_interval", 25): 62.2, ("krr_interval", 100): 63.4,
    ("agop_interval", 100): 62.6, ("agop_interval", 400): 62.0,
    ("gamma", 0.5): 64.0, ("gamma", 2.0): 63.0,
}
DEFAULTS = {"eta_max": 0.15, "lambda_w": 0.1, "beta_w": 0.5, "base_interval": 50, "beta_m": 0.25,
            "krr_interval": 50, "agop_interval": 200, "gamma": 1.0}
assert set(PAPER) == set(GRID)

# %%
spec, _ = tw.presets.db()
configs = [tw.hparams("db")] + [tw.hparams("db", **{name: value}) for name, value in GRID]
labels = [("default", None)] + list(GRID)
rates = []
t0 = time.perf_counter()
for seed in SEEDS:
    stream = simdb.load_stream(N_TASKS, seed=seed)
    _, out = simdb.sweep(stream, configs, spec)
    rates.append(100 * np.asarray(out.reward).mean(axis=1))
sweep_seconds = time.perf_counter() - t0
sr = np.mean(rates, axis=0)
print(f"{len(configs)} configs x {N_TASKS} tasks x {len(SEEDS)} seed(s) in {sweep_seconds:.1f} s (incl. compile)")
for (name, value), r in zip(labels, sr):
    paper = PAPER_DEFAULT if name == "default" else PAPER[(name, value)]
    print(f"{name:14s} {str(value):6s} SR {r:5.1f}   paper {paper:4.1f}")

# %%
import matplotlib.pyplot as plt  # noqa: E402

names = list(DEFAULTS)
# Both curves as the change against their own default (percentage points): the simulator's
# absolute SR is not the paper's, so only the shapes are comparable.
fig, axes = plt.subplots(2, 4, figsize=(15, 6.5), sharey=True)
for ax, name in zip(axes.ravel(), names):
    pts = sorted([(v, r - sr[0]) for (n, v), r in zip(labels[1:], sr[1:]) if n == name] + [(DEFAULTS[name], 0.0)])
    ppts = sorted([(v, PAPER[(n, v)] - PAPER_DEFAULT) for (n, v) in GRID if n == name] + [(DEFAULTS[name], 0.0)])
    ax.plot(*zip(*pts), "o-", label="this run (simulated)")
    ax.plot(*zip(*ppts), "s--", label="paper (Table A3)")
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.axvline(DEFAULTS[name], color="grey", lw=0.5, ls=":", label=f"default {DEFAULTS[name]}")
    ax.set_title(name)
    ax.set_xlabel(f"{name} value")
    ax.legend(fontsize=7, loc="upper center", framealpha=0.9)
    ax.grid(alpha=0.3)
low = min(min(sr) - sr[0], min(PAPER.values()) - PAPER_DEFAULT)
high = max(max(sr) - sr[0], max(PAPER.values()) - PAPER_DEFAULT)
axes[0, 0].set_ylim(low - 0.5, high + 0.45 * (high - low) + 1.5)  # headroom above the data for the legends
for ax in axes[:, 0]:
    ax.set_ylabel("ΔSR vs default (pp)")
fig.suptitle(f"Table A3 shape: {N_TASKS} DB tasks, {len(SEEDS)} seed(s); default SR {sr[0]:.1f} % "
             f"(paper {PAPER_DEFAULT:.1f} %)")
fig.tight_layout()
plt.show()

# %% [markdown]
# Read each panel as "which direction hurts". A flat simulated curve means no decision changed:
# `agop_interval`, for example, only rescales the metric `M`, which the simulator's stream
# barely moves (notebook 03 shows by how much).

# %%
print("KEY_OUTPUTS " + json.dumps(dict(n_configs=len(configs), n_tasks=N_TASKS, seeds=list(SEEDS),
                                       default_sr=float(sr[0]), sr=[float(x) for x in sr],
                                       sweep_seconds=sweep_seconds)))
