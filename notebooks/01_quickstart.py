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
# # TokenWorth controller: quickstart
#
# Featurise task texts, step the controller over a stream, and look inside: the selected
# memories, the worth scores of the bank, the base weights `w` and the metric `M`.
#
# It needs only the installed library (`pip install tokenworth-jax`, plus matplotlib for the
# figure): the stream is **generated** here, a SQL-flavoured task family whose success is drawn
# from a skill-overlap model. Each task exercises one to three skills; a memory of a past task
# helps in proportion to the skills the two share and hurts when they share almost none, so a
# memory's worth is not its text similarity. 240 tasks by default, so that the first AGOP
# update of the metric (every `agop_interval` = 200 tasks in the DB preset) has run; set
# `TOKENWORTH_NOTEBOOK_FULL=1` for 500.

# %%
import json
import os
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import tokenworth_jax as tw

FULL = os.environ.get("TOKENWORTH_NOTEBOOK_FULL") == "1"
N_TASKS = 500 if FULL else 240  # > agop_interval (200): M has been updated once

# %% [markdown]
# ## 0. A generated stream
# Skills are SQL operations, each with its own phrasing; a task's text names its skills on
# random tables and columns. Success: `v < p`, with `p = p0 + 0.4 J` for a memory whose skill
# overlap (Jaccard) with the task is `J >= 0.2`, `p = p0 - 0.15 (1 - J)` below that, and
# `p = p0` with no memory.

# %%
SKILLS = {
    "filter": "keep only the rows where {col} is over {n}",
    "join": "join {table} with {other} on their {col}",
    "group": "group the {table} rows by {col}",
    "count": "count how many {table} rows there are",
    "order": "sort the result by {col} descending",
    "limit": "return only the first {n} rows",
    "update": "set {col} to {n} in {table}",
    "insert": "add a new {table} row with {col} equal to {n}",
    "delete": "remove the {table} rows whose {col} is missing",
    "distinct": "list each distinct {col} once",
}
TABLES = ["orders", "customers", "invoices", "shipments", "products", "employees", "tickets", "payments"]
COLUMNS = ["price", "region", "status", "created_at", "quantity", "owner", "score", "category"]


@dataclass(frozen=True)
class Stream:
    instructions: list[str]
    skills: list[tuple[str, ...]]
    skill_table: np.ndarray  # (T, n_skills) 0/1
    p0: np.ndarray  # (T,) success probability without a memory
    outcome_u: np.ndarray  # (T,) the outcome's uniform draw
    queries: np.ndarray  # (T, D) featurised instructions


def make_stream(n_tasks: int, seed: int = 0, dim: int = 512) -> Stream:
    rng = np.random.default_rng(seed)
    names = list(SKILLS)
    instructions, skills = [], []
    table = np.zeros((n_tasks, len(names)), np.float32)
    for i in range(n_tasks):
        chosen = sorted(rng.choice(len(names), size=rng.integers(1, 4), replace=False))
        t, o = rng.choice(TABLES, 2, replace=False)
        parts = [SKILLS[names[k]].format(table=t, other=o, col=rng.choice(COLUMNS), n=int(rng.integers(2, 500)))
                 for k in chosen]
        instructions.append(f"In the {t} table: " + ", then ".join(parts) + ".")
        skills.append(tuple(names[k] for k in chosen))
        table[i, chosen] = 1.0
    p0 = rng.uniform(0.2, 0.6, n_tasks) - 0.05 * (table.sum(1) - 1)
    return Stream(instructions, skills, table, p0, rng.random(n_tasks), tw.featurize(instructions, dim))


def success_probability(stream: Stream, task: int, memory: int) -> float:
    """p for task ``task`` with the memory of source task ``memory`` (-1: none)."""
    if memory < 0:
        return float(np.clip(stream.p0[task], 0.02, 0.98))
    s_i, s_j = stream.skill_table[task], stream.skill_table[memory]
    j = float((s_i * s_j).sum() / max(np.maximum(s_i, s_j).sum(), 1.0))
    p = stream.p0[task] + 0.4 * j if j >= 0.2 else stream.p0[task] - 0.15 * (1.0 - j)
    return float(np.clip(p, 0.02, 0.98))


# %% [markdown]
# ## 1. Featurise
# `tw.featurize` hashes words and character 3-5-grams into D = 512 signed buckets and
# L2-normalises (deterministic across processes).

# %%
stream = make_stream(N_TASKS)
print(stream.instructions[0])
print("vector shape", stream.queries.shape, "norm", float(np.linalg.norm(stream.queries[0])))
sims = stream.queries[:5] @ stream.queries[:5].T
print(np.round(sims, 2))

# %% [markdown]
# ## 2. Step the controller, one task at a time
# `select` → the simulated judge → `observe` → `offer` (only after a success) → `end_task`.

# %%
spec, hp = tw.presets.db()
state = tw.init(spec, hp)
log = []
for i in range(N_TASKS):
    q = jnp.asarray(stream.queries[i])
    state, sel = tw.select(state, q, hp, spec)
    p = success_probability(stream, i, int(sel.memory_id))
    reward = int(stream.outcome_u[i] < p)
    state = tw.observe(state, jnp.int32(reward), hp, spec)
    code = "NOT_OFFERED"
    if reward:
        state, dec = tw.offer(state, q, jnp.int32(i), hp, spec)
        code = tw.Admission(int(dec.code)).name
    state = tw.end_task(state, spec)
    log.append(dict(task=i, memory=int(sel.memory_id), reward=reward, admission=code))

