"""How the simulated backbone answers auxiliary calls (reflections, facts, skill cards, ...).

An auxiliary request's :class:`~tokenworth_agent.sim.facts.Facts` carry its purpose (``aux``), the task it is
about and the method's :class:`~tokenworth_agent.sim.facts.AuxHint`, whose ``form`` names the reply grammar
its prompt asks for (:mod:`tokenworth_agent.core.aux_grammar`). The simulator writes text in that grammar, with
the grammar's own writers, so the method's parser reads it as it would read a model that
follows the instructions.

**What the text carries (the documented model).** Text the model writes about a task carries
that task's *skills*, and nothing else the simulator knows: a reflection, a fact, an insight or
a skill card mentions the skills of the task(s) it came from (the hint's ``source_skills``, else
the task's own ``skill_list``) and the head of the question. The method stores the text with
those skills (:class:`~tokenworth_agent.memory.Memory` ``.skills``), and injecting it later moves the
success probability only through the existing skill-overlap rule of :func:`tokenworth_agent.sim.model.decide`
(gain ``a``·J, harm below the threshold). So the simulator rewards writing text about the right
skills and recalling it for the right tasks, exactly as it does for the shared trajectory
memories, and gives model-written text no bonus of its own.

Decisions per form (parameters in :class:`~tokenworth_agent.sim.model.SimParams`, fixed before any
comparison; the fields named are the hint's):

* ``notes``: ``min(limit, aux_items_max, number of skills)`` lines (at least one), each
  ``<LABEL>: <a sentence naming one of the skills and the question's head>`` (``NOTE`` without
  a ``label``).
* ``operations``: given the shown memories' skills (``candidates``), their overlap J with
  the source skills decides, in this order: on a ``failed`` task each ``injected`` shown memory
  with J ≥ ``aux_match_overlap`` is deleted (the evidence contradicts it); then the best
  remaining shown memory with J ≥ ``aux_match_overlap`` is updated with a merged text; otherwise
  the ``new_texts`` (else one written here) are added; with nothing to do, ``NOOP``. Only the
  operations in ``allowed`` (empty: all) are used.
* ``card``: ``EDIT n`` for the shown card with the highest J ≥ ``aux_match_overlap``, else
  ``NEW``; then ``SKILL`` / ``WHEN`` / ``HOW`` lines naming the source skills.

The reply is then counted with the simulator's tokenizer and cut at the call's ``max_tokens``
like any other reply (so a cut card may lose its ``HOW`` line and be malformed, as a real
model's would).
"""

from __future__ import annotations

import re
from typing import Sequence

from tokenworth_agent.core.aux_grammar import (FORM_CARD, FORM_NOTES, FORM_OPERATIONS, OPERATION_WORDS, card_text, notes_text,
                               operation_line)
from tokenworth_agent.backbones.base import BackboneError
from tokenworth_agent.tasks import Task
from tokenworth_agent.sim.facts import AuxHint, Facts
from tokenworth_agent.sim.model import SimParams, skill_overlap

_SENTENCES = (
    "For requests like \"{head}\", the step that matters is {skill}; apply it exactly as the question states "
    "and check the result before answering.",
    "When a task needs {skill}, write the action for it first and verify its output against every condition "
    "in the request.",
    "A task such as \"{head}\" goes wrong when {skill} is skipped or misread; handle {skill} explicitly.",
)


def _head(question: str, words: int = 10) -> str:
    first = question.strip().splitlines()[0] if question.strip() else "the task"
    parts = first.split()
    return " ".join(parts[:words]) + ("…" if len(parts) > words else "")


def _sentence(index: int, skills: Sequence[str], head: str) -> str:
    skill = skills[index % len(skills)] if skills else "the requested operation"
    return _SENTENCES[index % len(_SENTENCES)].format(skill=skill.replace("_", " "), head=head)


def notes(label: str, skills: Sequence[str], head: str, limit: int) -> str:
    count = max(1, min(limit, max(1, len(skills))))
    return notes_text(label, [_sentence(i, skills, head) for i in range(count)])


def operations(hint: AuxHint, skills: Sequence[str], head: str, threshold: float) -> str:
    allowed = set(hint.allowed or OPERATION_WORDS)
    candidates = list(hint.candidates)
    overlaps = [skill_overlap(c, skills) for c in candidates]
    lines: list[str] = []
    deleted: set[int] = set()
    if hint.failed and "DELETE" in allowed:
        for i in hint.injected:
            if 0 <= i < len(candidates) and overlaps[i] >= threshold:
                lines.append(operation_line("DELETE", i + 1))
                deleted.add(i)
    remaining = [i for i in range(len(candidates)) if i not in deleted and overlaps[i] >= threshold]
    if "UPDATE" in allowed and remaining:
        best = max(remaining, key=lambda i: (overlaps[i], -i))
        lines.append(operation_line("UPDATE", best + 1, f"{_sentence(0, skills, head)} {_sentence(1, skills, head)}"))
    elif "ADD" in allowed:
        texts = list(hint.new_texts) or [_sentence(0, skills, head)]
        lines += [operation_line("ADD", None, text) for text in texts]
    return "\n".join(lines) or operation_line("NOOP")


def card(hint: AuxHint, skills: Sequence[str], head: str, threshold: float) -> str:
    overlaps = [skill_overlap(c, skills) for c in hint.candidates]
    close = [i for i, j in enumerate(overlaps) if j >= threshold]
    edit = max(close, key=lambda i: (overlaps[i], -i)) + 1 if close else None
    name = "handle_" + "_and_".join(re.sub(r"\W+", "_", s.lower()).strip("_") for s in skills[:2]) if skills \
        else "check_the_request"
    named = ", ".join(s.replace("_", " ") for s in skills) or "the requested operation"
    return card_text(name, f"the request needs {named}, as in \"{head}\".",
                     f"Work out which {named} the question asks for. Write that action first and keep it minimal. "
                     f"Check the result against every condition before answering.", edit)


def reply(task: Task, facts: Facts, params: SimParams) -> str:
    """The full (uncapped) text of one auxiliary reply (see the module docstring)."""
    hint = facts.hint
    if hint is None:
        raise BackboneError(f"simulated backbone: auxiliary call {facts.aux!r} carries no AuxHint (its reply form)")
    skills = tuple(hint.source_skills or task.skill_list)
    head = _head(task.query_text)
    if hint.form == FORM_NOTES:
        limit = min(hint.limit or params.aux_items_max, params.aux_items_max)
        return notes(hint.label or "NOTE", skills, head, limit)
    if hint.form == FORM_OPERATIONS:
        return operations(hint, skills, head, params.aux_match_overlap)
    if hint.form == FORM_CARD:
        return card(hint, skills, head, params.aux_match_overlap)
    raise BackboneError(f"simulated backbone: auxiliary call {facts.aux!r} asks for reply form {hint.form!r}; "
                        f"it answers {FORM_NOTES!r}, {FORM_OPERATIONS!r} and {FORM_CARD!r}")


__all__ = ["card", "notes", "operations", "reply"]
