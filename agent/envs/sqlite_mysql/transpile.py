"""MySQL statements to SQLite statements, via sqlglot's AST.

``sqlglot`` (read="mysql", write="sqlite") does the dialect translation; the transforms
here add the MySQL *behaviours* SQLite lacks, each as an AST rewrite:

* **Row order.** MySQL returns ``GROUP BY`` groups in first-seen order and breaks
  ``ORDER BY`` ties in insertion (scan) order. SQLite promises neither, so every
  single-source SELECT gets the scan position (``rowid``, or ``MIN(rowid)`` per group)
  as the last ordering key.
* **UPDATE/DELETE with ORDER BY/LIMIT** (SQLite is built without them) become
  ``rowid IN (SELECT rowid ... ORDER BY ..., rowid LIMIT n)``.
* **Multi-table DELETE** (``DELETE a FROM t a JOIN ...``) becomes a ``rowid IN (...)``
  delete on the target; **multi-table UPDATE** (``UPDATE t a JOIN s ON ... SET ...``)
  becomes SQLite's ``UPDATE ... FROM``.
* **Left-to-right SET.** MySQL's single-table UPDATE lets a later assignment see the value
  an earlier one just wrote; the earlier expressions are substituted in.
* **DATE_ADD/DATE_SUB** with an INTERVAL become SQLite ``date``/``datetime`` modifiers.
* MySQL errors the original would raise and SQLite would not: ``LIMIT`` inside
  ``IN (subquery)`` (1235) and a subquery reading the table being modified (1093).
"""

from __future__ import annotations

import dataclasses

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from .errors import MySQLError, syntax_error

ALLOWED_STATEMENTS = (exp.Query, exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter)


@dataclasses.dataclass
class Statement:
    """One translated statement: SQLite text, or a MySQL meta command to emulate."""

    sqlite_sql: str | None
    kind: str  # "query", "write", "ddl", "show_tables", "describe", "use", "show_create"
    target: str | None = None  # table named by describe/show
    tree: exp.Expression | None = None
    # When set, ``sqlite_sql`` returns the rows unsorted plus hidden sort keys, and the
    # database sorts them the way MySQL's filesort does (see ``mysql_sort``).
    sort: "SortPlan | None" = None
    # Tried in turn when the statement before fails (not for timeouts): the scan-ordered
    # query, then the query exactly as sqlglot translated it. The last error is reported.
    fallbacks: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class SortPlan:
    """Hidden columns after the ``visible`` ones: one per ORDER BY key, then one scan
    position per source table (``rowid``, or ``MIN(rowid)`` per group)."""

    visible: int
    descending: tuple[bool, ...]
    positions: int
    offset: int = 0
    limit: int | None = None


_STATEMENT_WORDS = {
    "select", "with", "insert", "update", "delete", "replace", "create", "drop", "alter", "show",
    "describe", "desc", "use", "explain", "truncate", "(", "values", "table",
}


def parse(sql: str) -> exp.Expression:
    """Parse one MySQL statement, or raise a 1064 error shaped as MySQL's."""
    first_word = sql.split(None, 1)[0].lower() if sql.split() else ""
    if first_word.rstrip("(") not in _STATEMENT_WORDS and not first_word.startswith("("):
        raise syntax_error(sql, 0)  # MySQL quotes the whole statement when the verb is unknown
    try:
        trees = [t for t in sqlglot.parse(sql, read="mysql") if t is not None]
    except ParseError as exc:
        errors = exc.errors or [{}]
        col = errors[0].get("col")
        start = errors[0].get("start_context", "")
        position = len(start) if start and sql.startswith(start) else (col - 1 if col else None)
        raise syntax_error(sql, position) from None
    except TokenError:
        raise syntax_error(sql) from None
    if len(trees) != 1:
        raise syntax_error(sql)
    return trees[0]


def translate(sql: str) -> Statement:
    """Translate one MySQL statement (no trailing ``;``) for the SQLite engine."""
    tree = parse(sql)
    meta = _meta_command(tree, sql)
    if meta is not None:
        return meta
    if isinstance(tree, exp.Command) or not isinstance(tree, ALLOWED_STATEMENTS):
        raise syntax_error(sql)
    _check_mysql_restrictions(tree)
    if isinstance(tree, exp.Delete):
        return Statement(_delete_sql(tree), "write", tree=tree)
    if isinstance(tree, exp.Update):
        return Statement(_update_sql(tree), "write", tree=tree)
    tree = tree.transform(_rewrite_dates)
    if isinstance(tree, exp.Query):
        untouched_sql = tree.sql(dialect="sqlite")
        ordered = tree.copy()
        _add_scan_order(ordered)
        plain_sql = ordered.sql(dialect="sqlite")
        plain = (plain_sql, untouched_sql) if plain_sql != untouched_sql else (plain_sql,)
        planned = _filesort_plan(tree)
        if planned is None:
            return Statement(plain[0], "query", tree=tree, fallbacks=plain[1:])
        return Statement(planned[0], "query", tree=tree, sort=planned[1], fallbacks=plain)
    kind = "write" if isinstance(tree, exp.Insert) else "ddl"
    return Statement(tree.sql(dialect="sqlite"), kind, tree=tree)


