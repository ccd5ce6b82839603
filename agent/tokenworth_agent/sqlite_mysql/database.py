"""One task's database: an in-memory SQLite connection that behaves like the MySQL one.

Safety: the connection is ``:memory:`` only, extensions stay disabled, and an authorizer
refuses ATTACH/DETACH, every PRAGMA issued by model-written SQL, and the functions that
could reach files. The emulation's own objects (INT-rounding triggers, their function,
the tables that hold materialized derived tables) carry the reserved ``_mysql_`` prefix;
statements naming them, SQLite's schema tables or SQLite-only functions are refused
before they run (``transpile.check_names``), and the authorizer refuses them again.

Cost: one :class:`~.limits.Deadline` covers a whole reply (see ``limits``); the progress
handler interrupts SQLite past it and the Python steps check it, so the agent sees
MySQL's timeout error (3024) instead of a reply that runs on.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sqlite3
import time
import unicodedata
from typing import Any, Iterable, Iterator, Sequence

from sqlglot import exp

from . import errors, functions, transpile, types
from .errors import MySQLError
from .limits import Clock, Deadline, Limits
from .mysql_sort import std_sort
from .transpile import INTERNAL_PREFIX, SortPlan

_DENIED_ACTIONS = {
    sqlite3.SQLITE_ATTACH: "ATTACH",
    sqlite3.SQLITE_DETACH: "DETACH",
    sqlite3.SQLITE_PRAGMA: "PRAGMA",
}
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
_SCHEMA_TABLES = {"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"}
_PROGRESS_EVERY = 1000  # SQLite VM instructions between time checks
_FETCH_CHUNK = 1024  # rows fetched between time checks
_GROUP_CONCAT_MAX_LEN = 1024  # MySQL's default group_concat_max_len
_MYSQL_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_INTERNAL_NAME = re.compile(rf"{INTERNAL_PREFIX}\w*", re.I)


def _internal(name: str | None) -> bool:
    return bool(name) and name.lower().startswith(INTERNAL_PREFIX)  # type: ignore[union-attr]


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


def mysql_filesort(rows: list[tuple[Any, ...]], plan: SortPlan, deadline: Deadline | None = None) -> list[tuple[Any, ...]]:
    """Order rows carrying hidden keys (see ``SortPlan``) as MySQL's filesort would.

    Sort keys are computed once per row; the comparison reads the deadline every few
    thousand calls, so a large sort ends with MySQL's timeout error, not after it."""
    key_end = plan.visible + len(plan.descending)
    keyed = [([_sort_key(v) for v in row[plan.visible : key_end]], row) for row in rows]
    keyed.sort(key=lambda item: [_sort_key(v) for v in item[1][key_end:]])  # scan order first
    tick = deadline.checker(4096) if deadline is not None else (lambda: None)
    descending = plan.descending

    def less(a: tuple[list, Any], b: tuple[list, Any]) -> bool:
        tick()
        for x, y, down in zip(a[0], b[0], descending):
            if x != y:
                return x > y if down else x < y
        return False

    ordered = std_sort(keyed, less)
    end = None if plan.limit is None else plan.offset + plan.limit
    return [row[: plan.visible] for _, row in ordered[plan.offset : end]]


