"""The KG environment against the real Virtuoso 7.2.5 (Debian's virtuoso-opensource), step by step
equal to oxigraph; and `tokenworth kg serve` / `kg stop` end to end.

One Virtuoso serves the whole module (session fixture): it runs from a temporary folder with its
own virtuoso.ini, listens on two free 127.0.0.1 ports, holds the fixture graph (tests/kg_fixture.py,
written as N-Triples and bulk-loaded into <http://freebase.com>, the graph dki-lab/Freebase-Setup
loads Freebase into), and is stopped and its folder removed at the end, also when a test fails.
Without Virtuoso (virtuoso-t and isql-vt not in PATH) every test that needs it is skipped with the
reason; `make setup` installs it (scripts/install-system-deps.sh), so CI always runs them.
"""

from __future__ import annotations

import http.server
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

import pyoxigraph as ox
import pytest

pytestmark = pytest.mark.server  # a real Virtuoso server (make test-quick leaves it out)
from typer.testing import CliRunner

from tokenworth_agent.cli import app
from tokenworth_agent.benchmarks.kg.ontology import KGVocabulary, load_kg_vocabulary
from tokenworth_agent.benchmarks.kg.env import KGEnvironment
from tokenworth_agent.benchmarks.kg.sparql import (
    Entity,
    FreebaseQueries,
    HttpSparqlEndpoint,
    Join,
    OxigraphEndpoint,
    SparqlEndpoint,
    SparqlEndpointError,
    canonical_lexical,
)
from tokenworth_agent.benchmarks.kg.virtuoso import (
    INSTALL_COMMAND,
    STATE_FILE,
    VirtuosoServer,
    binaries,
    free_port,
    read_state,
)
from tokenworth_agent.benchmarks.kg.tasks import KGTask
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.benchmarks.kg.tasks import kg_gold_replies as gold_replies
from tests.kg_fixture import NS, REPLAYED_RECORDS, build_fixture_store

GRAPH = "http://freebase.com"
_SCRIPT = Path(sys.executable).with_name("tokenworth")
TOKENWORTH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "tokenworth_agent.cli"]
NOT_INSTALLED = (f"Virtuoso is not installed (virtuoso-t/isql-vt not in PATH); install it with: {INSTALL_COMMAND} "
                 f"(make setup does: scripts/install-system-deps.sh)")
# Fixture predicates that LAB's ontology (vocab.json of knowledge_graph/ontology) does not list:
# the filtered listings must drop them on both engines.
NOT_IN_LAB_VOCABULARY = frozenset({"royalty.system_of_nobility.rank_relationships", "book.written_work.number_of_pages",
                                   "spaceflight.bipropellant_rocket_engine.isp"})
BOOKKEEPING = ("type.", "common.")

TIMINGS: dict[str, float] = {}  # what the session server measured, printed at its end (docs/kg.md quotes it)


def two_free_ports() -> tuple[int, int]:
    first = free_port()
    second = free_port()
    while second == first:
        second = free_port()
    return first, second


def write_dump(store: ox.Store, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(store.dump(format=ox.RdfFormat.N_TRIPLES, from_graph=ox.DefaultGraph()))
    return path


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def kg_tasks(data_dir: str) -> list[KGTask]:
    return load_tasks("kg", data_dir)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def store() -> ox.Store:
    return build_fixture_store()


@pytest.fixture(scope="session")
def virtuoso() -> Iterator[VirtuosoServer]:
    """Virtuoso on the fixture graph, started once; stopped and removed at the end whatever happens."""
    if binaries() is None:
        pytest.skip(NOT_INSTALLED)
    root = Path(tempfile.mkdtemp(prefix="tokenworth-virtuoso-"))
    server = VirtuosoServer(root / "db", *two_free_ports())
    try:
        dump = write_dump(build_fixture_store(), root / "dump" / "fixture.nt")
        TIMINGS["start_s"] = server.start(memory_mb=64, dirs_allowed=[dump.parent], timeout=120)
        TIMINGS["load_s"] = server.load([dump], GRAPH)
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)
            if TIMINGS:
                print(f"\nVirtuoso (session server): started in {TIMINGS.get('start_s', float('nan')):.2f} s, "
                      f"fixture loaded in {TIMINGS.get('load_s', float('nan')):.2f} s")


