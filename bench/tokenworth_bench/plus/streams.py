"""Synthetic streams where relevance and worth disagree, with an oracle ceiling.

Every task i has a hidden *topic* t_i (its surface wording), a hidden *skill* s_i (the
procedure it needs), a difficulty p0_i (its success probability without a memory) and an
outcome uniform v_i: it succeeds iff v_i < clip(p0_i + e(i, j), 0.02, 0.98), where j is the
injected memory (e = 0 for none). Common random numbers: every method sees the same v. On
success task i offers a memory (id i). Injecting memory j changes the success probability by

    e(i, j) = E[kind(i, j), same topic(i, j)],  kind = 0 same skill and j helpful, 1 same skill, 2 other skill

(an effect table per stream, :func:`effects`). Two kinds of stream:

**trap and mixed** (no text; the query vector is ``normalize(a·T[t_i] + b·S[s_i] + σ·ε_i)``,
a = 1 > b = 0.7, so wording dominates the similarity; in TokenWorth+ the query vector stands for
the words and the actions are zero):

* ``trap`` — a memory of the same topic (near-duplicate wording) misleads, −0.25; one of the
  same skill but another topic (less similar) helps, +0.30; anything else does nothing.
* ``mixed`` — same topic *and* skill helps (+0.30), same topic and another skill harms (−0.25).

**The harm-majority family** (:data:`FAMILY`, :data:`HELD_OUT`; TokenWorth+'s no-harm work,
docs/tokenworth-plus.md, "No harm"): most stored memories hurt when injected. Only a share ``help`` of a
skill's memories help its tasks (+``gain``); every other memory, of the same skill or another, costs ``harm``.
Each stream is real text, hashed by the controller's own featurizers (``tw.featurize``, ``word_vectors``,
``action_vectors``):

* a question is three of its topic's five words, ``named`` of its skill's three name words (0: the
  words never name the skill) and three filler words, shuffled;
* a memory's actions are its skill's four procedure tokens (every memory of a skill shows them),
  ``signal`` of the skill's four key-step tokens if the memory is a helpful one (0: helpful and
  harmful memories of a skill look alike), and three generic tokens;
* ``plain``: the memory is offered as plain text (question and actions in one string, no separate
  action text), so its action vector hashes the whole text, as ``Controller.offer(text)`` does.

Methods: no memory; paper TokenWorth (DB preset); TokenWorth+ (DB preset, ``method="tokenworth+"``,
any ``--set`` configurations); and an **oracle** that knows every true probability and, at each
task, takes the best arm among "no memory" and every memory of its bank (the last 64 successful
tasks, the controller's B_max). Reported per method and seed: SR (%), the mean true success
probability of the choices (p̄), the injection rate, the share of tasks with a harmful injection
(e < 0), the gap closed, (SR − no memory) / (oracle − no memory), and TokenWorth+'s
**exploration cost**: the expected SR points lost to decisions that went against the posterior
mean (abstaining although the mean gain of the best candidate was above the margin, or injecting
although it was not), valued with the true probabilities.

    python -m tokenworth_bench.plus.streams [--tasks 1000] [--seeds 0,1,2] [--kinds dev|held-out|trap,mixed,...]
        [--set "NAME:plus_KEY=VALUE;..."] [--out bench/results/plus]
"""

from __future__ import annotations

from ..paths import RESULTS
import argparse
import functools
import json
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import tokenworth_jax as tw

KINDS = ("trap", "mixed")
GAIN, HARM = 0.30, 0.25
N_TOPICS = 16


class Variant(NamedTuple):
    """One stream of the harm-majority family."""

    help: float  # share of a skill's memories that help its tasks; every other memory hurts
    harm: float  # how much a memory that does not help lowers the success probability
    signal: int  # key-step tokens (0-4) a helpful memory's actions show: 0, it looks like a harmful one
    named: int  # skill words (0-3) in the question: 0, the words never name the skill
    p0: tuple[float, float] = (0.2, 0.8)  # the range of the difficulty (success probability without memory)
    plain: bool = False  # offered as plain text: the action vector hashes the whole memory text
    n_skills: int = 4
    gain: float = GAIN


