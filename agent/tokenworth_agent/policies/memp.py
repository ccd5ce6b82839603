"""MemP (zjunlp/MemP): procedural memory with success-only writes and usage-based deletion.

* **Build:** a successful task writes its memory (the shared construction); a failed one
  writes nothing.
* **Retrieve:** the top K_max memories by cosine similarity of the question to each
  memory's key (the hashed vectors of spec §2); MemP's vanilla retrieval has no
  threshold, so something is injected whenever the bank is not empty. Ties: older first.
* **Update:** each injected memory gets ``hit += 1`` and ``success += r``; a memory with
  ``hit ≥ 3`` and ``success / hit < 0.5`` is deleted.
* **Capacity (our decision):** at B_max the memory with the lowest smoothed success rate
  ``(success + 1) / (hit + 2)`` is evicted — an unused memory sits at 0.5, a proven one
  above, a failing one below — ties going to the oldest.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.core.parameters import Parameter, at_least, within
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies.base import MemoryStore, Outcome, StoreBackedPolicy, cosine_scores, embed


class MemPPolicy(StoreBackedPolicy):
    name = "memp"
    parameters = (
        Parameter("min_hits", int, 3, "deletion: injections before a memory may be deleted", check=at_least(1)),
        Parameter("min_success_rate", float, 0.5, "deletion: a memory below this success rate goes",
                  check=within(0.0, 1.0)),
    )

    def __init__(self, env: str, budget: Budget, seed: int = 0, *, harness: HarnessOptions = DEFAULT_HARNESS,
                 min_hits: int = 3, min_success_rate: float = 0.5) -> None:
        super().__init__(env, budget, seed, harness=harness)
        self.min_hits, self.min_success_rate = min_hits, min_success_rate
        self.store = MemoryStore(["hit", "success"])

    def retrieve(self, task: Task) -> list[Memory]:
        if not self.store.memories:
            self.note(candidate_ids=[], chosen_ids=[])
            return []
        sims = cosine_scores(embed([task.query_text])[0], self.store.vectors())
        order = np.argsort(-sims, kind="stable")[: self.budget.max_memories]
        chosen = [self.store.memories[i] for i in order]
        self.note(
            candidate_ids=[m.memory_id for m in chosen],
            sims=[round(float(sims[i]), 6) for i in order],
            chosen_ids=[m.memory_id for m in chosen],
        )
        return chosen

    def update(self, task: Task, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        deleted: list[int] = []
        for memory in memories:
            i = self.store.index_of(memory.memory_id)
            self.store.stats["hit"][i] += 1
            self.store.stats["success"][i] += float(outcome.reward == 1)
            hit, success = self.store.stats["hit"][i], self.store.stats["success"][i]
            if hit >= self.min_hits and success / hit < self.min_success_rate:
                deleted.append(self.store.remove_at(i).memory_id)
        memory = self.candidate(task, outcome, trajectory)
        written = evicted = None
        if memory is not None:
            written, evicted = self.write(memory, self._lowest_success_rate)
        self.note(deleted=deleted, write=written, evicted=evicted)

    def _lowest_success_rate(self) -> int:
        """Store index of the lowest smoothed success rate (success+1)/(hit+2); ties: oldest."""
        rate = (np.asarray(self.store.stats["success"]) + 1) / (np.asarray(self.store.stats["hit"]) + 2)
        return int(np.argmin(rate))
