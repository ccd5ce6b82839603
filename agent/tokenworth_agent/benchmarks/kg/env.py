"""The KG environment of LifelongAgentBench: Freebase tools over a SPARQL endpoint.

The agent answers a question by calling tools, one per reply, and names the variable
that holds the answer. Variables hold lazy S-expressions (:mod:`tokenworth_agent.benchmarks.kg.sparql`);
the graph is only read to list relations/attributes, to look up a relation's type, and
to execute the final answer.

Action format (the original's): the reply holds a line ``Action: tool(arg, arg)`` or
``Final Answer: #k``. If a reply contains a final answer anywhere it is the answer
(the original checked that pattern first); otherwise the first ``Action:`` is run. A
reply with neither ends the task as ``invalid_action``. How exactly a reply is read is the
parser's (:mod:`tokenworth_agent.benchmarks.kg.parsers`): LAB's strict reading by default, or the lenient one
(any case of ``Final Answer``, any spacing after ``Action:``, quotes dropped from arguments).

Naming: an entity is named by its key in ``entity_dict`` (what the agent is shown) or
by a MID (``m.…``/``g.…``, what the gold ``action_list`` uses); both are accepted, as in
the original. A variable is ``#k`` (also ``var #k`` / ``variable #k``). Only calls that
*yield a variable* number them: get_neighbors, intersection, argmax, argmin and count
make ``#0, #1, …`` in call order; get_relations and get_attributes only list names.
The dataset decides this: e.g. record 0 runs get_relations/get_neighbors three times
and then calls ``intersection(#1,#2)``.

Rules, each answered with ``Error in executing '<call>'. Error: <why>`` (the task goes on):

* unknown tool, wrong argument count, malformed variable, unknown variable;
* get_neighbors(x, r) only after get_relations(x), and only with an r it listed;
* intersection(#a, #b) only on two variables whose types are equal;
* argmax/argmin(#v, a) only after get_attributes(#v), and only with an a it listed;
* variables made by count, argmax or argmin can only be final answers;
* get_relations/get_neighbors take an entity or a variable; the others take variables.

Judging: the answer variable is executed and the task succeeds iff its value set equals
``answer_list`` as a set (count gives the number as a string, as the data writes it).
J_max = 15 replies; the 15th reply that is not an answer ends the task (``round_limit``).
An endpoint failure ends the task as ``env_error``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Callable, Sequence

from tokenworth_agent.benchmarks.kg.tasks import KGTask
from tokenworth_agent.envs.base import Environment, Judgement, StepResult
from tokenworth_agent.benchmarks.kg.parsers import STRICT, ParsedReply, ReplyParser, reply_parser
from tokenworth_agent.benchmarks.kg.parsers import parse_lenient as parse_reply  # noqa: F401 - the lenient reading, by its old name
from tokenworth_agent.benchmarks.kg.parsers import split_lenient as split_arguments  # noqa: F401
from tokenworth_agent.benchmarks.kg.sparql import (
    And,
    Count,
    Entity,
    Expr,
    Extremum,
    FreebaseQueries,
    HttpSparqlEndpoint,
    Join,
    SparqlEndpoint,
    SparqlEndpointError,
    is_mid,
    to_sexpr,
)

if TYPE_CHECKING:
    from tokenworth_agent.benchmarks.kg.ontology import KGVocabulary

MAX_ROUNDS = 15
ENDPOINT_ENV_VAR = "TOKENWORTH_KG_ENDPOINT"
TOOLS: tuple[str, ...] = ("get_relations", "get_neighbors", "intersection", "get_attributes", "argmax", "argmin", "count")
_ARITY = {"get_relations": 1, "get_neighbors": 2, "intersection": 2, "get_attributes": 1, "argmax": 2, "argmin": 2, "count": 1}
# Which calls make a new variable, and the gold replay, are tokenworth_agent.tasks's (KG_VARIABLE_TOOLS,
# kg_gold_replies): the simulated backbone replays gold answers too, and sits below the environments.

INSTRUCTIONS = """You answer questions with the knowledge stored in a knowledge base (Freebase). You query it with these tools:

1. get_relations(variable: var) -> list of relations
   Lists the relations that lead from an entity or from a variable's entities. A variable is either an entity from the question or a set of entities from an earlier call (e.g. #0). Example: get_relations(Barack Obama).
2. get_neighbors(variable: var, relation: str) -> variable
   Returns the entities reached from the variable by the relation. Use it only after get_relations on the same variable, with one of the relations it listed. Example: get_neighbors(Barack Obama, people.person.profession).
3. intersection(variable1: var, variable2: var) -> variable
   Returns the entities in both variables. Both must be variables of the same type.
4. get_attributes(variable: var) -> list of attributes
   Lists the numerical attributes of the variable's entities. Use it only when the question asks for a superlative (argmax or argmin).
