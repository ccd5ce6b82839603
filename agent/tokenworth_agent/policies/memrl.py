"""MemRL (MemTensor/MemRL): two-phase retrieval with learned Q-values on memories.

* **Phase A, recall:** cosine similarity between the task's question and each memory's
  key (the hashed vectors of spec §2, the same representation TokenWorth uses); memories
  with similarity ≥ ``sim_threshold`` are recalled, at most ``recall_k`` of them.
* **Phase B, selection:** ``score = 0.5·z(sim) + 0.5·clip(z(Q), −3, 3)``, where z is the
  z-score over the recalled set (a constant column, e.g. one recalled memory, gives z = 0).
  ε-greedy: with probability ``epsilon`` the K_max memories are drawn uniformly from the
  recalled set (seeded generator, part of the checkpoint), otherwise the top K_max scores
  (ties: higher similarity's recall rank first).
* **Update:** for each injected memory ``Q ← Q + α (r − Q)`` with α = 0.3 and
  r = +1 on success, −1 on failure. New memories start at ``q_init`` = 0.
* **Writes:** success only (like every method here). At capacity B_max the memory with the
  lowest Q is evicted (ties: the oldest), the new one included in neither comparison.
* **No auxiliary LLM call:** MemRL's optional LLM-written summaries are not used, so its
  token budget is exactly the execution budget every method gets.

Defaults: ``sim_threshold`` = 0.30 (hashed char-n-gram cosine; unrelated questions in the
streams score ≈0.1–0.25, paraphrase-level ones ≥ 0.4), ``recall_k`` = 12 (TokenWorth's K_c),
``epsilon`` = 0.1, ``q_init`` = 0.0.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.core.parameters import Parameter, at_least, within
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies.base import MemoryStore, Outcome, StoreBackedPolicy, cosine_scores, embed, rng_from_state, rng_state


def zscore(values: np.ndarray) -> np.ndarray:
    std = values.std()
    return np.zeros_like(values) if std < 1e-12 else (values - values.mean()) / std


class MemRLPolicy(StoreBackedPolicy):
    name = "memrl"
    parameters = (
        Parameter("sim_threshold", float, 0.30, "recall: least cosine similarity of question and memory key"),
        Parameter("recall_k", int, 12, "recall: most memories recalled before selection", check=at_least(1)),
        Parameter("epsilon", float, 0.1, "selection: chance of a uniform draw from the recalled set",
                  check=within(0.0, 1.0)),
        Parameter("alpha", float, 0.3, "Q update step: Q <- Q + alpha (r - Q)", check=within(0.0, 1.0, open_low=True)),
        Parameter("q_init", float, 0.0, "Q of a new memory"),
    )

    def __init__(
        self,
        env: str,
        budget: Budget,
        seed: int = 0,
        *,
        harness: HarnessOptions = DEFAULT_HARNESS,
        sim_threshold: float = 0.30,
        recall_k: int = 12,
        epsilon: float = 0.1,
        alpha: float = 0.3,
        q_init: float = 0.0,
    ) -> None:
        super().__init__(env, budget, seed, harness=harness)
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.sim_threshold, self.recall_k, self.epsilon = sim_threshold, recall_k, epsilon
        self.alpha, self.q_init = alpha, q_init
        self.store = MemoryStore(["q"])
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 0x4D454D52]))  # "MEMR"

    def retrieve(self, task: Task) -> list[Memory]:
        if not self.store.memories:
            self.note(recalled_ids=[], chosen_ids=[])
            return []
        sims = cosine_scores(embed([task.query_text])[0], self.store.vectors())
        by_sim = np.argsort(-sims, kind="stable")
        recalled = [i for i in by_sim if sims[i] >= self.sim_threshold][: self.recall_k]
        if not recalled:
            self.note(recalled_ids=[], chosen_ids=[], best_sim=round(float(sims[by_sim[0]]), 6))
            return []
        sim_r = sims[recalled]
        q_r = np.asarray(self.store.stats["q"], dtype=np.float64)[recalled]
        scores = 0.5 * zscore(sim_r) + 0.5 * np.clip(zscore(q_r), -3.0, 3.0)
        explore = bool(self.rng.random() < self.epsilon)
        k = min(self.budget.max_memories, len(recalled))
        if explore:
            picks = sorted(self.rng.choice(len(recalled), size=k, replace=False).tolist())
        else:
            picks = np.argsort(-scores, kind="stable")[:k].tolist()
        chosen = [self.store.memories[recalled[p]] for p in picks]
        self.note(
            recalled_ids=[self.store.memories[i].memory_id for i in recalled],
            sims=[round(float(s), 6) for s in sim_r],
            q=[round(float(q), 6) for q in q_r],
            scores=[round(float(s), 6) for s in scores],
            explore=explore,
            chosen_ids=[m.memory_id for m in chosen],
        )
        return chosen

    def update(self, task: Task, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        r = 1.0 if outcome.reward == 1 else -1.0
        q = self.store.stats["q"]
        for memory in memories:
            i = self.store.index_of(memory.memory_id)
            q[i] = q[i] + self.alpha * (r - q[i])
        memory = self.candidate(task, outcome, trajectory)
        if memory is None:
            self.note(write=None)
            return
        # lowest Q goes; argmin takes the first, i.e. the oldest, on ties
        written, evicted = self.write(memory, lambda: int(np.argmin(np.asarray(q))), q=self.q_init)
        self.note(write=written, evicted=evicted)


    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "rng": rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.rng = rng_from_state(state["rng"])
