"""MySQL functions, aggregates and conversions registered on a SQLite connection.

SQLite lacks several MySQL behaviours the benchmark's gold answers depend on. Each one
is supplied here as a real SQLite function (``create_function`` / ``create_window_function``)
rather than by rewriting SQL text:

* ``AVG`` over integers returns the exact mean rounded half away from zero to 4 decimals,
  as MySQL's DECIMAL AVG does (``div_precision_increment`` = 4). Over non-integers
  (decimal expressions, strings converted to numbers) it returns the plain mean.
* ``STDDEV``/``STD``/``STDDEV_POP``/``STDDEV_SAMP``/``VARIANCE``/``VAR_POP``/``VAR_SAMP``.
* ``CONCAT``, ``CONCAT_WS`` (NULL-skipping), ``IF``, date parts (``YEAR`` ...), ``NOW``.
* ``INSTR`` (case-insensitive), ``REPLACE``, ``TRIM``/``LTRIM``/``RTRIM`` (of a string) and
  ``FORMAT``, in linear time: SQLite's own are O(n*m) in C and cannot be interrupted.
* ``mysql_int`` (called by the INT-rounding triggers): how a value written into an INT
  column is stored (numbers rounded half away from zero; numeric strings converted;
  anything else rejected as strict mode does).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import sqlite3
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Callable

_NUMERIC_STRING = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")
_NUMERIC_PREFIX = re.compile(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


class IncorrectIntegerValue(ValueError):
    """A value MySQL's strict mode refuses to store in an INT column (error 1366)."""


def round_half_away(value: Decimal, places: int) -> Decimal:
    """MySQL rounds exact numbers half away from zero (Python's round() is half-even)."""
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def to_decimal(value: Any) -> Decimal:
    """Exact decimal of a SQLite number (floats go through repr, as MySQL prints them)."""
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def mysql_number(value: Any) -> int | float | None:
    """MySQL's implicit string-to-number conversion: the longest numeric prefix, else 0."""
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    match = _NUMERIC_PREFIX.match(str(value))
    if not match:
        return 0
    text = match.group(0).strip()
    number = float(text)
    return int(number) if number.is_integer() and re.fullmatch(r"[+-]?\d+", text) else number