success_rate = float(np.mean([r["reward"] for r in log]))
print("success rate", success_rate)
for r in log[-5:]:
    print(r)

# %% [markdown]
# ## 3. What was selected, and why
# The selection of the next task: candidates in recall order, their scores
# `s = wᵀφ + η f(z)`, the base part `wᵀφ`, and the cosine relevance.

# %%
i = N_TASKS - 1
_, sel = tw.select(state, jnp.asarray(stream.queries[i]), hp, spec)
sel = jax.device_get(sel)
print("query:", stream.instructions[i])
for k, (mid, s, b, rel) in enumerate(zip(sel.candidate_ids, sel.scores, sel.base_scores, sel.relevance)):
    if mid < 0:
        continue
    mark = "*" if k == sel.chosen else " "
    print(f"{mark} id {mid:3d} score {s:+.3f} base {b:+.3f} cos {rel:.3f}  skills {stream.skills[mid]}")
selected_instruction = stream.instructions[int(sel.memory_id)] if sel.memory_id >= 0 else None
print("selected memory's source task:", selected_instruction)

# %% [markdown]
# ## 4. Worth of the bank
# `tw.worth` averages the score of every memory over the probe queries (the current query
# and up to 8 earlier ones): the number the admission rule compares.

# %%
state_q, _ = tw.select(state, jnp.asarray(stream.queries[i]), hp, spec)
wv = jax.device_get(tw.worth(state_q, jnp.asarray(stream.queries[i]), hp, spec))
bank = jax.device_get(state.bank)
order = np.argsort(-np.where(bank.valid, wv.bank, -np.inf))
print("valid memories:", int(bank.valid.sum()), "of", spec.capacity)
for slot in order[:5]:
    print(f"slot {slot:2d} id {bank.ids[slot]:3d} worth {wv.bank[slot]:+.3f} u {bank.u[slot]:+.2f} "
          f"h {bank.h[slot]:.0f} d {bank.d[slot]:.0f}")
print("candidate worth", float(wv.new), "rho+", float(wv.rho_pos))

# %% [markdown]
# ## 5. Learned state: base weights `w` and the metric `M`

# %%
w = np.asarray(state.base.w)
M = np.asarray(state.residual.metric)
print("w [cos, u, rel, rec] =", np.round(w, 3), "(w0 =", np.asarray(hp.w0), ")")
print("M: mean over |e_q - e_m| block", float(M[:spec.dim].mean()), "; tail [cos, u, rel, rec, freq] =", np.round(M[spec.dim:], 3))
print("clock", jax.device_get(state.clock), "| base fits", int(state.base.n_fits), "| KRR fits", int(state.residual.n_fits),
      "| AGOP updates", int(state.residual.n_agop))

# %%
import matplotlib.pyplot as plt  # noqa: E402

w0 = np.asarray(hp.w0)
features = ["cos", "u", "rel", "rec"]
fig, ax = plt.subplots(1, 3, figsize=(15, 3.8))
x = np.arange(len(features))
ax[0].bar(x - 0.2, w0, 0.4, label="w0 (start)")
ax[0].bar(x + 0.2, w, 0.4, label=f"w after {N_TASKS} tasks")
ax[0].set_xticks(x, features)
ax[0].set_xlabel("base feature")
ax[0].set_ylabel("weight")
ax[0].set_title("base weights w")
ax[0].legend(fontsize=8)
tail = M[spec.dim:]
x = np.arange(len(tail))
ax[1].bar(x, tail - 1.0, 0.6, color="tab:green", label=f"after {int(state.residual.n_agop)} AGOP update(s)")
ax[1].axhline(0.0, color="grey", lw=0.8, label="start (M = 1)")
ax[1].set_xticks(x, ["cos", "u", "rel", "rec", "freq"])
ax[1].set_xlabel("statistic")
ax[1].set_ylabel("M − 1")
ax[1].set_title("metric M on the five statistics")
ax[1].legend(fontsize=8)
block = np.sort(M[:spec.dim])[::-1]
ax[2].plot(np.arange(1, spec.dim + 1), block - 1.0, color="tab:purple", label="M_d − 1, sorted")
ax[2].axhline(0.0, color="grey", lw=0.8, label="start (M = 1)")
ax[2].set_xlabel("bucket d of |e_q − e_m| (sorted by M_d)")
ax[2].set_ylabel("M_d − 1")
ax[2].set_title("metric M on the embedding block")
ax[2].legend(fontsize=8)
fig.tight_layout()
plt.show()

# %%
print("KEY_OUTPUTS " + json.dumps(dict(
    n_tasks=N_TASKS, n_agop=int(state.residual.n_agop), success_rate=success_rate,
    bank_valid=int(bank.valid.sum()), w=w.tolist(),
    metric_tail=M[spec.dim:].tolist(), selected_id=int(sel.memory_id), worth_new=float(wv.new))))