# The family (TokenWorth+'s no-harm work). Development variants: every decision-rule choice was tuned on these only,
# on seeds 10-12. The held-out variants were written down here before any tuning and run once, at
# the end, with the final defaults (docs/tokenworth-plus.md).
FAMILY: dict[str, Variant] = {
    "h10-x25-s4-n2": Variant(help=0.10, harm=0.25, signal=4, named=2),  # rare helpers, loud text
    "h25-x15-s2-n2": Variant(help=0.25, harm=0.15, signal=2, named=2),
    "h50-x25-s1-n2": Variant(help=0.50, harm=0.25, signal=1, named=2),  # many helpers, faint text
    "h25-x25-s4-n0": Variant(help=0.25, harm=0.25, signal=4, named=0),  # the words never name the skill
    "h10-x10-s0-n2": Variant(help=0.10, harm=0.10, signal=0, named=2),  # helpers look like the others
    "h50-x10-s0-n0-easy": Variant(help=0.50, harm=0.10, signal=0, named=0, p0=(0.5, 0.95)),
    "h25-x25-s2-n2-plain": Variant(help=0.25, harm=0.25, signal=2, named=2, plain=True),
    "h40-x20-s3-n2-hard": Variant(help=0.40, harm=0.20, signal=3, named=2, p0=(0.05, 0.5)),
}
HELD_OUT: dict[str, Variant] = {
    "h15-x20-s3-n2-easy": Variant(help=0.15, harm=0.20, signal=3, named=2, p0=(0.55, 0.95)),
    "h35-x30-s1-n0-plain": Variant(help=0.35, harm=0.30, signal=1, named=0, plain=True),
    "h20-x15-s4-n1-k6": Variant(help=0.20, harm=0.15, signal=4, named=1, n_skills=6),
    "h45-x05-s2-n2-hard": Variant(help=0.45, harm=0.05, signal=2, named=2, p0=(0.1, 0.4)),
}
VARIANTS = {**FAMILY, **HELD_OUT}
GROUPS = {"dev": tuple(FAMILY), "held-out": tuple(HELD_OUT), "relevance": KINDS}


def effects(kind: str) -> np.ndarray:
    """The (3, 2) effect table E[kind of pair, same topic] of a stream (see the module docstring)."""
    if kind == "trap":
        return np.asarray([[GAIN, -HARM], [GAIN, -HARM], [0.0, -HARM]])
    if kind == "mixed":
        return np.asarray([[0.0, GAIN], [0.0, GAIN], [0.0, -HARM]])
    v = VARIANTS[kind]
    return np.asarray([[v.gain, v.gain], [-v.harm, -v.harm], [-v.harm, -v.harm]])


def effect(table: Any, topic_i: Any, skill_i: Any, good_i: Any, topic_j: Any, skill_j: Any, good_j: Any,
           xp: Any = np) -> Any:
    """e(i, j) from the effect table (NumPy or jax.numpy, broadcasting over j)."""
    del good_i
    pair = xp.where(skill_i == skill_j, xp.where(good_j, 0, 1), 2)
    return xp.asarray(table)[pair, (topic_i == topic_j).astype(xp.int32)]


