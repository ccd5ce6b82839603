"""The ranking research's loop (docs/ranking-research.md): the controller's modes on the simulated DB/OS
streams, in JAX.

No LLM, no environment: the simulated backbone's success model (:mod:`tokenworth_bench.controller.simdb`,
equal to :func:`tokenworth_agent.sim.decide`) decides each task, and a success offers a memory whose action
text is the task's gold SQL (DB) or script (OS), which is what the simulated backbone replays on
a success. The whole stream is one ``tw.run`` (``lax.scan`` of the controller's step, its
lifecycle included) with the sim as its ``reward_fn``; hyperparameters are traced, so every
configuration of a mode reuses one compilation per stream.

With ``--fits RUN`` a success also needs the reply to fit the output budget, as measured in an
engine run (:func:`budget_fits`). Reported per configuration (mean over seeds): p̄ = the mean
success probability of the choices, budget included (the least noisy measure), SR, the injection
rate, the chosen memory's J, the recall set's top-cosine and best J, and the harmful rate
(J < 0.25, share of all tasks). J is computed here, from the skill lists, after the run; the
controller never sees it.

    python -m tokenworth_bench.rank.lab --env db --seeds 0,1,2 --configs "tokenworth+,tokenworth"
    python -m tokenworth_bench.rank.lab --env db --set "no worth:plus_worth=0" --set "greedy:plus_optimism=0"
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import time
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import tokenworth_jax as tw
from tokenworth_bench.controller import simdb

# Named configurations: (TokenWorth+ mode?, overrides by flat hyperparameter name).
CONFIGS: dict[str, tuple[bool, dict[str, Any]]] = {
    "tokenworth+": (True, {}),
    "tokenworth": (False, {}),
    "no memory": (True, dict(plus_margin=1.0, plus_optimism=0.0)),
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
    from tokenworth_agent.results.record import read_records
    from tokenworth_agent.sim import SimParams, decide
    from tokenworth_bench.ranking import _task, seed_folders, written_id

    params = SimParams()
    seen = np.zeros((n_tasks, 3), bool)
    cut = np.zeros((n_tasks, 3), bool)
    for run in runs:
        for seed, folder in seed_folders(Path(run)):
            for path in folder.glob("*/records.jsonl"):
                skills: dict[int, tuple[str, ...]] = {}
                for r in read_records(path):
                    task, mid = _task(r), r.injected_memory_id
                    memory = skills.get(mid) if mid is not None else None
                    episode = decide(params, int(seed or 0), task, memory)
                    kind = 0 if memory is None else (2 if episode.harmful else 1)
                    if episode.success and task.sample_index < n_tasks:
                        seen[task.sample_index, kind] = True
                        cut[task.sample_index, kind] |= not r.reward
                    written = written_id(r.decision)
                    if written is not None:
                        skills[written] = task.skill_list
    short = np.where(seen[:, 0], cut[:, 0], cut[:, 1])  # none and helpful: the same length class
    short_seen = seen[:, 0] | seen[:, 1]
    cut[:, 0] = np.where(seen[:, 0], cut[:, 0], short)
    cut[:, 1] = np.where(seen[:, 1], cut[:, 1], short)
    cut[:, 2] = np.where(seen[:, 2], cut[:, 2], short & short_seen)
    return (~cut).astype(np.float32)


class Lab:
    """One env's stream (the controller's inputs, seed-independent) and each seed's sim draws."""

    def __init__(self, env: str, n_tasks: int | None, seeds: Sequence[int], fits_from: Sequence[Path] = (),
                 capacity: int = 64, n_probes: int = 8) -> None:
        from tokenworth_agent.tasks import load_tasks

        self.env, self.capacity, self.n_probes = env, capacity, n_probes
        self.sims = {s: simdb.load_stream(n_tasks, seed=s, env=env) for s in seeds}
        first = next(iter(self.sims.values()))
        tasks = load_tasks(env, simdb.data_dir())[:n_tasks]
        spec, _ = self.setup(True, {})
        keys = jnp.asarray(first.queries)
        T = keys.shape[0]
        words = jnp.asarray(tw.word_vectors(first.instructions, spec.mode.shapes.word_dim))
        actions = jnp.asarray(tw.action_vectors([gold_action(t) for t in tasks], spec.mode.shapes.action_dim))
        self.events = {
            True: tw.Event(query=tw.Query(keys, {"words": words}), reward=jnp.zeros((T,), jnp.int32),
                           memory=tw.MemoryText(keys, {"actions": actions}), memory_id=jnp.arange(T, dtype=jnp.int32)),
            False: tw.Event(query=keys, reward=jnp.zeros((T,), jnp.int32), memory=keys,
                            memory_id=jnp.arange(T, dtype=jnp.int32))}
        table = first.skill_table
        inter = table @ table.T
        union = table.sum(1)[:, None] + table.sum(1)[None, :] - inter
        self.J = np.where(union > 0, inter / np.maximum(union, 1), 0.0)  # (T, T) skill overlap, bench only
        self.fits = budget_fits(fits_from, T) if fits_from else np.ones((T, 3), np.float32)

    def setup(self, plus: bool, overrides: dict[str, Any], seed: int = 0) -> tuple[tw.Spec, tw.HParams]:
        extra = {"plus_seed": seed} if plus else {}
        return tw.preset(self.env if self.env in ("db", "os") else "db", method="tokenworth+" if plus else "tokenworth",
                         spec_overrides={"capacity": self.capacity, "n_probes": self.n_probes},
                         **{**extra, **overrides})

    @functools.lru_cache(maxsize=None)
    def _runner(self, plus: bool) -> Any:
        spec, _ = self.setup(plus, {})
        params = next(iter(self.sims.values())).params  # SimParams: the same for every seed
        events = self.events[plus]

        @jax.jit
        def go(hp: tw.HParams, table: jax.Array, p0: jax.Array, v: jax.Array,
               fits: jax.Array) -> tuple[tw.State, tw.StepOutput, jax.Array]:
            def prob(t: jax.Array, m: jax.Array) -> tuple[jax.Array, jax.Array]:
                """(success probability, whether a success fits the budget)."""
                j = simdb.overlap(table, t, m)
                kind = jnp.where(m < 0, 0, jnp.where(j < params.harm_threshold, 2, 1))
                return simdb.probability(params, p0[t], j, m >= 0), fits[t, kind]

            def reward(event: tw.Event, selection: tw.Selection) -> jax.Array:
                p, fit = prob(event.memory_id, selection.memory_id)
                return ((v[event.memory_id] < p) & (fit > 0)).astype(jnp.int32)

            state, out = tw.run(tw.init(spec, hp), events, hp, spec, reward)
            p, fit = jax.vmap(prob)(jnp.arange(p0.shape[0]), out.selection.memory_id)
            return state, out, p * fit

        return go

    def final(self, seed: int, plus: bool, overrides: dict[str, Any]) -> tuple[tw.State, tw.StepOutput, np.ndarray]:
        """One run: the controller's final state, its outputs (T, ...) and each task's true success
        probability (T,) for the choice made, budget included."""
        sim = self.sims[seed]
        _, hp = self.setup(plus, overrides, seed)
        state, out, probs = self._runner(plus)(hp, jnp.asarray(sim.skill_table), jnp.asarray(sim.p0, jnp.float32),
                                               jnp.asarray(sim.outcome_u, jnp.float32), jnp.asarray(self.fits))
        return state, jax.device_get(out), np.asarray(probs)

    def run(self, seed: int, plus: bool, overrides: dict[str, Any]) -> dict[str, Any]:
        _, out, probs = self.final(seed, plus, overrides)
        return self.measures(out, probs)

    def measures(self, out: tw.StepOutput, probs: np.ndarray) -> dict[str, Any]:
        """The lab's measures of one run; memory ids are source task indices (the events' ids)."""
        sel = out.selection
        T = len(probs)
        chosen = np.asarray(sel.memory_id)
        inj = chosen >= 0
        j_ch, j_top, j_best = [], [], []
        for t in np.flatnonzero(inj):
            ids = np.asarray(sel.candidate_ids[t])
            ids = ids[ids >= 0]  # recall order: cosine first
            j_ch.append(self.J[t, chosen[t]])
            j_top.append(self.J[t, ids[0]])
            j_best.append(self.J[t, ids].max())
        j_ch_a = np.asarray(j_ch)
        return dict(p=float(probs.mean()), sr=100 * float(np.mean(np.asarray(out.reward))), injected=float(inj.mean()),
                    j=float(j_ch_a.mean()) if j_ch else None, j_top=float(np.mean(j_top)) if j_top else None,
                    j_best=float(np.mean(j_best)) if j_best else None,
                    harmful=float(np.sum(j_ch_a < 0.25)) / T)