def observation(rows: Sequence[Sequence[Any]], complete: bool, max_chars: int) -> str:
    """``repr`` of the rows as the original shows them, cut after ``max_chars`` characters
    (or where the fetch stopped), saying so."""
    parts, length = ["["], 1
    for index, row in enumerate(rows):
        piece = (", " if index else "") + repr(tuple(row))
        if length + len(piece) > max_chars:
            return (
                "".join(parts)[:max_chars] + f", ...] (result cut at {max_chars} characters: "
                f"{index} of {len(rows)}{'' if complete else '+'} rows shown)"
            )
        parts.append(piece)
        length += len(piece)
    if not complete:
        return "".join(parts) + f", ...] (result cut at {len(rows)} rows)"
    return "".join(parts) + "]"


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
        limits: Limits | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.limits = limits if limits is not None else Limits(time_s=time_limit_s)
        self.database = database
        self.table = table
        self.columns = list(columns)
        self.time_limit_s = self.limits.time_s
        self._clock = clock
        self._deadline: Deadline | None = None
        self._internal = False
        self._strict = True
        self._int_error: tuple[str, str] | None = None
        self._temp_count = 0
        self._temp_columns: dict[str, dict[str, types.ResultType]] = {}
        self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        functions.register(self._conn)
        self._conn.create_function(f"{INTERNAL_PREFIX}int_column", 2, self._mysql_int_column, deterministic=True)
        self._conn.set_authorizer(self._authorize)
        self._conn.set_progress_handler(self._progress, _PROGRESS_EVERY)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.limits.value_bytes)
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
        self._install_int_rounding()

    def _trigger_names(self) -> list[str]:
        return [f"{INTERNAL_PREFIX}int_{event}" for event in ("insert", "update")]

    def _install_int_rounding(self) -> None:
        """After every write, store the task table's INT columns as MySQL would (see
        functions.mysql_int). Reinstalled after DDL, so added INT columns are rounded too
        and dropped ones are not referenced."""
        table = quote_identifier(self.table)
        info = self._run_internal(f"PRAGMA table_info({table})")
        int_columns = [row[1] for row in info if str(row[2]).upper().startswith("INT")]
        if not int_columns:
            return
        sets = ", ".join(
            f"{quote_identifier(n)} = {INTERNAL_PREFIX}int_column({quote_identifier(n)}, '{n.replace(chr(39), chr(39) * 2)}')"
            for n in int_columns
        )
        for event, name in zip(("INSERT", "UPDATE"), self._trigger_names()):
            self._run_internal(
                f"CREATE TRIGGER {quote_identifier(name)} AFTER {event} ON {table} "
                f"BEGIN UPDATE {table} SET {sets} WHERE rowid = NEW.rowid; END"
            )

    def _drop_int_rounding(self) -> None:
        for name in self._trigger_names():
            self._run_internal(f"DROP TRIGGER IF EXISTS {quote_identifier(name)}")

    def _mysql_int_column(self, value: Any, column: str) -> int | None:
        try:
            return functions.mysql_int(value)
        except functions.IncorrectIntegerValue as exc:
            self._int_error = (str(exc), column)
            raise

    # --- guards ---------------------------------------------------------------------

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if self._internal or _internal(source):
            return sqlite3.SQLITE_OK  # the emulation's own statements and trigger bodies
        if action in _DENIED_ACTIONS:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION:
            name = (arg2 or "").lower()
            if name in _DENIED_FUNCTIONS or (
                self._strict and (_internal(name) or name in functions.SQLITE_ONLY_FUNCTIONS)
            ):
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if not self._strict:
            return sqlite3.SQLITE_OK  # DDL: SQLite's own schema edits read sqlite_master, use printf
        if action == sqlite3.SQLITE_READ:
            table = (arg1 or "").lower()
            return sqlite3.SQLITE_DENY if table in _SCHEMA_TABLES or table.startswith("pragma_") else sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY if _internal(arg1) or _internal(arg2) else sqlite3.SQLITE_OK

    def _progress(self) -> int:
        return 1 if self._deadline is not None and self._deadline.expired() else 0

    @contextlib.contextmanager
    def _internal_mode(self) -> Iterator[None]:
        self._internal = True
        try:
            yield
        finally:
            self._internal = False

    def _run_internal(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._internal_mode():
            return self._conn.execute(sql, params).fetchall()

    # --- running agent SQL ------------------------------------------------------------

    def run(self, text: str) -> str:
        """Run the agent's SQL as the original does: split on ';', run each statement,
        return the last one's result (``str`` of the fetched rows) or the first error.

        One deadline covers the whole text, rendering included."""
        deadline = Deadline(self.limits.time_s, self._clock)
        rows: list[tuple[Any, ...]] = []
        complete = True
        for sql in (s.strip() for s in text.split(";")):
            if not sql:
                continue
            try:
                rows, complete = self._statement(sql, deadline)
            except MySQLError as exc:
                return str(exc)
        return observation(rows, complete, self.limits.result_chars)

    def execute(self, sql: str) -> list[tuple[Any, ...]]:
        """One MySQL statement; rows as the MySQL driver returns them, ``[]`` for writes."""
        return self._statement(sql, Deadline(self.limits.time_s, self._clock))[0]

    def execute_sqlite(self, sql: str) -> list[tuple[Any, ...]]:
        """Run raw SQLite text under the same guards (authorizer, time limit)."""
        deadline = Deadline(self.limits.time_s, self._clock)
        with self._running(deadline):
            return self._fetch(sql, sql, deadline, self.limits.rows)[0]

    @contextlib.contextmanager
    def _running(self, deadline: Deadline, strict: bool = True) -> Iterator[None]:
        self._deadline, self._strict = deadline, strict
        try:
            yield
        finally:
            self._deadline, self._strict = None, True

    def _statement(self, sql: str, deadline: Deadline) -> tuple[list[tuple[Any, ...]], bool]:
        """(rows, complete) for one statement, within ``deadline``."""
        deadline.check()
        if len(sql) > self.limits.statement_chars:
            raise errors.packet_too_big(self.limits.statement_chars)
        if transpile.paren_depth(sql) > self.limits.nesting:
            raise errors.too_deep(self.limits.nesting)
        try:
            tree = transpile.parse(sql)
            deadline.check()
            transpile.check_names(tree, self.database)
            statement = transpile.translate_tree(tree, sql)
            deadline.check()
            if statement.sqlite_sql is None:
                return self._meta(statement), True
            if statement.kind == "ddl":
                return self._ddl(statement, sql, deadline), True
            with self._running(deadline):
                if statement.kind == "query":
                    return self._query(statement, sql, deadline)
                rows, _, complete = self._fetch_with_fallbacks(statement, sql, deadline)
                return rows, complete
        except RecursionError:  # nesting without parentheses (NOT NOT ..., - - ..., CASE ...)
            raise errors.too_deep() from None

    def _ddl(self, statement: transpile.Statement, original: str, deadline: Deadline) -> list[tuple[Any, ...]]:
        """DDL runs with the INT-rounding triggers lifted, then reinstalled on the table."""
        self._drop_int_rounding()
        try:
            with self._running(deadline, strict=False):
                return self._fetch_with_fallbacks(statement, original, deadline)[0]
        finally:
            if self._run_internal("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", (self.table,)):
                self._install_int_rounding()

    def _query(
        self, statement: transpile.Statement, original: str, deadline: Deadline
    ) -> tuple[list[tuple[Any, ...]], bool]:
        """A query, with its derived tables and CTEs materialized first (as MySQL does),
        so that row-order rules apply inside them; plain SQLite if that cannot be done."""
        assert statement.tree is not None
        if transpile.has_derived_tables(statement.tree):
            try:
                with self._temporary_tables():
                    tree = self._materialize(statement.tree, original, deadline)
                    inner = transpile.translate_tree(tree, original)
                    rows, _, complete = self._fetch_with_fallbacks(inner, original, deadline)
                    return self._typed(tree, rows, deadline), complete
            except transpile.NotMaterializable:
                pass
        rows, _, complete = self._fetch_with_fallbacks(statement, original, deadline)
        return self._typed(statement.tree, rows, deadline), complete

    # --- derived tables and CTEs ---------------------------------------------------------

    @contextlib.contextmanager
    def _temporary_tables(self) -> Iterator[None]:
        try:
            yield
        finally:
            for name in list(self._temp_columns):
                self._run_internal(f"DROP TABLE IF EXISTS temp.{quote_identifier(name)}")
            self._temp_columns.clear()

    def _materialize(self, tree: exp.Query, original: str, deadline: Deadline) -> exp.Query:
        """``tree`` with each non-recursive CTE and each derived table replaced by a
        temporary table holding its rows in MySQL's order (innermost first)."""
        return transpile.materialize(tree, lambda body, names: self._store(body, names, original, deadline))

    def _store(self, body: exp.Query, names: list[str] | None, original: str, deadline: Deadline) -> str:
        """Run ``body`` as a query of its own and keep its rows in a new temporary table."""
        tree = self._materialize(body, original, deadline)
        statement = transpile.translate_tree(tree, original)
        try:
            rows, described, complete = self._fetch_with_fallbacks(statement, original, deadline)
        except MySQLError as exc:
            if exc.errno == 3024:
                raise
            raise transpile.NotMaterializable(str(exc)) from None  # e.g. a correlated derived table
        if not complete or not described:
            raise transpile.NotMaterializable("derived table too large, or not a query")
        columns = names or described
        seen: set[str] = set()
        for column in columns:
            if column.lower() in seen:
                raise MySQLError(1060, "42S21", f"Duplicate column name '{column}'")
            seen.add(column.lower())
        kinds = self._output_kinds(tree)
        if len(kinds) != len(columns):
            kinds = [None] * len(columns)
        self._temp_count += 1
        name = f"{INTERNAL_PREFIX}derived_{self._temp_count}"
        self._temp_columns[name] = {c.lower(): k for c, k in zip(columns, kinds)}
        defs = ", ".join(f"{quote_identifier(c)} COLLATE NOCASE" for c in columns)
        try:
            self._run_internal(f"CREATE TEMP TABLE {quote_identifier(name)} ({defs})")
            if rows:
                marks = ", ".join("?" for _ in columns)
                with self._internal_mode():
                    self._conn.executemany(f"INSERT INTO temp.{quote_identifier(name)} VALUES ({marks})", rows)
        except sqlite3.DatabaseError as exc:
            raise transpile.NotMaterializable(str(exc)) from None
        deadline.check()
        return name

    # --- fetching ------------------------------------------------------------------------

    def _fetch_with_fallbacks(
        self, statement: transpile.Statement, original: str, deadline: Deadline
    ) -> tuple[list[tuple[Any, ...]], list[str], bool]:
        """Run the statement; if a MySQL-order rewrite trips SQLite, try the plainer forms.
        A result too large for the filesort emulation is sorted by SQLite instead."""
        attempts = [statement.sqlite_sql, *statement.fallbacks]
        for number, sql in enumerate(attempts):
            sorting = number == 0 and statement.sort is not None
            limit = self.limits.sort_rows if sorting else self.limits.rows
            try:
                rows, names, complete = self._fetch(sql, original, deadline, limit)
            except MySQLError as exc:
                if exc.errno == 3024 or number == len(attempts) - 1:
                    raise  # out of time (do not spend the limit twice), or nothing left to try
                continue
            if sorting:
                if not complete:
                    continue  # too many rows to sort in Python: the scan-ordered query sorts in SQLite
                assert statement.sort is not None
                return mysql_filesort(rows, statement.sort, deadline), names[: statement.sort.visible], True
            return rows, names, complete
        raise AssertionError("unreachable")

    def _fetch(
        self, sql: str | None, original: str, deadline: Deadline, max_rows: int
    ) -> tuple[list[tuple[Any, ...]], list[str], bool]:
        """(rows, column names, complete): at most ``max_rows`` rows, checking the deadline."""
        assert sql is not None
        self._int_error = None
        cursor = None
        try:
            cursor = self._conn.execute(sql)
            if not cursor.description:
                return [], [], True
            names = [d[0] for d in cursor.description]
            rows: list[tuple[Any, ...]] = []
            while len(rows) <= max_rows:
                chunk = cursor.fetchmany(_FETCH_CHUNK)
                if not chunk:
                    return rows, names, True
                rows.extend(chunk)
                deadline.check()
            return rows[:max_rows], names, False
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, original) from None
        except (OverflowError, ValueError, MemoryError) as exc:
            raise MySQLError(1105, "HY000", str(exc)) from None
        finally:
            if cursor is not None:
                cursor.close()

    def _error(self, exc: sqlite3.DatabaseError, sql: str) -> MySQLError:
        text = str(exc)
        if "interrupted" in text:
            return errors.timeout(self.limits.time_s)
        if "not authorized" in text or "prohibited" in text:
            return errors.denied("this statement (files, ATTACH, PRAGMA and the emulation's own objects are off limits)")
        if self._int_error is not None:
            return errors.incorrect_integer(*self._int_error)
        if _INTERNAL_NAME.search(text):
            return MySQLError(1105, "HY000", _INTERNAL_NAME.sub("(internal)", text))
        return errors.translate(exc, self.database, sql)

    # --- result types --------------------------------------------------------------------

    def _column_types(self) -> dict[str, str]:
        return {n.lower(): t for n, t in self.columns}

    def _output_kinds(self, tree: exp.Expression) -> list[types.ResultType]:
        """MySQL result types of the query's columns; ``*`` over a materialized derived
        table takes that table's column types."""
        known: dict[str, Any] = dict(self._column_types())
        for columns in self._temp_columns.values():
            known.update(columns)
        source = transpile.only_source(tree)
        star: dict[str, Any] = {}
        if source is not None and source.lower() in self._temp_columns:
            star = self._temp_columns[source.lower()]
        elif source is not None and source.lower() == self.table.lower():
            star = dict(self._column_types())
        return types.output_types(tree, known, star)

    def _typed(
        self, tree: exp.Expression, rows: list[tuple[Any, ...]], deadline: Deadline
    ) -> list[tuple[Any, ...]]:
        kinds = self._output_kinds(tree)
        if not rows or len(kinds) != len(rows[0]) or all(k is None for k in kinds):
            return rows
        tick = deadline.checker(_FETCH_CHUNK)
        typed = []
        for row in rows:
            tick()
            typed.append(tuple(types.render(v, k) for v, k in zip(row, kinds)))
        return typed

    # --- MySQL meta commands ------------------------------------------------------------

    def _tables(self) -> list[str]:
        names = self._run_internal("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        return [r[0] for r in names if not r[0].lower().startswith(("sqlite_", INTERNAL_PREFIX))]

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
        if statement.kind in ("show_triggers", "noop"):
            return []  # the agent has no triggers of its own; the emulation's are not shown
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
