"""Synthetic streams where relevance and worth disagree, with an oracle ceiling.

Every task i has a hidden *topic* t_i (its surface wording) and a hidden *skill* s_i (the
procedure it needs), a difficulty p0_i ~ U(0.2, 0.8) and an outcome uniform v_i; its query
vector is ``normalize(a·T[t_i] + b·S[s_i] + σ·ε_i)`` with random unit topic/skill directions,
a = 1 > b = 0.7 (wording dominates the text similarity). On success task i offers a memory
keyed by its own query vector (id i). Injecting memory j changes the success probability:

* ``trap`` — *helpful memories are lexically less similar than harmful ones*: a memory of
  the same topic (near-duplicate wording, cos ≈ 0.5–0.7) misleads, p − 0.25; one of the same
  skill but another topic (cos ≈ 0.2) helps, p + 0.30; anything else does nothing.
* ``mixed`` — relevance is half right: same topic *and* skill helps (+0.30), same topic and
  another skill harms (−0.25), anything else does nothing.

success iff v_i < clip(p, 0.02, 0.98) (common random numbers across methods).

Methods: no memory; paper TokenWorth (DB preset); TokenWorth+ (DB preset, ``method="tokenworth+"``);
and an **oracle** that knows every
true probability and, at each task, takes the best arm among "no memory" and every memory
of its bank (the last 64 successful tasks, the controller's B_max). Reported: SR (%) mean ±
std over seeds, the fraction of tasks with an injection, and the gap closed,
(SR − no-memory) / (oracle − no-memory).

    python -m bench.plus.streams [--tasks 1000] [--seeds 0,1,2] [--out bench/results/plus]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import tokenworth_jax as tw

KINDS = ("trap", "mixed")
GAIN, HARM = 0.30, 0.25


def make_stream(kind: str, seed: int, T: int, dim: int = 512, n_topics: int = 16, n_skills: int = 4,
                a: float = 1.0, b: float = 0.7, sigma: float = 0.7) -> dict[str, np.ndarray]:
    if kind not in KINDS:
        raise ValueError(f"unknown stream {kind!r}; expected one of {KINDS}")
    rng = np.random.default_rng([seed, KINDS.index(kind)])

    def units(n: int) -> np.ndarray:
        v = rng.normal(size=(n, dim))
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    topics, skills = units(n_topics), units(n_skills)
    t = rng.integers(0, n_topics, size=T)
    s = rng.integers(0, n_skills, size=T)
    q = a * topics[t] + b * skills[s] + sigma * units(T)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return dict(kind=kind, topic=t, skill=s, query=q.astype(np.float32), p0=rng.uniform(0.2, 0.8, size=T),
                v=rng.uniform(size=T))


def effect(kind: str, topic_i: Any, skill_i: Any, topic_j: Any, skill_j: Any, xp: Any = np) -> Any:
    same_t, same_s = topic_i == topic_j, skill_i == skill_j
    if kind == "trap":
        return xp.where(same_t, -HARM, xp.where(same_s, GAIN, 0.0))
    return xp.where(same_t & same_s, GAIN, xp.where(same_t, -HARM, 0.0))


def reward_fn(stream: dict[str, np.ndarray]) -> Callable[[tw.Event, tw.Selection], jax.Array]:
    kind = stream["kind"]
    topic, skill = jnp.asarray(stream["topic"]), jnp.asarray(stream["skill"])
    p0, v = jnp.asarray(stream["p0"], jnp.float32), jnp.asarray(stream["v"], jnp.float32)

    def reward(event: tw.Event, selection: tw.Selection) -> jax.Array:
        i, j = event.memory_id, selection.memory_id
        jj = jnp.maximum(j, 0)
        p = p0[i] + jnp.where(j >= 0, effect(kind, topic[i], skill[i], topic[jj], skill[jj], jnp), 0.0)
        return (v[i] < jnp.clip(p, 0.02, 0.98)).astype(jnp.int32)

    return reward


def oracle(stream: dict[str, np.ndarray], capacity: int = 64) -> tuple[float, float]:
    """(SR, injection rate) of the best arm per task over a FIFO bank of the last successes."""
    kind, T = stream["kind"], len(stream["p0"])
    bank: list[int] = []
    wins = injected = 0
    for i in range(T):
        best, arm = stream["p0"][i], -1
        if bank:
            js = np.asarray(bank)
            p = stream["p0"][i] + effect(kind, stream["topic"][i], stream["skill"][i], stream["topic"][js],
                                         stream["skill"][js])
            k = int(np.argmax(p))
            if p[k] > best:
                best, arm = p[k], int(js[k])
        success = stream["v"][i] < np.clip(best, 0.02, 0.98)
        wins += int(success)
        injected += int(arm >= 0)
        if success:
            bank = (bank + [i])[-capacity:]
    return 100.0 * wins / T, injected / T


def run_controller(stream: dict[str, np.ndarray], plus: bool, **overrides: Any) -> tuple[float, float, float]:
    """(SR, injection rate, abstention rate) of one controller over the stream.

    The stream has no text: in TokenWorth+ mode the query vector stands for the question's words
    and every memory's action vector is zero (no action affinity), so only the lift model learns."""
    dim = stream["query"].shape[1]
    spec, hp = tw.preset("db", method="tokenworth+" if plus else "tokenworth",
                         spec_overrides={"dim": dim, **({"word_dim": dim, "action_dim": 8} if plus else {})}, **overrides)
    q = jnp.asarray(stream["query"])
    T = q.shape[0]
    query, memory = q, q
    if plus:
        query = tw.Query(key=q, features={"words": q})
        memory = tw.MemoryText(key=q, features={"actions": jnp.zeros((T, spec.mode.shapes.action_dim), q.dtype)})
    events = tw.Event(query=query, reward=jnp.zeros((T,), jnp.int32), memory=memory,
                      memory_id=jnp.arange(T, dtype=jnp.int32))
    _, out = tw.run(tw.init(spec, hp), events, hp, spec, reward_fn(stream))
    chosen = np.asarray(out.selection.chosen)
    has_candidates = np.asarray(out.selection.candidate_ids)[:, 0] >= 0
    return (100.0 * float(np.mean(np.asarray(out.reward))), float(np.mean(chosen >= 0)),
            float(np.mean(has_candidates & (chosen < 0))))


