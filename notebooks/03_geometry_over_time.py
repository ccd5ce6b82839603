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
# # Geometry over time: the AGOP metric, the η ramp, and the bank
#
# One DB-preset controller runs over the DB stream in chunks (`tw.run` per chunk, the
# state kept between chunks). After each chunk we record the metric diagonal `M`, the
# residual weight `η = η_max · min(1, n_krr_fits / 3)`, and the bank. **The backbone is
# simulated** (see `bench/controller/simdb.py`). Small by default; set
# `TOKENWORTH_NOTEBOOK_FULL=1` for all 500 tasks.

# %%
import json
import os
import sys
from pathlib import Path

import jax
import numpy as np

ROOT = Path.cwd() if (Path.cwd() / "tokenworth_jax").exists() else Path.cwd().parent
sys.path.insert(0, str(ROOT))
import tokenworth_jax as tw  # noqa: E402
from bench.controller import simdb  # noqa: E402

FULL = os.environ.get("TOKENWORTH_NOTEBOOK_FULL") == "1"
N_TASKS, CHUNK = (500, 25) if FULL else (120, 20)
# Short refit intervals at small size, so AGOP acts within the short stream.
OVERRIDES = {} if FULL else dict(krr_interval=10, agop_interval=20)

spec, hp = tw.presets.db(**OVERRIDES)
stream = simdb.load_stream(N_TASKS)
chunks = simdb.run_chunks(stream, hp, spec, CHUNK)
print(len(chunks), "chunks; final counters", jax.device_get(chunks[-1][0].counters))

# %% [markdown]
# ## The metric: which features gain weight
# `M` starts at the identity (mean 1). AGOP sets each entry to the mean squared gradient of
# the residual predictor along that feature, then clips to [0.05, 8] and renormalises to
# mean 1. We track the mean over the |e_q − e_m| block and the five statistics.

# %%
D = spec.dim
tail_names = ["cos", "u", "rel", "rec", "freq"]
t_axis = [int(s.counters.t) for s, _ in chunks]
block_mean = [float(np.asarray(s.metric)[:D].mean()) for s, _ in chunks]
tails = np.array([np.asarray(s.metric)[D:] for s, _ in chunks])
eta = [float(hp.eta_max) * min(1.0, int(s.counters.n_krr_fits) / 3) for s, _ in chunks]
M_final = np.asarray(chunks[-1][0].metric)
top = np.argsort(-M_final[:D])[:5]
print("final M tail", dict(zip(tail_names, np.round(M_final[D:], 3))))
print("|e_q-e_m| block: mean", round(float(M_final[:D].mean()), 3), "max", round(float(M_final[:D].max()), 3),
      "top buckets", top.tolist())

# %%
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(1, 3, figsize=(15, 3.5))
ax[0].plot(t_axis, block_mean, "k-o", label="|e_q−e_m| block (mean)")
for k, name in enumerate(tail_names):
    ax[0].plot(t_axis, tails[:, k], "-", label=name)
ax[0].set_yscale("log")
ax[0].set_xlabel("task")
ax[0].set_title("metric diagonal M")
ax[0].legend(fontsize=7)
ax[1].step(t_axis, eta, where="post")
ax[1].set_xlabel("task")
ax[1].set_title("η = η_max · min(1, n_krr_fits/3)")
ax[2].hist(M_final[:D], bins=40)
ax[2].set_title("final M over the |e_q−e_m| block")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The bank: admissions, evictions and what it holds

# %%
codes = np.concatenate([np.asarray(o.decision.code) for _, o in chunks])
counts = {a.name: int(np.sum(codes == a.value)) for a in tw.Admission}
print(counts)
per_chunk = np.array([[int(np.sum(np.asarray(o.decision.code) == a.value)) for a in tw.Admission] for _, o in chunks])
ages, sizes, skill_share = [], [], []
top_skills = list(np.argsort(-stream.skill_table.sum(0))[:5])
for s, _ in chunks:
    b = jax.device_get(s.bank)
    ids = b.ids[b.valid]
    sizes.append(len(ids))
    ages.append(float(np.mean(int(s.counters.t) - b.tau[b.valid])) if len(ids) else 0.0)
    skill_share.append(stream.skill_table[ids][:, top_skills].mean(0) if len(ids) else np.zeros(len(top_skills)))
skill_share = np.array(skill_share)

fig, ax = plt.subplots(1, 3, figsize=(15, 3.5))
for k, a in enumerate(tw.Admission):
    if a is not tw.Admission.NOT_OFFERED and per_chunk[:, k].any():
        ax[0].plot(t_axis, np.cumsum(per_chunk[:, k]), label=a.name)
ax[0].set_title("admission decisions (cumulative)")
ax[0].legend(fontsize=7)
ax[1].plot(t_axis, sizes, label="valid memories")
ax[1].plot(t_axis, ages, label="mean age (tasks)")
ax[1].set_title("bank size and age")
ax[1].legend(fontsize=7)
for k, sk in enumerate(top_skills):
    ax[2].plot(t_axis, skill_share[:, k], label=stream.skill_names[sk])
ax[2].set_title("share of bank memories with each common skill")
ax[2].legend(fontsize=7)
fig.tight_layout()
plt.show()

# %%
print("KEY_OUTPUTS " + json.dumps(dict(
    n_tasks=N_TASKS, n_agop=int(chunks[-1][0].counters.n_agop), metric_block_mean=block_mean,
    metric_tail_final=M_final[D:].tolist(), eta=eta, admissions=counts, bank_sizes=sizes)))
