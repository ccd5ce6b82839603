"""The research loop of issue 24: learned rankers on the simulated DB/OS streams, in JAX.

No LLM, no environment, no token budget: the simulated backbone's success model
(:mod:`bench.controller.simdb`, equal to :func:`agent.sim.decide`) decides each task,
and a success writes a memory whose action text is the task's gold SQL (DB) or script (OS),
which is exactly what the simulated backbone replays on a success. The whole stream is one
``lax.scan`` of :func:`tokenworth_jax.rank.standalone.run`; hyperparameters are traced, so every
configuration reuses one compilation per stream.

With ``--fits RUN`` a success also needs the reply to fit the output budget, as measured in an
engine run (:func:`budget_fits`). Reported per configuration (mean over seeds): p̄ = the mean
success probability of the choices, budget included (the least noisy measure), SR, the injection rate, the chosen memory's J, the recall set's
top-cosine and best J, and the harmful rate (J < 0.25, share of all tasks). J is computed here,
from the skill lists, after the run; the ranker never sees it.

    python -m bench.rank.lab --env db --seeds 0,1,2 --configs default,cosine
"""

from __future__ import annotations

import argparse
import functools
import json
import time
import types
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bench.controller import simdb
from tokenworth_jax.rank import standalone as S
from tokenworth_jax.rank.text import action_vectors, query_vectors

# Named configurations: overrides of tokenworth_jax.rank.model.DEFAULTS. ψ = [1, cos, ŝ, 4 bumps].
CONFIGS: dict[str, dict[str, Any]] = {
    "no memory": dict(margin=1.0),
    # the ranking by one fixed score: a ridge so large that θ stays at its prior
    "cosine": dict(features=(1, 1, 0, 0, 0, 0, 0), theta0=(0.5, 1, 0, 0, 0, 0, 0), lam=1e6, abstain=0.0),
    "s only": dict(features=(1, 0, 1, 0, 0, 0, 0), theta0=(0.5, 0, 2, 0, 0, 0, 0), lam=1e6, abstain=0.0),
    "default": {},
}


def gold_action(task: Any) -> str:
    """The action text a successful simulated task writes: its gold SQL, script or tool calls."""
    if hasattr(task, "answer_sql"):
        return task.answer_sql
    if hasattr(task, "ground_truth"):
        return task.ground_truth.script if task.ground_truth is not None else ""
    return "\n".join(task.action_list)


def budget_fits(runs: Sequence[Path], n_tasks: int) -> np.ndarray:
    """(T, 3) 0/1: whether task t's successful reply fits the output budget with no memory, a
    helpful memory or a harmful one (the Thought line has 1, 0 or 3 sentences), read from the
    records of engine runs (every method and seed): a sim success that the grader failed was cut.
    The fit is deterministic per (task, kind). Pairs never observed are imputed by the order of
    the reply lengths: helpful and none agree (measured: 433 of 433 tasks seen both ways), and a
    harmful reply is cut whenever the shorter one is (cut more often still: 13 of 232 tasks)."""
    from agent.sim import SimParams, decide
    from agent.checkpoint import read_records
    from bench.ranking import _task, seed_folders, written_id

    params = SimParams()
    seen = np.zeros((n_tasks, 3), bool)
    cut = np.zeros((n_tasks, 3), bool)
    for run in runs:
        for seed, folder in seed_folders(Path(run)):
            for path in folder.glob("*/records.jsonl"):
                skills: dict[int, tuple[str, ...]] = {}
                for r in read_records(path):
                    task, mid = _task(r), r["injected_memory_id"]
                    memory = skills.get(mid) if mid is not None else None
                    episode = decide(params, int(seed or 0), task, memory)
                    kind = 0 if memory is None else (2 if episode.harmful else 1)
                    if episode.success and task.sample_index < n_tasks:
                        seen[task.sample_index, kind] = True
                        cut[task.sample_index, kind] |= not r["reward"]
                    written = written_id(r["decision"])
                    if written is not None:
                        skills[written] = task.skill_list
    short = np.where(seen[:, 0], cut[:, 0], cut[:, 1])  # none and helpful: the same length class
    short_seen = seen[:, 0] | seen[:, 1]
    cut[:, 0] = np.where(seen[:, 0], cut[:, 0], short)
    cut[:, 1] = np.where(seen[:, 1], cut[:, 1], short)
    cut[:, 2] = np.where(seen[:, 2], cut[:, 2], short & short_seen)
    return (~cut).astype(np.float32)


