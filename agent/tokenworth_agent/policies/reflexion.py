"""Reflexion (Shinn et al., NeurIPS 2023): verbal reflections on failures, reused later.

The paper's loop: an Actor attempts a task, an Evaluator scores it, and on failure a
Self-Reflection model turns the trajectory and the failure signal into a short verbal lesson;
lessons are kept in an episodic memory (a sliding window of the last 1-3) and prepended to the
next attempt.

Here, in a lifelong stream under the joint budget:

* **Write.** After a *failed* task (grader reward 0) one auxiliary call (purpose
  ``reflexion.reflect``) asks the model for a reflection: what went wrong and what to do
  differently next time. A successful task writes nothing and makes no call (the paper
  reflects only when the evaluator reports failure).
* **Memory.** The reflection becomes one item: its text (prefixed with what it is), keyed by the
  failed task's question, carrying that task's skills. The paper's window of the last few
  reflections becomes the bank of B_max, oldest evicted first (FIFO): the same recency rule,
  sized by the budget.
* **Reuse.** The paper retries the *same* task; a stream never repeats one, so the reflection is
  recalled for later *similar* tasks: the top K_max = 1 by question similarity
  (:class:`~tokenworth_agent.policies.written.WrittenMemoryPolicy`).
* **Parsing.** The ``REFLECTION:`` lines of the reply, joined; a reply with no such line but
  with plain prose is taken whole (a small model often drops the label); an empty or too short
  reply is malformed and writes nothing.
"""

from __future__ import annotations

from typing import Sequence

from tokenworth_agent.policies.auxiliary import AuxSteps
from tokenworth_agent.tasks import Task
from tokenworth_agent.memory import Memory, Turn
from tokenworth_agent.policies import aux_text
from tokenworth_agent.policies.base import Outcome
from tokenworth_agent.policies.written import WrittenMemoryPolicy
from tokenworth_agent.sim.facts import AuxHint

PURPOSE = "reflexion.reflect"
LABEL = "REFLECTION"
PREFIX = "Lesson from a failed attempt at a similar task: "

SYSTEM = ("You are an agent reviewing one of your own attempts that failed. Diagnose the likely cause of the "
          "failure from the actions and results, and write a short, concrete plan that would avoid it on a "
          "similar task. Do not restate the task; do not write code.")


def reflection_prompt(task: Task, trajectory: Sequence[Turn], outcome: Outcome) -> str:
    return (aux_text.task_block(task, trajectory, outcome.reward, outcome.status) + "\n\n"
            + aux_text.NOTES_FORMAT.format(what="sentence of your reflection (at most three)", label=LABEL))


def parse_reflection(text: str | None) -> str | None:
    """The reflection in a reply, or None when it holds none (see the module docstring)."""
    lines = aux_text.labelled(text, LABEL)
    if lines:
        return " ".join(lines)
    prose = " ".join((text or "").split())
    return prose if len(prose) >= aux_text.MIN_ITEM_CHARS and ":" not in prose[:12] else None


class ReflexionPolicy(WrittenMemoryPolicy):
    name = "reflexion"

    def learn(self, task: Task, memories: Sequence[Memory], outcome: Outcome,
              trajectory: Sequence[Turn]) -> AuxSteps[None]:
        if outcome.reward == 1:
            self.note(write=None, reason="success: nothing to reflect on")
            return
        text = yield from self.ask(PURPOSE, SYSTEM, reflection_prompt(task, trajectory, outcome),
                                   AuxHint(aux_text.FORM_NOTES, label=LABEL, source_skills=tuple(task.skill_list)))
        if text is None:
            self.note(write=None, reason="the budget skipped the reflection")
            return
        reflection = parse_reflection(text)
        if reflection is None:
            self.aux_status(PURPOSE, "malformed")
            self.note(write=None, reason="the reply held no reflection")
            return
        self.aux_status(PURPOSE, "ok")
        memory = self.item(PREFIX + reflection, task.query_text, task.skill_list, task.task_id)
        written, evicted = self.write(memory, lambda: 0)  # FIFO: the oldest reflection goes
        self.note(write=written, evicted=evicted)


__all__ = ["ReflexionPolicy", "parse_reflection"]
