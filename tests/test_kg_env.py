"""The KG environment: gold replays on a Freebase-shaped fixture, tool rules, endpoints."""

from __future__ import annotations

import http.server
import re
import socket
import threading
import urllib.parse
from typing import Iterator

import pyoxigraph as ox
import pytest

from tokenworth_agent.benchmarks.kg.tasks import KG_VARIABLE_TOOLS as VARIABLE_TOOLS
from tokenworth_agent.benchmarks.kg.tasks import KGTask
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.benchmarks.kg.tasks import kg_gold_replies as gold_replies
from tokenworth_agent.envs.base import conversation
from tokenworth_agent.benchmarks.kg.env import (
    ENDPOINT_ENV_VAR,
    KGEndpointRequired,
    KGEnvironment,
    expression_for_call,
    make_kg_environment,
    parse_reply,
    split_arguments,
)
from tokenworth_agent.benchmarks.kg.sparql import (
    Entity,
    Expr,
    FreebaseQueries,
    HttpSparqlEndpoint,
    OxigraphEndpoint,
    SparqlEndpointError,
    iri,
    to_sexpr,
)
from tokenworth_agent.benchmarks.kg.ontology import load_fb_roles
from tests.kg_fixture import REPLAYED_RECORDS, build_fixture_store

# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def kg_tasks(data_dir: str) -> list[KGTask]:
    return load_tasks("kg", data_dir)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def store() -> ox.Store:
    return build_fixture_store()


@pytest.fixture()
def env(store: ox.Store) -> KGEnvironment:
    return KGEnvironment(OxigraphEndpoint(store))


def play(env: KGEnvironment, task: KGTask, replies: list[str]) -> list[str]:
    env.reset(task)
    observations = []
    for reply in replies:
        result = env.step(reply)
        observations.append(result.observation)
        if result.done:
            break
    return observations


# ----------------------------------------------------------------------------- gold replays


@pytest.mark.parametrize("use_names", [True, False], ids=["entity-names", "mids"])
@pytest.mark.parametrize("index", sorted(REPLAYED_RECORDS))
def test_gold_trajectory_replays_to_reward_one(env: KGEnvironment, kg_tasks: list[KGTask], index: int, use_names: bool) -> None:
    task = kg_tasks[index]
    replies = gold_replies(task, use_entity_names=use_names)
    observations = play(env, task, replies)
    assert len(observations) == len(task.action_list) + 1
    for reply, observation in zip(replies, observations[:-1]):
        assert "executes successfully" in observation, (reply, observation)
    judgement = env.judge()
    assert judgement.details["status"] == "completed"
    assert judgement.details["answer"] == sorted(task.answer_list)
    assert judgement.details["answer_sexpr"] == task.s_expression
    assert judgement.reward == 1


def test_replayed_records_cover_every_skill(kg_tasks: list[KGTask]) -> None:
    skills = {skill for i in REPLAYED_RECORDS for skill in kg_tasks[i].skill_list}
    assert {"count", "intersection", "argmax", "argmin", "get_neighbors"} <= skills
    assert len(REPLAYED_RECORDS) >= 8


@pytest.mark.parametrize("index, wrong_variable", [(0, 3), (2, 1), (12, 1), (25, 0)])
def test_wrong_answer_variable_gets_reward_zero(env: KGEnvironment, kg_tasks: list[KGTask], index: int, wrong_variable: int) -> None:
    task = kg_tasks[index]
    replies = gold_replies(task)[:-1] + [f"Final Answer: #{wrong_variable}"]
    play(env, task, replies)
    judgement = env.judge()
    assert judgement.details["status"] == "completed"
    assert judgement.details["answer"] != sorted(task.answer_list)
    assert judgement.reward == 0