def mysql_int(value: Any) -> int | None:
    """The value an INT column stores when ``value`` is written into it."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise IncorrectIntegerValue(str(value))
        # SQLite computed in binary floating point what MySQL computes exactly in DECIMAL
        # (100 * 1.005 is 100.49999999999999 here, 100.500 there): read the double at its
        # 15 reliable significant digits before rounding.
        return int(round_half_away(Decimal(format(value, ".15g")), 0))
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if not _NUMERIC_STRING.match(text):
        raise IncorrectIntegerValue(text)
    try:
        return int(round_half_away(Decimal(text.strip()), 0))
    except InvalidOperation as exc:  # pragma: no cover - regex already vetted it
        raise IncorrectIntegerValue(text) from exc


class _MySQLAvg:
    """AVG, usable as aggregate and window function."""

    def __init__(self) -> None:
        self.total = Decimal(0)
        self.count = 0
        self.all_int = True

    def step(self, value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, int):
            self.all_int = False
            value = mysql_number(value)
        self.total += to_decimal(value)
        self.count += 1

    def inverse(self, value: Any) -> None:
        if value is None:
            return
        self.total -= to_decimal(mysql_number(value))
        self.count -= 1

    def value(self) -> float | None:
        if self.count == 0:
            return None
        mean = self.total / self.count
        return float(round_half_away(mean, 4)) if self.all_int else float(mean)

    def finalize(self) -> float | None:
        return self.value()


class _Moments:
    """Shared state for the variance family (exact sums, so no catastrophic cancellation)."""

    sample = False
    root = False

    def __init__(self) -> None:
        self.values: list[Decimal] = []

    def step(self, value: Any) -> None:
        if value is not None:
            self.values.append(to_decimal(mysql_number(value)))

    def inverse(self, value: Any) -> None:
        if value is not None:
            self.values.remove(to_decimal(mysql_number(value)))

    def value(self) -> float | None:
        n = len(self.values)
        if n == 0 or (self.sample and n < 2):
            return None
        mean = sum(self.values) / n
        var = sum((v - mean) ** 2 for v in self.values) / (n - 1 if self.sample else n)
        return float(var.sqrt()) if self.root else float(var)

    def finalize(self) -> float | None:
        return self.value()


class _StddevPop(_Moments):
    root = True


class _StddevSamp(_Moments):
    root, sample = True, True


class _VarPop(_Moments):
    pass


class _VarSamp(_Moments):
    sample = True


WINDOW_AGGREGATES: dict[str, type] = {
    "avg": _MySQLAvg,
    "stddev": _StddevPop,
    "std": _StddevPop,
    "stddev_pop": _StddevPop,
    "stddev_samp": _StddevSamp,
    "variance": _VarPop,
    "var_pop": _VarPop,
    "variance_pop": _VarPop,  # sqlglot writes MySQL VARIANCE as VARIANCE_POP
    "var_samp": _VarSamp,
}


def _as_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _concat(*args: Any) -> str | None:
    if any(a is None for a in args):
        return None
    return "".join(_as_text(a) for a in args)


def _concat_ws(separator: Any, *args: Any) -> str | None:
    if separator is None:
        return None
    return _as_text(separator).join(_as_text(a) for a in args if a is not None)


def _if(condition: Any, then: Any, otherwise: Any) -> Any:
    number = mysql_number(condition)
    return then if number not in (None, 0) else otherwise


def _parse_date(value: Any) -> _dt.datetime | None:
    if value is None:
        return None
    text = _as_text(value).strip()
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d", "%Y%m%d"):
        try:
            return _dt.datetime.strptime(text[: len(_dt.datetime(2000, 1, 1).strftime(fmt))], fmt)
        except ValueError:
            continue
    return None


def _date_part(attribute: str) -> Callable[[Any], int | None]:
    def part(value: Any) -> int | None:
        parsed = _parse_date(value)
        return None if parsed is None else int(getattr(parsed, attribute))

    return part


def _text_args(*args: Any) -> list[str] | None:
    return None if any(a is None for a in args) else [_as_text(a) for a in args]


def _instr(haystack: Any, needle: Any) -> int | None:
    """MySQL INSTR: 1-based position of the first match, case-insensitively as the
    utf8mb4_0900_ai_ci collation compares (SQLite's is case-sensitive and O(n*m))."""
    texts = _text_args(haystack, needle)
    if texts is None:
        return None
    text, part = texts
    folded_text, folded_part = text.lower(), part.lower()
    if len(folded_text) == len(text) and len(folded_part) == len(part):
        text, part = folded_text, folded_part
    return text.find(part) + 1


def _replace(value: Any, old: Any, new: Any) -> str | None:
    """MySQL REPLACE (case-sensitive, as SQLite's), in linear time."""
    texts = _text_args(value, old, new)
    if texts is None:
        return None
    text, before, after = texts
    return text if not before else text.replace(before, after)


def _trimmer(leading: bool, trailing: bool) -> Callable[..., str | None]:
    """MySQL TRIM/LTRIM/RTRIM: strip spaces, or every repetition of a whole *string*
    (``TRIM(BOTH 'ab' FROM s)``, which sqlglot writes as ``TRIM(s, 'ab')``) at the ends.
    SQLite's two-argument trim strips a *set of characters* instead, in O(n*m)."""

    def trim(value: Any, remove: Any = " ") -> str | None:
        texts = _text_args(value, remove)
        if texts is None:
            return None
        text, part = texts
        if not part:
            return text
        start, end = 0, len(text)
        if leading:
            while text.startswith(part, start, end):
                start += len(part)
        if trailing:
            while end - len(part) >= start and text.endswith(part, start, end):
                end -= len(part)
        return text[start:end]

    return trim


def _format(value: Any, places: Any, locale: Any = None) -> str | None:
    """MySQL FORMAT(X, D): X rounded half away from zero to D decimals (at most 30), with
    thousands separators (sqlglot writes it as NUMBER_TO_STR)."""
    if value is None or places is None:
        return None
    digits = min(max(int(mysql_number(places) or 0), 0), 30)
    number = to_decimal(mysql_number(value) or 0)
    return f"{round_half_away(number, digits):,.{digits}f}"


def _now() -> str:
    return _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


SCALAR_FUNCTIONS: dict[str, tuple[int, Callable[..., Any]]] = {
    "concat": (-1, _concat),
    "concat_ws": (-1, _concat_ws),
    "if": (3, _if),
    "year": (1, _date_part("year")),
    "month": (1, _date_part("month")),
    "day": (1, _date_part("day")),
    "dayofmonth": (1, _date_part("day")),
    "hour": (1, _date_part("hour")),
    "minute": (1, _date_part("minute")),
    "second": (1, _date_part("second")),
    "now": (0, _now),
    "instr": (2, _instr),
    "number_to_str": (-1, _format),
    "replace": (3, _replace),
    "trim": (-1, _trimmer(True, True)),
    "ltrim": (-1, _trimmer(True, False)),
    "rtrim": (-1, _trimmer(False, True)),
}

# SQLite functions MySQL does not have whose cost is not bounded by their result's size
# (printf/format loop once per padding character, even past SQLite's length limit).
SQLITE_ONLY_FUNCTIONS = frozenset({"printf", "format"})


def register(conn: sqlite3.Connection) -> None:
    """Install every MySQL function above on ``conn``."""
    for name, (nargs, func) in SCALAR_FUNCTIONS.items():
        conn.create_function(name, nargs, func, deterministic=name != "now")
    for name, cls in WINDOW_AGGREGATES.items():
        conn.create_window_function(name, 1, cls)
