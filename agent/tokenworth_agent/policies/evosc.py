"""EvoSC (Yu, Zhu, Xie, Shao, arXiv 2602.01966): contrastive experience, then self-consolidation.

The paper's two mechanisms: (1) **non-parametric contrastive experience extraction** — the model
contrasts a failed trajectory with a successful one to name error-prone points and how to avoid
them (kept in a FIFO queue), and abstracts reusable strategies from successful trajectories;
(2) **self-consolidation** — the accumulated textual experience is distilled into a few learnable
parameters, so that it stops growing in the context.

Here, in a lifelong stream under the joint budget:

* **Success pool.** The last ``pool_size`` = 8 successful tasks' memories (the shared
  construction, :func:`tokenworth_agent.memory.build_memory`) are kept as contrast partners. They are
  never injected; they do count toward B_max (the bank of experiences holds B_max − pool_size).
* **Contrast** (purpose ``evosc.contrast``): after a failure, the most similar pooled success
  (question similarity) and the failed trajectory go to the model, which writes at most
  ``max_insights`` = 2 ``INSIGHT:`` lines (the pitfall and how to avoid it). No partner in the
  pool: no call (there is nothing to contrast with).
* **Success experience** (purpose ``evosc.success``): after a success with a similar pooled
  success, the two go to the model, which writes the shared, reusable strategy as ``INSIGHT:``
  lines; the new success then joins the pool (oldest out).
* **Experiences** are items keyed by the source question, carrying the source task's skills;
  recall is the top K_max = 1 by question similarity.
* **Self-consolidation** (purpose ``evosc.consolidate``), adapted: the paper distils experience
  into parameters (trained), which a frozen backbone behind an API cannot take and the L_max
  text block cannot carry. What is kept is its purpose, compaction instead of growth: when the
  bank is full, the oldest experience and its ``group_size`` − 1 = 3 nearest neighbours are
  given to the model, which consolidates them into at most ``max_insights`` lines; those
  replace the group (their key is their own text, their skills the group's union). A skipped or
  malformed consolidation falls back to evicting the oldest experience (noted).
"""

from __future__ import annotations

from typing import Any, Sequence

from tokenworth_agent.policies.auxiliary import AuxSteps
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.core.parameters import Parameter, at_least
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies import aux_text
from tokenworth_agent.policies.base import Outcome, cosine_scores, embed
from tokenworth_agent.policies.written import WrittenMemoryPolicy
from tokenworth_agent.sim.facts import AuxHint

CONTRAST, SUCCESS, CONSOLIDATE = "evosc.contrast", "evosc.success", "evosc.consolidate"
LABEL = "INSIGHT"

CONTRAST_SYSTEM = ("You help an agent learn from its mistakes. Below are a successful solution of a similar task "
                   "and a failed attempt. Contrast them: name the error-prone point that made the attempt fail and "
                   "the concrete way to avoid it next time.")
SUCCESS_SYSTEM = ("You help an agent learn from experience. Below are two successful solutions of similar tasks. "
                  "Abstract the strategy they share: the essential steps and checks that make such tasks succeed.")
CONSOLIDATE_SYSTEM = ("You consolidate an agent's accumulated experience. Merge the experiences below into fewer, "
                      "more general insights. Keep every distinct lesson, drop repetition and instance details.")


