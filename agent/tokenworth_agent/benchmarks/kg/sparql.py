"""KG variables as lazy S-expressions, compiled to SPARQL, run on a pluggable endpoint.

Every KG tool call that yields a variable stores an *expression*, never a result. The
expressions are the GrailQA S-expression fragment the LifelongAgentBench records use
(``JOIN`` with ``R``, ``AND``, ``COUNT``, ``ARGMAX``, ``ARGMIN``), so a gold trajectory
rebuilds its record's ``s_expression`` exactly (:func:`to_sexpr`). Nothing touches the
graph until a tool needs to look (relations, attributes, relation ranges) or the final
answer is executed.

Freebase shape: entities and properties are IRIs ``http://rdf.freebase.com/ns/<id>``;
results are reported with that prefix stripped, as the original harness did.

Decisions (the original left them to Virtuoso quirks or did not say):

* ``(JOIN (R rel) src)`` is the set of objects ``o`` with ``src rel o``: get_neighbors
  follows *outgoing* edges, as in the original (Freebase stores each reverse property
  as its own forward predicate, so nothing is lost).
* The members of a variable never include the entities its expression names (the
  original's ``FILTER (?x != ns:<entity>)``), and literals must be untagged or English.
* ARGMAX/ARGMIN keep *every* member that ties the extreme value (the original's
  ``ORDER BY … LIMIT 1`` subquery joined back on the value). Members without the
  attribute drop out. The entity filter applies inside and outside the subquery.
* COUNT counts distinct members; its result is the decimal number as a string ("45"),
  which is how the dataset's ``answer_list`` writes counts.
* Standard SPARQL 1.1 only (``COUNT(DISTINCT ?x)``, not Virtuoso's ``COUNT DISTINCT``),
  so one query text runs on oxigraph and on a Freebase Virtuoso alike (tests/test_kg_virtuoso.py
  runs both, Virtuoso 7.2.5 as AgentBench used). Every name is written as a full IRI after
  validation, so an agent cannot inject SPARQL.
"""

from __future__ import annotations

import dataclasses
import decimal
import http.client
import json
import re
import struct
import urllib.error
import urllib.parse
import urllib.request
from typing import Iterable, Mapping, Protocol, Union

FREEBASE_NS = "http://rdf.freebase.com/ns/"
XSD = "http://www.w3.org/2001/XMLSchema#"

# Freebase ids: MIDs (m.0abc, g.11b...) and dotted schema ids (domain.type.property).
_MID = re.compile(r"^[mg]\.[0-9a-z_]+$")
_SCHEMA_ID = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")

# Literal datatypes that make a property an "attribute" (something argmax/argmin can rank):
# Freebase's type.int, type.float and type.datetime, as they appear in RDF dumps.
NUMERIC_DATATYPES: tuple[str, ...] = tuple(
    XSD + t
    for t in (
        "integer", "int", "long", "short", "decimal", "float", "double",
        "nonNegativeInteger", "positiveInteger",
        "dateTime", "date", "gYear", "gYearMonth",
    )
)

# Freebase bookkeeping domains that are not question-answering relations (names, types,
# topic metadata, user and base namespaces). GrailQA's ontology leaves them out too.
DEFAULT_EXCLUDED_DOMAINS: tuple[str, ...] = ("type", "common", "freebase", "kg", "dataworld", "user", "base")

Row = dict[str, str]


class SparqlEndpointError(RuntimeError):
    """The endpoint could not answer (unreachable, HTTP error, bad response, bad query)."""


class SparqlEndpoint(Protocol):
    """Anything that runs a SPARQL SELECT and returns rows of variable -> lexical value.

    IRIs come back as the full IRI, literals as their lexical form; unbound variables are
    left out of the row.
    """

    def query(self, sparql: str) -> list[Row]: ...


class OxigraphEndpoint:
    """An in-process :mod:`pyoxigraph` store (tests, demos, a locally loaded Freebase slice)."""

    def __init__(self, store: "object") -> None:
        self.store = store

    def query(self, sparql: str) -> list[Row]:
        try:
            solutions = self.store.query(sparql)  # type: ignore[attr-defined]
        except (SyntaxError, ValueError, OSError) as exc:
            raise SparqlEndpointError(f"oxigraph rejected the query ({exc}):\n{sparql}") from exc
        names = [v.value for v in solutions.variables]
        rows: list[Row] = []
        for solution in solutions:
            row = {}
            for name in names:
                term = solution[name]
                if term is not None:
                    row[name] = term.value
            rows.append(row)
        return rows


