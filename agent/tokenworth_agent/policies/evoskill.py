"""EvoSkill (Alzubi et al., arXiv 2603.02766): skills discovered from failures, in a repository that evolves.

The paper's loop: an executor agent runs tasks with the current skills; a *proposer* analyses
the failures and proposes a new skill or an edit to an existing one; a *skill builder*
materialises the proposal as a structured skill (name, when to use it, instructions); a Pareto
frontier of agent programs keeps only the skill sets that improve held-out validation
performance, with the model frozen.

Here, in a lifelong stream under the joint budget:

* **Repository.** The bank holds skill cards (``Skill`` / ``When to use`` / ``How``), at most
  B_max. A card is recalled by the similarity of the task's question to the card's text, top
  K_max = 1, and injected as the memory. It carries the skills of the task(s) it was built from.
* **Propose + build** (purpose ``evoskill.propose``): after a *failed* task the model sees the
  task, the trajectory and the ``shown_k`` = 3 most similar existing cards, and answers
  ``NEW`` or ``EDIT n`` followed by a card (:func:`tokenworth_agent.policies.aux_text.card`). Decision: the
  proposer and the skill builder are one call, since under O_max two calls would leave the
  second little room. A success proposes nothing (the paper mines failures).
* **Selection** (adapted): the paper validates on a held-out set, which would mean running
  extra tasks outside the stream. Instead every card is validated online: it counts the tasks it
  was injected into (``uses``) and their successes, and once ``uses >= min_uses`` = 3 a card
  whose smoothed success rate (s+1)/(u+2) falls below that of the tasks that ran with no card
  is retired — "keep only skills that beat the program without them", measured on the stream.
  An edited card starts its count afresh (it is a new program). At B_max the card with the
  lowest smoothed rate is replaced (ties: the oldest).
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

PURPOSE = "evoskill.propose"

SYSTEM = ("You improve an agent by giving it reusable skills. The agent just failed the task below. Find the "
          "root cause, then either propose a NEW skill that would have prevented the failure, or EDIT one of "
          "the existing skills if it is close but wrong or incomplete. A skill is general: it must help on "
          "every task of this kind, not only this one.")


def proposal_prompt(task: Task, trajectory: Sequence[Turn], outcome: Outcome, shown: Sequence[Memory]) -> str:
    return (aux_text.task_block(task, trajectory, outcome.reward, outcome.status)
            + f"\n\nExisting skills:\n{aux_text.numbered([m.text for m in shown])}\n\n"
            + aux_text.CARD_FORMAT.format(first="NEW or EDIT <n>\n"))


def smoothed(successes: float, uses: float) -> float:
    return (successes + 1.0) / (uses + 2.0)


class EvoSkillPolicy(WrittenMemoryPolicy):
    name = "evoskill"
    parameters = (
        Parameter("shown_k", int, 3, "propose: most similar cards shown", check=at_least(1)),
        Parameter("min_uses", int, 3, "selection: uses before a card may be retired", check=at_least(1)),
    )
    stat_names = ("uses", "successes")

    def __init__(self, env: str, budget: Budget, seed: int = 0, *, harness: HarnessOptions = DEFAULT_HARNESS,
                 shown_k: int = 3, min_uses: int = 3) -> None:
        super().__init__(env, budget, seed, harness=harness)
        if shown_k < 1 or min_uses < 1:
            raise ValueError(f"shown_k and min_uses must be >= 1, got {shown_k}, {min_uses}")
        self.shown_k, self.min_uses = shown_k, min_uses
        self.baseline = [0.0, 0.0]  # successes, tasks of the tasks that ran with no skill injected

    def learn(self, task: Task, memories: Sequence[Memory], outcome: Outcome,
              trajectory: Sequence[Turn]) -> AuxSteps[None]:
        self.note(retired=self._validate(memories, outcome.reward))
        if outcome.reward == 1:
            self.note(proposal=None)
            return
        shown = [self.store.memories[i] for i, _ in self.similar(task.query_text, self.shown_k)]
        reply = yield from self.ask(PURPOSE, SYSTEM, proposal_prompt(task, trajectory, outcome, shown),
                                    AuxHint(aux_text.FORM_CARD, source_skills=tuple(task.skill_list),
                                            candidates=tuple(tuple(m.skills) for m in shown)))
        if reply is None:
            self.note(proposal=None)
            return
        proposal = aux_text.card(reply, len(shown))
        if proposal is None:
            self.aux_status(PURPOSE, "malformed")
            self.note(proposal=None)
            return
        self.aux_status(PURPOSE, "ok")
        self.note(proposal=self._build(proposal, shown, task))

    def _validate(self, injected: Sequence[Memory], reward: int) -> list[int]:
        """Book the outcome on the injected card (or the no-skill baseline); retire cards that lost."""
        if not injected:
            self.baseline[0] += reward
            self.baseline[1] += 1
        for memory in injected:
            i = self.store.index_of(memory.memory_id)
            self.store.stats["uses"][i] += 1
            self.store.stats["successes"][i] += reward
        floor = smoothed(*self.baseline)
        retired = []
        for memory in injected:
            i = self.store.index_of(memory.memory_id)
            uses, wins = self.store.stats["uses"][i], self.store.stats["successes"][i]
            if uses >= self.min_uses and smoothed(wins, uses) < floor:
                retired.append(self.store.remove_at(i).memory_id)
        return retired

    def _build(self, proposal: aux_text.Card, shown: Sequence[Memory], task: Task) -> dict[str, Any]:
        text = proposal.render()
        if proposal.edit is not None:
            target = shown[proposal.edit]
            i = self.store.index_of(target.memory_id)
            self.replace(i, self.item(text, aux_text.fit(text, self.budget),
                                      aux_text.merged_skills(target.skills, task.skill_list), task.task_id))
            self.store.stats["uses"][i] = self.store.stats["successes"][i] = 0.0
            return {"edit": target.memory_id, "skill": proposal.name}
        memory = self.item(text, aux_text.fit(text, self.budget), task.skill_list, task.task_id)
        written, evicted = self.write(memory, self._weakest)
        return {"new": written, "skill": proposal.name, "evicted": evicted}

    def _weakest(self) -> int:
        rates = smoothed(np.asarray(self.store.stats["successes"]), np.asarray(self.store.stats["uses"]))
        return int(np.argmin(rates))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "baseline": list(self.baseline)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.baseline = [float(x) for x in state["baseline"]]


__all__ = ["EvoSkillPolicy"]