def average(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {k: float(np.mean([r[k] for r in rows if r[k] is not None])) if any(r[k] is not None for r in rows) else None
            for k in rows[0]}


def fmt(name: str, m: dict[str, Any]) -> str:
    g = (lambda v, d=3: "—" if v is None else f"{v:.{d}f}")
    return (f"| {name} | {g(m['p'])} | {g(m['sr'], 1)} | {g(100 * m['injected'], 1)} | {g(m['j'])} | {g(m['j_top'])} | "
            f"{g(m['j_best'])} | {g(100 * m['harmful'], 1)} |")


HEADER = ("| config | p̄ | SR (%) | injected (%) | J chosen | J top-cos | J best | harmful (%) |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|")


def parse_set(item: str) -> tuple[str, tuple[bool, dict[str, Any]]]:
    """``NAME:KEY=VALUE[;KEY=VALUE]`` (Python literals; ``plus=0`` for the paper's mode)."""
    name, _, body = item.partition(":")
    values = {k.strip(): ast.literal_eval(v.strip()) for k, _, v in (kv.partition("=") for kv in body.split(";") if kv)}
    plus = bool(values.pop("plus", True))
    return name, (plus, values)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="db", choices=("db", "os"))
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--set", action="append", default=[],
                        help="NAME:KEY=VALUE[;KEY=VALUE] another configuration (flat hyperparameter names; plus=0 for "
                             "the paper's mode)")
    parser.add_argument("--capacity", type=int, default=64, help="Spec.capacity (B_max)")
    parser.add_argument("--probes", type=int, default=8, help="Spec.n_probes (the lifecycle's earlier queries)")
    parser.add_argument("--fits", default=None,
                        help="engine run folders, comma-separated: apply their output budget (budget_fits)")
    parser.add_argument("--out", default=None, help="write <out>.json with the measures")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    names = [name for name in args.configs.split(",") if name]
    unknown = [name for name in names if name not in CONFIGS]
    if unknown:
        parser.error(f"--configs: unknown {', '.join(map(repr, unknown))}; named ones are {', '.join(CONFIGS)} "
                     "(define others with --set NAME:KEY=VALUE)")
    configs = {name: CONFIGS[name] for name in names}
    configs.update(parse_set(item) for item in args.set)
    lab = Lab(args.env, args.tasks, seeds, fits_from=[Path(p) for p in args.fits.split(",")] if args.fits else (),
              capacity=args.capacity, n_probes=args.probes)
    results = {}
    print(HEADER)
    for name, (plus, overrides) in configs.items():
        started = time.perf_counter()
        rows = [lab.run(s, plus, overrides) for s in seeds]
        results[name] = {"mean": average(rows), "seeds": rows, "plus": plus, "overrides": overrides,
                         "seconds": time.perf_counter() - started}
        print(fmt(name, results[name]["mean"]) + f" {results[name]['seconds']:.0f}s", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=list))
    return results


if __name__ == "__main__":
    main()
