"""Mem0 (Chhikara et al., arXiv 2504.19413): extract salient facts, then reconcile them with memory.

The paper's pipeline, per new exchange: an **extraction phase** asks the model for the salient
facts in it; an **update phase** retrieves, for those facts, the most similar stored memories
and lets the model choose per fact one of ADD (new), UPDATE (augment an existing memory),
DELETE (an existing memory is contradicted) or NOOP (already known). Memories are short
natural-language facts, recalled by embedding similarity.

Here, per finished task:

1. **Extraction** (purpose ``mem0.extract``): the task, the agent's trajectory and the grader's
   verdict go to the model, which lists at most ``max_facts`` = 3 facts as ``FACT:`` lines.
   Decision: every finished task is a new exchange, success or failure (Mem0 has no notion of
   success; the verdict is part of the exchange, so a failure can yield a fact such as "this
   query returned the wrong rows"). No fact: nothing more happens.
2. **Update** (purpose ``mem0.update``): the ``similar_k`` = 3 most similar stored memories of
   each fact (by the same hashed-vector cosine recall uses), pooled and numbered, are shown with
   the new facts; memories injected into this task are marked, with the task's outcome. The
   model answers in the operations grammar (:mod:`tokenworth_agent.policies.aux_text`): ``ADD: text``,
   ``UPDATE n: text``, ``DELETE n``, ``NOOP``. Decisions: one batched call for all facts (as
   Mem0's own implementation batches them), not one per fact, because every call costs budget;
   with an empty bank there is nothing to reconcile and the facts are added without a call
   (the only answer possible). The first operation naming a memory wins; later ones on it are
   ignored.
3. **Items.** A fact is its own key (Mem0 embeds the memory text); it carries the skills of the
   task it was extracted from, and an UPDATE merges the two sources' skills.
4. **Capacity** (Mem0 has none): at B_max the item written or updated longest ago is evicted
   (stat ``touched``, the task clock at the last write), ties to the oldest.

A skipped or malformed extraction writes nothing. A skipped or malformed update phase writes
nothing either (Mem0 never adds a fact without its update decision, except into an empty bank).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tokenworth_agent.policies.auxiliary import AuxSteps
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.core.parameters import Parameter, at_least
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies import aux_text
from tokenworth_agent.policies.base import Outcome
from tokenworth_agent.policies.written import WrittenMemoryPolicy
from tokenworth_agent.sim.facts import AuxHint

EXTRACT, UPDATE = "mem0.extract", "mem0.update"
FACT = "FACT"

EXTRACT_SYSTEM = ("You maintain the long-term memory of an agent that solves tasks one after another. From the "
                  "finished task below, extract the few facts worth remembering for future tasks: how this kind "
                  "of request is solved, which action worked or failed and why, conventions of the data or the "
                  "system. Each fact must stand alone and be short. Skip anything specific to this one instance.")

UPDATE_SYSTEM = ("You manage an agent's memory. Compare each new fact with the existing memories. ADD a fact that "
                 "is new. UPDATE an existing memory when a fact refines or extends it (write the merged memory). "
                 "DELETE an existing memory that the new evidence contradicts, for instance one that was used in "
                 "a task that then failed. Answer NOOP when the fact is already known.")


def extraction_prompt(task: Task, trajectory: Sequence[Turn], outcome: Outcome, max_facts: int) -> str:
    return (aux_text.task_block(task, trajectory, outcome.reward, outcome.status) + "\n\n"
            + aux_text.NOTES_FORMAT.format(what=f"fact (at most {max_facts})", label=FACT))


def update_prompt(facts: Sequence[str], shown: Sequence[Memory], injected: set[int], outcome: Outcome) -> str:
    marks = [m.text + ("  (used in this task, which " + ("succeeded" if outcome.reward == 1 else "failed") + ")"
                       if m.memory_id in injected else "") for m in shown]
    new = "\n".join(f"- {f}" for f in facts)
    return (f"Existing memories:\n{aux_text.numbered(marks)}\n\nNew facts:\n{new}\n\n"
            + aux_text.OPERATIONS_FORMAT)


class Mem0Policy(WrittenMemoryPolicy):
    name = "mem0"
    parameters = (
        Parameter("max_facts", int, 3, "extraction: most facts listed per task", check=at_least(1)),
        Parameter("similar_k", int, 3, "update: stored memories shown per new fact", check=at_least(1)),
    )
    stat_names = ("touched",)

    def __init__(self, env: str, budget: Budget, seed: int = 0, *, harness: HarnessOptions = DEFAULT_HARNESS,
                 max_facts: int = 3, similar_k: int = 3) -> None:
        super().__init__(env, budget, seed, harness=harness)
        if max_facts < 1 or similar_k < 1:
            raise ValueError(f"max_facts and similar_k must be >= 1, got {max_facts}, {similar_k}")
        self.max_facts, self.similar_k = max_facts, similar_k

    def learn(self, task: Task, memories: Sequence[Memory], outcome: Outcome,
              trajectory: Sequence[Turn]) -> AuxSteps[None]:
        text = yield from self.ask(EXTRACT, EXTRACT_SYSTEM, extraction_prompt(task, trajectory, outcome, self.max_facts),
                                   AuxHint(aux_text.FORM_NOTES, label=FACT, source_skills=tuple(task.skill_list),
                                           limit=self.max_facts))
        if text is None:
            self.note(facts=[], operations=[])
            return
        facts = list(dict.fromkeys(aux_text.labelled(text, FACT)))[: self.max_facts]
        self.aux_status(EXTRACT, "ok" if facts else "malformed")
        self.note(facts=facts)
        if not facts:
            self.note(operations=[])
            return
        shown = self._similar_to(facts)
        if not shown:  # an empty bank: every fact is new, no decision to ask for
            self.note(operations=[self._add(fact, task) for fact in facts])
            return
        memories_shown = [self.store.memories[i] for i in shown]
        injected = {m.memory_id for m in memories}
        reply = yield from self.ask(UPDATE, UPDATE_SYSTEM, update_prompt(facts, memories_shown, injected, outcome), AuxHint(
            aux_text.FORM_OPERATIONS, allowed=aux_text.OPERATION_WORDS, new_texts=tuple(facts),
            source_skills=tuple(task.skill_list), failed=outcome.reward != 1,
            candidates=tuple(tuple(m.skills) for m in memories_shown),
            injected=tuple(i for i, m in enumerate(memories_shown) if m.memory_id in injected)))
        if reply is None:
            self.note(operations=[])
            return
        ops = aux_text.operations(reply, len(memories_shown))
        self.aux_status(UPDATE, "ok" if ops else "malformed")
        self.note(operations=self.apply_operations(ops, memories_shown, task, self._stalest,
                                                   touched=float(self.tasks_seen)))

    # ------------------------------------------------------------------ the update phase
    def _similar_to(self, facts: Sequence[str]) -> list[int]:
        """Store indices of the memories similar to any fact (each fact's top similar_k), in first-seen order."""
        pooled: dict[int, None] = {}
        for fact in facts:
            for index, _ in self.similar(fact, self.similar_k):
                pooled.setdefault(index)
        return list(pooled)

    def _add(self, fact: str, task: Task) -> dict[str, Any]:
        return self.apply_operations([aux_text.Operation("ADD", None, fact)], [], task, self._stalest,
                                     touched=float(self.tasks_seen))[0]

    def _stalest(self) -> int:
        return int(np.argmin(np.asarray(self.store.stats["touched"])))  # first minimum: the oldest on ties


__all__ = ["Mem0Policy"]
