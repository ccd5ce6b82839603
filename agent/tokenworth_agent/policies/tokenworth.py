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

Its parameters (``--grid tokenworth.NAME=...``, ``tokenworth plugins tokenworth``) are the controller's traced
hyperparameters, every field of :class:`tokenworth_jax.HParams` by its flat name (``plus_*`` only for
TokenWorth+), each defaulting to the benchmark's preset; a bare ``--grid NAME=...`` sets one for every TokenWorth
method of the run.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Sequence

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.core.parameters import Parameter
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies.base import MemoryPolicy, Outcome

if TYPE_CHECKING:
    from tokenworth_jax import HostSelection


@functools.lru_cache(maxsize=None)
def controller_parameters(method: str) -> tuple[Parameter, ...]:
    """The hyperparameters of the TokenWorth method ``method``: every flat ``HParams`` name of the preset table
    (``plus_*`` for ``tokenworth+`` only), its range checked as the library checks it."""
    from tokenworth_jax import presets

    declared = []
    for name in presets.names():
        if name.startswith("plus_") and method != "tokenworth+":
            continue
        schema = presets._owner(name)  # noqa: SLF001 - the library's own table of which part owns a name
        integer = schema.is_int(name)
        declared.append(Parameter(name, int if integer else float, None,
                                  f"controller hyperparameter, {schema.ranges[schema.field(name)].text(integer)} "
                                  "(tokenworth_jax.HParams; docs/controller.md)", show_default="preset",
                                  check=functools.partial(presets.check_value, name)))
    return tuple(declared)


class _ControllerParameters:
    """A TokenWorth class's ``parameters``, built on first use (reading the preset table imports JAX)."""

    def __get__(self, instance: Any, owner: type) -> tuple[Parameter, ...]:
        return controller_parameters(owner.name)


class TokenWorthPolicy(MemoryPolicy):
    name = "tokenworth"
    first_task_note = "compiling the controller…"  # the first select/offer compile (~13 s on CPU)
    parameters = _ControllerParameters()  # type: ignore[assignment]

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