# --- meta commands -------------------------------------------------------------------


def _meta_command(tree: exp.Expression, sql: str) -> Statement | None:
    if isinstance(tree, exp.Show):
        what = str(tree.name).upper()
        target = tree.args.get("target")
        target_name = target.name if isinstance(target, exp.Expression) else None
        if what == "TABLES":
            return Statement(None, "show_tables")
        if what in ("COLUMNS", "FIELDS") and target_name:
            return Statement(None, "describe", target=target_name)
        if what == "CREATE TABLE" and target_name:
            return Statement(None, "show_create", target=target_name)
        if what == "DATABASES":
            return Statement(None, "show_databases")
        raise syntax_error(sql)
    if isinstance(tree, exp.Describe) and isinstance(tree.this, exp.Table):
        return Statement(None, "describe", target=tree.this.name)
    if isinstance(tree, exp.Use):
        return Statement(None, "use", target=tree.this.name if tree.this else None)
    return None


# --- MySQL-only errors ---------------------------------------------------------------


def _check_mysql_restrictions(tree: exp.Expression) -> None:
    for node in tree.find_all(exp.In):
        query = node.args.get("query")
        inner = query.this if isinstance(query, exp.Subquery) else query
        if isinstance(inner, exp.Select) and inner.args.get("limit"):
            raise MySQLError(
                1235, "42000", "This version of MySQL doesn't yet support 'LIMIT & IN/ALL/ANY/SOME subquery'"
            )
    if isinstance(tree, (exp.Update, exp.Delete)):
        target = _target_table(tree)
        if target is not None and _subquery_reads(tree, target.name):
            # MySQL words it "for update" for DELETE too
            raise MySQLError(
                1093, "HY000", f"You can't specify target table '{target.alias_or_name}' for update in FROM clause"
            )


def _subquery_reads(tree: exp.Expression, table: str) -> bool:
    """Does a WHERE/SET subquery read ``table`` directly (not through a derived table)?"""
    parts = [tree.args.get("where"), *(tree.expressions if isinstance(tree, exp.Update) else [])]
    for part in filter(None, parts):
        for select in part.find_all(exp.Select):
            if _inside_derived_table(select, stop=tree):
                continue  # MySQL materializes derived tables first, so reading them is fine
            for source in _direct_sources(select):
                if isinstance(source, exp.Table) and source.name.lower() == table.lower():
                    return True
    return False


def _inside_derived_table(node: exp.Expression, stop: exp.Expression) -> bool:
    parent = node.parent
    while parent is not None and parent is not stop:
        if isinstance(parent, exp.Subquery) and isinstance(parent.parent, (exp.From, exp.Join)):
            return True
        parent = parent.parent
    return False


def _direct_sources(select: exp.Select) -> list[exp.Expression]:
    sources: list[exp.Expression] = []
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is not None:
        sources.append(from_.this)
    sources.extend(join.this for join in select.args.get("joins") or [])
    return sources


def _base_tables(select: exp.Select) -> list[exp.Table] | None:
    """The select's sources when all are stored tables (CTEs and derived tables have no
    rowid, hence no scan position); ``None`` otherwise."""
    sources = _direct_sources(select)
    ctes = {cte.alias_or_name.lower() for cte in select.find_all(exp.CTE)}
    node = select.parent
    while node is not None:
        with_ = node.args.get("with_") or node.args.get("with")
        if with_ is not None:
            ctes.update(cte.alias_or_name.lower() for cte in with_.expressions)
        node = node.parent
    tables = [s for s in sources if isinstance(s, exp.Table) and s.name.lower() not in ctes]
    return tables if tables and len(tables) == len(sources) else None


def _target_table(tree: exp.Update | exp.Delete) -> exp.Table | None:
    this = tree.this
    return this if isinstance(this, exp.Table) else None


# --- SELECT order ---------------------------------------------------------------------


