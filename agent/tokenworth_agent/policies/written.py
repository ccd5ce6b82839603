"""What the five model-writing baselines share: a bank of model-written items, recalled by similarity.

Mem0, MemSkill, Reflexion, EvoSC and EvoSkill differ in *what* they ask the model to write and
*how* they update their bank; they share how an item is stored and recalled under the joint
budget:

* **Items.** A :class:`~tokenworth_agent.memory.Memory` whose ``text`` is model-written (cut to the room
  one memory has in the L_max block), whose ``key_text`` is what recall compares the task's
  question with, and whose ``skills`` are the ``skill_list`` of the task(s) it came from (the
  simulated backbone reads them; a real model ignores them).
* **Recall.** The top K_max items by cosine similarity of the question's hashed vector to the
  items' keys (spec §2, the representation every similarity-based method here uses); ties go
  to the older item. None of the five papers thresholds recall, so none is applied.
* **Auxiliary calls.** :meth:`ask` yields one :class:`~tokenworth_agent.policies.auxiliary.AuxRequest` and returns
  the reply text, or ``None`` when the budget skipped the call; the decision log's ``aux``
  entry records, per purpose, ``"ok"``, ``"skipped"`` or ``"malformed"`` (no memory written).
* **The task clock.** ``self.tasks_seen`` counts finished tasks (part of the checkpoint), for
  periodic steps and recency.

Decision: ``update`` (the model-free entry point) runs ``update_steps`` with every auxiliary call
skipped, so a caller without a backbone gets exactly the "budget spent" behaviour.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Sequence

import numpy as np

from tokenworth_agent.policies.auxiliary import AuxRequest, AuxSteps, without_model
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies import aux_text
from tokenworth_agent.policies.base import MemoryStore, Outcome, StoreBackedPolicy, cosine_scores, embed
from tokenworth_agent.sim.facts import AuxHint


class WrittenMemoryPolicy(StoreBackedPolicy):
    """Base of the methods whose memories the model writes (see the module docstring)."""

    stat_names: tuple[str, ...] = ()

    def __init__(self, env: str, budget: Budget, seed: int = 0, *,
                 harness: HarnessOptions = DEFAULT_HARNESS) -> None:
        super().__init__(env, budget, seed, harness=harness)
        self.store = MemoryStore(self.stat_names)
        self.tasks_seen = 0

    # ------------------------------------------------------------------ recall
    def similar(self, text: str, k: int, among: Sequence[int] | None = None) -> list[tuple[int, float]]:
        """(store index, similarity) of the ``k`` items most similar to ``text``, best first."""
        if not self.store.memories or k <= 0:
            return []
        sims = cosine_scores(embed([text])[0], self.store.vectors())
        candidates = np.arange(len(sims)) if among is None else np.asarray(list(among), dtype=np.int64)
        if candidates.size == 0:
            return []
        order = candidates[np.argsort(-sims[candidates], kind="stable")][:k]
        return [(int(i), float(sims[i])) for i in order]

    def retrieve(self, task: Task) -> list[Memory]:
        hits = self.similar(task.query_text, self.budget.max_memories)
        chosen = [self.store.memories[i] for i, _ in hits]
        self.note(chosen_ids=[m.memory_id for m in chosen], sims=[round(s, 6) for _, s in hits])
        return chosen

    # ------------------------------------------------------------------ the model
    def ask(self, purpose: str, system: str, user: str, hint: AuxHint, *,
            max_tokens: int | None = None) -> AuxSteps[str | None]:
        """One auxiliary call; returns its text, or None when the budget skipped it (noted).

        ``hint`` names the reply form the prompt asks for and what only the simulated backbone reads.
        """
        request = AuxRequest(purpose, aux_text.chat(system, user), max_tokens, hint)
        reply = yield request
        if reply is None:
            self.aux_status(purpose, "skipped")
            return None
        return reply.text

    def aux_status(self, purpose: str, status: str) -> None:
        """Record what became of one auxiliary call: ok, skipped or malformed."""
        self._log.setdefault("aux", {})[purpose] = status

    # ------------------------------------------------------------------ the bank
    def item(self, text: str, key_text: str, skills: Sequence[str], source_task_id: str) -> Memory:
        return Memory(text=aux_text.fit(text, self.budget), key_text=key_text, skills=tuple(skills),
                      source_task_id=source_task_id)

    def replace(self, index: int, memory: Memory) -> Memory:
        """Rewrite the item at ``index`` in place (same id, same stats)."""
        return self.store.replace_at(index, memory)

    def apply_operations(self, ops: Sequence[aux_text.Operation], shown: Sequence[Memory], task: Task,
                         victim: Callable[[], int], **stats: float) -> list[dict[str, Any]]:
        """Carry out parsed memory operations on the ``shown`` memories; returns what was done.

        ADD writes a new item keyed by its own text (evicting ``victim()`` at B_max); UPDATE
        rewrites a shown item in place, merging the skills of both sources; DELETE removes it.
        ``stats`` are set on every added or updated item. The first operation naming a memory
        wins; one that names a memory an earlier ADD evicted is ignored.
        """
        done: list[dict[str, Any]] = []
        claimed: set[int] = set()
        for op in ops:
            if op.kind == "NOOP":
                done.append({"op": "NOOP"})
                continue
            if op.kind == "ADD":
                memory = self.item(op.text, aux_text.fit(op.text, self.budget), task.skill_list, task.task_id)
                written, evicted = self.write(memory, victim, **stats)
                done.append({"op": "ADD", "id": written, "evicted": evicted})
                continue
            target = shown[op.target]
            if op.target in claimed or target.memory_id not in self.store.ids():
                continue
            claimed.add(op.target)
            index = self.store.index_of(target.memory_id)
            if op.kind == "UPDATE":
                self.replace(index, self.item(op.text, aux_text.fit(op.text, self.budget),
                                              aux_text.merged_skills(target.skills, task.skill_list), task.task_id))
                for name, value in stats.items():
                    self.store.stats[name][index] = value
            else:
                self.store.remove_at(index)
            done.append({"op": op.kind, "id": target.memory_id})
        return done

    def update(self, task: Task, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        without_model(self.update_steps(task, memories, outcome, trajectory))

    def update_steps(self, task: Task, memories: Sequence[Memory], outcome: Outcome,
                     trajectory: Sequence[Turn]) -> AuxSteps[None]:
        yield from self.learn(task, memories, outcome, trajectory)
        self.tasks_seen += 1

    @abc.abstractmethod
    def learn(self, task: Task, memories: Sequence[Memory], outcome: Outcome,
              trajectory: Sequence[Turn]) -> AuxSteps[None]:
        """The method's update phase (a coroutine that may ask the model); every method defines it."""

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "tasks_seen": self.tasks_seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.tasks_seen = int(state["tasks_seen"])


__all__ = ["WrittenMemoryPolicy"]