class HttpSparqlEndpoint:
    """A remote endpoint over the SPARQL 1.1 protocol (query by POST form, JSON results).

    This is how a user who hosts Freebase (e.g. Virtuoso on ``http://host:3001/sparql``)
    runs the real benchmark.
    """

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"SPARQL endpoint URL must be http(s)://host[:port]/path, got {url!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.url = url
        self.timeout = timeout

    def query(self, sparql: str) -> list[Row]:
        request = urllib.request.Request(
            self.url,
            data=urllib.parse.urlencode({"query": sparql}).encode("utf-8"),
            headers={
                "Accept": "application/sparql-results+json",
                "Content-Type": "application/x-www-form-urlencoded",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
                _check_complete(response.headers, self.url)
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode("utf-8", "replace")
            raise SparqlEndpointError(
                f"SPARQL endpoint {self.url} answered HTTP {exc.code} {exc.reason}: {detail}"
            ) from exc
        except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SparqlEndpointError(
                f"cannot reach the SPARQL endpoint at {self.url} ({reason}); check that the "
                f"Freebase server is running and the URL is right"
            ) from exc
        return _rows_from_json(body, self.url)


def _check_complete(headers: "http.client.HTTPMessage", source: str) -> None:
    """Refuse an answer that Virtuoso cut short: it still says HTTP 200, only a header tells.

    ``X-SPARQL-MaxRows``: the result reached the server's ``ResultSetMaxRows`` cap (the rest
    was dropped). ``X-SQL-State`` (e.g. ``S1TAT``): an "anytime" query stopped at
    ``MaxQueryExecutionTime`` and returned what it had. Either would give a listing or an
    answer set that silently misses members, so both are endpoint errors.
    """
    cap = headers.get("X-SPARQL-MaxRows")
    if cap is not None:
        raise SparqlEndpointError(
            f"{source} cut the result at {cap} rows (Virtuoso's [SPARQL] ResultSetMaxRows); raise that limit "
            f"in the server's virtuoso.ini"
        )
    state = headers.get("X-SQL-State")
    if state is not None:
        message = headers.get("X-SQL-Message", "")
        raise SparqlEndpointError(
            f"{source} returned a partial result (SQL state {state}: {message}); raise Virtuoso's [SPARQL] "
            f"MaxQueryExecutionTime"
        )


# SPARQL JSON term types. "typed-literal" is the SPARQL XML-era spelling that Virtuoso 7 still
# writes for a literal with a datatype (W3C's JSON format says "literal" plus "datatype").
_TERM_TYPES = frozenset({"uri", "literal", "typed-literal", "bnode"})


def _term_value(cell: Mapping[str, object]) -> str:
    """A result term as the endpoints report it: an IRI in full, a literal's lexical form.

    Only the lexical form is kept (datatypes and language tags are not), which is what
    oxigraph's ``term.value`` gives. A number or boolean is written in the form oxigraph
    stores it in (:func:`canonical_lexical`): Virtuoso hands back the dump's own spelling
    (``"140.0"^^xsd:float``) where oxigraph says ``140``, and a value must not depend on the
    engine. (LAB's answers are MIDs or counts, which both engines already write alike.)
    """
    kind = cell["type"]
    if kind not in _TERM_TYPES:
        raise ValueError(f"unknown RDF term type {kind!r}")
    value = str(cell["value"])
    datatype = cell.get("datatype")
    return canonical_lexical(value, str(datatype)) if kind != "uri" and datatype else value


_INTEGER_TYPES = frozenset(XSD + t for t in (
    "integer", "int", "long", "short", "byte", "nonNegativeInteger", "positiveInteger", "negativeInteger",
    "nonPositiveInteger", "unsignedLong", "unsignedInt", "unsignedShort", "unsignedByte"))
# XSD lexical spaces (Python's int/float/Decimal also take "1_000", "infinity", "1e5" as a decimal).
_XSD_INTEGER = re.compile(r"[+-]?[0-9]+")
_XSD_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")
_XSD_FLOAT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _positional(number: decimal.Decimal) -> str:
    """A decimal without exponent or trailing zeros ("1E+2" -> "100", "1.50" -> "1.5")."""
    return "0" if number.is_zero() else format(number.normalize(), "f")


def _shortest(value: float, single: bool) -> str:
    """The shortest digits that read back as the same double (or float32), written positionally.

    Among equally short candidates the nearest wins and a tie rounds half up, as oxigraph's
    (Rust's) float formatting does; Python's ``repr`` would round a tie to even.
    """
    code, most = ("f", 9) if single else ("d", 17)
    try:
        target = struct.unpack(code, struct.pack(code, value))[0]
    except OverflowError:
        target = float("inf") if value > 0 else float("-inf")
    if target in (float("inf"), float("-inf")):  # beyond the type's range
        return "-INF" if target < 0 else "INF"
    if target == 0:  # below its range
        return "-0" if value < 0 else "0"
    exact = decimal.Decimal(target)
    with decimal.localcontext() as context:
        context.prec = 1200  # more than the exact decimal expansion of any double has
        for digits in range(1, most + 1):
            rounded = exact.quantize(decimal.Decimal(1).scaleb(exact.adjusted() - digits + 1), decimal.ROUND_HALF_UP)
            if struct.unpack(code, struct.pack(code, float(rounded)))[0] == target:
                return _positional(rounded)
        return _positional(exact)


def canonical_lexical(value: str, datatype: str) -> str:
    """A number's or boolean's lexical form as oxigraph writes it; anything else unchanged.

    Integers lose signs and leading zeros (``+012`` -> ``12``), decimals their trailing zeros
    (``1.50`` -> ``1.5``), floats and doubles are the shortest digits that denote the same
    value, without exponent (``140.0`` -> ``140``, ``1e20`` -> ``100000000000000000000``),
    booleans are ``true``/``false``. A malformed value is returned as it is, as oxigraph does.
    """
    try:
        if datatype in _INTEGER_TYPES and _XSD_INTEGER.fullmatch(value):
            return str(int(value))
        if datatype == XSD + "decimal" and _XSD_DECIMAL.fullmatch(value):
            return _positional(decimal.Decimal(value))
        if datatype in (XSD + "float", XSD + "double"):
            special = value.lstrip("+-").lower()  # oxigraph (Rust) reads inf, infinity and nan in any case
            if special in ("inf", "infinity"):
                return "-INF" if value.startswith("-") else "INF"
            if special == "nan":
                return "NaN"
            if not _XSD_FLOAT.fullmatch(value):
                return value
            number = float(value)
            if number in (float("inf"), float("-inf")):  # a double overflowed: oxigraph says INF too
                return "-INF" if number < 0 else "INF"
            if number == 0:
                return "-0" if value.startswith("-") else "0"
            return _shortest(number, single=datatype == XSD + "float")
        if datatype == XSD + "boolean":
            return {"1": "true", "0": "false"}.get(value, value)
    except (ValueError, ArithmeticError, struct.error):
        return value
    return value


def _rows_from_json(body: bytes, source: str) -> list[Row]:
    try:
        document = json.loads(body)
        bindings = document["results"]["bindings"]
        return [{name: _term_value(cell) for name, cell in binding.items()} for binding in bindings]
    except (ValueError, KeyError, TypeError) as exc:
        raise SparqlEndpointError(
            f"{source} did not return SPARQL JSON results ({exc}): {body[:200]!r}"
        ) from exc


# --------------------------------------------------------------------------- expressions


@dataclasses.dataclass(frozen=True)
class Entity:
    mid: str


@dataclasses.dataclass(frozen=True)
class Join:
    """``(JOIN (R relation) source)``: everything ``source`` reaches by ``relation``."""

    relation: str
    source: "Expr"


@dataclasses.dataclass(frozen=True)
class And:
    left: "Expr"
    right: "Expr"


@dataclasses.dataclass(frozen=True)
class Count:
    operand: "Expr"


@dataclasses.dataclass(frozen=True)
class Extremum:
    """``(ARGMAX operand attribute)`` or ``(ARGMIN …)``."""

    operand: "Expr"
    attribute: str
    maximum: bool


Expr = Union[Entity, Join, And, Count, Extremum]


def is_mid(text: str) -> bool:
    return bool(_MID.match(text))


def is_schema_id(text: str) -> bool:
    return bool(_SCHEMA_ID.match(text))


def to_sexpr(expr: Expr) -> str:
    """The GrailQA S-expression text, in the dataset's own spelling."""
    if isinstance(expr, Entity):
        return expr.mid
    if isinstance(expr, Join):
        return f"(JOIN (R {expr.relation}) {to_sexpr(expr.source)})"
    if isinstance(expr, And):
        return f"(AND {to_sexpr(expr.left)} {to_sexpr(expr.right)})"
    if isinstance(expr, Count):
        return f"(COUNT {to_sexpr(expr.operand)})"
    name = "ARGMAX" if expr.maximum else "ARGMIN"
    return f"({name} {to_sexpr(expr.operand)} {expr.attribute})"


def entities_of(expr: Expr) -> list[str]:
    """MIDs the expression names, sorted (for the member filter)."""
    found: set[str] = set()

    def walk(node: Expr) -> None:
        if isinstance(node, Entity):
            found.add(node.mid)
        elif isinstance(node, Join):
            walk(node.source)
        elif isinstance(node, And):
            walk(node.left)
            walk(node.right)
        else:
            walk(node.operand)

    walk(expr)
    return sorted(found)


def iri(freebase_id: str) -> str:
    """``<http://rdf.freebase.com/ns/id>`` after checking the id cannot break out of the IRI."""
    if not (is_mid(freebase_id) or is_schema_id(freebase_id)):
        raise ValueError(f"{freebase_id!r} is not a Freebase id (a MID like m.0abc or a dotted id like a.b.c)")
    return f"<{FREEBASE_NS}{freebase_id}>"


def strip_namespace(value: str) -> str:
    """Report values as the dataset writes them: MIDs/ids without the namespace.

    The trailing ``-08:00`` that Freebase dumps put on dates is dropped too, as the
    original harness did.
    """
    if value.startswith(FREEBASE_NS):
        return value[len(FREEBASE_NS):]
    return value[: -len("-08:00")] if value.endswith("-08:00") else value


class _Patterns:
    """Turns a set-valued expression into triple patterns binding a given variable."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.counter = 0
        self.lines: list[str] = []

    def fresh(self) -> str:
        self.counter += 1
        return f"?{self.prefix}{self.counter}"

    def bind(self, expr: Expr, var: str) -> None:
        if isinstance(expr, Join):
            if isinstance(expr.source, Entity):
                self.lines.append(f"{iri(expr.source.mid)} {iri(expr.relation)} {var} .")
            else:
                source_var = self.fresh()
                self.bind(expr.source, source_var)
                self.lines.append(f"{source_var} {iri(expr.relation)} {var} .")
        elif isinstance(expr, And):
            self.bind(expr.left, var)
            self.bind(expr.right, var)
        elif isinstance(expr, Entity):
            self.lines.append(f"VALUES {var} {{ {iri(expr.mid)} }}")
        elif isinstance(expr, Extremum):
            self.bind_extremum(expr, var)
        else:
            raise ValueError("COUNT is a number, not a set; it can only be the final answer")

    def bind_extremum(self, expr: Extremum, var: str) -> None:
        value = self.fresh()
        self.bind(expr.operand, var)
        self.lines.append(f"{var} {iri(expr.attribute)} {value} .")
        inner = _Patterns(f"{self.prefix}{self.counter}_")
        inner_var = inner.fresh()
        inner.bind(expr.operand, inner_var)
        inner.lines.append(f"{inner_var} {iri(expr.attribute)} {value} .")
        inner.lines.extend(member_filters(inner_var, entities_of(expr)))
        order = f"DESC({value})" if expr.maximum else value
        body = "\n    ".join(inner.lines)
        self.lines.append(f"{{ SELECT {value} WHERE {{\n    {body}\n  }} ORDER BY {order} LIMIT 1 }}")


def member_filters(var: str, mids: Iterable[str]) -> list[str]:
    filters = [f"FILTER (!isLiteral({var}) || lang({var}) = '' || langMatches(lang({var}), 'en'))"]
    mids = list(mids)
    if mids:
        filters.append(f"FILTER ({var} NOT IN ({', '.join(iri(m) for m in mids)}))")
    return filters


def _member_block(expr: Expr, var: str = "?x") -> str:
    patterns = _Patterns("v")
    patterns.bind(expr, var)
    patterns.lines.extend(member_filters(var, entities_of(expr)))
    return "\n  ".join(patterns.lines)


def answer_query(expr: Expr) -> str:
    """The query whose single column is the variable's value(s)."""
    if isinstance(expr, Count):
        return f"SELECT (COUNT(DISTINCT ?x) AS ?value) WHERE {{\n  {_member_block(expr.operand)}\n}}"
    return f"SELECT DISTINCT ?x WHERE {{\n  {_member_block(expr)}\n}}"


def _subject_block(subject: Expr) -> str:
    if isinstance(subject, Entity):
        return f"VALUES ?x {{ {iri(subject.mid)} }}"
    return _member_block(subject)


def relations_query(subject: Expr) -> str:
    """Outgoing Freebase predicates of an entity or a variable's members that lead to entities."""
    return (
        f"SELECT DISTINCT ?rel WHERE {{\n  {_subject_block(subject)}\n  ?x ?rel ?obj .\n"
        f"  FILTER (isIRI(?obj) && STRSTARTS(STR(?rel), \"{FREEBASE_NS}\"))\n}}"
    )


def attributes_query(subject: Expr) -> str:
    """Outgoing predicates of the members whose values are numbers or dates."""
    types = ", ".join(f"<{t}>" for t in NUMERIC_DATATYPES)
    return (
        f"SELECT DISTINCT ?rel WHERE {{\n  {_subject_block(subject)}\n  ?x ?rel ?obj .\n"
        f"  FILTER (isLiteral(?obj) && datatype(?obj) IN ({types}) && STRSTARTS(STR(?rel), \"{FREEBASE_NS}\"))\n}}"
    )


def range_query(relation: str) -> str:
    """Freebase's schema triple for what a property points at."""
    return f"SELECT DISTINCT ?type WHERE {{ {iri(relation)} {iri('type.property.expected_type')} ?type . }}"


def _single_column(rows: list[Row]) -> list[str]:
    out = []
    for row in rows:
        if len(row) != 1:
            raise SparqlEndpointError(f"expected one bound column per row, got {sorted(row)}")
        out.append(strip_namespace(next(iter(row.values()))))
    return out


def _schema_ids(values: Iterable[str], excluded_domains: Iterable[str]) -> list[str]:
    excluded = set(excluded_domains)
    return sorted({v for v in values if is_schema_id(v) and v.split(".", 1)[0] not in excluded})


@dataclasses.dataclass
class FreebaseQueries:
    """What the KG tools ask of an endpoint, with results in the dataset's spelling.

    ``relation_vocabulary`` / ``attribute_vocabulary``, when given (e.g. the original's
    ``ontology/vocab.json``), restrict listings to those names, as the original did;
    otherwise the structural rules above apply and ``excluded_domains`` drops Freebase
    bookkeeping. ``ranges`` (e.g. the original's ``ontology/fb_roles``, read by
    :func:`tokenworth_agent.benchmarks.kg.ontology.load_fb_roles`) overrides the endpoint's ``type.property.expected_type``
    for a relation's type.
    """

    endpoint: SparqlEndpoint
    excluded_domains: tuple[str, ...] = DEFAULT_EXCLUDED_DOMAINS
    relation_vocabulary: frozenset[str] | None = None
    attribute_vocabulary: frozenset[str] | None = None
    ranges: Mapping[str, str] = dataclasses.field(default_factory=dict)
    unknown_type: str = "type.object"
    _range_cache: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)

    def relations(self, subject: Expr) -> list[str]:
        found = _schema_ids(_single_column(self.endpoint.query(relations_query(subject))), self.excluded_domains)
        return [r for r in found if self.relation_vocabulary is None or r in self.relation_vocabulary]

    def attributes(self, subject: Expr) -> list[str]:
        found = _schema_ids(_single_column(self.endpoint.query(attributes_query(subject))), self.excluded_domains)
        return [a for a in found if self.attribute_vocabulary is None or a in self.attribute_vocabulary]

    def range_of(self, relation: str) -> str:
        """The type a relation's objects are instances of; the first by name if several."""
        if relation in self.ranges:
            return self.ranges[relation]
        if relation not in self._range_cache:
            types = sorted(_single_column(self.endpoint.query(range_query(relation))))
            self._range_cache[relation] = types[0] if types else self.unknown_type
        return self._range_cache[relation]

    def execute(self, expr: Expr) -> list[str]:
        """The variable's value set, sorted; a COUNT gives one decimal string."""
        return sorted(set(_single_column(self.endpoint.query(answer_query(expr)))))