def _add_scan_order(query: exp.Query) -> None:
    """Make SQLite return rows in the order MySQL would (see module docstring)."""
    if not isinstance(query, exp.Select):
        return  # UNION etc.: order of set operations is left to the engine
    tables = _base_tables(query)
    if not tables or query.args.get("distinct"):
        return
    grouped = bool(query.args.get("group"))
    if not grouped and _is_aggregate_only(query):
        return
    keys: list[exp.Expression] = []
    for table in tables:
        rowid = exp.column("rowid", table=table.alias_or_name)
        keys.append(exp.Min(this=rowid) if grouped else rowid)
    order = query.args.get("order")
    if order is None:
        if not grouped:
            return  # a plain scan already comes out in rowid order
        query.set("order", exp.Order(expressions=[exp.Ordered(this=k) for k in keys]))
    else:
        order.set("expressions", [*order.expressions, *(exp.Ordered(this=k) for k in keys)])


def _filesort_plan(query: exp.Query) -> tuple[str, SortPlan] | None:
    """The unsorted query with hidden sort keys, for a single-block SELECT with ORDER BY."""
    if not isinstance(query, exp.Select) or query.args.get("order") is None or query.args.get("distinct"):
        return None
    tables = _base_tables(query)
    if not tables or _is_aggregate_only(query):
        return None
    bounds = _literal_bounds(query)
    if bounds is None:
        return None
    aliases = {e.alias.lower(): e.unalias() for e in query.expressions if isinstance(e, exp.Alias)}
    keys, descending = [], []
    for ordered in query.args["order"].expressions:
        key = ordered.this
        if isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
            key = aliases[key.name.lower()]
        elif isinstance(key, exp.Literal) and not key.is_string:
            index = int(key.this) - 1
            if not 0 <= index < len(query.expressions):
                return None  # let SQLite report the bad position
            key = query.expressions[index].unalias()
        keys.append(key.copy())
        descending.append(bool(ordered.args.get("desc")))
    grouped = bool(query.args.get("group"))
    positions = [
        exp.Min(this=exp.column("rowid", table=t.alias_or_name)) if grouped else exp.column("rowid", table=t.alias_or_name)
        for t in tables
    ]
    unsorted = query.copy()
    for arg in ("order", "limit", "offset"):
        unsorted.set(arg, None)
    visible = len(unsorted.expressions)
    unsorted.set("expressions", [*unsorted.expressions, *keys, *positions])
    plan = SortPlan(visible, tuple(descending), len(positions), *bounds)
    return unsorted.sql(dialect="sqlite"), plan


def _literal_bounds(query: exp.Select) -> tuple[int, int | None] | None:
    """(offset, limit) when both are absent or integer literals, else None."""

    def value(node: exp.Expression | None) -> int | None | bool:
        if node is None:
            return None
        inner = node.args.get("expression") or node.this
        if isinstance(inner, exp.Literal) and not inner.is_string and inner.this.isdigit():
            return int(inner.this)
        return False

    limit, offset = value(query.args.get("limit")), value(query.args.get("offset"))
    if limit is False or offset is False:
        return None
    return (offset or 0, limit)  # type: ignore[return-value]


def _is_aggregate_only(select: exp.Select) -> bool:
    return any(isinstance(e.unalias(), exp.AggFunc) for e in select.expressions) and not select.args.get("group")


# --- DELETE / UPDATE ------------------------------------------------------------------


def _rowid_subquery(target: exp.Table, source_sql: str, where: exp.Expression | None, order, limit) -> str:
    key = f'"{target.alias_or_name}".rowid'
    parts = [f"SELECT {key} FROM {source_sql}"]
    if where is not None:
        parts.append(where.sql(dialect="sqlite"))
    if order is not None:
        parts.append(f"{order.sql(dialect='sqlite')}, {key}")
    if limit is not None:
        parts.append(limit.sql(dialect="sqlite"))
    return " ".join(parts)


def _delete_sql(tree: exp.Delete) -> str:
    tree = tree.transform(_rewrite_dates)
    source = tree.this
    if not isinstance(source, exp.Table):
        raise MySQLError(1064, "42000", "Unsupported DELETE target")
    named = tree.args.get("tables") or []
    joins = source.args.get("joins") or []
    order, limit, where = tree.args.get("order"), tree.args.get("limit"), tree.args.get("where")
    if not named and not joins and order is None and limit is None:
        return tree.sql(dialect="sqlite")
    # The deleted table: the one named before FROM (multi-table form), else the source.
    target = source
    if named:
        wanted = named[0].name.lower()
        candidates = [source, *(j.this for j in joins)]
        target = next(
            (t for t in candidates if isinstance(t, exp.Table) and t.alias_or_name.lower() == wanted), source
        )
    subquery = _rowid_subquery(target, source.sql(dialect="sqlite"), where, order, limit)
    return f'DELETE FROM "{target.name}" WHERE rowid IN ({subquery})'