@pytest.fixture(scope="module")
def lab_vocabulary(tmp_path_factory: pytest.TempPathFactory, store: ox.Store) -> KGVocabulary:
    """A tiny LAB ontology for the fixture, read by the project's own loader (``--kg-vocab``).

    vocab.json: the fixture's relations and attributes that LAB's vocab.json lists (all but
    :data:`NOT_IN_LAB_VOCABULARY`); fb_roles: each relation's range from the fixture's schema,
    except two ranges renamed so that the role table, not the endpoint, visibly sets the type.
    """
    relations: set[str] = set()
    attributes: set[str] = set()
    ranges: dict[str, str] = {}
    for quad in store:
        name = quad.predicate.value[len(NS):]
        if name.startswith(BOOKKEEPING) or name in NOT_IN_LAB_VOCABULARY:
            continue
        (attributes if isinstance(quad.object, ox.Literal) else relations).add(name)
    for quad in store.quads_for_pattern(None, ox.NamedNode(NS + "type.property.expected_type"), None):
        ranges[quad.subject.value[len(NS):]] = quad.object.value[len(NS):]
    ranges["food.cheese_milk_source.cheeses"] = "food.cheese_variety"
    ranges["food.cheese_texture.cheeses"] = "food.cheese_variety"  # record 0 intersects the two: types must agree
    folder = tmp_path_factory.mktemp("ontology")
    (folder / "vocab.json").write_text(json.dumps({"relations": sorted(relations), "attributes": sorted(attributes)}))
    (folder / "fb_roles").write_text("".join(f"{r.rsplit('.', 1)[0]} {r} {t}\n" for r, t in sorted(ranges.items())))
    return load_kg_vocabulary(str(folder))


def knowledge_base(endpoint: SparqlEndpoint, vocabulary: KGVocabulary | None) -> FreebaseQueries:
    if vocabulary is None:
        return FreebaseQueries(endpoint)
    return FreebaseQueries(endpoint, relation_vocabulary=vocabulary.relations,
                           attribute_vocabulary=vocabulary.attributes, ranges=vocabulary.ranges)


def replay(kb: FreebaseQueries, task: KGTask, replies: list[str]) -> tuple[list[tuple], dict]:
    """Every step's (observation, done, status) and the judgement, on a fresh environment."""
    env = KGEnvironment(kb)
    env.reset(task)
    steps = []
    for reply in replies:
        result = env.step(reply)
        steps.append((reply, result.observation, result.done, result.status))
        if result.done:
            break
    judgement = env.judge()
    return steps, {"reward": judgement.reward, **judgement.details}


# ----------------------------------------------------------------------------- the engines agree


