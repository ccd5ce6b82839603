"""MemSkill (Zhang et al., arXiv 2602.02474; code ViktorAxelsen/MemSkill): memory skills that evolve.

The paper (and its code, read, not copied) replaces fixed memory operations with a bank of
*memory skills* — cards saying what a memory operation is for, when to use it and how — on top of
the primitives INSERT / UPDATE / DELETE / NOOP. Three parts close the loop:

* a **controller** (PPO-trained in the paper: a state encoder and a skill encoder whose
  interaction scores each skill; top-K skills sampled with Gumbel noise while training, greedy
  at test time; a bias towards newly designed skills encourages trying them);
* an **executor**, one LLM call that applies the selected skills to a span of the interaction
  and emits memory operations (``ACTION: INSERT`` … blocks) against retrieved memories;
* a **designer** that keeps a rolling pool of hard cases (where memory failed) and periodically
  asks the LLM to add a new skill or refine an existing one.

Here, one finished task is one span:

* **Controller** (adapted: no PPO network to train on one stream). Each skill j has a score
  ``cos(state, skill_j) + q_j``, where state and skill are the hashed vectors of the question
  (plus the outcome) and of the card; ``top_k`` = 2 skills are drawn by Gumbel top-k at
  temperature ``temperature`` = 0.2 (seeded, in the checkpoint) — the paper's training-time
  selection, since a lifelong stream never stops learning. ``q_j`` is a running value of the
  skill's memories: when a memory written under skill j is injected, ``q_j ← q_j + α (r − q_j)``
  with r = ±1, α = 0.3 (the delayed reward the paper's PPO credits to the selection). New skills
  start at ``new_skill_q`` = 0.5 (the paper's new-skill bias); primitives at 0.
* **Executor** (purpose ``memskill.execute``): the selected cards, the task and the ``shown_k`` =
  3 most similar memories go to the model, which answers in the operations grammar, restricted
  to the operations the selected skills allow (a designed skill inserts, as the paper's designed
  skills do). Memories are keyed by their own text and carry the task's skills.
* **Designer** (purpose ``memskill.design``): a failed task is a hard case (rolling pool of
  ``case_pool`` = 20). Every ``design_every`` = 50 tasks, with at least ``min_cases`` = 5 cases,
  the model sees the skill cards and the cases and answers ``NEW`` or ``EDIT n`` plus a card. At
  ``max_skills`` = 8 a new skill replaces the lowest-valued designed one. The pool is then cleared.
* **Capacity.** At B_max the oldest memory is evicted (the paper's bank is unbounded).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tokenworth_agent.policies.auxiliary import AuxSteps
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.core.parameters import Parameter, at_least, within
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies import aux_text
from tokenworth_agent.policies.base import Outcome, cosine_scores, embed, rng_from_state, rng_state
from tokenworth_agent.policies.written import WrittenMemoryPolicy
from tokenworth_agent.sim.facts import AuxHint

EXECUTE, DESIGN = "memskill.execute", "memskill.design"

# The primitives, in our own words for agent experience: (name, operation, when, how)
PRIMITIVES = (
    ("insert", "ADD", "the task showed a durable lesson that memory does not hold yet",
     "Write one short, general memory: the procedure that worked, or the cause of the failure and its fix."),
    ("update", "UPDATE", "a stored memory covers the same kind of task but is incomplete or outdated",
     "Rewrite that memory so that it also covers what this task showed; keep it short."),
    ("delete", "DELETE", "a stored memory was used in this task and proved wrong or misleading",
     "Delete that memory."),
    ("noop", "NOOP", "the task adds nothing to what memory already holds", "Change nothing."),
)

EXECUTOR_SYSTEM = ("You build the memory of an agent that solves tasks one after another, using the memory skills "
                   "below. Apply them to the finished task and to the stored memories shown, and write the "
                   "resulting memory operations.")
DESIGNER_SYSTEM = ("You design the memory skills of an agent. Memory skills say what to store after a task and how. "
                   "The agent failed the hard cases below although it had a memory. Propose one NEW memory skill "
                   "that would have stored what these tasks needed, or EDIT an existing skill that falls short.")


def skill_card(skill: dict[str, Any]) -> str:
    return f"{skill['name']} ({skill['op']}): use when {skill['when']}. {skill['how']}"


class MemSkillPolicy(WrittenMemoryPolicy):
    name = "memskill"
    parameters = (
        Parameter("top_k", int, 2, "controller: skills drawn per task", check=at_least(1)),
        Parameter("temperature", float, 0.2, "controller: Gumbel top-k temperature", check=at_least(1e-9)),
        Parameter("alpha", float, 0.3, "skill value step: q <- q + alpha (r - q)", check=within(0.0, 1.0, open_low=True)),
        Parameter("new_skill_q", float, 0.5, "value of a newly designed skill (the new-skill bias)"),
        Parameter("shown_k", int, 3, "executor: most similar memories shown"),
        Parameter("case_pool", int, 20, "designer: hard cases kept"),
        Parameter("min_cases", int, 5, "designer: least hard cases before a design call"),
        Parameter("design_every", int, 50, "designer: tasks between design calls", check=at_least(1)),
        Parameter("max_skills", int, 8, "most skills, the four primitives included", check=at_least(5)),
    )

    def __init__(self, env: str, budget: Budget, seed: int = 0, *, harness: HarnessOptions = DEFAULT_HARNESS,
                 top_k: int = 2, temperature: float = 0.2, alpha: float = 0.3, new_skill_q: float = 0.5, shown_k: int = 3, case_pool: int = 20,
                 min_cases: int = 5, design_every: int = 50, max_skills: int = 8) -> None:
        super().__init__(env, budget, seed, harness=harness)
        if top_k < 1 or temperature <= 0 or not 0 < alpha <= 1 or max_skills <= len(PRIMITIVES):
            raise ValueError("need top_k >= 1, temperature > 0, alpha in (0, 1] and max_skills > 4")
        self.top_k, self.temperature, self.alpha, self.new_skill_q = top_k, temperature, alpha, new_skill_q
        self.shown_k, self.case_pool, self.min_cases = shown_k, case_pool, min_cases
        self.design_every, self.max_skills = design_every, max_skills
        self.skills: list[dict[str, Any]] = [
            {"name": n, "op": op, "when": w, "how": h, "q": 0.0, "primitive": True} for n, op, w, h in PRIMITIVES]
        self.authors: dict[int, list[str]] = {}  # memory id -> the skills that wrote it
        self.cases: list[dict[str, Any]] = []  # hard cases, oldest first
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 0x4D534B4C]))  # "MSKL"

    # ------------------------------------------------------------------ controller
    def select(self, state_text: str) -> list[int]:
        """Indices of the ``top_k`` skills, drawn by Gumbel top-k over the controller's scores."""
        vectors = embed([skill_card(s) for s in self.skills])
        sims = cosine_scores(embed([state_text])[0], vectors)
        logits = (sims + np.asarray([s["q"] for s in self.skills])) / self.temperature
        noisy = logits + self.rng.gumbel(size=logits.shape)
        return [int(i) for i in np.argsort(-noisy, kind="stable")[: self.top_k]]

    def _credit(self, injected: Sequence[Memory], reward: int) -> None:
        r = 1.0 if reward == 1 else -1.0
        by_name = {s["name"]: s for s in self.skills}
        for memory in injected:
            for name in self.authors.get(memory.memory_id, []):
                if name in by_name:
                    by_name[name]["q"] += self.alpha * (r - by_name[name]["q"])

    # ------------------------------------------------------------------ the update phase
    def learn(self, task: Task, memories: Sequence[Memory], outcome: Outcome,
              trajectory: Sequence[Turn]) -> AuxSteps[None]:
        self._credit(memories, outcome.reward)
        if outcome.reward != 1:
            self.cases = (self.cases + [{"question": aux_text.clip(task.query_text, 300),
                                         "skills": list(task.skill_list)}])[-self.case_pool:]
        state = f"{task.query_text} {'success' if outcome.reward == 1 else 'failure'}"
        chosen = [self.skills[i] for i in self.select(state)]
        self.note(selected=[s["name"] for s in chosen])
        allowed = sorted({s["op"] for s in chosen}, key=aux_text.OPERATION_WORDS.index)
        if allowed != ["NOOP"]:
            yield from self._execute(task, memories, outcome, trajectory, chosen, allowed)
        else:
            self.note(operations=[{"op": "NOOP"}])
        if (self.tasks_seen + 1) % self.design_every == 0 and len(self.cases) >= self.min_cases:
            yield from self._design()

    def _execute(self, task: Task, injected: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn],
                 chosen: Sequence[dict[str, Any]], allowed: Sequence[str]) -> AuxSteps[None]:
        shown = [self.store.memories[i] for i, _ in self.similar(task.query_text, self.shown_k)]
        used = {m.memory_id for m in injected}
        marks = [m.text + ("  (used in this task)" if m.memory_id in used else "") for m in shown]
        user = ("Memory skills to apply:\n" + "\n".join(f"- {skill_card(s)}" for s in chosen) + "\n\n"
                + aux_text.task_block(task, trajectory, outcome.reward, outcome.status)
                + f"\n\nStored memories:\n{aux_text.numbered(marks)}\n\n" + aux_text.OPERATIONS_FORMAT
                + f"\nUse only these operations: {', '.join(allowed)}.")
        reply = yield from self.ask(EXECUTE, EXECUTOR_SYSTEM, user, AuxHint(
            aux_text.FORM_OPERATIONS, allowed=tuple(allowed), source_skills=tuple(task.skill_list),
            failed=outcome.reward != 1, candidates=tuple(tuple(m.skills) for m in shown),
            injected=tuple(i for i, m in enumerate(shown) if m.memory_id in used)))
        if reply is None:
            self.note(operations=[])
            return
        ops = aux_text.operations(reply, len(shown), allowed=allowed)
        self.aux_status(EXECUTE, "ok" if ops else "malformed")
        done = self.apply_operations(ops, shown, task, lambda: 0)  # FIFO at B_max
        names = [s["name"] for s in chosen]
        for entry in done:
            if entry["op"] in ("ADD", "UPDATE"):
                self.authors[entry["id"]] = list(names)
            if entry.get("evicted") is not None or entry["op"] == "DELETE":
                self.authors.pop(entry.get("evicted") if entry["op"] == "ADD" else entry["id"], None)
        self.note(operations=done)

    # ------------------------------------------------------------------ designer
    def _design(self) -> AuxSteps[None]:
        cards = [skill_card(s) for s in self.skills]
        cases = "\n".join(f"- {c['question']}" for c in self.cases)
        user = (f"Current memory skills:\n{aux_text.numbered(cards)}\n\nHard cases:\n{cases}\n\n"
                + aux_text.CARD_FORMAT.format(first="NEW or EDIT <n>\n"))
        counts: dict[str, int] = {}
        for case in self.cases:
            for skill in case["skills"]:
                counts[skill] = counts.get(skill, 0) + 1
        common = sorted(counts, key=lambda s: -counts[s])[:2]  # stable: first seen among equals
        reply = yield from self.ask(DESIGN, DESIGNER_SYSTEM, user, AuxHint(
            aux_text.FORM_CARD, source_skills=tuple(common), candidates=tuple(() for _ in self.skills)))
        self.cases = []
        if reply is None:
            self.note(designed=None)
            return
        proposal = aux_text.card(reply, len(self.skills))
        if proposal is None:
            self.aux_status(DESIGN, "malformed")
            self.note(designed=None)
            return
        self.aux_status(DESIGN, "ok")
        if proposal.edit is not None:
            target = self.skills[proposal.edit]
            target.update(when=proposal.when, how=proposal.how)
            self.note(designed={"edit": target["name"]})
            return
        names = {s["name"] for s in self.skills}
        name = proposal.name if proposal.name not in names else f"{proposal.name}_{self.tasks_seen}"
        new = {"name": name, "op": "ADD", "when": proposal.when, "how": proposal.how, "q": self.new_skill_q,
               "primitive": False}
        replaced = None
        if len(self.skills) >= self.max_skills:
            designed = [i for i, s in enumerate(self.skills) if not s["primitive"]]
            worst = min(designed, key=lambda i: self.skills[i]["q"])
            replaced = self.skills.pop(worst)["name"]
        self.skills.append(new)
        self.note(designed={"new": name, "replaced": replaced})

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "skills": [dict(s) for s in self.skills],
                "authors": {int(k): list(v) for k, v in self.authors.items()},
                "cases": [dict(c) for c in self.cases], "rng": rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.skills = [dict(s) for s in state["skills"]]
        self.authors = {int(k): list(v) for k, v in state["authors"].items()}
        self.cases = [dict(c) for c in state["cases"]]
        self.rng = rng_from_state(state["rng"])


__all__ = ["MemSkillPolicy", "PRIMITIVES"]