class EvoSCPolicy(WrittenMemoryPolicy):
    name = "evosc"
    parameters = (
        Parameter("pool_size", int, 8, "successes kept as contrast partners (they count toward B_max)",
                  check=at_least(1)),
        Parameter("max_insights", int, 2, "most INSIGHT lines per call", check=at_least(1)),
        Parameter("group_size", int, 4, "consolidation: experiences merged at a time", check=at_least(2)),
    )

    def __init__(self, env: str, budget: Budget, seed: int = 0, *, harness: HarnessOptions = DEFAULT_HARNESS,
                 pool_size: int = 8, max_insights: int = 2, group_size: int = 4) -> None:
        super().__init__(env, budget, seed, harness=harness)
        if not 0 < pool_size < budget.bank_capacity:
            raise ValueError(f"pool_size must be in [1, B_max), got {pool_size} with B_max {budget.bank_capacity}")
        if max_insights < 1 or group_size < 2:
            raise ValueError(f"need max_insights >= 1 and group_size >= 2, got {max_insights}, {group_size}")
        self.pool_size, self.max_insights, self.group_size = pool_size, max_insights, group_size
        self.capacity = budget.bank_capacity - pool_size
        self.pool: list[Memory] = []  # recent successes, oldest first

    def learn(self, task: Task, memories: Sequence[Memory], outcome: Outcome,
              trajectory: Sequence[Turn]) -> AuxSteps[None]:
        partner = self._partner(task.query_text)
        self.note(partner=partner.source_task_id if partner else None)
        success = self.candidate(task, outcome, trajectory)
        if outcome.reward != 1 and partner is not None:
            user = (f"Successful solution of a similar task:\n{partner.text}\n\nFailed attempt:\n"
                    + aux_text.task_block(task, trajectory, outcome.reward, outcome.status))
            yield from self._extract(CONTRAST, CONTRAST_SYSTEM, user, task)
        elif success is not None and partner is not None:
            user = f"Solution A:\n{partner.text}\n\nSolution B:\n{success.text}"
            yield from self._extract(SUCCESS, SUCCESS_SYSTEM, user, task)
        if success is not None:
            self.pool = (self.pool + [success])[-self.pool_size:]

    def _partner(self, question: str) -> Memory | None:
        if not self.pool:
            return None
        sims = cosine_scores(embed([question])[0], embed([m.key_text for m in self.pool]))
        return self.pool[int(sims.argmax())]

    def _extract(self, purpose: str, system: str, user: str, task: Task) -> AuxSteps[None]:
        asked = aux_text.NOTES_FORMAT.format(what=f"insight (at most {self.max_insights})", label=LABEL)
        prompt = f"{user}\n\n{asked}"
        reply = yield from self.ask(purpose, system, prompt, AuxHint(aux_text.FORM_NOTES, label=LABEL,
                                    source_skills=tuple(task.skill_list), limit=self.max_insights))
        if reply is None:
            self.note(written=[])
            return
        insights = aux_text.labelled(reply, LABEL)[: self.max_insights]
        self.aux_status(purpose, "ok" if insights else "malformed")
        written = []
        for insight in insights:
            yield from self._make_room()
            written.append(self.store.add(self.item(insight, task.query_text, task.skill_list, task.task_id)).memory_id)
        self.note(written=written)

    def _make_room(self) -> AuxSteps[None]:
        """Consolidate (or, failing that, evict the oldest) until one more experience fits."""
        if len(self.store) < self.capacity:
            return
        group = [0] + [i for i, _ in self.similar(self.store.memories[0].key_text, self.group_size - 1,
                                                   among=range(1, len(self.store)))]
        members = [self.store.memories[i] for i in group]
        prompt = ("Experiences:\n" + aux_text.numbered([m.text for m in members]) + "\n\n"
                  + aux_text.NOTES_FORMAT.format(what=f"consolidated insight (at most {self.max_insights})",
                                                 label=LABEL))
        reply = yield from self.ask(CONSOLIDATE, CONSOLIDATE_SYSTEM, prompt, AuxHint(
            aux_text.FORM_NOTES, label=LABEL, source_skills=aux_text.merged_skills(*(m.skills for m in members)),
            limit=self.max_insights))
        merged = aux_text.labelled(reply, LABEL)[: self.max_insights] if reply is not None else []
        if reply is not None:
            self.aux_status(CONSOLIDATE, "ok" if merged else "malformed")
        if not merged:
            self.note(consolidated=None, evicted=self.store.remove_at(0).memory_id)
            return
        for i in sorted(group, reverse=True):
            self.store.remove_at(i)
        skills = aux_text.merged_skills(*(m.skills for m in members))
        made = [self.store.add(self.item(text, aux_text.fit(text, self.budget), skills, members[0].source_task_id))
                for text in merged]
        evicted = [self.store.remove_at(0).memory_id for _ in range(len(self.store) - self.capacity + 1)]
        self.note(consolidated={"from": [m.memory_id for m in members], "into": [m.memory_id for m in made],
                                "evicted": evicted})

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "pool": [m.as_dict() for m in self.pool]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.pool = [Memory.from_dict(m) for m in state["pool"]]


__all__ = ["EvoSCPolicy"]
