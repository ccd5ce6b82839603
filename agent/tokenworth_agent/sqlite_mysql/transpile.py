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
  ``IN (subquery)`` (1235), a subquery reading the table being modified (1093), and
  ONLY_FULL_GROUP_BY (1055/1140, see ``check_full_group_by``).
* **Derived tables and CTEs** are materialized as MySQL does (``materialize``): each one
  runs as a query of its own, with the row-order rules above, and its rows go to a
  temporary table in that order, which the outer query then scans.
* **Reserved names.** The emulation's own objects start with ``_mysql_``; a statement
  naming one of them, a SQLite schema table or a SQLite-only function is refused with the
  error MySQL gives for a missing object (``check_names``).
"""

from __future__ import annotations

import dataclasses

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from .functions import SQLITE_ONLY_FUNCTIONS
from .errors import MySQLError, function_missing, syntax_error, table_missing, trigger_missing

ALLOWED_STATEMENTS = (exp.Query, exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter)
INTERNAL_PREFIX = "_mysql_"  # every object the emulation creates starts with this
_RESERVED_TABLE_PREFIXES = (INTERNAL_PREFIX, "sqlite_", "pragma_")
# Aggregates sqlglot reads as plain function calls
_ANONYMOUS_AGGREGATES = frozenset({"std", "var_samp", "json_arrayagg", "json_objectagg", "bit_xor"})


class NotMaterializable(Exception):
    """A derived table or CTE that cannot run on its own (correlated, recursive, too big)."""


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


def paren_depth(sql: str) -> int:
    """Deepest nesting of parentheses outside quoted text (a linear pre-parse check)."""
    depth = deepest = 0
    quote: str | None = None
    escaped = False
    for char in sql:
        if quote is not None:
            if escaped:
                escaped = False
            elif char == "\\" and quote != "`":
                escaped = True
            elif char == quote:
                quote = None
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
    return deepest


def translate(sql: str) -> Statement:
    """Translate one MySQL statement (no trailing ``;``) for the SQLite engine."""
    return translate_tree(parse(sql), sql)


def translate_tree(tree: exp.Expression, sql: str) -> Statement:
    """Translate a parsed statement; ``sql`` is its text, for error messages."""
    meta = _meta_command(tree, sql)
    if meta is not None:
        return meta
    if isinstance(tree, exp.Command) or not isinstance(tree, ALLOWED_STATEMENTS):
        raise syntax_error(sql)
    _check_mysql_restrictions(tree)
    check_full_group_by(tree)
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
        if what == "TRIGGERS":
            return Statement(None, "show_triggers")
        raise syntax_error(sql)
    if isinstance(tree, exp.Drop) and str(tree.args.get("kind") or "").upper() == "TRIGGER":
        # The agent cannot create triggers (CREATE TRIGGER is not supported), so every
        # trigger it could name is missing; the emulation's own are not its to drop.
        if tree.args.get("exists"):
            return Statement(None, "noop")
        raise trigger_missing()
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


# --- reserved names ------------------------------------------------------------------


def check_names(tree: exp.Expression, database: str) -> None:
    """Refuse statements that name the emulation's own objects, SQLite's schema tables,
    table-valued functions or SQLite-only functions, with the error MySQL gives for a
    missing object (so nothing about them is revealed)."""
    if isinstance(tree, exp.Drop) and str(tree.args.get("kind") or "").upper() == "TRIGGER":
        return  # answered as MySQL would without touching the database (see _meta_command)
    defining = isinstance(tree, (exp.Create, exp.Alter, exp.Drop))
    for node in tree.walk():
        if isinstance(node, exp.Table):
            if node.this is not None and not isinstance(node.this, exp.Identifier):
                raise syntax_error(node.sql(dialect="mysql"))  # e.g. pragma_table_info('t')
            if node.name.lower().startswith(_RESERVED_TABLE_PREFIXES):
                if defining:
                    raise MySQLError(1103, "42000", f"Incorrect table name '{node.name}'")
                raise table_missing(database, node.name)
        elif isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name.startswith(INTERNAL_PREFIX) or name in SQLITE_ONLY_FUNCTIONS:
                raise function_missing(database, node.name)


# --- ONLY_FULL_GROUP_BY -----------------------------------------------------------------


def _scope_nodes(node: exp.Expression):
    """``node`` and its descendants in the same query scope, outside aggregates and window
    functions (nested SELECTs are their own scopes)."""
    return node.walk(
        prune=lambda n: isinstance(n, (exp.AggFunc, exp.Window, exp.Select, exp.Subquery))
        or (isinstance(n, exp.Anonymous) and n.name.lower() in _ANONYMOUS_AGGREGATES)
    )


def _has_aggregate(node: exp.Expression) -> bool:
    for n in node.walk(prune=lambda n: isinstance(n, (exp.Window, exp.Select, exp.Subquery)) and n is not node):
        if isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Window):
            return True
        if isinstance(n, exp.Anonymous) and n.name.lower() in _ANONYMOUS_AGGREGATES:
            return True
    return False


def _source_names(select: exp.Select) -> dict[str, str]:
    """Alias (lower-cased) -> how MySQL names the source in its errors (db-less here)."""
    names = {}
    for source in _direct_sources(select):
        if isinstance(source, exp.Table):
            names[source.alias_or_name.lower()] = source.name
        elif source.alias_or_name:
            names[source.alias_or_name.lower()] = source.alias_or_name
    return names


def check_full_group_by(tree: exp.Expression) -> None:
    """MySQL 8's default ``ONLY_FULL_GROUP_BY``: in a grouped (or aggregated) SELECT, each
    select-list expression must be a GROUP BY expression, or use only grouped columns
    outside aggregates. Functional dependence is not detected (MySQL detects it through
    primary and unique keys, which the benchmark's tables do not have) and ``*`` is not
    checked."""
    for select in tree.find_all(exp.Select):
        group = select.args.get("group")
        aggregated = any(_has_aggregate(e) for e in select.expressions) or any(
            select.args.get(part) is not None and _has_aggregate(select.args[part]) for part in ("having", "order")
        )
        if group is None and not aggregated:
            continue
        keys = list(group.expressions) if group is not None else []
        aliases = {e.alias.lower(): e.unalias() for e in select.expressions if isinstance(e, exp.Alias)}
        for key in list(keys):
            if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit():
                index = int(key.this) - 1
                if 0 <= index < len(select.expressions):
                    keys.append(select.expressions[index].unalias())
            elif isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
                keys.append(aliases[key.name.lower()])
        key_sql = {k.sql(dialect="mysql") for k in keys}
        grouped = [(k.table.lower(), k.name.lower()) for k in keys if isinstance(k, exp.Column)]
        sources = _source_names(select)
        only_source = next(iter(sources.values())) if len(sources) == 1 else ""
        for position, expression in enumerate(select.expressions, start=1):
            inner = expression.unalias()
            if isinstance(inner, exp.Star) or inner.sql(dialect="mysql") in key_sql:
                continue
            for node in _scope_nodes(inner):
                if not isinstance(node, exp.Column) or node.is_star:
                    continue
                table, name = node.table.lower(), node.name.lower()
                if any(n == name and (not t or not table or t == table) for t, n in grouped):
                    continue
                owner = sources.get(table, node.table) if table else only_source
                column = f"{owner}.{node.name}" if owner else node.name
                raise _full_group_by_error(position, column, grouped=group is not None)


def _full_group_by_error(position: int, column: str, grouped: bool) -> MySQLError:
    mode = "this is incompatible with sql_mode=only_full_group_by"
    if grouped:
        return MySQLError(
            1055,
            "42000",
            f"Expression #{position} of SELECT list is not in GROUP BY clause and contains nonaggregated column "
            f"'{column}' which is not functionally dependent on columns in GROUP BY clause; {mode}",
        )
    return MySQLError(
        1140,
        "42000",
        f"In aggregated query without GROUP BY, expression #{position} of SELECT list contains nonaggregated "
        f"column '{column}'; {mode}",
    )


# --- derived tables and CTEs -----------------------------------------------------------------


def _is_derived(node: exp.Expression) -> bool:
    return isinstance(node, exp.Subquery) and isinstance(node.parent, (exp.From, exp.Join))


def has_derived_tables(tree: exp.Expression) -> bool:
    """Does the query read a derived table or a (top-level) CTE?"""
    return (tree.args.get("with_") or tree.args.get("with")) is not None or any(
        _is_derived(n) for n in tree.find_all(exp.Subquery)
    )


def only_source(tree: exp.Expression) -> str | None:
    """Name of the outermost SELECT's single stored source, if it has exactly one."""
    select = tree
    while isinstance(select, exp.SetOperation):
        select = select.this
    if not isinstance(select, exp.Select):
        return None
    sources = _direct_sources(select)
    return sources[0].name if len(sources) == 1 and isinstance(sources[0], exp.Table) else None


def _is_simple_outer(select: exp.Expression, source: exp.Expression) -> bool:
    """MySQL keeps a derived table's ORDER BY only when the outer query is not grouped or
    aggregated, has no DISTINCT, HAVING or ORDER BY, and reads only that source."""
    if not isinstance(select, exp.Select):
        return False
    if any(select.args.get(a) for a in ("group", "having", "order", "distinct", "joins")):
        return False
    if any(_has_aggregate(e) for e in select.expressions):
        return False
    sources = _direct_sources(select)
    return len(sources) == 1 and sources[0] is source


def _without_ignored_order(body: exp.Expression, simple: bool) -> exp.Expression:
    if not isinstance(body, exp.Query):
        raise NotMaterializable("not a query")  # e.g. DML inside WITH: SQLite reports it
    if isinstance(body, exp.Select) and body.args.get("order") and not body.args.get("limit") and not simple:
        body.set("order", None)
    return body


def _alias_columns(node: exp.Expression) -> list[str] | None:
    alias = node.args.get("alias")
    columns = alias.args.get("columns") if isinstance(alias, exp.TableAlias) else None
    return [c.name for c in columns] if columns else None


def _reference(temp: str, alias: str) -> exp.Table:
    return exp.Table(
        this=exp.to_identifier(temp, quoted=True), alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True))
    )


