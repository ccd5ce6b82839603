"""An example memory method: inject the stored success whose question shares the most words with the task.

The method in full (docs/plugins.md, "Add your memory method"):

* **write**: every success the run counts as one (``candidate``: the run's ``--memory-from`` and
  ``--memory-format`` decide) is stored; at B_max the oldest is evicted (FIFO);
* **retrieve**: the K_max memories with the highest word overlap (Jaccard over lower-cased words) between
  their source question and the task's, newest first among equals, and only from ``min_overlap`` on;
* **learn**: nothing; the decision log records each retrieval's candidates and scores.

It needs no model call, so it implements ``retrieve`` and ``update``; its state (the store) is checkpointed
by :class:`~tokenworth_agent.policies.base.StoreBackedPolicy`, so a killed run resumes with the same bank.

Its one hyperparameter, ``min_overlap``, is declared in ``parameters`` (name, type, default, help) and taken
as a constructor keyword with the same default: ``tokenworth plugins overlap`` lists it, and
``--grid overlap.min_overlap=0.1,0.4`` runs one stream per value (docs/plugins.md, "Parameters").
"""

from __future__ import annotations

import re
from typing import Sequence

from tokenworth_agent.plugin import (Memory, MemoryStore, Outcome, Parameter, StoreBackedPolicy, Task, Turn,
                                     within)

MIN_OVERLAP = 0.2  # the default: below this a memory is about something else, so nothing is injected
_WORD = re.compile(r"[a-z0-9_]+")


def words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


class OverlapPolicy(StoreBackedPolicy):
    name = "overlap"
    parameters = (Parameter("min_overlap", float, MIN_OVERLAP, "least word overlap of a memory that is injected",
                            check=within(0.0, 1.0)),)

    def __init__(self, env: str, budget, seed: int = 0, *, min_overlap: float = MIN_OVERLAP,  # noqa: ANN001
                 **kwargs) -> None:
        super().__init__(env, budget, seed, **kwargs)
        self.min_overlap = min_overlap
        self.store = MemoryStore()

    def retrieve(self, task: Task) -> list[Memory]:
        query = words(task.query_text)
        memories = self.store.memories
        scores = [overlap(query, words(m.key_text)) for m in memories]
        # best first; among equal scores the newest (the store keeps write order)
        order = sorted(range(len(memories)), key=lambda i: (-scores[i], -i))[: self.budget.max_memories]
        chosen = [memories[i] for i in order if scores[i] >= self.min_overlap]
        self.note(candidate_ids=[memories[i].memory_id for i in order],
                  scores=[round(scores[i], 6) for i in order], chosen_ids=[m.memory_id for m in chosen])
        return chosen

    def update(self, task: Task, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        memory = self.candidate(task, outcome, trajectory)
        if memory is None:
            self.note(write=None)
            return
        written, evicted = self.write(memory, lambda: 0)  # FIFO: the oldest goes
        self.note(write=written, evicted=evicted)
