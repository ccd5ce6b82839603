"""One task's database: an in-memory SQLite connection that behaves like the MySQL one.

Safety: the connection is ``:memory:`` only, extensions stay disabled, and an authorizer
refuses ATTACH/DETACH, every PRAGMA issued by model-written SQL, and the functions that
could reach files. A progress handler interrupts any statement that runs past the time
limit (e.g. a recursive CTE that never ends); the agent sees a MySQL-style timeout error.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
import unicodedata
from typing import Any, Iterable, Sequence

from . import errors, functions, transpile, types
from .errors import MySQLError
from .mysql_sort import std_sort
from .transpile import SortPlan

_DENIED_ACTIONS = {
    sqlite3.SQLITE_ATTACH: "ATTACH",
    sqlite3.SQLITE_DETACH: "DETACH",
    sqlite3.SQLITE_PRAGMA: "PRAGMA",
}
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
_PROGRESS_EVERY = 1000  # SQLite VM instructions between time checks
_GROUP_CONCAT_MAX_LEN = 1024  # MySQL's default group_concat_max_len
_MYSQL_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}


def mysql_string_literal(text: str) -> str:
    """What MySQL stores for ``'text'`` written between quotes (backslash escapes apply)."""
    return re.sub(r"\\(.)", lambda m: _MYSQL_ESCAPES.get(m.group(1), m.group(1)), text, flags=re.S)


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def row_hash_text(value: Any) -> str:
    """How MySQL's CONCAT_WS renders one stored value."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def table_md5(rows: Iterable[Sequence[Any]]) -> str | None:
    """``md5(group_concat(rowhash ORDER BY rowhash))`` with ``rowhash =
    substring(md5(concat_ws(',', cols...)), 1, 5)``, as MySQL computes it (NULLs skipped
    by CONCAT_WS, ',' separator, result cut at ``group_concat_max_len``). ``None`` for an
    empty table (GROUP_CONCAT of nothing is NULL)."""
    hashes = sorted(
        hashlib.md5(",".join(row_hash_text(v) for v in row if v is not None).encode()).hexdigest()[:5]
        for row in rows
    )
    if not hashes:
        return None
    joined = ",".join(hashes)[:_GROUP_CONCAT_MAX_LEN]
    return hashlib.md5(joined.encode()).hexdigest()


def _sort_key(value: Any) -> tuple[int, Any]:
    """MySQL's comparison of ORDER BY values: NULL first, numbers, then text compared
    case- and accent-insensitively (utf8mb4_0900_ai_ci)."""
    if value is None:
        return (0, 0)
    if isinstance(value, (int, float)):
        return (1, value)
    if isinstance(value, bytes):
        return (3, value)
    folded = "".join(c for c in unicodedata.normalize("NFKD", str(value)) if not unicodedata.combining(c))
    return (2, folded.casefold())