def _sequential_assignments(assignments: list[exp.Expression]) -> list[exp.Expression]:
    """Substitute earlier SET targets into later right-hand sides (MySQL left-to-right)."""
    written: dict[str, exp.Expression] = {}
    result = []
    for assignment in assignments:
        column = assignment.this
        value = assignment.expression.copy()
        if written:
            value = value.transform(
                lambda n: written[n.name.lower()].copy()
                if isinstance(n, exp.Column) and n.name.lower() in written and _outside_subquery(n)
                else n
            )
        name = column.name.lower() if isinstance(column, exp.Column) else None
        target = exp.column(column.name) if isinstance(column, exp.Column) else column
        result.append(exp.EQ(this=target, expression=value))
        if name:
            written[name] = exp.Paren(this=value)
    return result


def _outside_subquery(node: exp.Expression) -> bool:
    return node.find_ancestor(exp.Subquery, exp.Select) is None


def _update_sql(tree: exp.Update) -> str:
    tree = tree.transform(_rewrite_dates)
    source = tree.this
    if not isinstance(source, exp.Table):
        raise MySQLError(1064, "42000", "Unsupported UPDATE target")
    joins = source.args.get("joins") or []
    order, limit, where = tree.args.get("order"), tree.args.get("limit"), tree.args.get("where")
    if joins:
        return _update_join_sql(tree, source, joins)
    assignments = _sequential_assignments(tree.expressions)
    set_sql = ", ".join(a.sql(dialect="sqlite") for a in assignments)
    alias = source.alias_or_name
    head = f'UPDATE "{source.name}"' + (f' AS "{alias}"' if alias != source.name else "")
    if order is None and limit is None:
        return f"{head} SET {set_sql}" + (f" {where.sql(dialect='sqlite')}" if where is not None else "")
    bare = source.copy()
    subquery = _rowid_subquery(bare, bare.sql(dialect="sqlite"), where, order, limit)
    return f"{head} SET {set_sql} WHERE rowid IN ({subquery})"


def _update_join_sql(tree: exp.Update, source: exp.Table, joins: list[exp.Join]) -> str:
    """``UPDATE t a JOIN s b ON c SET ...`` as ``UPDATE t AS a SET ... FROM s AS b WHERE c AND ...``."""
    if tree.args.get("order") is not None or tree.args.get("limit") is not None:
        raise MySQLError(1221, "HY000", "Incorrect usage of UPDATE and ORDER BY")  # MySQL refuses too
    conditions = [j.args["on"] for j in joins if j.args.get("on") is not None]
    if tree.args.get("where") is not None:
        conditions.append(tree.args["where"].this)
    from_sql = ", ".join(j.this.sql(dialect="sqlite") for j in joins)
    # SQLite's SET takes bare column names of the target.
    target = source.alias_or_name.lower()
    assignments = []
    for a in tree.expressions:
        column = a.this
        if isinstance(column, exp.Column) and column.table and column.table.lower() != target:
            raise MySQLError(1105, "HY000", "updating a joined table other than the first is not supported")
        assignments.append(exp.EQ(this=exp.column(column.name), expression=a.expression))
    alias = source.alias_or_name
    head = f'UPDATE "{source.name}"' + (f' AS "{alias}"' if alias != source.name else "")
    sql = f"{head} SET {', '.join(a.sql(dialect='sqlite') for a in assignments)} FROM {from_sql}"
    if conditions:
        sql += " WHERE " + " AND ".join(f"({c.sql(dialect='sqlite')})" for c in conditions)
    return sql


# --- dates ----------------------------------------------------------------------------

_UNITS = {"DAY": "days", "MONTH": "months", "YEAR": "years", "HOUR": "hours", "MINUTE": "minutes", "SECOND": "seconds"}


def _rewrite_dates(node: exp.Expression) -> exp.Expression:
    if not isinstance(node, (exp.DateAdd, exp.DateSub)):
        return node
    unit = str(node.args.get("unit").name if node.args.get("unit") else "DAY").upper()
    if unit == "WEEK":
        unit, scale = "DAY", 7
    else:
        scale = 1
    if unit not in _UNITS:
        return node
    amount = node.expression
    sign = "-" if isinstance(node, exp.DateSub) else "+"
    modifier = exp.Concat(
        expressions=[
            exp.Literal.string(sign),
            # parenthesised: SQLite binds || tighter than *
            exp.Paren(this=exp.Mul(this=exp.Paren(this=amount.copy()), expression=exp.Literal.number(scale))),
            exp.Literal.string(f" {_UNITS[unit]}"),
        ]
    )
    func = "datetime" if unit in ("HOUR", "MINUTE", "SECOND") else "date"
    return exp.Anonymous(this=func, expressions=[node.this.copy(), modifier])
