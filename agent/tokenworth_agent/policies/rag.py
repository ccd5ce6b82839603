"""RAG: store successful experiences, retrieve the top K_max by BM25, no learning.

Decisions:

* The BM25 index (``bm25s``, Lucene scoring, English stop words) covers each memory's full
  text — question plus trajectory — as classic retrieval-augmented prompting does.
* Only memories with a positive BM25 score are retrieved (no shared term, no retrieval).
  Ties go to the older memory (stable order), so retrieval is deterministic.
* At capacity B_max the oldest memory is evicted (FIFO).
"""

from __future__ import annotations

from typing import Any, Sequence

import bm25s
import numpy as np

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies.base import MemoryStore, Outcome, StoreBackedPolicy


def _tokens(texts: Sequence[str]) -> list[list[str]]:
    return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


class RAGPolicy(StoreBackedPolicy):
    name = "rag"

    def __init__(self, env: str, budget: Budget, seed: int = 0, *,
                 harness: HarnessOptions = DEFAULT_HARNESS) -> None:
        super().__init__(env, budget, seed, harness=harness)
        self.store = MemoryStore()
        self._index: bm25s.BM25 | None = None

    def _bm25(self) -> bm25s.BM25:
        if self._index is None:
            self._index = bm25s.BM25()
            self._index.index(_tokens([m.text for m in self.store.memories]), show_progress=False)
        return self._index

    def bm25_scores(self, query: str) -> np.ndarray:
        if not self.store.memories:
            return np.zeros(0)
        query_tokens = _tokens([query])[0]
        if not query_tokens:
            return np.zeros(len(self.store))
        return np.asarray(self._bm25().get_scores(query_tokens), dtype=np.float64)

    def retrieve(self, task: Task) -> list[Memory]:
        scores = self.bm25_scores(task.query_text)
        order = np.argsort(-scores, kind="stable")[: self.budget.max_memories]
        chosen = [self.store.memories[i] for i in order if scores[i] > 0]
        self.note(
            candidate_ids=[self.store.memories[i].memory_id for i in order],
            scores=[round(float(scores[i]), 6) for i in order],
            chosen_ids=[m.memory_id for m in chosen],
        )
        return chosen

    def update(self, task: Task, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        memory = self.candidate(task, outcome, trajectory)
        if memory is None:
            self.note(write=None)
            return
        written, evicted = self.write(memory, lambda: 0)  # FIFO: the oldest goes
        self._index = None
        self.note(write=written, evicted=evicted)



    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._index = None
