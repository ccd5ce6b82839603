"""TokenWorth: the learned memory-worth controller (``tokenworth_jax``) as a policy.

The controller runs with the environment's Table A1 preset (``Controller.from_preset``),
with its bank capacity equal to the budget's B_max. Per task: ``select`` on the question
(the controller recalls K_c = 12 candidates and picks at most one, spec §3),
``observe`` the grader's reward (always, even when nothing was selected: it closes the
judged phase), then — on success only — ``offer`` the constructed memory with the source
question as its key text (so recall compares question with question, as the other
similarity-based methods do). The decision log holds the candidates, their scores and the
admission decision.

Each memory's :class:`~agent.memory.Memory` (for its skills) is the payload the controller's
:class:`~tokenworth_jax.MemoryTable` keeps under its id; the table drops it when the
controller evicts or replaces it (one bookkeeping type for the host controller, this policy
and the lockstep sweep).
"""

from __future__ import annotations

from typing import Any, Sequence

from agent.budget import Budget
from agent.data import Task
from agent.harness import DEFAULT_HARNESS, HarnessOptions
from agent.memory import Memory, Turn
from agent.policies.base import MemoryPolicy, Outcome


class TokenWorthPolicy(MemoryPolicy):
    name = "tokenworth"
    first_task_note = "compiling the controller…"  # the first select/offer compile (~13 s on CPU)

    def __init__(self, env: str, budget: Budget, seed: int = 0, *, harness: HarnessOptions = DEFAULT_HARNESS,
                 **overrides: Any) -> None:
        super().__init__(env, budget, seed, harness=harness)
        from tokenworth_jax import Controller

        # The controller is deterministic; ``seed`` only matters to the runner's other parts.
        self.controller = Controller.from_preset(env, **overrides)
        if self.controller.spec.capacity != budget.bank_capacity:
            self.controller = Controller(self.controller.spec._replace(capacity=budget.bank_capacity), self.controller.hp)

    def retrieve(self, task: Task) -> list[Memory]:
        selection = self.controller.select(task.query_text)
        self.note(selection=selection.as_dict())
        if selection.memory is None:
            return []
        return [selection.memory][: self.budget.max_memories]

    def update(self, task: Task, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        self.controller.observe(outcome.reward)
        memory = self.candidate(task, outcome, trajectory)
        if memory is None:
            self.note(admission=None)
        else:
            new_id = self.controller.memories.next_id
            decision = self.controller.offer(memory.text, key_text=memory.key_text, payload=memory.with_id(new_id))
            self.note(admission=decision.as_dict())
        self.controller.end_task()

    @property
    def memories(self) -> dict[int, Memory]:
        """The bank's memories by controller id (a view of the controller's table)."""
        return self.controller.memories.items

    def bank_size(self) -> int:
        return len(self.controller.memories)

    def state_dict(self) -> dict[str, Any]:
        return {"controller": self.controller.state_dict(encode=Memory.as_dict)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from tokenworth_jax import Controller, MemoryTable

        self.controller = Controller.from_state_dict(state["controller"], decode=Memory.from_dict)
        if "memories" in state:  # checkpoints before the shared table: payloads were kept beside the texts
            table = self.controller.memories
            items = {int(mid): Memory.from_dict(m) for mid, m in state["memories"].items()}
            self.controller.memories = MemoryTable(items, table.next_id)