def test_the_server_is_virtuoso_7_2_on_loopback(virtuoso: VirtuosoServer) -> None:
    request = urllib.request.Request(virtuoso.url + "?query=ASK%20%7B%7D",
                                     headers={"Accept": "application/sparql-results+json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Server"].startswith("Virtuoso/07.20"), response.headers["Server"]
    assert virtuoso.url.startswith("http://127.0.0.1:")
    ini = virtuoso.ini.read_text()
    assert f"ServerPort         = 127.0.0.1:{virtuoso.isql_port}" in ini
    assert f"ServerPort           = 127.0.0.1:{virtuoso.http_port}" in ini


@pytest.mark.parametrize("vocabulary", [False, True], ids=["structural", "lab-vocab"])
@pytest.mark.parametrize("index", sorted(REPLAYED_RECORDS))
def test_gold_replays_equal_oxigraph_step_by_step(virtuoso: VirtuosoServer, store: ox.Store, kg_tasks: list[KGTask],
                                                  lab_vocabulary: KGVocabulary, index: int, vocabulary: bool) -> None:
    vocab = lab_vocabulary if vocabulary else None
    task = kg_tasks[index]
    for use_names in (True, False):
        replies = gold_replies(task, use_entity_names=use_names)
        expected = replay(knowledge_base(OxigraphEndpoint(store), vocab), task, replies)
        got = replay(knowledge_base(HttpSparqlEndpoint(virtuoso.url, timeout=30), vocab), task, replies)
        for want, have in zip(expected[0], got[0]):
            assert have == want
        assert len(got[0]) == len(expected[0]) == len(replies)
        assert got[1] == expected[1]
        assert got[1]["reward"] == 1 and got[1]["answer"] == sorted(task.answer_list)


def test_the_lab_vocabulary_changes_what_both_engines_show(virtuoso: VirtuosoServer, store: ox.Store,
                                                          kg_tasks: list[KGTask], lab_vocabulary: KGVocabulary) -> None:
    # The filtered run is not the unfiltered one under another name: listings shrink, types follow fb_roles.
    task = kg_tasks[0]
    for endpoint in (OxigraphEndpoint(store), HttpSparqlEndpoint(virtuoso.url, timeout=30)):
        plain, _ = replay(knowledge_base(endpoint, None), task, gold_replies(task))
        lab, _ = replay(knowledge_base(endpoint, lab_vocabulary), task, gold_replies(task))
        assert plain[1][1].endswith("which are instances of food.cheese")
        assert lab[1][1].endswith("which are instances of food.cheese_variety")
    rocket = kg_tasks[25]
    steps, _ = replay(knowledge_base(HttpSparqlEndpoint(virtuoso.url, timeout=30), lab_vocabulary), rocket,
                      ["Action: get_relations(Pentaborane)",
                       "Action: get_neighbors(Pentaborane, spaceflight.rocket_engine_fuel.rocket_engines)",
                       "Action: get_attributes(#0)"])
    assert steps[2][1].endswith("Observation: [spaceflight.bipropellant_rocket_engine.chamber_pressure]")  # no .isp


@pytest.mark.parametrize("index", sorted(REPLAYED_RECORDS))
def test_every_variable_executes_alike(virtuoso: VirtuosoServer, store: ox.Store, kg_tasks: list[KGTask],
                                       index: int) -> None:
    """Answering each variable of the gold trajectory (right or wrong) gives the same answer set."""
    task = kg_tasks[index]
    replies = gold_replies(task)
    variables = int(replies[-1].rsplit("#", 1)[1]) + 1
    for k in range(variables):
        probe = replies[:-1] + [f"Final Answer: #{k}"]
        expected = replay(FreebaseQueries(OxigraphEndpoint(store)), task, probe)
        got = replay(FreebaseQueries(HttpSparqlEndpoint(virtuoso.url, timeout=30)), task, probe)
        assert got == expected, (k, got[1], expected[1])


def test_literal_values_read_alike(virtuoso: VirtuosoServer, store: ox.Store) -> None:
    """Every typed or tagged literal of the fixture comes back with the same lexical form.

    (Virtuoso reports xsd:int as xsd:integer and writes ``typed-literal``; the lexical form, which is
    all the environment keeps, is the same.)"""
    oxigraph = FreebaseQueries(OxigraphEndpoint(store))
    remote = FreebaseQueries(HttpSparqlEndpoint(virtuoso.url, timeout=30))
    pairs = sorted({(q.subject.value[len(NS):], q.predicate.value[len(NS):])
                    for q in store if isinstance(q.object, ox.Literal)})
    assert len(pairs) > 100
    for subject, predicate in pairs:
        expression = Join(predicate, Entity(subject))
        assert remote.execute(expression) == oxigraph.execute(expression), (subject, predicate)


def test_virtuoso_writes_typed_literal_terms(virtuoso: VirtuosoServer) -> None:
    """The raw JSON differs from oxigraph's: the client's tolerance above is needed, not assumed."""
    query = (f"SELECT ?v WHERE {{ <{NS}m.0fx_story_2> <{NS}book.written_work.number_of_pages> ?v }}")
    request = urllib.request.Request(virtuoso.url, data=urllib.parse.urlencode({"query": query}).encode(),
                                     headers={"Accept": "application/sparql-results+json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        cell = json.loads(response.read())["results"]["bindings"][0]["v"]
    assert cell == {"type": "typed-literal", "datatype": "http://www.w3.org/2001/XMLSchema#integer", "value": "312"}
    assert HttpSparqlEndpoint(virtuoso.url).query(query) == [{"v": "312"}]


# ----------------------------------------------------------------------------- client checks (no Virtuoso needed)


def test_http_numbers_are_written_as_oxigraph_writes_them() -> None:
    """canonical_lexical (applied to HTTP results only) equals oxigraph's stored form, value for value."""
    xsd = "http://www.w3.org/2001/XMLSchema#"
    cases = [("float", "140.0"), ("float", "1e20"), ("float", "0.0001"), ("float", "-0"), ("float", "NaN"),
             ("float", "INF"), ("float", "4.1"), ("float", "1.23456789"), ("float", "1e39"), ("float", "358381.62412707764"),
             ("double", "1.5e300"), ("double", "0.1"), ("double", "1e21"), ("double", "1799265411287898.2"),
             ("double", "1e400"), ("float", "-inf"), ("double", "Infinity"), ("double", "-NaN"), ("integer", "1_000"), ("decimal", "1.50"), ("decimal", "+01.0"), ("decimal", "-0.0"), ("integer", "+012"),
             ("int", "007"), ("long", "-0"), ("float", "abc"), ("float", " 1.5 "), ("boolean", "1"),
             ("nonNegativeInteger", "05"), ("gYear", "0800"), ("dateTime", "2020-09-01T00:00:00"), ("date", "1979-05-01-08:00")]
    rng = random.Random(7)
    for _ in range(1500):
        kind = rng.choice(["float", "double", "decimal", "integer"])
        if kind == "integer":
            cases.append((kind, str(rng.randint(-10**12, 10**12))))
        elif kind == "decimal":
            cases.append((kind, f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}"))
        else:
            cases.append((kind, rng.choice([repr(rng.uniform(-1e6, 1e6)), f"{rng.uniform(-10, 10):.3e}",
                                            repr(rng.lognormvariate(0, 40)), f"{rng.randint(-999, 999)}.0"])))
    store = ox.Store()
    for i, (kind, lexical) in enumerate(cases):
        store.add(ox.Quad(ox.NamedNode(f"http://example.org/{i}"), ox.NamedNode("http://example.org/p"),
                          ox.Literal(lexical, datatype=ox.NamedNode(xsd + kind))))
    for row in store.query("SELECT ?s ?o WHERE { ?s <http://example.org/p> ?o }"):
        kind, lexical = cases[int(row["s"].value.rsplit("/", 1)[1])]
        assert canonical_lexical(lexical, xsd + kind) == row["o"].value, (kind, lexical)
        assert canonical_lexical(row["o"].value, xsd + kind) == row["o"].value  # oxigraph's own form is kept


class _Headers(http.server.BaseHTTPRequestHandler):
    extra: dict[str, str] = {}
    body = json.dumps({"head": {"vars": ["x"]}, "results": {"bindings": [
        {"x": {"type": "typed-literal", "datatype": "http://www.w3.org/2001/XMLSchema#integer", "value": "7"}}]}})

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        self.rfile.read(int(self.headers["Content-Length"]))
        payload = self.body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/sparql-results+json")
        for name, value in self.extra.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("extra, message", [
    ({}, None),
    ({"X-SPARQL-MaxRows": "10000"}, "cut the result at 10000 rows"),
    ({"X-SQL-State": "S1TAT", "X-SQL-Message": "RC...: Returning incomplete results"}, "partial result"),
], ids=["complete", "row-cap", "anytime-timeout"])
def test_a_result_virtuoso_cut_short_is_an_error(extra: dict[str, str], message: str | None) -> None:
    handler = type("Handler", (_Headers,), {"extra": extra})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = HttpSparqlEndpoint(f"http://127.0.0.1:{server.server_address[1]}/sparql", timeout=5)
        if message is None:
            assert endpoint.query("SELECT ?x WHERE {}") == [{"x": "7"}]
        else:
            with pytest.raises(SparqlEndpointError, match=message):
                endpoint.query("SELECT ?x WHERE {}")
    finally:
        server.shutdown()
        server.server_close()


# ----------------------------------------------------------------------------- tokenworth kg serve / stop


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*TOKENWORTH, "kg", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def test_kg_serve_loads_once_serves_in_the_background_and_stops(tmp_path: Path, store: ox.Store,
                                                               kg_tasks: list[KGTask]) -> None:
    if binaries() is None:
        pytest.skip(NOT_INSTALLED)
    dump = write_dump(store, tmp_path / "freebase" / "fixture.nt")
    folder = tmp_path / "kg"
    port = free_port()
    serve = ["serve", "--dump", str(dump), "--port", str(port), "--dir", str(folder), "--memory", "0.06"]
    try:
        first = _run(*serve)
        assert first.returncode == 0, first.stderr
        url = f"http://127.0.0.1:{port}/sparql"
        assert f"--kg-endpoint {url}" in first.stdout and "loaded in" in first.stdout
        state = read_state(folder)
        assert state is not None and state["loaded"] and state["password"] != "dba"
        assert (folder / STATE_FILE).stat().st_mode & 0o077 == 0  # it holds the DBA password
        # The command has exited; the server it left behind answers the KG environment.
        task = kg_tasks[8]
        steps, judgement = replay(FreebaseQueries(HttpSparqlEndpoint(url, timeout=30)), task, gold_replies(task))
        assert judgement["reward"] == 1, steps
        # Same folder again: nothing reloaded, nothing restarted.
        again = _run(*serve)
        assert again.returncode == 0 and "already serving" in again.stdout and read_state(folder) == state
        # Stop, then serve again: the database is kept, so it restarts without loading.
        stopped = _run("stop", "--dir", str(folder))
        assert stopped.returncode == 0 and "stopped" in stopped.stdout
        with pytest.raises(SparqlEndpointError, match="cannot reach"):
            HttpSparqlEndpoint(url, timeout=5).query("ASK {}")
        restarted = _run(*serve)
        assert restarted.returncode == 0 and "already loaded, not reloaded" in restarted.stdout, restarted.stdout
        assert read_state(folder)["load_seconds"] == state["load_seconds"]  # type: ignore[index]
        steps, judgement = replay(FreebaseQueries(HttpSparqlEndpoint(url, timeout=30)), task, gold_replies(task))
        assert judgement["reward"] == 1, steps
        # Another dump for a loaded folder is refused, and says what to do.
        other = write_dump(ox.Store(), tmp_path / "other.nt")
        refused = CliRunner().invoke(app, ["kg", "serve", "--dump", str(other), "--port", str(port), "--dir", str(folder)])
        assert refused.exit_code == 2 and "use a new --dir" in refused.output
    finally:
        _run("stop", "--dir", str(folder))
    assert _run("stop", "--dir", str(folder)).stdout.startswith("no server was running")
    shutil.rmtree(folder)  # a Virtuoso database starts at 50 MB: not kept among pytest's temporary folders


def _one_error_line(*args: str) -> str:
    result = CliRunner().invoke(app, ["kg", *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


def test_kg_serve_refuses_bad_paths_in_one_line(tmp_path: Path) -> None:
    # Checked before anything is installed or started: no Virtuoso needed.
    assert "does not exist" in _one_error_line("serve", "--dump", str(tmp_path / "missing.nt"), "--dir", str(tmp_path / "a"))
    wrong = tmp_path / "freebase.csv"
    wrong.write_text("a,b\n")
    assert "must end in .nt" in _one_error_line("serve", "--dump", str(wrong), "--dir", str(tmp_path / "a"))
    (tmp_path / "empty").mkdir()
    assert "holds no .nt" in _one_error_line("serve", "--dump", str(tmp_path / "empty"), "--dir", str(tmp_path / "a"))
    assert "no tokenworth-kg.json" in _one_error_line("stop", "--dir", str(tmp_path / "nothing"))


def test_without_virtuoso_a_non_root_user_is_told_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import tokenworth_agent.benchmarks.kg.virtuoso as virtuoso_module

    monkeypatch.setattr(virtuoso_module, "binaries", lambda: None)
    monkeypatch.setattr(virtuoso_module.os, "geteuid", lambda: 1000)
    with pytest.raises(virtuoso_module.VirtuosoError) as caught:
        virtuoso_module.ensure_installed()
    assert str(caught.value) == f"Virtuoso is not installed (not root); install it with: {INSTALL_COMMAND}"


def test_kg_serve_busy_port_and_unloadable_dump_in_one_line(tmp_path: Path, virtuoso: VirtuosoServer) -> None:
    good = tmp_path / "ok.nt"
    good.write_text(f"<{NS}m.0a> <{NS}a.b.c> <{NS}m.0b> .\n")
    busy = _one_error_line("serve", "--dump", str(good), "--port", str(virtuoso.http_port), "--dir", str(tmp_path / "b"))
    assert f"port {virtuoso.http_port} on 127.0.0.1" in busy and "--port" in busy
    broken = tmp_path / "broken.nt"
    broken.write_text(f"<{NS}m.0a> <{NS}a.b.c> \"never closed .\n")
    folder = tmp_path / "c"
    failed = _one_error_line("serve", "--dump", str(broken), "--port", str(free_port()), "--dir", str(folder))
    assert "could not load" in failed and "broken.nt" in failed
    state = read_state(folder)
    assert state is not None and not state["loaded"]
    assert not VirtuosoServer(folder, state["http_port"], state["isql_port"], pid=state["pid"]).running()
    shutil.rmtree(folder)


def test_session_timings_are_reported(virtuoso: VirtuosoServer) -> None:
    # Start and load of the session server (docs/kg.md quotes the measured values).
    assert 0 < TIMINGS["start_s"] < 120 and 0 < TIMINGS["load_s"] < 60
    started = time.monotonic()
    assert HttpSparqlEndpoint(virtuoso.url).query("SELECT ?x WHERE { VALUES ?x { 1 } }") == [{"x": "1"}]
    assert time.monotonic() - started < 5
