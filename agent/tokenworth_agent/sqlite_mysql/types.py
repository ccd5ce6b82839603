"""Which result columns MySQL would return as DECIMAL, and with how many decimals.

SQLite computes exact-number results as floats or ints, while MySQL returns DECIMAL for
``SUM``/``AVG`` of integers, for ``/`` and for arithmetic with decimal literals; the
original's observations therefore show ``Decimal('…')``. The scale follows MySQL's rules
(``AVG``/``/`` add ``div_precision_increment`` = 4 decimals to the dividend's scale,
``*`` adds scales, ``+``/``-`` take the larger, ``ROUND(x, d)`` sets ``d``).

The inference is static, over the outermost SELECT list; anything it cannot type is left
as SQLite returned it. Judging never depends on it: the grader strips ``Decimal(...)``.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from sqlglot import exp

# A result type: ("int", 0), ("dec", scale), ("float", 0), ("text", 0), or None (unknown).
ResultType = tuple[str, int] | None
DIV_PRECISION_INCREMENT = 4


def _merge(a: ResultType, b: ResultType, combine_scale) -> ResultType:
    if a is None or b is None:
        return None
    if "float" in (a[0], b[0]) or "text" in (a[0], b[0]):
        return ("float", 0)
    if a[0] == b[0] == "int":
        return ("int", 0)
    return ("dec", combine_scale(a[1], b[1]))


Columns = dict[str, "str | ResultType"]


def infer(node: exp.Expression, columns: Columns) -> ResultType:
    """The MySQL result type of ``node``; ``columns`` maps lower-cased names to INT/TEXT,
    or to a result type already inferred (a materialized derived table's column)."""
    node = node.unalias() if isinstance(node, exp.Alias) else node
    if isinstance(node, exp.Paren):
        return infer(node.this, columns)
    if isinstance(node, exp.Column):
        kind = columns.get(node.name.lower())
        if kind is None or isinstance(kind, tuple):
            return kind
        return ("int", 0) if kind.upper().startswith("INT") else ("text", 0)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return ("text", 0)
        text = node.this
        if "e" in text.lower():
            return ("float", 0)
        return ("dec", len(text.split(".")[1])) if "." in text else ("int", 0)
    if isinstance(node, exp.Neg):
        return infer(node.this, columns)
    if isinstance(node, exp.Count):
        return ("int", 0)
    if isinstance(node, (exp.Max, exp.Min)):
        return infer(node.this, columns)
    if isinstance(node, exp.Avg):
        inner = infer(node.this, columns)
        if inner is None:
            return None
        return ("dec", inner[1] + DIV_PRECISION_INCREMENT) if inner[0] in ("int", "dec") else ("float", 0)
    if isinstance(node, exp.Sum):
        inner = infer(node.this, columns)
        if inner is None:
            return None
        return ("dec", inner[1]) if inner[0] in ("int", "dec") else ("float", 0)
    if isinstance(node, exp.Div):
        a, b = infer(node.this, columns), infer(node.expression, columns)
        merged = _merge(a, b, lambda x, _: x + DIV_PRECISION_INCREMENT)
        if merged is not None and merged[0] == "int":  # int / int is DECIMAL in MySQL
            return ("dec", DIV_PRECISION_INCREMENT)
        return merged
    if isinstance(node, exp.Mul):
        return _merge(infer(node.this, columns), infer(node.expression, columns), lambda x, y: x + y)
    if isinstance(node, (exp.Add, exp.Sub)):
        return _merge(infer(node.this, columns), infer(node.expression, columns), max)
    if isinstance(node, exp.Round):
        inner = infer(node.this, columns)
        if inner is None or inner[0] != "dec":
            return inner
        places = node.args.get("decimals")
        if places is None:
            return ("dec", 0)
        if isinstance(places, exp.Literal) and not places.is_string:
            return ("dec", max(int(places.this), 0))
        return None
    if isinstance(node, (exp.Stddev, exp.StddevPop, exp.StddevSamp, exp.Variance, exp.VariancePop)):
        return ("float", 0)
    return None


def output_types(query: exp.Expression, columns: Columns, star: Columns | None = None) -> list[ResultType]:
    """Result types of the outermost SELECT list (``*`` expands to ``star``, by default
    ``columns``: the columns of the query's only source)."""
    star = columns if star is None else star
    select = query
    while isinstance(select, exp.SetOperation):
        select = select.this
    if isinstance(select, exp.Subquery):
        select = select.this
    if not isinstance(select, exp.Select):
        return []
    result: list[ResultType] = []
    for expression in select.expressions:
        if isinstance(expression, exp.Star) or (isinstance(expression, exp.Column) and expression.is_star):
            result.extend(infer(exp.column(name), star) for name in star)
        else:
            result.append(infer(expression, columns))
    return result


def render(value: Any, kind: ResultType) -> Any:
    """A SQLite value as the MySQL driver would hand it over for a column of ``kind``."""
    if kind is None or value is None or not isinstance(value, (int, float)) or isinstance(value, bool):
        return value
    if kind[0] == "dec":
        text = repr(value) if isinstance(value, float) else str(value)
        return Decimal(text).quantize(Decimal(1).scaleb(-kind[1]), rounding=ROUND_HALF_UP)
    if kind[0] == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value