METHODS: dict[str, tuple[bool, dict[str, Any]]] = {
    "tokenworth": (False, {}),
    "tokenworth+": (True, {}),
}


def measure(kinds: Sequence[str], seeds: Sequence[int], T: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for kind in kinds:
        rows: dict[str, list[tuple[float, float, float]]] = {}
        for seed in seeds:
            stream = make_stream(kind, seed, T)
            nomem = 100.0 * float(np.mean(stream["v"] < np.clip(stream["p0"], 0.02, 0.98)))
            rows.setdefault("no memory", []).append((nomem, 0.0, 0.0))
            for name, (plus, overrides) in METHODS.items():
                extra = {"plus_seed": seed} if plus else {}
                rows.setdefault(name, []).append(run_controller(stream, plus, **overrides, **extra))
            sr, inj = oracle(stream)
            rows.setdefault("oracle", []).append((sr, inj, 0.0))
        no_mem = np.mean([r[0] for r in rows["no memory"]])
        ceil = np.mean([r[0] for r in rows["oracle"]])
        table = {}
        for name, vals in rows.items():
            arr = np.asarray(vals)
            table[name] = {"sr": (float(arr[:, 0].mean()), float(arr[:, 0].std())), "injected": float(arr[:, 1].mean()),
                           "abstained": float(arr[:, 2].mean()),
                           "gap_closed": float((arr[:, 0].mean() - no_mem) / (ceil - no_mem)) if ceil > no_mem else None}
        results[kind] = table
    return results


def markdown(results: dict[str, Any], seeds: Sequence[int], T: int) -> str:
    lines = [f"# Relevance ≠ worth streams · {T} tasks · seeds {list(seeds)}", ""]
    for kind, table in results.items():
        lines += [f"## {kind}", "", "| method | SR (%) | injected (%) | abstained (%) | gap closed |", "|---|---:|---:|---:|---:|"]
        for name, r in table.items():
            gap = f"{100 * r['gap_closed']:.0f}%" if r["gap_closed"] is not None else "—"
            lines.append(f"| {name} | {r['sr'][0]:.1f} ± {r['sr'][1]:.1f} | {100 * r['injected']:.1f} | "
                         f"{100 * r['abstained']:.1f} | {gap} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--out", default="bench/results/plus")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    results = measure(args.kinds.split(","), seeds, args.tasks)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(results, seeds, args.tasks)
    (out / "streams.md").write_text(text)
    (out / "streams.json").write_text(json.dumps({"tasks": args.tasks, "seeds": seeds, "results": results}, indent=1))
    print(text)
    return results


if __name__ == "__main__":
    main()