def mysql_filesort(rows: list[tuple[Any, ...]], plan: SortPlan) -> list[tuple[Any, ...]]:
    """Order rows carrying hidden keys (see ``SortPlan``) as MySQL's filesort would."""
    key_end = plan.visible + len(plan.descending)
    rows = sorted(rows, key=lambda r: [_sort_key(v) for v in r[key_end:]])  # scan order first

    def less(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
        for index, descending in enumerate(plan.descending, start=plan.visible):
            x, y = _sort_key(a[index]), _sort_key(b[index])
            if x != y:
                return x > y if descending else x < y
        return False

    ordered = std_sort(rows, less)
    end = None if plan.limit is None else plan.offset + plan.limit
    return [row[: plan.visible] for row in ordered[plan.offset : end]]


class MySQLOnSQLite:
    """A single-table MySQL database emulated in SQLite (see package docstring)."""

    def __init__(
        self,
        database: str,
        table: str,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[Sequence[Any]],
        *,
        time_limit_s: float = 5.0,
    ) -> None:
        if time_limit_s <= 0:
            raise ValueError(f"time_limit_s must be positive, got {time_limit_s}")
        self.database = database
        self.table = table
        self.columns = list(columns)
        self.time_limit_s = time_limit_s
        self._deadline: float | None = None
        self._internal = False
        self._int_error: tuple[str, str] | None = None
        self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        functions.register(self._conn)
        self._conn.create_function("mysql_int_column", 2, self._mysql_int_column, deterministic=True)
        self._conn.set_authorizer(self._authorize)
        self._conn.set_progress_handler(self._progress, _PROGRESS_EVERY)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 16 * 1024 * 1024)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        self._create(rows)

    # --- setup ----------------------------------------------------------------------

    def _create(self, rows: Sequence[Sequence[Any]]) -> None:
        defs = ", ".join(
            f"{quote_identifier(n)} INTEGER" if t.upper().startswith("INT") else f"{quote_identifier(n)} TEXT COLLATE NOCASE"
            for n, t in self.columns
        )
        table = quote_identifier(self.table)
        self._run_internal(f"CREATE TABLE {table} ({defs})")
        self._install_int_rounding()
        placeholders = ", ".join("?" for _ in self.columns)
        names = ", ".join(quote_identifier(n) for n, _ in self.columns)
        # The original inserts every value as a quoted string: '%s' % value.
        converted = [
            tuple(
                mysql_string_literal(str(v)) if t.upper() == "TEXT" else functions.mysql_int(str(v))
                for v, (_, t) in zip(row, self.columns)
            )
            for row in rows
        ]
        with self._internal_mode():
            self._conn.executemany(f"INSERT INTO {table} ({names}) VALUES ({placeholders})", converted)

    def _install_int_rounding(self) -> None:
        """After every write, store INT columns as MySQL would (see functions.mysql_int)."""
        int_columns = [n for n, t in self.columns if t.upper().startswith("INT")]
        if not int_columns:
            return
        table = quote_identifier(self.table)
        sets = ", ".join(
            f"{quote_identifier(n)} = mysql_int_column({quote_identifier(n)}, '{n.replace(chr(39), chr(39) * 2)}')"
            for n in int_columns
        )
        for event in ("INSERT", "UPDATE"):
            self._run_internal(
                f"CREATE TRIGGER {quote_identifier('_mysql_int_' + event.lower())} AFTER {event} ON {table} "
                f"BEGIN UPDATE {table} SET {sets} WHERE rowid = NEW.rowid; END"
            )

    def _mysql_int_column(self, value: Any, column: str) -> int | None:
        try:
            return functions.mysql_int(value)
        except functions.IncorrectIntegerValue as exc:
            self._int_error = (str(exc), column)
            raise

    # --- guards ---------------------------------------------------------------------

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if self._internal:
            return sqlite3.SQLITE_OK
        if action in _DENIED_ACTIONS:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def _progress(self) -> int:
        return 1 if self._deadline is not None and time.monotonic() > self._deadline else 0

    def _internal_mode(self):
        database = self

        class _Internal:
            def __enter__(self) -> None:
                database._internal = True

            def __exit__(self, *exc: object) -> None:
                database._internal = False

        return _Internal()

    def _run_internal(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._internal_mode():
            return self._conn.execute(sql, params).fetchall()

    # --- running agent SQL ------------------------------------------------------------

    def run(self, text: str) -> str:
        """Run the agent's SQL as the original does: split on ';', run each statement,
        return the last one's result (``str`` of the fetched rows) or the first error."""
        result = ""
        for sql in (s.strip() for s in text.split(";")):
            if not sql:
                continue
            try:
                result = repr(self.execute(sql))
            except MySQLError as exc:
                return str(exc)
        return result

    def execute(self, sql: str) -> list[tuple[Any, ...]]:
        """One MySQL statement; rows as the MySQL driver returns them, ``[]`` for writes."""
        statement = transpile.translate(sql)
        if statement.sqlite_sql is None:
            return self._meta(statement)
        return self._execute_sqlite(statement, sql)

    def execute_sqlite(self, sql: str) -> list[tuple[Any, ...]]:
        """Run raw SQLite text under the same guards (authorizer, time limit)."""
        return self._execute_sqlite(transpile.Statement(sql, "query"), sql)

    def _execute_sqlite(self, statement: transpile.Statement, original: str) -> list[tuple[Any, ...]]:
        rows = self._fetch_with_fallbacks(statement, original)
        if statement.kind != "query" or statement.tree is None:
            return rows
        kinds = types.output_types(statement.tree, self._column_types())
        if len(kinds) != (len(rows[0]) if rows else len(kinds)):
            return rows
        return [tuple(types.render(v, k) for v, k in zip(row, kinds)) for row in rows]

    def _fetch_with_fallbacks(self, statement: transpile.Statement, original: str) -> list[tuple[Any, ...]]:
        """Run the statement; if a MySQL-order rewrite trips SQLite, try the plainer forms."""
        attempts = [statement.sqlite_sql, *statement.fallbacks]
        for number, sql in enumerate(attempts):
            try:
                rows = self._fetch(sql, original)
            except MySQLError as exc:
                if exc.errno == 3024 or number == len(attempts) - 1:
                    raise  # out of time (do not spend the limit twice), or nothing left to try
                continue
            return mysql_filesort(rows, statement.sort) if number == 0 and statement.sort else rows
        raise AssertionError("unreachable")

    def _fetch(self, sql: str | None, original: str) -> list[tuple[Any, ...]]:
        assert sql is not None
        self._deadline = time.monotonic() + self.time_limit_s
        self._int_error = None
        try:
            cursor = self._conn.execute(sql)
            return cursor.fetchall() if cursor.description else []
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, original) from None
        except (OverflowError, ValueError, MemoryError) as exc:
            raise MySQLError(1105, "HY000", str(exc)) from None
        finally:
            self._deadline = None

    def _error(self, exc: sqlite3.DatabaseError, sql: str) -> MySQLError:
        text = str(exc)
        if "interrupted" in text:
            return errors.timeout(self.time_limit_s)
        if "not authorized" in text or "prohibited" in text:
            return errors.denied("this statement (files, ATTACH and PRAGMA are off limits)")
        if self._int_error is not None:
            return errors.incorrect_integer(*self._int_error)
        return errors.translate(exc, self.database, sql)

    def _column_types(self) -> dict[str, str]:
        return {n.lower(): t for n, t in self.columns}

    # --- MySQL meta commands ------------------------------------------------------------

    def _tables(self) -> list[str]:
        return [r[0] for r in self._run_internal("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]

    def _described_columns(self, table: str) -> list[tuple[str, str]]:
        if table.lower() not in {t.lower() for t in self._tables()}:
            raise errors.table_missing(self.database, table)
        info = self._run_internal(f"PRAGMA table_info({quote_identifier(table)})")
        return [(row[1], self._mysql_type(table, row[1], row[2])) for row in info]

    def _mysql_type(self, table: str, column: str, declared: str) -> str:
        if table.lower() == self.table.lower():
            for name, kind in self.columns:
                if name.lower() == column.lower():
                    return "int" if kind.upper().startswith("INT") else kind.lower()
        return declared.split()[0].lower() if declared else ""

    def _meta(self, statement: transpile.Statement) -> list[tuple[Any, ...]]:
        if statement.kind == "show_tables":
            return [(t,) for t in self._tables()]
        if statement.kind == "show_databases":
            return [("information_schema",), (self.database,), ("mysql",), ("performance_schema",), ("sys",)]
        if statement.kind == "use":
            if (statement.target or "").lower() != self.database.lower():
                raise MySQLError(1049, "42000", f"Unknown database '{statement.target}'")
            return []
        assert statement.target is not None
        columns = self._described_columns(statement.target)
        if statement.kind == "describe":
            return [(name, kind, "YES", "", None, "") for name, kind in columns]
        body = ",\n".join(
            f"  `{name}` {kind}" + (" DEFAULT NULL" if kind == "int" else "") for name, kind in columns
        )
        create = (
            f"CREATE TABLE `{statement.target}` (\n{body}\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 "
            "COLLATE=utf8mb4_0900_ai_ci"
        )
        return [(statement.target, create)]

    # --- grading --------------------------------------------------------------------------

    def table_hash(self) -> str | None:
        """The original's md5 table hash over the task table's original columns.

        Raises :class:`MySQLError` if the table or one of its columns is gone, as the
        original's hash query would fail then.
        """
        names = ", ".join(quote_identifier(n) for n, _ in self.columns)
        try:
            rows = self._run_internal(f"SELECT {names} FROM {quote_identifier(self.table)}")
        except sqlite3.DatabaseError as exc:
            raise errors.translate(exc, self.database, "") from None
        return table_md5(rows)

    def close(self) -> None:
        self._conn.close()
