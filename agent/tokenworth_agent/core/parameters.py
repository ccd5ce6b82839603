"""A plugin's declared parameters: one type for a benchmark's options and a method's hyperparameters.

A :class:`Parameter` is a name, a type, a default and a help line. A benchmark lists its options in
:attr:`Benchmark.options <tokenworth_agent.benchmarks.base.Benchmark.options>` (each one a flag of ``tokenworth
run`` and ``sweep``; ``BenchmarkOption`` is this type's older name); a method lists its hyperparameters in
:attr:`MemoryPolicy.parameters <tokenworth_agent.policies.base.MemoryPolicy.parameters>` (each one a constructor
keyword). Both are swept with ``--grid`` (a method's as ``METHOD.NAME``, a benchmark's options by their own
names) and printed by ``tokenworth plugins NAME``, one per line: name, type, default, help.

Values from the command line arrive as text: :meth:`Parameter.convert` makes them the declared type (``bool``
takes true/false, yes/no, on/off, 1/0), checks ``choices`` and the parameter's own ``check``, and refuses a bad
value in one line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

TYPES = (str, int, float, bool, Path)  # what a parameter may be (a Path is kept as text)
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


class HarnessError(ValueError):
    """A harness option names something unusable (a missing file, a bad folder, an unknown value)."""

    __module__ = "tokenworth_agent.core.harness"  # where users import it from, and where it always lived


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One declared parameter: a benchmark's option or a method's hyperparameter (docs/plugins.md, "Parameters").

    A benchmark lists its options in ``Benchmark.options``: each is a flag of ``tokenworth run`` and ``sweep``
    (:attr:`flag`), and reaches ``make_environment`` in its ``options``. A method lists its hyperparameters in its
    class's ``parameters``: each is a keyword of its constructor with the same default, set with ``--grid
    METHOD.NAME=v1,v2``. ``tokenworth plugins NAME`` prints either kind, one per line (:func:`listing`). Values
    from the command line arrive as text: :meth:`convert` makes them the declared type (``bool`` takes true/false,
    yes/no, on/off, 1/0), checks ``choices`` and ``check``, and refuses a bad value in one line. The default is
    checked when the benchmark or method is loaded: None, or a value of ``type`` (an int for a float), one of
    ``choices`` if there are any (:func:`default_problems`).

    ``identity`` (benchmark options): the value enters each stream's identity under ``name`` (a run with another
    value is not resumed into this one), and only such an option can be swept with ``--grid`` (an option naming a
    file or a place enters by its content through :attr:`Benchmark.identity`, or not at all). A method's parameters
    always enter the identity, at the value the stream runs with (a grid's, else the default; a None default only
    when a grid sets it). ``check``: called with a converted value, raises ``ValueError`` (its message one line)
    for a value out of range, e.g. ``k >= 1``.

    Attributes:
        name: a Python name, unique among the benchmarks' options and the commands' own flags for an option
            (prefix it with the benchmark's name: ``kg_parser``); a method's constructor keyword for a
            hyperparameter.
        type: ``str``, ``int``, ``float``, ``bool`` or ``pathlib.Path`` (kept as text).
        default: the value when none is given (None, or a value of ``type``).
        help: one line, for ``--help`` and ``tokenworth plugins NAME``.
        identity: (a benchmark's option) its value enters each stream's identity and can be swept.
        show_default: what is shown as the default where it is not a value (an environment variable).
        choices: the allowed values of a ``str`` parameter (compared lower-cased).
        check: ``check(value)`` raises ``ValueError`` for a value out of range (:func:`at_least`,
            :func:`within`), or None.
    """

    name: str  # a Python name: "kg_parser", "k"
    type: type  # str, int, float, bool or pathlib.Path
    default: Any
    help: str
    identity: bool = False
    show_default: str | None = None  # what is shown where the default is not a value (an env variable, ...)
    choices: tuple[str, ...] = ()  # the allowed values of a str parameter (lower-cased)
    check: Callable[[Any], Any] | None = dataclasses.field(default=None, compare=False)

    @property
    def flag(self) -> str:
        """The command-line flag of a benchmark option: ``--kg-parser``."""
        return "--" + self.name.replace("_", "-")

    @property
    def type_name(self) -> str:
        """``int``, ``float``, ``bool``, ``str``, ``path``, or the choices: ``strict|lenient``."""
        if self.choices:
            return "|".join(self.choices)
        return "path" if self.type is Path else self.type.__name__

    @property
    def default_text(self) -> str:
        """The default as ``tokenworth plugins NAME`` shows it (``show_default``, ``-`` for None)."""
        return self.show_default if self.show_default is not None else ("-" if self.default is None else
                                                                         str(self.default))

    def describe(self) -> str:
        """``k (int, default 2)``: how an error line names it."""
        return f"{self.name} ({self.type_name}, default {self.default_text})"

    def convert(self, value: Any, *, where: str | None = None) -> Any:
        """The value as the run keeps it: paths and text as str, numbers and booleans as their type; a bad value is
        one line naming ``where`` (default: the flag), a :class:`~tokenworth_agent.core.harness.HarnessError`."""
        where = where or self.flag
        if value is None:
            return None
        if self.type is Path:
            converted: Any = str(value)
        elif self.type is str:
            converted = str(value).strip().lower() if self.choices else str(value)
            if self.choices and converted not in self.choices:
                raise HarnessError(f"{where} must be one of {', '.join(self.choices)}, got {value!r}")
        elif self.type is bool and not isinstance(value, bool):
            text = str(value).strip().lower()
            if text not in _TRUE + _FALSE:
                raise HarnessError(f"{where} takes a bool (true or false), got {value!r}")
            converted = text in _TRUE
        elif self.type is int and not isinstance(value, bool):
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise HarnessError(f"{where} takes an int, got {value!r}") from None
            if not number.is_integer():
                raise HarnessError(f"{where} takes an int, got {value!r}")
            converted = int(number)
        else:
            try:
                converted = self.type(value)
            except (TypeError, ValueError):
                raise HarnessError(f"{where} takes a {self.type.__name__}, got {value!r}") from None
        if self.check is not None:
            try:
                self.check(converted)
            except ValueError as exc:
                raise HarnessError(f"{where}: {str(exc).splitlines()[0] if str(exc) else 'out of range'}, "
                                   f"got {value!r}") from None
        return converted


