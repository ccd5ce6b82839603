"""Two methods: a valid one registered under the built-in name ``rag``, and one whose ``name`` is not its entry's."""

from __future__ import annotations

from typing import Any, Sequence

from tokenworth_agent.plugin import Memory, MemoryStore, Outcome, StoreBackedPolicy, Task, Turn


class Newest(StoreBackedPolicy):
    """Keep every success; inject the newest."""

    name = "newest"

    def __init__(self, env: str, budget: Any, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(env, budget, seed, **kwargs)
        self.store = MemoryStore()

    def retrieve(self, task: Task) -> list[Memory]:
        return self.store.memories[::-1][: self.budget.max_memories]

    def update(self, task: Task, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        memory = self.candidate(task, outcome, trajectory)
        if memory is not None:
            self.write(memory, lambda: 0)


class ShadowRAG(Newest):
    name = "rag"


class Misnamed(Newest):
    name = "something_else"
