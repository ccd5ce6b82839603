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
# simulated** (see `bench/tokenworth_bench/controller/simdb.py`). It runs the whole DB stream (500 tasks,
# about 20 s on a laptop CPU) with the DB preset: the bank (B_max = 64) fills after about 130
# tasks, so evictions and replacements appear, and AGOP (every 200 tasks) updates `M` twice.
# At fewer tasks none of that would be visible.

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
from tokenworth_bench.controller import simdb  # noqa: E402

FULL = os.environ.get("TOKENWORTH_NOTEBOOK_FULL") == "1"
N_TASKS, CHUNK = 500, 10  # TOKENWORTH_NOTEBOOK_FULL changes nothing here: this is the full stream

spec, hp = tw.presets.db()
stream = simdb.load_stream(N_TASKS)
chunks = simdb.run_chunks(stream, hp, spec, CHUNK)
print(len(chunks), "chunks; final clock", jax.device_get(chunks[-1][0].clock), "| AGOP updates",
      int(chunks[-1][0].residual.n_agop))

# %% [markdown]
# ## The metric: which features gain weight
# `M` starts at the identity (mean 1). AGOP sets each entry to the mean squared gradient of
# the residual predictor along that feature, then clips to [0.05, 8] and renormalises to
# mean 1. We track the mean over the |e_q − e_m| block and the five statistics.

# %%
D = spec.dim
tail_names = ["cos", "u", "rel", "rec", "freq"]
t_axis = [int(s.clock.t) for s, _ in chunks]
block_mean = [float(np.asarray(s.residual.metric)[:D].mean()) for s, _ in chunks]
tails = np.array([np.asarray(s.residual.metric)[D:] for s, _ in chunks])
eta = [float(hp.eta_max) * min(1.0, int(s.residual.n_fits) / 3) for s, _ in chunks]
M_final = np.asarray(chunks[-1][0].residual.metric)
top = np.argsort(-M_final[:D])[:5]
print("final M tail", dict(zip(tail_names, np.round(M_final[D:], 3))))
print("|e_q-e_m| block: mean", round(float(M_final[:D].mean()), 3), "max", round(float(M_final[:D].max()), 3),
      "top buckets", top.tolist())

# %%
import matplotlib.pyplot as plt  # noqa: E402

agop_at = [t for t, prev, s in zip(t_axis[1:], chunks[:-1], chunks[1:])
           if int(s[0].residual.n_agop) > int(prev[0].residual.n_agop)]
fig, ax = plt.subplots(1, 3, figsize=(15, 3.8))
ax[0].plot(t_axis, np.asarray(block_mean) - 1.0, "k-", lw=2, label="|e_q−e_m| block (mean)")
for k, name in enumerate(tail_names):
    ax[0].plot(t_axis, tails[:, k] - 1.0, "-", label=name)
for t in agop_at:
    ax[0].axvline(t, color="grey", ls=":", lw=1)
ax[0].set_xlabel("task")
ax[0].set_ylabel("M − 1 (linear)")
ax[0].set_title(f"metric diagonal M ({len(agop_at)} AGOP updates, dotted)")
ax[0].legend(fontsize=7, ncol=2)
ax[1].step(t_axis, eta, where="post", label="η")
ax[1].axhline(float(hp.eta_max), color="grey", ls="--", lw=0.8, label="η_max")
ax[1].set_xlabel("task")
ax[1].set_ylabel("η (residual weight)")
ax[1].set_ylim(0, float(hp.eta_max) * 1.15)
ax[1].set_title("η = η_max · min(1, n_krr_fits/3)")
ax[1].legend(fontsize=8, loc="lower right")
ax[2].hist(M_final[:D] - 1.0, bins=40, label=f"final, {D} buckets")
ax[2].axvline(0.0, color="grey", lw=0.8, label="start (M = 1)")
ax[2].set_xlabel("M_d − 1")
ax[2].set_ylabel("buckets")
ax[2].set_title("final M over the |e_q−e_m| block")
ax[2].legend(fontsize=8)
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
    ages.append(float(np.mean(int(s.clock.t) - b.tau[b.valid])) if len(ids) else 0.0)
    skill_share.append(stream.skill_table[ids][:, top_skills].mean(0) if len(ids) else np.zeros(len(top_skills)))
skill_share = np.array(skill_share)

evicted = np.concatenate([np.asarray(o.decision.evicted_id) for _, o in chunks]) >= 0
evictions = int(evicted.sum())
evictions_per_chunk = [int((np.asarray(o.decision.evicted_id) >= 0).sum()) for _, o in chunks]
print("evictions", evictions)

fig, ax = plt.subplots(1, 3, figsize=(15, 3.8))
for k, a in enumerate(tw.Admission):
    if a is not tw.Admission.NOT_OFFERED and per_chunk[:, k].any():
        ax[0].plot(t_axis, np.cumsum(per_chunk[:, k]), label=a.name)
ax[0].plot(t_axis, np.cumsum(evictions_per_chunk), "k--", label="evictions (any cause)")
ax[0].set_xlabel("task")
ax[0].set_ylabel("decisions so far")
ax[0].set_title("admission decisions (cumulative)")
ax[0].legend(fontsize=7)
ax[1].plot(t_axis, sizes, label="valid memories")
ax[1].axhline(spec.capacity, color="grey", ls="--", lw=0.8, label=f"capacity B_max = {spec.capacity}")
ax[1].plot(t_axis, ages, label="mean age (tasks)")
ax[1].set_xlabel("task")
ax[1].set_ylabel("memories / tasks")
ax[1].set_title("bank size and mean memory age")
ax[1].legend(fontsize=7)
for k, sk in enumerate(top_skills):
    ax[2].plot(t_axis, skill_share[:, k], label=stream.skill_names[sk])
ax[2].set_xlabel("task")
ax[2].set_ylabel("share of bank memories")
ax[2].set_ylim(0, 1)
ax[2].set_title("bank memories with each common skill")
ax[2].legend(fontsize=7)
fig.tight_layout()
plt.show()

# %%
print("KEY_OUTPUTS " + json.dumps(dict(
    n_tasks=N_TASKS, n_agop=int(chunks[-1][0].residual.n_agop), metric_block_mean=block_mean,
    metric_tail_final=M_final[D:].tolist(), eta=eta, admissions=counts, bank_sizes=sizes,
    capacity=int(spec.capacity), evictions=evictions)))
