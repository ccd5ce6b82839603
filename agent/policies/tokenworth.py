"""TokenWorth: the learned memory-worth controller (``tokenworth_jax``) as a policy.

The controller runs with the environment's Table A1 preset (``Controller.from_preset``),
with its bank capacity equal to the budget's B_max. Per task: ``select`` on the question
(the controller recalls K_c = 12 candidates and picks at most one, spec §3),
``observe`` the grader's reward (always, even when nothing was selected: it closes the
judged phase), then — on success only — ``offer`` the constructed memory with the source
question as its key text (so recall compares question with question, as the other
similarity-based methods do). The decision log holds the candidates, their scores and the
admission decision.

The policy keeps each memory's :class:`~agent.memory.Memory` (for its skills) keyed by the
controller's memory id, and drops it when the controller evicts or replaces it.
"""

from __future__ import annotations

from typing import Any, Sequence

from agent.budget import Budget
from agent.memory import Memory, Turn
from agent.policies.base import MemoryPolicy, Outcome


class TokenWorthPolicy(MemoryPolicy):
    name = "tokenworth"
    first_task_note = "compiling the controller…"  # the first select/offer compile (~13 s on CPU)

    def __init__(self, env: str, budget: Budget, seed: int = 0, **overrides: Any) -> None:
        super().__init__(env, budget, seed)
        from tokenworth_jax import Controller

        # The controller is deterministic; ``seed`` only matters to the runner's other parts.
        self.controller = Controller.from_preset(env, **overrides)
        if self.controller.spec.capacity != budget.bank_capacity:
            self.controller = Controller(self.controller.spec._replace(capacity=budget.bank_capacity), self.controller.hp)
        self.memories: dict[int, Memory] = {}

    def retrieve(self, task: Any) -> list[Memory]:
        selection = self.controller.select(task.query_text)
        self.note(selection=selection.as_dict())
        if selection.memory_id is None:
            return []
        return [self.memories[selection.memory_id]][: self.budget.max_memories]

    def update(self, task: Any, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        self.controller.observe(outcome.reward)
        memory = self.candidate(task, outcome, trajectory)
        if memory is None:
            self.note(admission=None)
        else:
            decision = self.controller.offer(memory.text, key_text=memory.key_text)
            if decision.evicted_id is not None:
                self.memories.pop(decision.evicted_id, None)
            if decision.memory_id is not None:
                self.memories[decision.memory_id] = memory.with_id(decision.memory_id)
            self.note(admission=decision.as_dict())
        self.controller.end_task()

    def bank_size(self) -> int:
        return len(self.memories)

    def state_dict(self) -> dict[str, Any]:
        return {"controller": self.controller.state_dict(),
                "memories": {mid: m.as_dict() for mid, m in self.memories.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from tokenworth_jax import Controller

        self.controller = Controller.from_state_dict(state["controller"])
        self.memories = {int(mid): Memory.from_dict(m) for mid, m in state["memories"].items()}