def at_least(lowest: float) -> Callable[[Any], None]:
    """A ``check`` for ``value >= lowest``."""
    def check(value: Any) -> None:
        if value < lowest:
            raise ValueError(f"must be >= {lowest}")
    return check


def within(lowest: float, highest: float, *, open_low: bool = False) -> Callable[[Any], None]:
    """A ``check`` for ``lowest <= value <= highest`` (``open_low``: ``lowest < value``)."""
    def check(value: Any) -> None:
        if value < lowest or value > highest or (open_low and value == lowest):
            raise ValueError(f"must be in {'(' if open_low else '['}{lowest}, {highest}]")
    return check


def of_type(value: Any, kind: type) -> bool:
    """Whether ``value`` is a value of the parameter type ``kind`` (an int is a float; a bool is neither an int nor
    a float; a path is a str or a ``Path``)."""
    if kind is bool:
        return isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is Path:
        return isinstance(value, (str, Path))
    return isinstance(value, kind) and not isinstance(value, bool)


def default_problems(parameter: Parameter) -> list[str]:
    """What is wrong with ``parameter``'s default and choices (empty: nothing), each a phrase such as ``its default
    'three' is not of its type, int``: a benchmark's option and a method's parameter are checked alike, when loaded."""
    found = []
    if parameter.default is not None and not of_type(parameter.default, parameter.type):
        found.append(f"its default {parameter.default!r} is not of its type, {parameter.type.__name__}")
    if parameter.choices and parameter.type is not str:
        found.append("choices are for a str option")
    elif parameter.choices and parameter.default is not None and parameter.default not in parameter.choices:
        found.append(f"its default {parameter.default!r} is not one of its choices")
    return found


def check_declared(parameters: Any, owner: str, *, defaults: bool = False) -> tuple[Parameter, ...]:
    """``parameters`` as a tuple of :class:`Parameter` with distinct Python names of the allowed types, else one
    ``ValueError`` line naming ``owner`` (e.g. ``method 'recency' (hp-recency 0.3.1)``); ``defaults``: each default
    and its choices too (:func:`default_problems`)."""
    if not isinstance(parameters, (tuple, list)):
        raise ValueError(f"{owner}: its parameters must be a tuple of Parameter, got {type(parameters).__name__}")
    seen: set[str] = set()
    for parameter in parameters:
        if not isinstance(parameter, Parameter):
            raise ValueError(f"{owner}: each of its parameters must be a Parameter, got {parameter!r}")
        if not parameter.name.isidentifier() or parameter.name.startswith("_"):
            raise ValueError(f"{owner}: parameter name {parameter.name!r} is not a Python name")
        if parameter.name in seen:
            raise ValueError(f"{owner} declares the parameter {parameter.name!r} twice")
        if parameter.type not in TYPES:
            raise ValueError(f"{owner}: parameter {parameter.name!r} has type {parameter.type!r}; use one of "
                             "str, int, float, bool, pathlib.Path")
        problems = default_problems(parameter) if defaults else []
        if problems:
            raise ValueError(f"{owner}: parameter {parameter.name!r}: {'; '.join(problems)}")
        seen.add(parameter.name)
    return tuple(parameters)


def listing(parameters: Any) -> list[str]:
    """What ``tokenworth plugins NAME`` prints: one line per parameter, name, type, default, help, aligned."""
    rows = [(p.name, p.type_name, p.default_text, p.help) for p in parameters]
    if not rows:
        return []
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(("NAME", "TYPE", "DEFAULT"))]
    head = ("NAME", "TYPE", "DEFAULT", "HELP")
    return ["  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3] for row in [head, *rows]]


__all__ = ["Parameter", "TYPES", "at_least", "within", "of_type", "default_problems", "check_declared", "listing"]
