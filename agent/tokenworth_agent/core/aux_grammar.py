"""The reply grammar of auxiliary model calls: one copy for the methods and the simulator.

A method that asks the model to write (a reflection, facts, memory operations, a skill card)
names the *form* of the reply it wants and shows the model the grammar (the ``*_FORMAT``
texts below, put into its prompt). Two sides read this module: the methods' prompts and
their forgiving parsers (:mod:`tokenworth_agent.policies.aux_text`), and the simulated backbone, which
writes its replies with the writers below (:mod:`tokenworth_agent.sim.aux`). Neither imports the other:
the simulator sits below the policies (docs/layout.md), so what both need lives here.

Forms:

* ``"notes"`` — one or more ``<LABEL>: text`` lines (``FACT:``, ``REFLECTION:``, ``INSIGHT:``);
* ``"operations"`` — memory operations, one per line: ``ADD: text``, ``UPDATE <n>: text``,
  ``DELETE <n>``, ``NOOP``; ``<n>`` is the number a memory was shown under (1-based);
* ``"card"`` — a skill card: a first line ``NEW`` or ``EDIT <n>``, then ``SKILL: name``,
  ``WHEN: when to use it``, ``HOW: what to do``.
"""

from __future__ import annotations

from typing import Sequence

FORM_NOTES, FORM_OPERATIONS, FORM_CARD = "notes", "operations", "card"
FORMS = (FORM_NOTES, FORM_OPERATIONS, FORM_CARD)
OPERATION_WORDS = ("ADD", "UPDATE", "DELETE", "NOOP")

# What a prompt shows the model (the methods fill in the placeholders).
NOTES_FORMAT = "Write each {what} on its own line starting with '{label}:'. Write nothing else."
OPERATIONS_FORMAT = ("Answer with one operation per line, nothing else:\n"
                     "ADD: <new memory text>\nUPDATE <n>: <merged memory text replacing memory [n]>\n"
                     "DELETE <n>\nNOOP")
CARD_FORMAT = ("Answer in exactly this format:\n{first}SKILL: <short_snake_case_name>\n"
               "WHEN: <when to use it, one sentence>\nHOW: <what to do, at most three short sentences>")


def notes_text(label: str, items: Sequence[str]) -> str:
    """A notes reply: one ``LABEL: item`` line per item."""
    return "\n".join(f"{label}: {item}" for item in items)


def operation_line(kind: str, number: int | None = None, text: str = "") -> str:
    """One operation line; ``number`` is the 1-based number the memory was shown under."""
    if kind not in OPERATION_WORDS:
        raise ValueError(f"unknown memory operation {kind!r}; the grammar has {', '.join(OPERATION_WORDS)}")
    head = kind if number is None else f"{kind} {number}"
    return f"{head}: {text}" if text else head


def card_text(name: str, when: str, how: str, edit: int | None = None) -> str:
    """A skill card; ``edit`` is the 1-based number of the shown card it replaces (``None``: a new one)."""
    first = "NEW" if edit is None else f"EDIT {edit}"
    return f"{first}\nSKILL: {name}\nWHEN: {when}\nHOW: {how}"


__all__ = ["CARD_FORMAT", "FORMS", "FORM_CARD", "FORM_NOTES", "FORM_OPERATIONS", "NOTES_FORMAT", "OPERATIONS_FORMAT",
           "OPERATION_WORDS", "card_text", "notes_text", "operation_line"]