def _cte_references(tree: exp.Expression, name: str) -> list[exp.Table]:
    return [t for t in tree.find_all(exp.Table) if not t.args.get("db") and t.name.lower() == name]


def materialize(tree: exp.Query, store) -> exp.Query:
    """``tree`` with each non-recursive top-level CTE and each derived table replaced by a
    stored table: ``store(body, column_names)`` runs the body and returns the new table's
    name. A derived table's ORDER BY without LIMIT is dropped where MySQL ignores it."""
    tree = tree.copy()
    key = "with_" if "with_" in tree.args else "with"
    with_ = tree.args.get(key)
    if with_ is not None:
        if with_.args.get("recursive"):
            raise NotMaterializable("recursive CTE")
        for cte in with_.expressions:
            name = cte.alias_or_name.lower()
            references = _cte_references(tree, name)
            simple = len(references) == 1 and _is_simple_outer(references[0].parent.parent, references[0])
            body = _without_ignored_order(cte.this.copy(), simple)
            temp = store(body, _alias_columns(cte))
            for reference in _cte_references(tree, name):
                if reference.find_ancestor(exp.CTE) is cte:
                    continue
                reference.replace(_reference(temp, reference.alias_or_name))
        tree.set(key, None)
    outermost = [
        n for n in tree.find_all(exp.Subquery) if _is_derived(n) and not any(_is_derived(a) for a in _ancestors(n, tree))
    ]
    for subquery in outermost:
        if not subquery.alias_or_name:
            raise MySQLError(1248, "42000", "Every derived table must have its own alias")
        simple = _is_simple_outer(subquery.parent.parent, subquery)
        body = _without_ignored_order(subquery.this.copy(), simple)
        temp = store(body, _alias_columns(subquery))
        subquery.replace(_reference(temp, subquery.alias_or_name))
    return tree


def _ancestors(node: exp.Expression, stop: exp.Expression):
    parent = node.parent
    while parent is not None and parent is not stop:
        yield parent
        parent = parent.parent


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