def _pseudo_words(rng: np.random.Generator, n: int) -> list[str]:
    """n distinct random lowercase words (4-8 letters): a vocabulary that hashes like real words."""
    out: dict[str, None] = {}
    while len(out) < n:
        out["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=int(rng.integers(4, 9))))] = None
    return list(out)


def make_stream(kind: str, seed: int, T: int, dim: int = 512, word_dim: int = 512,
                action_dim: int = 256) -> dict[str, Any]:
    """One stream: hidden topic/skill/helpfulness, difficulty, outcome draws and the controller's inputs
    (``query`` keys, and for the family ``words`` and ``actions`` vectors and the texts)."""
    if kind in KINDS:
        return _relevance_stream(kind, seed, T, dim)
    if kind not in VARIANTS:
        raise ValueError(f"unknown stream {kind!r}; expected one of {KINDS + tuple(VARIANTS)}")
    v = VARIANTS[kind]
    rng = np.random.default_rng([seed, 2 + list(VARIANTS).index(kind)])
    vocab = iter(_pseudo_words(rng, N_TOPICS * 5 + v.n_skills * 11 + 150))
    take = lambda n: [next(vocab) for _ in range(n)]  # noqa: E731
    topic_words = [take(5) for _ in range(N_TOPICS)]
    skill_names = [take(3) for _ in range(v.n_skills)]
    procedure = [take(4) for _ in range(v.n_skills)]
    key_steps = [take(4) for _ in range(v.n_skills)]
    fillers, generic = take(120), take(30)
    t = rng.integers(0, N_TOPICS, size=T)
    s = rng.integers(0, v.n_skills, size=T)
    good = rng.uniform(size=T) < v.help
    questions, actions = [], []
    for i in range(T):
        words = (list(rng.choice(topic_words[t[i]], 3, replace=False))
                 + list(rng.choice(skill_names[s[i]], v.named, replace=False))
                 + list(rng.choice(fillers, 3, replace=False)))
        questions.append(" ".join(rng.permutation(words)))
        steps = procedure[s[i]] + (key_steps[s[i]][:v.signal] if good[i] else [])
        actions.append(" ".join(steps + list(rng.choice(generic, 3, replace=False))))
    memory_texts = [f"{q} ; {a}" if v.plain else a for q, a in zip(questions, actions)]
    return dict(kind=kind, topic=t, skill=s, good=good, p0=rng.uniform(*v.p0, size=T), v=rng.uniform(size=T),
                questions=questions, action_texts=memory_texts,
                query=tw.featurize(questions, dim), words=tw.word_vectors(questions, word_dim),
                actions=tw.action_vectors(memory_texts, action_dim))


def _relevance_stream(kind: str, seed: int, T: int, dim: int, n_skills: int = 4, a: float = 1.0, b: float = 0.7,
                      sigma: float = 0.7) -> dict[str, Any]:
    rng = np.random.default_rng([seed, KINDS.index(kind)])

    def units(n: int) -> np.ndarray:
        v = rng.normal(size=(n, dim))
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    topics, skills = units(N_TOPICS), units(n_skills)
    t = rng.integers(0, N_TOPICS, size=T)
    s = rng.integers(0, n_skills, size=T)
    q = a * topics[t] + b * skills[s] + sigma * units(T)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return dict(kind=kind, topic=t, skill=s, good=np.ones(T, bool), query=q.astype(np.float32),
                p0=rng.uniform(0.2, 0.8, size=T), v=rng.uniform(size=T))


def no_memory(stream: dict[str, Any]) -> float:
    return 100.0 * float(np.mean(stream["v"] < np.clip(stream["p0"], 0.02, 0.98)))


def oracle(stream: dict[str, Any], capacity: int = 64) -> tuple[float, float]:
    """(SR, injection rate) of the best arm per task over a FIFO bank of the last successes."""
    table, T = effects(stream["kind"]), len(stream["p0"])
    topic, skill, good = stream["topic"], stream["skill"], stream["good"]
    bank: list[int] = []
    wins = injected = 0
    for i in range(T):
        best, arm = stream["p0"][i], -1
        if bank:
            js = np.asarray(bank)
            p = stream["p0"][i] + effect(table, topic[i], skill[i], good[i], topic[js], skill[js], good[js])
            k = int(np.argmax(p))
            if p[k] > best:
                best, arm = p[k], int(js[k])
        success = stream["v"][i] < np.clip(best, 0.02, 0.98)
        wins += int(success)
        injected += int(arm >= 0)
        if success:
            bank = (bank + [i])[-capacity:]
    return 100.0 * wins / T, injected / T


def setup(stream: dict[str, Any], plus: bool, **overrides: Any) -> tuple[tw.Spec, tw.HParams]:
    """The DB preset over the stream's dimensions (no text: 8 zero action dimensions)."""
    text = "words" in stream
    dims = {"dim": stream["query"].shape[1]}
    if plus:  # TokenWorth+'s own shape fields
        dims.update(word_dim=stream["words"].shape[1] if text else stream["query"].shape[1],
                    action_dim=stream["actions"].shape[1] if text else 8)
    return tw.preset("db", method="tokenworth+" if plus else "tokenworth", spec_overrides=dims, **overrides)


def events(stream: dict[str, Any], spec: tw.Spec) -> tw.Event:
    """The controller's inputs: without text the query vector stands for the words and actions are zero."""
    q = jnp.asarray(stream["query"])
    T = q.shape[0]
    query: Any = q
    memory: Any = q
    if spec.mode.features:  # TokenWorth+ reads the question's words and the memory's actions
        text = "words" in stream
        query = tw.Query(key=q, features={"words": jnp.asarray(stream["words"]) if text else q})
        memory = tw.MemoryText(key=q, features={"actions": jnp.asarray(stream["actions"]) if text
                                                else jnp.zeros((T, spec.mode.shapes.action_dim), q.dtype)})
    return tw.Event(query=query, reward=jnp.zeros((T,), jnp.int32), memory=memory,
                    memory_id=jnp.arange(T, dtype=jnp.int32))


@functools.lru_cache(maxsize=None)
def _runner(spec: tw.Spec) -> Callable[..., tuple[tw.StepOutput, jax.Array, jax.Array]]:
    """One compiled stream run per spec: the hyperparameters and the stream are arguments."""

    @jax.jit
    def go(hp: tw.HParams, ev: tw.Event, topic: jax.Array, skill: jax.Array, good: jax.Array, table: jax.Array,
           p0: jax.Array, v: jax.Array) -> tuple[tw.StepOutput, jax.Array, jax.Array]:
        def prob(i: jax.Array, j: jax.Array) -> jax.Array:
            jj = jnp.maximum(j, 0)
            e = effect(table, topic[i], skill[i], good[i], topic[jj], skill[jj], good[jj], jnp)
            return jnp.clip(p0[i] + jnp.where(j >= 0, e, 0.0), 0.02, 0.98)

        def reward(event: tw.Event, selection: tw.Selection) -> jax.Array:
            return (v[event.memory_id] < prob(event.memory_id, selection.memory_id)).astype(jnp.int32)

        _, out = tw.run(tw.init(spec, hp), ev, hp, spec, reward)
        ids = jnp.arange(p0.shape[0])
        gains = out.selection.mode_scores.get("gain", out.selection.scores)  # the paper's mode: its score s
        best = jnp.take_along_axis(out.selection.candidate_ids,
                                   jnp.argmax(jnp.nan_to_num(gains, nan=-jnp.inf), axis=1)[:, None],
                                   axis=1)[:, 0]
        return out, jax.vmap(prob)(ids, out.selection.memory_id), jax.vmap(prob)(ids, best)

    return go


def run_controller(stream: dict[str, Any], plus: bool, **overrides: Any) -> dict[str, Any]:
    """One controller over the stream: SR, p̄, injection, abstention, harmful share, exploration cost."""
    spec, hp = setup(stream, plus, **overrides)
    out, p_chosen, p_best = _runner(spec)(
        hp, events(stream, spec), *(jnp.asarray(stream[k]) for k in ("topic", "skill", "good")),
        jnp.asarray(effects(stream["kind"]), jnp.float32), jnp.asarray(stream["p0"], jnp.float32),
        jnp.asarray(stream["v"], jnp.float32))
    out, p_chosen, p_best = jax.device_get((out, p_chosen, p_best))
    sel = out.selection
    p_none = np.clip(stream["p0"], 0.02, 0.98)
    injected = np.asarray(sel.memory_id) >= 0
    abstained = np.asarray(sel.abstained)
    row = dict(sr=100.0 * float(np.mean(out.reward)), p=100.0 * float(np.mean(p_chosen)),
               injected=float(injected.mean()), abstained=float(abstained.mean()),
               harmful=float(np.mean(injected & (p_chosen < p_none - 1e-6))),
               helpful=float(np.mean(injected & (p_chosen > p_none + 1e-6))))
    if plus:  # decisions against the posterior mean, valued with the true probabilities
        margin = float(np.asarray(hp.mode.margin))
        adv = np.nan_to_num(np.asarray(sel.advantage), nan=-np.inf)
        explore_none = abstained & (adv > margin)
        explore_inject = injected & (adv <= margin)
        row.update(explore_none=float(explore_none.mean()), explore_inject=float(explore_inject.mean()),
                   explore_cost=100.0 * float(np.sum(np.where(explore_none, p_best - p_none, 0.0))
                                             + np.sum(np.where(explore_inject, p_none - p_chosen, 0.0))) / len(p_none))
    return row


METHODS: dict[str, tuple[bool, dict[str, Any]]] = {
    "tokenworth": (False, {}),
    "tokenworth+": (True, {}),
}


def measure(kinds: Sequence[str], seeds: Sequence[int], T: int,
            methods: dict[str, tuple[bool, dict[str, Any]]] | None = None) -> dict[str, Any]:
    """{kind: {"seeds": [...], "methods": {name: {"rows": [per seed], "mean": {...}, "gap_closed": ...}}}}."""
    methods = METHODS if methods is None else methods
    results: dict[str, Any] = {}
    for kind in kinds:
        rows: dict[str, list[dict[str, Any]]] = {}
        for seed in seeds:
            stream = make_stream(kind, seed, T)
            rows.setdefault("no memory", []).append(dict(sr=no_memory(stream), injected=0.0))
            for name, (plus, overrides) in methods.items():
                extra = {"plus_seed": seed} if plus else {}
                rows.setdefault(name, []).append(run_controller(stream, plus, **{**overrides, **extra}))
            sr, inj = oracle(stream)
            rows.setdefault("oracle", []).append(dict(sr=sr, injected=inj))
        no_mem = np.asarray([r["sr"] for r in rows["no memory"]])
        ceil = np.asarray([r["sr"] for r in rows["oracle"]])
        table = {}
        for name, per_seed in rows.items():
            sr = np.asarray([r["sr"] for r in per_seed])
            mean = {k: float(np.mean([r[k] for r in per_seed])) for k in per_seed[0]}
            table[name] = {"rows": per_seed, "mean": mean, "sr_std": float(sr.std()),
                           "vs_no_memory": (sr - no_mem).tolist(), "vs_oracle": (sr - ceil).tolist(),
                           "gap_closed": float((sr.mean() - no_mem.mean()) / (ceil.mean() - no_mem.mean()))
                           if ceil.mean() > no_mem.mean() + 1e-9 else None}
        results[kind] = {"seeds": list(seeds), "methods": table}
    return results


def markdown(results: dict[str, Any], T: int, title: str = "Relevance ≠ worth and harm-majority streams") -> str:
    seeds = next(iter(results.values()))["seeds"]
    lines = [f"# {title} · {T} tasks · seeds {seeds}", "",
             "SR per seed (mean ± std); Δ₀ = SR − no memory per seed; p̄ = mean true success probability of the "
             "choices; harmful = tasks with an injection that lowers p; explore = expected SR points lost to "
             "decisions against the posterior mean (TokenWorth+).", ""]
    for kind, res in results.items():
        spec = VARIANTS.get(kind)
        lines += [f"## {kind}" + (f" ({'held out' if kind in HELD_OUT else 'development'}: {spec._asdict()})"
                                  if spec else ""), "",
                  "| method | SR per seed | SR | Δ₀ per seed | p̄ | injected | harmful | gap closed | explore |",
                  "|---|---|---:|---|---:|---:|---:|---:|---:|"]
        for name, r in res["methods"].items():
            m = r["mean"]
            per = " / ".join(f"{x['sr']:.1f}" for x in r["rows"])
            d0 = " / ".join(f"{d:+.1f}" for d in r["vs_no_memory"])
            gap = f"{100 * r['gap_closed']:.0f}%" if r["gap_closed"] is not None else "—"
            g = (lambda key, scale=100.0, fmt="{:.1f}": fmt.format(scale * m[key]) if key in m else "—")  # noqa: E731
            lines.append(f"| {name} | {per} | {m['sr']:.1f} ± {r['sr_std']:.1f} | {d0} | {g('p', 1.0)} | "
                         f"{g('injected')} | {g('harmful')} | {gap} | {g('explore_cost', 1.0, '{:+.2f}')} |")
        lines.append("")
    return "\n".join(lines)


def parse_set(item: str) -> tuple[str, tuple[bool, dict[str, Any]]]:
    from tokenworth_bench.rank.lab import parse_set as lab_parse

    return lab_parse(item)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--kinds", default="relevance,dev",
                        help="comma-separated stream names, or the groups relevance (trap, mixed), dev, held-out")
    parser.add_argument("--methods", default=",".join(METHODS), help="of tokenworth, tokenworth+ ('' for none)")
    parser.add_argument("--set", action="append", default=[],
                        help="NAME:KEY=VALUE[;KEY=VALUE] another configuration (flat hyperparameter names; plus=0 for "
                             "the paper's mode)")
    parser.add_argument("--out", default=str(RESULTS / "plus" / "streams"), help="writes <out>.md and <out>.json")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    kinds = [k for item in args.kinds.split(",") if item for k in GROUPS.get(item, (item,))]
    methods = {name: METHODS[name] for name in args.methods.split(",") if name}
    methods.update(parse_set(item) for item in args.set)
    results = measure(kinds, seeds, args.tasks, methods)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = markdown(results, args.tasks)
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps({"tasks": args.tasks, "seeds": seeds, "methods": {
        k: [p, o] for k, (p, o) in methods.items()}, "results": results}, indent=1, default=float))
    print(text)
    return results


if __name__ == "__main__":
    main()