QUERY_REPS = ("words+bigrams", "words", "chars", "words+chars")


def query_representation(texts: Sequence[str], dim: int, rep: str) -> np.ndarray:
    """The ranker's query vectors under a hashing choice (the default is the policy's,
    :func:`tokenworth_jax.rank.text.query_vectors`; "chars" is the recall vector's own hashing)."""
    from tokenworth_jax.featurize import featurize
    from tokenworth_jax.rank.text import hashed

    if rep == "words+bigrams":
        return query_vectors(texts, dim)
    if rep == "words":
        return hashed(texts, dim, bigrams=False)
    if rep == "chars":
        return featurize(texts, dim)
    if rep == "words+chars":
        both = np.concatenate([query_vectors(texts, dim // 2), featurize(texts, dim - dim // 2)], axis=1)
        return (both / np.sqrt(2)).astype(np.float32)
    raise ValueError(f"unknown query representation {rep!r}; expected one of {', '.join(QUERY_REPS)}")


class Lab:
    """One env's stream features (seed-independent) and each seed's draws."""

    def __init__(self, env: str, n_tasks: int | None, seeds: Sequence[int], dims: S.Dims = S.Dims(),
                 fits_from: Sequence[Path] = (), query_rep: str = "words+bigrams") -> None:
        from agent.data import load_tasks

        self.env, self.dims = env, dims
        self.sims = {s: simdb.load_stream(n_tasks, seed=s, env=env, dim=dims.rank.key_dim) for s in seeds}
        first = next(iter(self.sims.values()))
        tasks = load_tasks(env, simdb.data_dir())[:n_tasks]
        self.stream = S.Stream(keys=jnp.asarray(first.queries),
                               words=jnp.asarray(query_representation(first.instructions, dims.rank.query_dim, query_rep)),
                               acts=jnp.asarray(action_vectors([gold_action(t) for t in tasks], dims.rank.action_dim)))
        table = first.skill_table
        inter = table @ table.T
        union = table.sum(1)[:, None] + table.sum(1)[None, :] - inter
        self.J = np.where(union > 0, inter / np.maximum(union, 1), 0.0)  # (T, T) skill overlap, bench only
        T = table.shape[0]
        self.fits = budget_fits(fits_from, T) if fits_from else np.ones((T, 3), np.float32)

    @functools.cached_property
    def _runner(self) -> Any:
        dims = self.dims
        params = next(iter(self.sims.values())).params  # SimParams: the same for every seed

        @jax.jit
        def go(hp: Any, stream: S.Stream, table: jax.Array, p0: jax.Array, v: jax.Array,
               fits: jax.Array) -> tuple[S.Selection, jax.Array, jax.Array]:
            def prob(t: jax.Array, m: jax.Array) -> tuple[jax.Array, jax.Array]:
                """(success probability, whether a success fits the budget)."""
                j = simdb.overlap(table, t, m)
                kind = jnp.where(m < 0, 0, jnp.where(j < params.harm_threshold, 2, 1))
                return simdb.probability(params, p0[t], j, m >= 0), fits[t, kind]

            def reward(t: jax.Array, m: jax.Array) -> jax.Array:
                p, fit = prob(t, m)
                return ((v[t] < p) & (fit > 0)).astype(jnp.int32)

            _, sel, rewards = S.run(S.init(dims, hp), stream, hp, dims, reward)
            p, fit = jax.vmap(prob)(jnp.arange(p0.shape[0]), sel.memory_id)
            return sel, rewards, p * fit

        return go

    def run(self, seed: int, hp: Any) -> dict[str, Any]:
        sim = self.sims[seed]
        sel, rewards, probs = self._runner(hp, self.stream, jnp.asarray(sim.skill_table), jnp.asarray(sim.p0, jnp.float32),
                                           jnp.asarray(sim.outcome_u, jnp.float32), jnp.asarray(self.fits))
        return self.measures(jax.device_get(sel), np.asarray(rewards), np.asarray(probs))

    def measures(self, sel: S.Selection, rewards: np.ndarray, probs: np.ndarray) -> dict[str, Any]:
        T = len(rewards)
        chosen = np.asarray(sel.memory_id)
        inj = chosen >= 0
        # the bank's memory ids at each task are not in the outputs; rebuild them (FIFO of successes)
        ids = np.full(self.dims.capacity, -1)
        nxt = 0
        j_ch, j_top, j_best, harmful = [], [], [], 0
        for t in range(T):
            if inj[t]:
                valid = ids >= 0
                recall = np.asarray(sel.recall[t]) & valid
                cos = np.where(valid, np.asarray(sel.cos[t]), -np.inf)
                jrow = self.J[t]
                j = jrow[chosen[t]]
                j_ch.append(j)
                harmful += j < 0.25
                j_top.append(jrow[ids[int(np.argmax(cos))]])
                j_best.append(jrow[ids[recall]].max())
            if rewards[t]:
                ids[nxt % len(ids)] = t
                nxt += 1
        return dict(p=float(probs.mean()), sr=100 * float(rewards.mean()), injected=float(inj.mean()),
                    j=float(np.mean(j_ch)) if j_ch else None, j_top=float(np.mean(j_top)) if j_top else None,
                    j_best=float(np.mean(j_best)) if j_best else None, harmful=harmful / T)


def oracle(lab: "Lab", seed: int, k: int | None) -> dict[str, Any]:
    """The ceiling: on a FIFO bank of its own successes, inject the candidate of the ``k`` most
    cosine-similar (``None``: the whole bank) with the highest true success probability, budget
    included, or nothing when no candidate beats no memory. Reads J: a reference, not a method."""
    sim, prm = lab.sims[seed], lab.sims[seed].params
    keys = np.asarray(lab.stream.keys)
    bank: list[int] = []
    wins = expected = 0.0
    chosen_j: list[float] = []
    for t in range(len(sim.p0)):
        cands = np.asarray(bank, int)
        if len(bank) and k is not None:
            cands = cands[np.argsort(-(keys[cands] @ keys[t]), kind="stable")[:k]]
        j = lab.J[t, cands]
        p = np.asarray(simdb.probability(prm, sim.p0[t], jnp.asarray(j), True))
        kinds = np.where(j < prm.harm_threshold, 2, 1)
        values = np.concatenate([[float(simdb.probability(prm, sim.p0[t], 0.0, False)) * lab.fits[t, 0]],
                                 p * lab.fits[t, kinds]])
        best = int(np.argmax(values))  # 0: no memory
        p_arm = float(simdb.probability(prm, sim.p0[t], 0.0, False)) if best == 0 else float(p[best - 1])
        fit = lab.fits[t, 0] if best == 0 else lab.fits[t, kinds[best - 1]]
        success = bool(sim.outcome_u[t] < p_arm and fit > 0)
        wins += success
        expected += values[best]
        if best:
            chosen_j.append(float(j[best - 1]))
        if success:
            bank = (bank + [t])[-lab.dims.capacity:]
    T = len(sim.p0)
    return dict(p=expected / T, sr=100 * wins / T, injected=len(chosen_j) / T,
                j=float(np.mean(chosen_j)) if chosen_j else None, j_top=None, j_best=None,
                harmful=float(np.sum(np.asarray(chosen_j) < prm.harm_threshold)) / T)


class StreamLab:
    """A relevance ≠ worth stream (:mod:`bench.plus.streams`): query vectors only, no text, so the
    ranker's word vector is the query vector and its action vectors are zero (ŝ = 0)."""

    def __init__(self, kind: str, n_tasks: int, seeds: Sequence[int], dims: S.Dims = S.Dims()) -> None:
        from bench.plus import streams

        self.kind, self.dims = kind, dims
        self.streams = {s: streams.make_stream(kind, s, n_tasks, dim=dims.rank.key_dim) for s in seeds}
        self.oracles = {s: streams.oracle(self.streams[s], dims.capacity) for s in seeds}
        self._compiled: dict[int, Any] = {}

    def run(self, seed: int, hp: Any) -> dict[str, Any]:
        from bench.plus.streams import reward_fn

        st = self.streams[seed]
        q = jnp.asarray(st["query"])
        stream = S.Stream(keys=q, words=q, acts=jnp.zeros((q.shape[0], self.dims.rank.action_dim), q.dtype))
        env = reward_fn(st)  # the stream's own reward: it reads only the two memory ids

        def reward(t: jax.Array, m: jax.Array) -> jax.Array:
            return env(types.SimpleNamespace(memory_id=t), types.SimpleNamespace(memory_id=m))

        # the reward closes over this seed's stream: one compilation per seed, reused by every configuration
        if seed not in self._compiled:
            self._compiled[seed] = jax.jit(lambda h: S.run(S.init(self.dims, h), stream, h, self.dims, reward))
        _, sel, rewards = self._compiled[seed](hp)
        sr = 100 * float(np.mean(rewards))
        none = 100 * float(np.mean(st["v"] < np.clip(st["p0"], 0.02, 0.98)))
        top = self.oracles[seed][0]
        return dict(p=None, sr=sr, injected=float(np.mean(np.asarray(sel.memory_id) >= 0)), j=None, j_top=None,
                    j_best=None, harmful=None, gap=(sr - none) / (top - none), none=none, oracle=top)


def average(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {k: float(np.mean([r[k] for r in rows if r[k] is not None])) if any(r[k] is not None for r in rows) else None
            for k in rows[0]}


def fmt(name: str, m: dict[str, Any]) -> str:
    g = (lambda v, d=3: "—" if v is None else f"{v:.{d}f}")
    if "gap" in m:
        return (f"| {name} | gap closed {100 * m['gap']:.0f}% (none {m['none']:.1f}, oracle {m['oracle']:.1f}) | "
                f"{g(m['sr'], 1)} | {g(100 * m['injected'], 1)} | — | — | — | — |")
    return (f"| {name} | {g(m['p'])} | {g(m['sr'], 1)} | {g(100 * m['injected'], 1)} | {g(m['j'])} | {g(m['j_top'])} | "
            f"{g(m['j_best'])} | {g(100 * m['harmful'], 1)} |")


HEADER = ("| config | p̄ | SR (%) | injected (%) | J chosen | J top-cos | J best | harmful (%) |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="db")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--set", action="append", default=[],
                        help="NAME:KEY=VALUE[;KEY=VALUE] an extra configuration (values are Python literals)")
    parser.add_argument("--query-dim", type=int, default=512)
    parser.add_argument("--action-dim", type=int, default=256)
    parser.add_argument("--capacity", type=int, default=64)
    parser.add_argument("--query-rep", default="words+bigrams", choices=QUERY_REPS)
    parser.add_argument("--oracle", action="store_true", help="also the best-arm ceilings (they read J)")
    parser.add_argument("--fits", default=None,
                        help="engine run folders, comma-separated: apply their output budget (budget_fits)")
    parser.add_argument("--out", default=None, help="write <out>.json with the measures")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    configs = {name: CONFIGS[name] for name in args.configs.split(",") if name}
    import ast

    for item in args.set:
        name, _, body = item.partition(":")
        configs[name] = {k: ast.literal_eval(v) for k, _, v in (kv.partition("=") for kv in body.split(";") if kv)}
    dims = S.Dims(rank=S.M.RankDims(query_dim=args.query_dim, action_dim=args.action_dim), capacity=args.capacity)
    if args.env in ("trap", "mixed"):
        lab: Any = StreamLab(args.env, args.tasks or 1000, seeds, dims)
    else:
        lab = Lab(args.env, args.tasks, seeds, dims, fits_from=[Path(p) for p in args.fits.split(",")] if args.fits else (),
                  query_rep=args.query_rep)
    results = {}
    print(HEADER)
    if args.oracle:
        for name, k in (("oracle (recall 12)", lab.dims.k_candidates), ("oracle (whole bank)", None)):
            rows = [oracle(lab, s, k) for s in seeds]
            results[name] = {"mean": average(rows), "seeds": rows}
            print(fmt(name, results[name]["mean"]), flush=True)
    for name, overrides in configs.items():
        started = time.perf_counter()
        rows = [lab.run(s, S.params(**{"seed": s, **overrides})) for s in seeds]
        results[name] = {"mean": average(rows), "seeds": rows, "overrides": {k: v for k, v in overrides.items()},
                         "seconds": time.perf_counter() - started}
        print(fmt(name, results[name]["mean"]) + f" {results[name]['seconds']:.0f}s", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=list))
    return results


if __name__ == "__main__":
    main()