def test_argmax_keeps_ties_and_skips_topic_entity(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    # Record 25: two engines tie on chamber pressure; record 12: Hurricane Dolly formed last
    # but is the topic entity, which the original's filter removes from the set.
    play(env, kg_tasks[25], gold_replies(kg_tasks[25]))
    assert env.judge().details["answer"] == ["m.02xlt6v", "m.02xlt9t"]
    play(env, kg_tasks[12], gold_replies(kg_tasks[12]))
    assert "m.04dn799" not in env.judge().details["answer"]


def test_every_record_gold_actions_rebuild_its_s_expression(kg_tasks: list[KGTask]) -> None:
    """All 396 records: tool -> expression mapping and variable numbering reproduce s_expression."""
    assert len(kg_tasks) == 396
    for task in kg_tasks:
        variables: list[Expr] = []
        for action in task.action_list:
            tool, argument_text = re.fullmatch(r"(\w+)\((.*)\)", action).groups()  # type: ignore[union-attr]
            if tool not in VARIABLE_TOOLS:
                continue
            operands: list[Expr | str] = []
            for argument in split_arguments(argument_text, list(task.entity_dict)):
                if argument.startswith("#"):
                    operands.append(variables[int(argument[1:])])
                elif argument.startswith(("m.", "g.")):
                    operands.append(Entity(argument))
                else:
                    operands.append(argument)
            variables.append(expression_for_call(tool, operands))
        assert to_sexpr(variables[-1]) == task.s_expression, task.task_id
        assert gold_replies(task)[-1] == f"Final Answer: #{len(variables) - 1}"


# ----------------------------------------------------------------------------- prompt shape


def test_prompt_turns_follow_the_original(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    task = kg_tasks[0]
    turns = conversation(env, task)
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
    assert "Action: tool(arguments)" in turns[1]["content"] and "Final Answer: #id" in turns[1]["content"]
    assert turns[3]["content"] == f"Question: {task.question}, Entities: ['Goat', 'cows', 'semi-firm']"
    assert env.reset(task) == turns[3]["content"]


# ----------------------------------------------------------------------------- tool rules


def _steps(env: KGEnvironment, task: KGTask, replies: list[str]) -> list[str]:
    env.reset(task)
    return [env.step(reply).observation for reply in replies]


def test_get_neighbors_needs_get_relations_first_and_a_listed_relation(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    out = _steps(env, kg_tasks[0], [
        "Action: get_neighbors(Goat, food.cheese_milk_source.cheeses)",
        "Action: get_relations(Goat)",
        "Action: get_neighbors(Goat, food.cheese.texture)",
        "Action: get_neighbors(Goat, food.cheese_milk_source.cheeses)",
    ])
    assert out[0] == ("Error in executing 'get_neighbors(Goat, food.cheese_milk_source.cheeses)'. "
                      "Error: call get_relations(Goat) before get_neighbors on it.")
    # Freebase bookkeeping (type.object.name/type) is not offered as a relation.
    assert out[1].endswith("Observation: [biology.domesticated_animal.breeds, food.cheese_milk_source.cheeses]")
    assert "food.cheese.texture is not a relation of Goat" in out[2]
    assert "[biology.domesticated_animal.breeds, food.cheese_milk_source.cheeses]" in out[2]
    # Failed calls made no variable: the first success is #0.
    assert out[3].endswith("Observation: Variable #0, which are instances of food.cheese")


def test_relations_listed_for_an_entity_count_for_its_mid_too(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    out = _steps(env, kg_tasks[0], ["Action: get_relations(Goat)", "Action: get_neighbors(m.03fwl, food.cheese_milk_source.cheeses)"])
    assert "Variable #0" in out[1]


def test_intersection_needs_two_variables_of_one_type(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    out = _steps(env, kg_tasks[0], [
        "Action: get_relations(Goat)",
        "Action: get_neighbors(Goat, food.cheese_milk_source.cheeses)",
        "Action: get_neighbors(Goat, biology.domesticated_animal.breeds)",
        "Action: intersection(#0, #1)",
        "Action: intersection(#0, Goat)",
        "Action: intersection(#0, #0)",
    ])
    assert out[2].endswith("Variable #1, which are instances of biology.animal_breed")
    assert "must have the same type" in out[3] and "food.cheese" in out[3] and "biology.animal_breed" in out[3]
    assert "'Goat' is not a variable" in out[4]
    assert out[5].endswith("Variable #2, which are instances of food.cheese")


def test_argmax_needs_get_attributes_first_and_a_listed_attribute(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    out = _steps(env, kg_tasks[12], [
        "Action: get_relations(Hurricane Dolly)",
        "Action: get_neighbors(Hurricane Dolly, meteorology.tropical_cyclone.category)",
        "Action: get_relations(#0)",
        "Action: get_neighbors(#0, meteorology.tropical_cyclone_category.tropical_cyclones)",
        "Action: argmax(#1, meteorology.tropical_cyclone.formed)",
        "Action: get_attributes(#1)",
        "Action: argmin(#1, meteorology.tropical_cyclone.category)",
        "Action: argmin(#1, meteorology.tropical_cyclone.formed)",
    ])
    assert "call get_attributes(#1) before argmax on it" in out[4]
    # Only numeric/date literals are attributes: not the category link, not the text description.
    assert out[5].endswith("Observation: [meteorology.tropical_cyclone.formed, meteorology.tropical_cyclone.highest_winds]")
    assert "meteorology.tropical_cyclone.category is not an attribute of #1" in out[6]
    assert out[7].endswith("Variable #2, which are instances of meteorology.tropical_cyclone")
    assert env.step("Final Answer: #2").done
    assert env.judge().details["answer"] == ["m.0fx_cyclone_0"]  # 1996, the earliest


def test_count_and_extremum_results_are_final_answers_only(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    out = _steps(env, kg_tasks[4], [
        "Action: get_relations(Unsteadiness)",
        "Action: get_neighbors(Unsteadiness, medicine.symptom.side_effect_of)",
        "Action: count(#0)",
        "Action: get_relations(#1)",
        "Action: count(#1)",
    ])
    assert out[2].endswith("Variable #1, which is a number")
    assert "#1 was returned by count, so it can only be a final answer" in out[3]
    assert "Variables usable as inputs: [#0]" in out[4]


def test_unknown_and_malformed_variables(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    out = _steps(env, kg_tasks[0], [
        "Action: count(#0)",
        "Action: get_relations(Goat)",
        "Action: get_neighbors(Goat, food.cheese_milk_source.cheeses)",
        "Action: get_relations(#4)",
        "Action: get_relations(#x)",
        "Action: get_relations(variable #0)",
        "Action: get_relations(Sheep)",
        "Final Answer: #9",
    ])
    assert "there are no variables yet" in out[0]
    assert "Variable #4 is not found in the variable list. Current variables: [#0]." in out[3]
    assert "cannot read a variable number from '#x'" in out[4]
    assert "executes successfully" in out[5]
    assert "'Sheep' is neither a variable nor an entity" in out[6] and "['Goat', 'cows', 'semi-firm']" in out[6]
    assert "Variable #9 is not found" in out[7]


def test_unknown_tool_and_wrong_argument_count(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    out = _steps(env, kg_tasks[0], [
        "Action: get_entity(Goat)",
        "Action: get_neighbors(Goat)",
        "Action: count(#0, #1)",
        "Action: get_relations()",
    ])
    assert "unknown tool 'get_entity'" in out[0] and "get_relations" in out[0]
    assert "get_neighbors takes 2 arguments, but 1 was given" in out[1]
    assert "count takes 1 argument, but 2 were given" in out[2]
    # Empty parentheses: LAB's action pattern needs an argument, so the strict parser ends the
    # task; the lenient one runs the call and reports the argument count.
    assert out[3].startswith("Invalid reply") and env.judge().details["status"] == "invalid_action"
    lenient = KGEnvironment(env.kb, parser="lenient")
    assert "get_relations takes 1 argument, but 0 were given" in _steps(lenient, kg_tasks[0], ["Action: get_relations()"])[0]


def test_reply_without_action_ends_the_task(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    env.reset(kg_tasks[0])
    result = env.step("I think the answer is Havarti.")
    assert result.done and result.status == "invalid_action"
    assert env.judge().reward == 0
    with pytest.raises(RuntimeError, match="already ended"):
        env.step("Action: get_relations(Goat)")


def test_round_limit_is_fifteen_replies(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    env.reset(kg_tasks[0])
    results = [env.step("Action: get_relations(Goat)") for _ in range(15)]
    assert [r.done for r in results] == [False] * 14 + [True]
    assert results[-1].status == "round_limit"
    judgement = env.judge()
    assert judgement.reward == 0 and judgement.details["rounds"] == 15


def test_answer_on_the_last_round_still_counts(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    task = kg_tasks[4]
    filler = ["Action: get_relations(Unsteadiness)"] * (15 - len(task.action_list) - 1)
    play(env, task, filler + gold_replies(task))
    assert env.judge().details["rounds"] == 15
    assert env.judge().reward == 1


def test_reply_parsing() -> None:
    assert parse_reply("Thought: done.\nFinal Answer: #3").answer_index == 3
    assert parse_reply("final answer: variable #2").answer_index == 2
    # The final answer wins over an action in the same reply, as in the original.
    assert parse_reply("Action: count(#0)\nFinal Answer: #1").kind == "answer"
    parsed = parse_reply("Thought: x\nAction: get_relations(Count (band))\nAction: count(#0)")
    assert (parsed.tool, parsed.argument_text) == ("get_relations", "Count (band)")
    assert parse_reply("Action: get_relations(Goat").argument_text == "Goat"
    assert parse_reply("no action here").kind == "invalid"


def test_argument_splitting_keeps_entity_names_with_commas() -> None:
    names = ["Washington, D.C.", "Goat"]
    assert split_arguments("Washington, D.C., location.location.contains", names) == ["Washington, D.C.", "location.location.contains"]
    assert split_arguments(" 'Goat' , \"food.a.b\" ", names) == ["Goat", "food.a.b"]


def test_entity_name_with_parentheses_reaches_the_tool(store: ox.Store) -> None:
    task = KGTask(0, "q?", "q", "test", {"Goat (animal)": "m.03fwl"}, "", (), ("x",), ())
    env = KGEnvironment(OxigraphEndpoint(store))
    out = _steps(env, task, ["Action: get_relations(Goat (animal))"])
    assert out[0].endswith("[biology.domesticated_animal.breeds, food.cheese_milk_source.cheeses]")


def test_gold_replies_write_entity_names_or_mids(kg_tasks: list[KGTask]) -> None:
    task = kg_tasks[0]
    assert gold_replies(task)[:2] == ["Action: get_relations(Goat)", "Action: get_neighbors(Goat, food.cheese_milk_source.cheeses)"]
    assert gold_replies(task, use_entity_names=False)[6] == "Action: intersection(#1, #2)"
    assert gold_replies(task)[-1] == "Final Answer: #4"


# ----------------------------------------------------------------------------- schema options


def test_ranges_override_and_unknown_type(store: ox.Store, kg_tasks: list[KGTask], tmp_path) -> None:
    roles = tmp_path / "fb_roles"
    roles.write_text("food.cheese_milk_source food.cheese_milk_source.cheeses food.cheese_variety\n")
    kb = FreebaseQueries(OxigraphEndpoint(store), ranges=load_fb_roles(str(roles)))
    assert kb.range_of("food.cheese_milk_source.cheeses") == "food.cheese_variety"
    assert kb.range_of("food.cheese_texture.cheeses") == "food.cheese"
    assert kb.range_of("no_such.property.at_all") == "type.object"
    roles.write_text("only two\n")
    with pytest.raises(ValueError, match="expected 'domain relation range'"):
        load_fb_roles(str(roles))


def test_relation_vocabulary_restricts_listings(store: ox.Store, kg_tasks: list[KGTask]) -> None:
    kb = FreebaseQueries(OxigraphEndpoint(store), relation_vocabulary=frozenset({"food.cheese_milk_source.cheeses"}))
    env = KGEnvironment(kb)
    out = _steps(env, kg_tasks[0], ["Action: get_relations(Goat)"])
    assert out[0].endswith("Observation: [food.cheese_milk_source.cheeses]")


def test_ids_cannot_inject_sparql() -> None:
    with pytest.raises(ValueError, match="not a Freebase id"):
        iri("m.0x> } DROP ALL { <a")
    assert iri("m.011_yk") == "<http://rdf.freebase.com/ns/m.011_yk>"


# ----------------------------------------------------------------------------- HTTP endpoint


class _SparqlHandler(http.server.BaseHTTPRequestHandler):
    store: ox.Store
    status = 200
    raw_reply: bytes | None = None  # when set, sent as-is with status 200

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = self.rfile.read(int(self.headers["Content-Length"])).decode("utf-8")
        query = urllib.parse.parse_qs(body)["query"][0]
        assert self.headers["Accept"] == "application/sparql-results+json"
        if self.raw_reply is not None:
            payload = self.raw_reply
        elif self.status != 200:
            payload = b"Virtuoso 37000 Error SP030: SPARQL compiler"
        else:
            payload = self.store.query(query).serialize(format=ox.QueryResultsFormat.JSON)
        self.send_response(self.status)
        self.send_header("Content-Type", "application/sparql-results+json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def sparql_server(store: ox.Store) -> Iterator[tuple[str, type[_SparqlHandler]]]:
    handler = type("Handler", (_SparqlHandler,), {"store": store, "status": 200, "raw_reply": None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/sparql", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("index", [0, 8, 25])
def test_gold_replay_over_http(sparql_server, kg_tasks: list[KGTask], index: int) -> None:
    url, _ = sparql_server
    env = make_kg_environment(url, timeout=10)
    play(env, kg_tasks[index], gold_replies(kg_tasks[index]))
    assert env.judge().reward == 1


def test_http_error_status_is_reported(sparql_server, kg_tasks: list[KGTask]) -> None:
    url, handler = sparql_server
    handler.status = 500
    with pytest.raises(SparqlEndpointError, match="HTTP 500.*SP030"):
        HttpSparqlEndpoint(url).query("SELECT * WHERE { ?s ?p ?o }")
    env = KGEnvironment(HttpSparqlEndpoint(url))
    env.reset(kg_tasks[0])
    result = env.step("Action: get_relations(Goat)")
    assert result.done and result.status == "env_error"
    assert env.judge().reward == 0 and "HTTP 500" in env.judge().details["error"]


def test_unreachable_endpoint_error_is_clear() -> None:
    with socket.socket() as probe:  # a port that nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(SparqlEndpointError, match=f"cannot reach the SPARQL endpoint at http://127.0.0.1:{port}/sparql"):
        HttpSparqlEndpoint(f"http://127.0.0.1:{port}/sparql", timeout=5).query("SELECT * WHERE { ?s ?p ?o }")


def test_non_json_answer_is_an_endpoint_error(sparql_server) -> None:
    url, handler = sparql_server
    handler.raw_reply = b"<html>Freebase maintenance</html>"
    with pytest.raises(SparqlEndpointError, match="did not return SPARQL JSON results"):
        HttpSparqlEndpoint(url, timeout=5).query("SELECT * WHERE { ?s ?p ?o }")


def test_bad_endpoint_urls_are_rejected() -> None:
    with pytest.raises(ValueError, match="http"):
        HttpSparqlEndpoint("localhost:3001/sparql")
    with pytest.raises(ValueError, match="timeout"):
        HttpSparqlEndpoint("http://localhost:3001/sparql", timeout=0)


# ----------------------------------------------------------------------------- CLI factory


def test_no_endpoint_raises_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENDPOINT_ENV_VAR, raising=False)
    with pytest.raises(KGEndpointRequired) as caught:
        make_kg_environment(None)
    message = str(caught.value)
    assert "--kg-endpoint URL" in message and ENDPOINT_ENV_VAR in message and "Freebase" in message


def test_endpoint_url_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENDPOINT_ENV_VAR, "http://freebase.example:3001/sparql")
    env = make_kg_environment(None)
    assert isinstance(env.kb.endpoint, HttpSparqlEndpoint)
    assert env.kb.endpoint.url == "http://freebase.example:3001/sparql"
    assert env.max_rounds == 15


def test_relations_lead_to_entities_only(env: KGEnvironment, kg_tasks: list[KGTask]) -> None:
    # The cyclones carry dates, floats and a text description: none of them is a relation.
    out = _steps(env, kg_tasks[12], [
        "Action: get_relations(Hurricane Dolly)",
        "Action: get_neighbors(Hurricane Dolly, meteorology.tropical_cyclone.category)",
        "Action: get_relations(#0)",
        "Action: get_neighbors(#0, meteorology.tropical_cyclone_category.tropical_cyclones)",
        "Action: get_relations(#1)",
    ])
    assert out[4].endswith("Observation: [meteorology.tropical_cyclone.category]")
