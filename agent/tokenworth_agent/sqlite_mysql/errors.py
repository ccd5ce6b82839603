"""MySQL-shaped error texts for what goes wrong in the SQLite engine.

The original harness shows the agent ``str(exc)`` of a ``mysql.connector`` error, which
reads ``"<errno> (<sqlstate>): <message>"``. :class:`MySQLError` renders the same shape,
and :func:`translate` maps SQLite's messages onto the MySQL error a MySQL server would
have raised for the same mistake. Unknown SQLite messages keep their text under the
generic 1105 (HY000) code so nothing is hidden from the agent.
"""

from __future__ import annotations

import re

SYNTAX_HINT = (
    "You have an error in your SQL syntax; check the manual that corresponds to your MySQL "
    "server version for the right syntax to use near '{near}' at line 1"
)


class MySQLError(Exception):
    """An error as mysql.connector would print it."""

    def __init__(self, errno: int, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.errno, self.sqlstate, self.message = errno, sqlstate, message

    def __str__(self) -> str:
        return f"{self.errno} ({self.sqlstate}): {self.message}"


def syntax_error(sql: str, position: int | None = None) -> MySQLError:
    """1064 with MySQL's "near '...'" excerpt (MySQL quotes up to 80 characters)."""
    near = sql[position:] if position is not None else sql
    return MySQLError(1064, "42000", SYNTAX_HINT.format(near=near.strip()[:80]))


def table_missing(database: str, table: str) -> MySQLError:
    return MySQLError(1146, "42S02", f"Table '{database}.{table}' doesn't exist")


def unknown_column(column: str, clause: str = "field list") -> MySQLError:
    return MySQLError(1054, "42S22", f"Unknown column '{column}' in '{clause}'")


def timeout(seconds: float) -> MySQLError:
    return MySQLError(
        3024, "HY000", f"Query execution was interrupted, maximum statement execution time ({seconds:g} s) exceeded"
    )


def packet_too_big(limit: int) -> MySQLError:
    """A statement longer than this environment accepts (its ``max_allowed_packet``)."""
    return MySQLError(1153, "08S01", f"Got a packet bigger than 'max_allowed_packet' bytes ({limit} characters)")


def too_deep(limit: int | None = None) -> MySQLError:
    """Nesting deeper than the parser can take (MySQL runs out of thread stack)."""
    bound = f" (at most {limit} levels of parentheses)" if limit else ""
    return MySQLError(1436, "HY000", f"Thread stack overrun: the statement nests too deeply{bound}")


def trigger_missing() -> MySQLError:
    return MySQLError(1360, "HY000", "Trigger does not exist")


def function_missing(database: str, name: str) -> MySQLError:
    return MySQLError(1305, "42000", f"FUNCTION {database}.{name} does not exist")


def denied(what: str) -> MySQLError:
    return MySQLError(1227, "42000", f"Access denied; this environment does not allow {what}")


def incorrect_integer(value: str, column: str) -> MySQLError:
    return MySQLError(1366, "HY000", f"Incorrect integer value: '{value}' for column '{column}' at row 1")


_PATTERNS: list[tuple[re.Pattern[str], object]] = [
    (re.compile(r"no such table: (?:\w+\.)?(\S+)"), lambda m, db, sql: table_missing(db, m.group(1))),
    (re.compile(r"no such column: (\S+)"), lambda m, db, sql: unknown_column(m.group(1))),
    (
        re.compile(r"table (\S+) already exists"),
        lambda m, db, sql: MySQLError(1050, "42S01", f"Table '{m.group(1)}' already exists"),
    ),
    (
        re.compile(r"ambiguous column name: (\S+)"),
        lambda m, db, sql: MySQLError(1052, "23000", f"Column '{m.group(1)}' in field list is ambiguous"),
    ),
    (
        re.compile(r"table (\S+) has (\d+) columns but (\d+) values were supplied"),
        lambda m, db, sql: MySQLError(1136, "21S01", "Column count doesn't match value count at row 1"),
    ),
    (
        re.compile(r"(\d+) values for (\d+) columns"),
        lambda m, db, sql: MySQLError(1136, "21S01", "Column count doesn't match value count at row 1"),
    ),
    (
        re.compile(r"no such function: (\S+)"),
        lambda m, db, sql: MySQLError(1305, "42000", f"FUNCTION {db}.{m.group(1)} does not exist"),
    ),
    (
        re.compile(r"wrong number of arguments to function (\w+)"),
        lambda m, db, sql: MySQLError(
            1582, "42000", f"Incorrect parameter count in the call to native function '{m.group(1)}'"
        ),
    ),
    (
        re.compile(r"misuse of aggregate(?: function)?:? ?(\w*)"),
        lambda m, db, sql: MySQLError(1111, "HY000", "Invalid use of group function"),
    ),
    (re.compile(r"(?:near \"(.*?)\": )?syntax error"), lambda m, db, sql: syntax_error(sql, _find(sql, m.group(1)))),
    (re.compile(r"incomplete input"), lambda m, db, sql: syntax_error(sql, len(sql))),
    (re.compile(r"parser stack overflow|Expression tree is too large"), lambda m, db, sql: too_deep()),
    (
        re.compile(r"string or blob too big"),
        lambda m, db, sql: MySQLError(1301, "HY000", "Result of a string function was larger than max_allowed_packet"),
    ),
]


def _find(sql: str, token: str | None) -> int | None:
    if not token:
        return None
    index = sql.find(token)
    return index if index >= 0 else None


def translate(exc: Exception, database: str, sql: str) -> MySQLError:
    """The MySQL error for a SQLite exception raised while running ``sql``."""
    if isinstance(exc, MySQLError):
        return exc
    text = str(exc)
    for pattern, build in _PATTERNS:
        match = pattern.search(text)
        if match:
            return build(match, database, sql)  # type: ignore[operator]
    return MySQLError(1105, "HY000", text)
