"""How the KG environment reads a reply: LAB's strict parser (default) or the lenient one.

A parser turns a reply into a :class:`ParsedReply` (a final answer, a tool call, or invalid),
splits a call's argument text into arguments, and reads a variable reference (``#3``).

* :data:`STRICT` accepts exactly what LifelongAgentBench's KG task accepts: ``Final Answer:``
  with a capital F (``answer`` in either case) before ``#k``, optionally ``var``/``variable``
  (capitalised or not); ``Action: `` with exactly one space, a tool name, and parentheses that
  hold at least one character and close somewhere after. The argument text is read with
  balanced parentheses; when they never balance, the tool is called with no arguments (an
  argument-count error the agent sees; the task goes on). Arguments are split on commas
  (entity names that contain commas kept whole) with nothing else removed: a quoted or
  space-padded name is not the entity. A variable is ``#k``, ``var #k``, ``var#k``,
  ``variable #k`` or ``variable#k`` (any case), ``k`` as Python's ``int`` reads it.
* :data:`LENIENT` is the project's forgiving reading: any case and spacing of ``Final
  Answer:`` and after ``Action:``, an unclosed parenthesis runs the rest of the line, and one
  layer of quotes and surrounding spaces is dropped from every argument.

docs/kg.md has the case table (LAB against both); ``tests/test_kg_parsers.py`` runs every row.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Sequence


@dataclasses.dataclass(frozen=True)
class ParsedReply:
    kind: str  # "answer", "action" or "invalid"
    answer_index: int | None = None
    tool: str | None = None
    argument_text: str | None = None

    @property
    def call(self) -> str:
        return f"{self.tool}({self.argument_text})"


@dataclasses.dataclass(frozen=True)
class ReplyParser:
    name: str
    parse: Callable[[str], ParsedReply]
    arguments: Callable[[str, Sequence[str]], list[str]]
    variable_index: Callable[[str], int | None]  # None: not a variable; ValueError: a malformed one


def _balanced(reply: str, opening: int) -> str | None:
    """The text inside the parenthesis at ``opening`` up to its balancing ``)``, or None."""
    depth = 0
    for position in range(opening, len(reply)):
        if reply[position] == "(":
            depth += 1
        elif reply[position] == ")":
            depth -= 1
            if depth == 0:
                return reply[opening + 1 : position]
    return None


# ----------------------------------------------------------------------------- strict (LAB)
_STRICT_FINAL = re.compile(r"Final [Aa]nswer:\s*(?:[Vv]ar(?:iable)?\s*)?#(\d+)")
_STRICT_ACTION = re.compile(r"Action: (\w+)\((.+?)\)")
_STRICT_PREFIXES = ("#", "variable#", "variable #", "var#", "var #")


def parse_strict(reply: str) -> ParsedReply:
    answer = _STRICT_FINAL.search(reply)
    if answer is not None:
        return ParsedReply("answer", answer_index=int(answer.group(1)))
    action = _STRICT_ACTION.search(reply)
    if action is None:
        return ParsedReply("invalid")
    inside = _balanced(reply, action.start(2) - 1)
    return ParsedReply("action", tool=action.group(1), argument_text="" if inside is None else inside)


def split_strict(argument_text: str, entity_names: Sequence[str]) -> list[str]:
    """Comma-split, an entity name holding commas kept whole (the first found splits the text)."""
    if not argument_text:
        return []
    for name in entity_names:
        if "," in name and (index := argument_text.find(name)) != -1:
            return (split_strict(argument_text[:index], entity_names) + [name]
                    + split_strict(argument_text[index + len(name):], entity_names))
    return [part for part in re.split(r"\s*,\s*", argument_text) if part != ""]


def variable_strict(text: str) -> int | None:
    for prefix in _STRICT_PREFIXES:
        if text.lower().startswith(prefix):
            return int(text[len(prefix):])  # ValueError for "#x": the agent is told
    return None


# ----------------------------------------------------------------------------- lenient
_LENIENT_FINAL = re.compile(r"Final Answer:\s*(?:var(?:iable)?\s*)?#(\d+)", re.IGNORECASE)
_LENIENT_ACTION = re.compile(r"Action:\s*(\w+)\(")
_LENIENT_PREFIX = re.compile(r"^(?:variable|var)?\s*#", re.IGNORECASE)


def parse_lenient(reply: str) -> ParsedReply:
    """Find the final answer, else the first action (with balanced parentheses)."""
    answer = _LENIENT_FINAL.search(reply)
    if answer is not None:
        return ParsedReply("answer", answer_index=int(answer.group(1)))
    action = _LENIENT_ACTION.search(reply)
    if action is None:
        return ParsedReply("invalid")
    start = action.end() - 1  # the opening parenthesis
    inside = _balanced(reply, start)
    if inside is None:  # unbalanced: run the tool with the rest of the line so the agent sees an argument error
        inside = reply[start + 1 :].split("\n", 1)[0]
    return ParsedReply("action", tool=action.group(1), argument_text=inside)


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        return text[1:-1].strip()
    return text


def split_lenient(argument_text: str, entity_names: Sequence[str]) -> list[str]:
    """Split on commas, keeping entity names that contain commas whole; drop one layer of quotes."""
    protected = sorted((n for n in entity_names if "," in n), key=len, reverse=True)
    placeholders: dict[str, str] = {}
    for number, name in enumerate(protected):
        token = f"\x00{number}\x00"
        if name in argument_text:
            argument_text = argument_text.replace(name, token)
            placeholders[token] = name
    restored = []
    for part in (part.strip() for part in argument_text.split(",")):
        for token, name in placeholders.items():
            part = part.replace(token, name)
        if part:
            restored.append(_unquote(part))
    return restored


def variable_lenient(text: str) -> int | None:
    match = _LENIENT_PREFIX.match(text)
    if match is None:
        return None
    digits = text[match.end():].strip()
    if not digits.isdigit():
        raise ValueError(text)
    return int(digits)


STRICT = ReplyParser("strict", parse_strict, split_strict, variable_strict)
LENIENT = ReplyParser("lenient", parse_lenient, split_lenient, variable_lenient)
PARSERS = {parser.name: parser for parser in (STRICT, LENIENT)}


def reply_parser(name: str) -> ReplyParser:
    try:
        return PARSERS[name]
    except KeyError:
        raise ValueError(f"unknown KG parser {name!r}; choose {' or '.join(PARSERS)}") from None
