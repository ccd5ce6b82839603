"""ALFWorld's real text engine, as a worker process: TextWorld's PDDL environment (fast-downward) with
ALFWorld's demangler, serving any number of engines (one per stream) over a JSON-lines pipe.

This file runs as a script under ALFWorld's own venv (``.venv-alfworld``: the old pinned textworld /
tatsu / fast-downward set, docs/alfworld.md), never imported by the harness: it imports only the
standard library and the engine. :mod:`tokenworth_agent.benchmarks.alfworld.env` starts it and talks to it.

Why a worker process (and never two engines in the run's process): fast-downward's ``libdownward.so``
holds a GNU-unique static (``options::RawRegistry::instance()::instance_``); TextWorld dlopens one copy
of the library per PddlEnv, every copy binds to the same object, and each copy's static destructor
destroys it at exit, so a process with two engines segfaults when it exits. The worker leaves with
``os._exit`` (skipping the destructors); a planner crash takes only the worker, and the game in play
fails with a message naming it. One engine per stream, reused across games (each holds a 33 MB copy
of the library that TextWorld never unloads).

Playing a game from its ``game.tw-pddl`` alone (no ALFRED ``traj_data.json``)::

    env = AlfredDemangler(PddlEnv(EnvInfos(won=True, admissible_commands=True)))
    env.load(game_dict)   # the JSON object, walkthrough removed first
    state = env.reset()

The worker reads the game file itself, checks its sha256 against the one the manifest names (the
environment plays the very file the manifest lists), and drops the walkthrough before TextWorld sees
the game. Speed-ups that change no answer (``tests/test_alfworld.py`` plays one game per task type, its
walkthrough and a wrong plan, in a ``--plain`` worker and a fast one and compares every answer): the
first reset after a load reuses the state the load built; PDDL->SAS translations are memoised per
(domain, problem) text (every stream of an experiment plays the same games); TatSu parses of grammar
rule texts and of the grammar's conditional queries are memoised per text; and the grammar's context
copies are shallow (upstream deep-copies two dicts whose values the derivation never changes).

Protocol: one JSON object per line on stdin, one answer per line on the original stdout (the
engine's own prints go to stderr). Requests ``{"op": "start", "key", "path", "sha256"}``,
``{"op": "step", "key", "command"}``, ``{"op": "close"}``; answers ``{"ok": true, "text",
"admissible", "won", "executed", "cpu"}`` or ``{"ok": false, "error"}``.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import sys
import time
from typing import Any

WELCOME = "-= Welcome to TextWorld, ALFRED! =-"
# Run as a script, this file's folder (agent/tokenworth_agent/benchmarks/alfworld) would come first on sys.path
# and shadow the `alfworld` package.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]


def _engine_classes(fast: bool) -> Any:
    """Import the engine (late: ALFWORLD_DATA must be set first) and install the memos."""
    import fast_downward
    import textworld
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.core import GameState
    from textworld.envs.pddl import PddlEnv

    class ReusingPddlEnv(PddlEnv):
        """PddlEnv whose first reset after load reuses the initial state that load built."""

        _fresh_from_load = False

        def load(self, filename_or_data: Any) -> None:  # type: ignore[override]
            super().load(filename_or_data)
            self._fresh_from_load = True

        def reset(self) -> Any:  # type: ignore[override]
            if not self._fresh_from_load:
                return super().reset()
            self._fresh_from_load = False
            self.prev_state = None
            self.state = GameState()
            self._last_action = None
            self._moves = 0
            context = {"state": self._pddl_state, "facts": list(self._pddl_state.facts), "variables": {},
                       "mapping": {}, "entity_infos": self._entity_infos}
            self.state.feedback = self._logic.grammar.derive("#intro#", context)
            self.state.raw = self.state.feedback
            self._gather_infos()
            return self.state

    if fast:
        original_pddl2sas, original_parse = fast_downward.pddl2sas, textgen._parse_and_convert

        @functools.lru_cache(maxsize=16)
        def cached_pddl2sas(domain: str, problem: str, optimize: bool) -> Any:
            return original_pddl2sas(domain, problem, verbose=False, optimize=optimize)

        def memo_pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
            # a pure function of the two texts; PddlState only reads the translated task
            if verbose:
                return original_pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
            return cached_pddl2sas(domain, problem, optimize)

        @functools.lru_cache(maxsize=4096)
        def cached_parse(text: str, rule_name: str) -> Any:
            return original_parse(text, rule_name=rule_name)

        def memo_parse(*args: Any, **kwargs: Any) -> Any:
            if len(args) == 1 and set(kwargs) <= {"rule_name", "trace"} and not kwargs.get("trace"):
                return copy.deepcopy(cached_parse(args[0], kwargs.get("rule_name", "symbols")))  # derivation mutates it
            return original_parse(*args, **kwargs)

        original_query = textworld.logic.Rule.parse_conjunctive_query

        @functools.lru_cache(maxsize=4096)
        def query_preconditions(expression: str) -> Any:
            return original_query(expression).preconditions

        def memo_query(cls: Any, expression: str) -> Any:
            # the grammar parses each conditional symbol's query at every derivation (a third of a step's
            # time); its predicates are values, so a new Rule over the same ones is the same query
            return cls("query", query_preconditions(expression), [])

        def shallow_copy_context(context: dict[str, Any]) -> dict[str, Any]:
            # upstream deep-copies the variables and mapping dicts at every symbol (another third); the
            # derivation only adds keys to them and never changes a value, so new dicts over the same values do
            return {"state": context["state"], "facts": context["facts"], "variables": dict(context["variables"]),
                    "mapping": dict(context["mapping"]), "entity_infos": context["entity_infos"]}

        fast_downward.pddl2sas = memo_pddl2sas
        textgen._parse_and_convert = memo_parse
        textworld.logic.Rule.parse_conjunctive_query = classmethod(memo_query)
        textgen.copy_context = shallow_copy_context
    infos = textworld.EnvInfos(won=True, admissible_commands=True)
    return lambda: AlfredDemangler((ReusingPddlEnv if fast else PddlEnv)(infos))


def opening(feedback: str) -> str:
    """The game's opening without TextWorld's banner: the room, then "Your task is to: ..."."""
    text = feedback.strip()
    return text[len(WELCOME):].strip() if text.startswith(WELCOME) else text


class Worker:
    def __init__(self, fast: bool) -> None:
        self.make = _engine_classes(fast)
        self.engines: dict[str, Any] = {}
        self.states: dict[str, Any] = {}

    def answer(self, state: Any, executed: bool, cpu: float, text: str | None = None) -> dict[str, Any]:
        return {"ok": True, "text": state.feedback if text is None else text,
                "admissible": list(state["admissible_commands"]), "won": bool(state["won"]), "executed": executed,
                "cpu": round(cpu, 4)}

    def start(self, key: str, path: str, sha256: str) -> dict[str, Any]:
        c0 = time.process_time()
        raw = open(path, "rb").read()
        digest = hashlib.sha256(raw).hexdigest()
        if digest != sha256:
            return {"ok": False, "error": f"{path}: sha256 {digest}, but the manifest names {sha256}: not the "
                                          f"manifest's game file"}
        game = json.loads(raw.decode("utf-8"))
        game.pop("walkthrough", None)  # the engine never holds the expert plan
        engine = self.engines.get(key)
        if engine is None:
            engine = self.engines[key] = self.make()
        engine.load(game)
        state = self.states[key] = engine.reset()
        return self.answer(state, True, time.process_time() - c0, opening(state.feedback))

    def step(self, key: str, command: str) -> dict[str, Any]:
        if key not in self.states:
            return {"ok": False, "error": f"engine {key!r}: step before start"}
        c0 = time.process_time()
        executed = command in self.states[key]["admissible_commands"]
        state, _, _ = self.engines[key].step(command)
        self.states[key] = state
        return self.answer(state, executed, time.process_time() - c0)


def serve(fast: bool = True) -> None:
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything the engine prints goes to stderr, never into the protocol
    sys.stdout = sys.stderr
    worker = None
    try:
        for line in sys.stdin:
            try:
                request = json.loads(line)
                op = request["op"]
                if op == "close":
                    out.write(json.dumps({"ok": True}) + "\n")
                    out.flush()
                    break
                if worker is None:
                    worker = Worker(fast)
                if op == "start":
                    reply = worker.start(request["key"], request["path"], request["sha256"])
                elif op == "step":
                    reply = worker.step(request["key"], request["command"])
                elif op == "ping":
                    reply = {"ok": True}
                else:
                    reply = {"ok": False, "error": f"unknown op {op!r}"}
            except Exception as exc:  # a bad game or command fails that call; the worker lives
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            out.write(json.dumps(reply) + "\n")
            out.flush()
    finally:
        out.flush()
        sys.stderr.flush()
        os._exit(0)  # never run libdownward's static destructors (module docstring)


if __name__ == "__main__":
    serve(fast="--plain" not in sys.argv[1:])