5. argmax(variable: var, attribute: str) -> variable
   Returns the entities of the variable with the largest value of the attribute. Use it only after get_attributes on the same variable, with one of the attributes it listed. Example: argmax(#2, people.person.height_meters).
6. argmin(variable: var, attribute: str) -> variable
   Like argmax, with the smallest value.
7. count(variable: var) -> int
   Returns the number of entities in the variable.

Each call that returns a variable stores it as #0, #1, #2, ... in call order. Variables returned by count, argmax and argmin can only be final answers.

Take exactly one action per reply. Think first if you like, then end your reply with one line:
Action: tool(arguments)
When a variable holds the answer, reply with:
Final Answer: #id
where id is the variable's number. You have at most 15 replies, the final answer included."""


class KGEndpointRequired(RuntimeError):
    """The KG stream needs a SPARQL endpoint serving Freebase, and none was configured."""


@dataclasses.dataclass(frozen=True)
class Variable:
    expr: Expr
    type: str

    @property
    def usable_as_input(self) -> bool:
        return not isinstance(self.expr, (Count, Extremum))


class ToolError(Exception):
    """A rule the agent broke; the message goes back to it as the observation."""


def expression_for_call(tool: str, operands: Sequence[Expr | str]) -> Expr:
    """The S-expression a variable-yielding call stores (the gold trajectories' mapping)."""
    if tool == "get_neighbors":
        source, relation = operands
        return Join(str(relation), source)  # type: ignore[arg-type]
    if tool == "intersection":
        return And(operands[0], operands[1])  # type: ignore[arg-type]
    if tool in ("argmax", "argmin"):
        return Extremum(operands[0], str(operands[1]), maximum=tool == "argmax")  # type: ignore[arg-type]
    if tool == "count":
        return Count(operands[0])  # type: ignore[arg-type]
    raise ValueError(f"{tool} does not yield a variable")


class KGEnvironment(Environment):
    """One KG task at a time against a Freebase-shaped SPARQL endpoint."""

    name = "kg"

    def __init__(self, endpoint: SparqlEndpoint | FreebaseQueries, max_rounds: int = MAX_ROUNDS, *,
                 parser: ReplyParser | str = STRICT, instructions: str | None = None) -> None:
        """``parser``: how replies are read (:mod:`tokenworth_agent.benchmarks.kg.parsers`; LAB's strict one by
        default); ``instructions``: a text that replaces :data:`INSTRUCTIONS`."""
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {max_rounds}")
        self.kb = endpoint if isinstance(endpoint, FreebaseQueries) else FreebaseQueries(endpoint)
        self.max_rounds = max_rounds
        self.parser = reply_parser(parser) if isinstance(parser, str) else parser
        self._instructions = instructions
        self._task: KGTask | None = None

    # ----------------------------------------------------------------- Environment API

    def instructions(self) -> str:
        return INSTRUCTIONS if self._instructions is None else self._instructions

    def task_prompt(self, task: KGTask) -> str:
        return f"Question: {task.question}, Entities: {list(task.entity_dict)}"

    def reset(self, task: KGTask) -> str:
        if not isinstance(task, KGTask):
            raise TypeError(f"KGEnvironment needs a KGTask, got {type(task).__name__}")
        self._task = task
        self._variables: list[Variable] = []
        self._relations_seen: dict[Expr, list[str]] = {}
        self._attributes_seen: dict[Expr, list[str]] = {}
        self._rounds = 0
        self._status: str | None = None
        self._answer: list[str] | None = None
        self._answer_index: int | None = None
        self._error: str | None = None
        return self.task_prompt(task)

    def step(self, reply: str) -> StepResult:
        self.check_step(started=self._task is not None, ended=self._status)
        self._rounds += 1
        parsed = self.parser.parse(reply)
        if parsed.kind == "invalid":
            return self._end(
                "invalid_action",
                "Invalid reply: found neither 'Action: tool(arguments)' nor 'Final Answer: #id'.",
                {"kind": "invalid"},
            )
        try:
            if parsed.kind == "answer":
                result = self._final_answer(parsed)
            else:
                result = self._run_tool(parsed)
        except SparqlEndpointError as exc:
            self._error = str(exc)
            return self._end("env_error", f"The knowledge base failed: {exc}", {"kind": parsed.kind})
        if not result.done and self._rounds >= self.max_rounds:
            result.done, result.status, self._status = True, "round_limit", "round_limit"
        return result

    def judge(self) -> Judgement:
        if self._task is None:
            raise RuntimeError("call reset(task) and step() before judge()")
        expected = set(self._task.answer_list)
        got = set(self._answer or [])
        details = {
            "status": self._status,
            "rounds": self._rounds,
            "answer": sorted(got) if self._answer is not None else None,
            "expected": sorted(expected),
            "f1": _f1(got, expected),
            "answer_variable": self._answer_index,
            "answer_sexpr": (
                to_sexpr(self._variables[self._answer_index].expr) if self._answer_index is not None else None
            ),
            "error": self._error,
        }
        reward = int(self._answer is not None and got == expected)
        return Judgement(reward=reward, details=details)

    def close(self) -> None:
        self._task = None

    # ----------------------------------------------------------------- internals

    def _end(self, status: str, observation: str, action: dict) -> StepResult:
        self._status = status
        return StepResult(observation=observation, done=True, status=status, action=action)  # type: ignore[arg-type]

    def _final_answer(self, parsed: ParsedReply) -> StepResult:
        index = parsed.answer_index
        assert index is not None
        action = {"kind": "answer", "variable": index}
        if index >= len(self._variables):
            return StepResult(observation=self._unknown_variable(index), done=False, action=action)
        self._answer = self.kb.execute(self._variables[index].expr)
        self._answer_index = index
        return self._end("completed", f"Final answer: variable #{index}.", action)

    def _run_tool(self, parsed: ParsedReply) -> StepResult:
        call = parsed.call
        action = {"kind": "tool", "tool": parsed.tool, "call": call}
        try:
            observation = self._dispatch(parsed)
        except ToolError as exc:
            return StepResult(observation=f"Error in executing '{call}'. Error: {exc}", done=False, action=action)
        return StepResult(observation=f"{call} executes successfully. Observation: {observation}", done=False, action=action)

    def _dispatch(self, parsed: ParsedReply) -> str:
        tool = parsed.tool or ""
        if tool not in TOOLS:
            raise ToolError(f"unknown tool {tool!r}. Available tools: {', '.join(TOOLS)}.")
        assert self._task is not None and parsed.argument_text is not None
        arguments = self.parser.arguments(parsed.argument_text, list(self._task.entity_dict))
        if len(arguments) != _ARITY[tool]:
            wanted = _ARITY[tool]
            raise ToolError(
                f"{tool} takes {wanted} argument{'s' if wanted > 1 else ''}, but {len(arguments)} "
                f"{'was' if len(arguments) == 1 else 'were'} given."
            )
        handler: Callable[[list[str]], str] = getattr(self, f"_tool_{tool}")
        return handler(arguments)

    # Argument resolution -------------------------------------------------------

    def _variable_index(self, text: str) -> int | None:
        try:
            return self.parser.variable_index(text)
        except ValueError:
            raise ToolError(f"cannot read a variable number from {text!r}; write variables as #0, #1, ...") from None

    def _unknown_variable(self, index: int) -> str:
        if self._variables:
            names = ", ".join(f"#{i}" for i in range(len(self._variables)))
            return f"Variable #{index} is not found in the variable list. Current variables: [{names}]."
        return (
            f"Variable #{index} is not found: there are no variables yet. Create the first one with "
            f"get_relations(entity) and then get_neighbors(entity, relation)."
        )

    def _variable(self, text: str) -> Variable | None:
        index = self._variable_index(text)
        if index is None:
            return None
        if index >= len(self._variables):
            raise ToolError(self._unknown_variable(index))
        variable = self._variables[index]
        if not variable.usable_as_input:
            made_by = "count" if isinstance(variable.expr, Count) else ("argmax" if variable.expr.maximum else "argmin")  # type: ignore[union-attr]
            usable = [f"#{i}" for i, v in enumerate(self._variables) if v.usable_as_input]
            raise ToolError(
                f"{text} was returned by {made_by}, so it can only be a final answer. "
                f"Variables usable as inputs: [{', '.join(usable)}]."
            )
        return variable

    def _entity_or_variable(self, text: str, tool: str) -> tuple[Expr, str]:
        """(expression, display name) for a first argument that may be an entity."""
        assert self._task is not None
        variable = self._variable(text)
        if variable is not None:
            return variable.expr, text
        if text in self._task.entity_dict:
            return Entity(self._task.entity_dict[text]), text
        if is_mid(text):
            return Entity(text), text
        raise ToolError(
            f"{text!r} is neither a variable nor an entity. The first argument of {tool} must be a "
            f"variable (e.g. #0) or one of the entities {list(self._task.entity_dict)}."
        )

    def _only_variable(self, text: str, tool: str) -> Variable:
        variable = self._variable(text)
        if variable is None:
            raise ToolError(f"{text!r} is not a variable; {tool} takes variables such as #0.")
        return variable

    def _new_variable(self, expr: Expr, type_: str) -> int:
        self._variables.append(Variable(expr, type_))
        return len(self._variables) - 1

    # Tools -------------------------------------------------------------------

    def _tool_get_relations(self, arguments: list[str]) -> str:
        subject, _ = self._entity_or_variable(arguments[0], "get_relations")
        relations = self.kb.relations(subject)
        self._relations_seen[subject] = relations
        return f"[{', '.join(relations)}]"

    def _tool_get_neighbors(self, arguments: list[str]) -> str:
        subject, shown = self._entity_or_variable(arguments[0], "get_neighbors")
        relation = arguments[1]
        if subject not in self._relations_seen:
            raise ToolError(f"call get_relations({shown}) before get_neighbors on it.")
        listed = self._relations_seen[subject]
        if relation not in listed:
            raise ToolError(f"{relation} is not a relation of {shown}. {shown} has the following relations: [{', '.join(listed)}].")
        type_ = self.kb.range_of(relation)
        index = self._new_variable(expression_for_call("get_neighbors", [subject, relation]), type_)
        return f"Variable #{index}, which are instances of {type_}"

    def _tool_intersection(self, arguments: list[str]) -> str:
        first = self._only_variable(arguments[0], "intersection")
        second = self._only_variable(arguments[1], "intersection")
        if first.type != second.type:
            raise ToolError(
                f"the two variables must have the same type, but {arguments[0]} holds instances of "
                f"{first.type} and {arguments[1]} holds instances of {second.type}."
            )
        index = self._new_variable(expression_for_call("intersection", [first.expr, second.expr]), first.type)
        return f"Variable #{index}, which are instances of {first.type}"

    def _tool_get_attributes(self, arguments: list[str]) -> str:
        variable = self._only_variable(arguments[0], "get_attributes")
        attributes = self.kb.attributes(variable.expr)
        self._attributes_seen[variable.expr] = attributes
        return f"[{', '.join(attributes)}]"

    def _extremum(self, tool: str, arguments: list[str]) -> str:
        variable = self._only_variable(arguments[0], tool)
        attribute = arguments[1]
        if variable.expr not in self._attributes_seen:
            raise ToolError(f"call get_attributes({arguments[0]}) before {tool} on it.")
        listed = self._attributes_seen[variable.expr]
        if attribute not in listed:
            raise ToolError(
                f"{attribute} is not an attribute of {arguments[0]}. The attributes of {arguments[0]} are: [{', '.join(listed)}]."
            )
        index = self._new_variable(expression_for_call(tool, [variable.expr, attribute]), variable.type)
        return f"Variable #{index}, which are instances of {variable.type}"

    def _tool_argmax(self, arguments: list[str]) -> str:
        return self._extremum("argmax", arguments)

    def _tool_argmin(self, arguments: list[str]) -> str:
        return self._extremum("argmin", arguments)

    def _tool_count(self, arguments: list[str]) -> str:
        variable = self._only_variable(arguments[0], "count")
        index = self._new_variable(expression_for_call("count", [variable.expr]), "type.int")
        return f"Variable #{index}, which is a number"


def _f1(got: set[str], expected: set[str]) -> float:
    hits = len(got & expected)
    if hits == 0:
        return 0.0
    precision, recall = hits / len(got), hits / len(expected)
    return 2 * precision * recall / (precision + recall)


def make_kg_environment(endpoint_url: str | None, timeout: float = 60.0, max_rounds: int = MAX_ROUNDS, *,
                        parser: ReplyParser | str = STRICT, vocabulary: "KGVocabulary | None" = None,
                        instructions: str | None = None) -> KGEnvironment:
    """The KG environment on a remote Freebase endpoint (``TOKENWORTH_KG_ENDPOINT`` if no URL).

    ``vocabulary`` (LAB's ontology files, :func:`tokenworth_agent.benchmarks.kg.ontology.load_kg_vocabulary`) filters
    relation and attribute listings and gives each relation its range, as LAB does.
    Raises :class:`KGEndpointRequired` when neither names one: there is no offline Freebase.
    """
    url = endpoint_url or os.environ.get(ENDPOINT_ENV_VAR)
    if not url:
        raise KGEndpointRequired(
            "The KG stream needs a SPARQL endpoint serving Freebase (the records hold no graph). "
            f"Point at one with --kg-endpoint URL or the {ENDPOINT_ENV_VAR} environment variable, "
            "e.g. a Virtuoso server loaded with the Freebase dump: --kg-endpoint http://localhost:3001/sparql"
        )
    endpoint = HttpSparqlEndpoint(url, timeout=timeout)
    kb = FreebaseQueries(endpoint) if vocabulary is None else FreebaseQueries(
        endpoint, relation_vocabulary=vocabulary.relations, attribute_vocabulary=vocabulary.attributes,
        ranges=vocabulary.ranges)
    return KGEnvironment(kb, max_rounds=max_rounds, parser=parser, instructions=instructions)
