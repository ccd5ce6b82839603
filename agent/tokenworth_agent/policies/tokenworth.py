"""TokenWorth: the learned memory-worth controller (``tokenworth_jax``) as a policy.

The controller runs with the environment's Table A1 preset, its bank capacity set to the
budget's B_max (one ``Controller``, built once). Per task: ``select`` on the question (the
controller recalls K_c = 12 candidates and its mode picks at most one, spec §3); ``observe`` the
grader's reward (always, even when nothing was selected: it closes the judged phase); then, on
success only, ``offer`` the constructed memory with the source question as its key text (so
recall compares question with question, as the other similarity-based methods do) and its
executable actions as its action text (which TokenWorth+'s learned ranker reads). The decision
log holds the selection (candidates and their scores) and the admission decision.

Each memory's :class:`~tokenworth_agent.memory.Memory` is the payload the controller's
:class:`~tokenworth_jax.MemoryTable` keeps under its id; the table drops it when the controller
evicts or replaces it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies.base import MemoryPolicy, Outcome

if TYPE_CHECKING:
    from tokenworth_jax import HostSelection


class TokenWorthPolicy(MemoryPolicy):
    name = "tokenworth"
    first_task_note = "compiling the controller…"  # the first select/offer compile (~13 s on CPU)

    def __init__(self, env: str, budget: Budget, seed: int = 0, *, harness: HarnessOptions = DEFAULT_HARNESS,
                 **overrides: Any) -> None:
        super().__init__(env, budget, seed, harness=harness)
        from tokenworth_jax import Controller

        from tokenworth_agent.core.plugins import benchmark

        # the benchmark's library preset, and the preset table's method of this name
        self.controller = Controller.from_preset(benchmark(env).preset, method=self.name,
                                                 spec_overrides={"capacity": budget.bank_capacity}, **overrides)

    def retrieve(self, task: Task) -> list[Memory]:
        selection = self.controller.select(task.query_text)
        self.note(selection=selection.as_dict())
        self.note_mode(selection)
        if selection.memory is None:
            return []
        return [selection.memory][: self.budget.max_memories]

    def note_mode(self, selection: HostSelection) -> None:
        """What the mode adds to the decision log (nothing in the paper's mode)."""

    def update(self, task: Task, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        self.controller.observe(outcome.reward)
        memory = self.candidate(task, outcome, trajectory)
        if memory is None:
            self.note(admission=None)
        else:
            new_id = self.controller.memories.next_id
            decision = self.controller.offer(memory.text, key_text=memory.key_text, payload=memory.with_id(new_id),
                                             actions=memory.action_text)
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
        from tokenworth_jax import Controller

        self.controller = Controller.from_state_dict(state["controller"], decode=Memory.from_dict)
