"""How far can text rank the recall set? Offline ceilings on the sim's DB/OS streams
(the ranking research, docs/ranking-research.md).

No bandit, no budget: every earlier task counts as a memory, the recall set is the K_c = 12 most
cosine-similar of the last 64, from task ``--start`` on. Rankers compared by the mean J of their
pick (the sim's skill overlap, read here only) and the share of picks with J < 0.25:

* top cosine (the paper's relevance); best in the recall set (the oracle);
* ŝ: the action model (ridge from question words to action tokens) refitted every 25 tasks on
  all earlier tasks, as TokenWorth+ (:mod:`tokenworth_jax.plus.actions`) learns it online;
* the query's *true* action vector a_q·a_m (hashed, as the ranker's), and exact-token cosine
  of the action texts: what the action representation could give if the words predicted the
  actions perfectly.

    python -m tokenworth_bench.rank.ceiling --env db
"""

from __future__ import annotations

import argparse
import collections
from typing import Sequence

import numpy as np

from tokenworth_bench.rank.lab import Lab


def exact_token_similarity(texts: Sequence[str]) -> np.ndarray:
    from tokenworth_jax.plus.text import unit_features

    feats = [unit_features(t, actions=True) for t in texts]
    vocab = {f: i for i, f in enumerate(collections.Counter(f for fs in feats for f in fs))}
    V = np.zeros((len(texts), len(vocab)))
    for i, fs in enumerate(feats):
        V[i, [vocab[f] for f in fs]] = 1.0
    V /= np.maximum(np.linalg.norm(V, axis=1, keepdims=True), 1e-12)
    return V @ V.T


def main(argv: Sequence[str] | None = None) -> dict[str, tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="db")
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--start", type=int, default=100)
    args = parser.parse_args(argv)
    from tokenworth_agent.tasks import load_tasks
    from tokenworth_bench.controller import simdb
    from tokenworth_bench.rank.lab import gold_action

    lab = Lab(args.env, args.tasks, [0])
    tasks = load_tasks(args.env, simdb.data_dir())[: args.tasks]
    events = lab.events[True]
    X = np.asarray(events.query.features["words"], np.float64)
    A = np.asarray(events.memory.features["actions"], np.float64)
    K = np.asarray(events.query.key, np.float64)
    exact = exact_token_similarity([gold_action(t) for t in tasks])
    picks: dict[str, list[float]] = collections.defaultdict(list)
    W = np.zeros((X.shape[1], A.shape[1]))
    for i in range(args.start, len(tasks)):
        idx = np.arange(max(0, i - 64), i)
        top = idx[np.argsort(-(K[idx] @ K[i]), kind="stable")[:12]]
        if i == args.start or i % 25 == 0:
            W = np.linalg.solve(X[:i].T @ X[:i] + np.eye(X.shape[1]), X[:i].T @ A[:i])
        J = lab.J[i, top]
        for name, score in (("top cosine", -np.arange(len(top))), ("action model ŝ", A[top] @ (X[i] @ W)),
                            ("true action vector", A[top] @ A[i]), ("true action tokens, exact", exact[i, top]),
                            ("best in recall (oracle)", J)):
            picks[name].append(J[int(np.argmax(score))])
    out = {k: (float(np.mean(v)), float(np.mean(np.asarray(v) < 0.25))) for k, v in picks.items()}
    print(f"{args.env}: tasks {args.start}–{len(tasks) - 1}\n| ranker | mean J of the pick | J < 0.25 |\n|---|---:|---:|")
    for k, (j, harm) in out.items():
        print(f"| {k} | {j:.3f} | {100 * harm:.1f}% |")
    return out


if __name__ == "__main__":
    main()
