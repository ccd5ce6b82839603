"""ALFWorld (Appendix C): a household text game per task, played in ALFWorld's real TextWorld engine.

Conversation (the shape every environment shares, :func:`tokenworth_agent.envs.base.conversation`): the
instructions (+ the injected memory), "OK.", then the game's opening (the room, then "Your task is
to: ..."; TextWorld's banner removed); then reply / observation pairs.

Decisions where the paper is silent (docs/alfworld.md):

* **Action format.** The first line of the reply that starts with ``Action:`` (any case) holds the
  command; a ``Thought:`` line before it is free text. The command is normalised (lower case,
  surrounding quotes/backticks and a final period removed, spaces collapsed); nothing is rewritten
  ("put X in Y" is not aliased to ALFWorld's "move X to Y"): a near miss goes through the repair call.
* **Admissible** = in TextWorld's admissible-command list for the current state. On this engine that
  is exactly what TextWorld executes (anything else: "Nothing happens.", no state change; checked on
  every step of the gold replay, wrong plans included), so the check happens before a step is spent.
* **The repair call.** A reply with no ``Action:`` line or an inadmissible command is not sent to
  the engine: the reply stays in the conversation, the next user turn says what was wrong and lists
  the admissible commands, and the model gets ONE repair call (capped at O_max like any action
  call). Whatever command the repaired reply holds is then sent to TextWorld (still inadmissible:
  "Nothing happens.", the step counts; no command at all: the empty command, the same). The
  environment marks that turn ``StepResult.repair``; the episode counts J_max in environment steps
  (commands sent to TextWorld), so an episode makes at most 50 action calls + 50 repair calls.
* **Observations** are TextWorld's feedback as is; the admissible list is shown only in the repair
  turn (ALFWorld's ReAct-style harnesses show none; AgentBench-style ones list it every turn).
* **One controller for every method**: this parser and repair rule, with no loop removal of any
  kind (memory-dependent or not); what an episode does depends on the replies alone.
* **Success** = TextWorld's ``won`` (no "lost" in ALFWorld): status ``completed``, reward 1; 50 steps
  without a win: ``round_limit``, reward 0. There is no finish action.
* **The walkthrough** never reaches the engine, a prompt or a memory: the worker reads the game file
  and drops it; prompts, observations and repair turns come from the engine's state.
* **The manifest is followed**: the worker plays the game file only if its sha256 is the one the
  manifest names for the episode (:class:`~tokenworth_agent.benchmarks.alfworld.tasks.ALFWorldTask`).

The engine runs in worker processes under ALFWorld's own venv (:mod:`tokenworth_agent.benchmarks.alfworld.engine`
says why): a pool of ``$TOKENWORTH_ALFWORLD_WORKERS`` workers (default ``min(2, cores)``) shared by
every ALFWorld environment of the process, environments dealt round-robin, one engine per
environment inside its worker (so the streams of one experiment share a worker's memoised
translations). A worker that dies fails the game in play with a message naming it (``env_error``);
the next game brings up a new one.

**Transitions are shared, never recomputed.** The engine is deterministic (TextWorld's PDDL state and
its text grammar draw no random numbers; each game start is a fresh load), so what a step answers is a
function of the game file and the commands sent since its start. Every stream of an experiment plays
the same games, and under the simulated backbone most episodes repeat another stream's commands
exactly (82 % of steps, 73 of 88 episodes over 11 methods x 8 games), so the pool keeps a
:class:`TransitionCache` of the real engine's answers: a start or step whose history was played
before is answered from it, and the engine is touched only when a history is new. It then catches up
by replaying the stream's history (a fresh start and its commands), and each replayed answer must equal
the one it had given (anything else is an :class:`EngineError`: the engine would not be deterministic).
The game file's sha256 is still checked against the manifest at every start, cached or not. Records are
unchanged except ``engine_cpu_s``, which stays the engine CPU the episode actually used (0 for answers
from the cache, replays included). ``$TOKENWORTH_ALFWORLD_CACHE_GAMES`` (default 64) bounds the cache to
the most recent games; 0 turns it off.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import re
import select
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from tokenworth_agent.benchmarks.alfworld.engine_venv import open_venv
from tokenworth_agent.envs.base import Environment, Judgement, StepResult
from tokenworth_agent.tasks import Task
from tokenworth_agent.benchmarks.alfworld.tasks import repair_prompt

INSTRUCTIONS = """You are an agent in a text-based household. You will be placed in a room and given a household task, such as putting an object somewhere, heating, cooling or cleaning an object first, or examining an object under a lamp. You act by issuing one text command per reply; the next message tells you what happened.

In every reply, you may first think briefly on a line starting with "Thought:", then give exactly one command on a line starting with "Action:", for example:

Thought: The task needs a mug; mugs are often on the countertop.
Action: go to countertop 1

Commands (use the exact object and receptacle names you have seen, numbers included):
- go to <receptacle>
- open <receptacle> / close <receptacle>
- take <object> from <receptacle>
- move <object> to <receptacle>
- heat <object> with <microwave>
- cool <object> with <fridge>
- clean <object> with <sink or basin>
- use <lamp>
- examine <object or receptacle>
- look
- inventory

A command that cannot be carried out does not change anything. If your command is not one of the commands possible at that moment, you will be shown the list of possible commands once and asked to choose again. You have at most 50 commands per task. The task ends as soon as it is done."""

NOTHING_HAPPENS = "Nothing happens."
WORKERS_VARIABLE = "TOKENWORTH_ALFWORLD_WORKERS"
CACHE_VARIABLE = "TOKENWORTH_ALFWORLD_CACHE_GAMES"
CACHE_GAMES = 64  # an experiment's streams are at most a few games apart: each game's transitions outlive that
ANSWER_TIMEOUT_S = 300.0  # a worker silent this long is killed (a game load takes ~1.5 s CPU)

_ACTION = re.compile(r"^[ \t]*action[ \t]*:[ \t]*(.*)$", re.IGNORECASE | re.MULTILINE)


def normalise(command: str) -> str:
    text = command.strip().strip("`'\"").strip()
    if text.endswith("."):
        text = text[:-1]
    return re.sub(r"\s+", " ", text).strip().lower()


def parse_action(reply: str) -> str | None:
    """The reply's command, normalised; None when it has no (non-empty) ``Action:`` line."""
    match = _ACTION.search(reply)
    return (normalise(match.group(1)) or None) if match else None


# ------------------------------------------------------------------ the worker pool
class EngineError(RuntimeError):
    """The engine worker failed a call or died; the message names it."""


class _Worker:
    """One engine worker process (agent/tokenworth_agent/benchmarks/alfworld/engine.py under the engine venv)."""

    def __init__(self, index: int, plain: bool = False) -> None:
        self.index, self.plain = index, plain  # plain: the engine without the worker's speed-ups
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr: Any = None
        self.generation = 0  # a new process holds none of the engines the last one held

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        venv = open_venv()
        self.stderr = tempfile.TemporaryFile()
        data = Path(tempfile.gettempdir()) / "tokenworth-alfworld-data"  # `import alfworld` creates this folder
        env = {**os.environ, "ALFWORLD_DATA": str(data), "PYTHONUNBUFFERED": "1"}
        env.pop("PYTHONPATH", None)
        script = Path(__file__).with_name("engine.py")
        self.generation += 1
        command = [str(venv.python), "-P", str(script), *(["--plain"] if self.plain else [])]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env, start_new_session=True)
        return self.proc

    def _stderr_tail(self) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0, os.SEEK_END)
        size = self.stderr.tell()
        self.stderr.seek(max(0, size - 600))
        return self.stderr.read().decode("utf-8", "replace").strip()

    def call(self, request: dict[str, Any], timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
        with self.lock:
            proc = self._ensure()
            assert proc.stdin is not None and proc.stdout is not None
            ready: list[Any] = [proc.stdout]
            try:
                proc.stdin.write((json.dumps(request) + "\n").encode("utf-8"))
                proc.stdin.flush()
                ready, _, _ = select.select([proc.stdout], [], [], timeout)
                line = proc.stdout.readline() if ready else b""
            except (BrokenPipeError, OSError):
                line = b""
            if not line:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                self.proc = None
                raise EngineError(f"ALFWorld engine worker {self.index} "
                                  f"{'gave no answer within %g s' % timeout if not ready else 'died'} during "
                                  f"{request['op']!r} (exit code {proc.returncode}); the game in play is lost, the "
                                  f"next game starts a new worker. Its last words: {self._stderr_tail()[-300:]!r}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise EngineError(f"ALFWorld engine: {reply.get('error')}")
        return reply

    def close(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    assert self.proc.stdin is not None
                    self.proc.stdin.write(b'{"op": "close"}\n')
                    self.proc.stdin.flush()
                    self.proc.wait(10)
                except (OSError, subprocess.TimeoutExpired):
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None


History = tuple[str, ...]  # (game sha256, command 1, command 2, ...): what an engine was sent since its start


class TransitionCache:
    """The real engine's answers by history, for the ``games`` most recently started games (module docstring)."""

    def __init__(self, games: int) -> None:
        if games < 0:
            raise ValueError(f"{CACHE_VARIABLE} must be at least 0, got {games}")
        self.games = games
        self._by_game: collections.OrderedDict[str, dict[History, dict[str, Any]]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._game_locks: dict[str, threading.Lock] = {}
        self.hits = self.misses = 0

    def playing(self, sha256: str) -> Any:
        """Held while a stream looks up or computes a transition of this game: the streams of one batch tick
        ask for the same history at once, and only the first may compute it (the rest then find it)."""
        if self.games == 0:
            return contextlib.nullcontext()
        with self._lock:
            return self._game_locks.setdefault(sha256, threading.Lock())

    def get(self, history: History, count: bool = True) -> dict[str, Any] | None:
        with self._lock:
            answer = self._by_game.get(history[0], {}).get(history)
            if count:
                self.hits += answer is not None
                self.misses += answer is None
            return answer

    def put(self, history: History, answer: dict[str, Any]) -> None:
        if self.games == 0:
            return
        with self._lock:
            game = self._by_game.get(history[0])
            if game is None:
                game = self._by_game[history[0]] = {}
                while len(self._by_game) > self.games:
                    self._game_locks.pop(self._by_game.popitem(last=False)[0], None)
            game[history] = answer

    def touch(self, sha256: str) -> None:
        """A game started: it is the most recent one."""
        with self._lock:
            if sha256 in self._by_game:
                self._by_game.move_to_end(sha256)


class EnginePool:
    """The process's engine workers and their transition cache; :meth:`engine` deals a new environment
    its worker and key."""

    def __init__(self, size: int, cache_games: int = CACHE_GAMES, *, plain: bool = False) -> None:
        if size < 1:
            raise ValueError(f"{WORKERS_VARIABLE} must be at least 1, got {size}")
        self.workers = [_Worker(i, plain) for i in range(size)]
        self.cache = TransitionCache(cache_games)
        self._keys = itertools.count()

    def engine(self) -> "RemoteEngine":
        n = next(self._keys)
        return RemoteEngine(self.workers[n % len(self.workers)], f"e{n}", self.cache)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


_POOL: EnginePool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> EnginePool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            size = int(os.environ.get(WORKERS_VARIABLE) or min(2, os.cpu_count() or 1))
            _POOL = EnginePool(size, int(os.environ.get(CACHE_VARIABLE) or CACHE_GAMES))
            atexit.register(_POOL.close)
        return _POOL


@dataclasses.dataclass
class EngineState:
    text: str
    admissible: list[str]
    won: bool
    executed: bool
    cpu: float


_ANSWER = ("text", "admissible", "won", "executed")  # what a transition answers; "cpu" is the call's cost


class RemoteEngine:
    """One environment's engine inside a worker, behind the pool's transition cache.

    ``history`` is what this environment has been answered for; ``_played`` is what its engine in the
    worker has actually been sent (None: nothing of this game). They differ while answers come from the
    cache; the first new history makes the engine catch up.
    """

    def __init__(self, worker: _Worker, key: str, cache: TransitionCache | None = None) -> None:
        self.worker, self.key = worker, key
        self.cache = cache if cache is not None else TransitionCache(0)
        self.history: History = ()
        self._path = ""
        self._played: History | None = None
        self._generation = 0  # the worker process that holds what was played

    @staticmethod
    def _state(answer: dict[str, Any], cpu: float) -> EngineState:
        return EngineState(answer["text"], list(answer["admissible"]), bool(answer["won"]), bool(answer["executed"]),
                           cpu)

    def _call(self, request: dict[str, Any], history: History) -> tuple[dict[str, Any], float]:
        """Send ``request`` (which brings the engine to ``history``): its answer, kept in the cache, and its CPU."""
        try:
            reply = self.worker.call({"key": self.key, **request})
        except EngineError:
            self._played = None
            raise
        self._played, self._generation = history, self.worker.generation
        answer = {k: reply[k] for k in _ANSWER}
        known = self.cache.get(history, count=False)
        if known is not None and known != answer:
            raise EngineError(f"ALFWorld engine: replaying {len(history) - 1} command(s) of game {history[0][:12]} "
                              f"gave another answer than before: the engine is not deterministic here; rerun with "
                              f"{CACHE_VARIABLE}=0")
        self.cache.put(history, answer)
        return answer, float(reply["cpu"])

    def _catch_up(self) -> float:
        """Bring the worker's engine to ``history`` (a fresh start unless it is already on the way)."""
        cpu, played = 0.0, self._played
        if played is None or played != self.history[: len(played)] or self._generation != self.worker.generation:
            played = (self.history[0],)
            cpu += self._call({"op": "start", "path": self._path, "sha256": self.history[0]}, played)[1]
        for command in self.history[len(played):]:
            played = (*played, command)
            cpu += self._call({"op": "step", "command": command}, played)[1]
        return cpu

    def start(self, path: Path, sha256: str) -> EngineState:
        with self.cache.playing(sha256):
            return self._start(path, sha256)

    def step(self, command: str) -> EngineState:
        if not self.history:
            raise EngineError(f"ALFWorld engine: engine {self.key!r}: step before start")
        with self.cache.playing(self.history[0]):
            return self._step(command)

    def _start(self, path: Path, sha256: str) -> EngineState:
        self._path, self._played, self.history = str(path), None, ()
        answer, cpu = self.cache.get((sha256,)), 0.0
        if answer is None:
            answer, cpu = self._call({"op": "start", "path": str(path), "sha256": sha256}, (sha256,))
        else:
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()  # what the worker checks, checked here
            if digest != sha256:
                raise EngineError(f"ALFWorld engine: {path}: sha256 {digest}, but the manifest names {sha256}: not "
                                  f"the manifest's game file")
            self.cache.touch(sha256)
        self.history = (sha256,)
        return self._state(answer, cpu)

    def _step(self, command: str) -> EngineState:
        history = (*self.history, command)
        answer = self.cache.get(history)
        if answer is not None:
            self.history = history
            return self._state(answer, 0.0)
        cpu = self._catch_up()
        answer, step_cpu = self._call({"op": "step", "command": command}, history)
        self.history = history
        return self._state(answer, cpu + step_cpu)


# ------------------------------------------------------------------ the environment
class ALFWorldEnvironment(Environment):
    name = "alfworld"
    concurrent_steps = True  # a step is a pipe round trip; each instance has its own engine key

    def __init__(self, max_rounds: int = 50, instructions: str | None = None, engine: RemoteEngine | None = None):
        if max_rounds < 1:
            raise ValueError(f"max_rounds (J_max) must be at least 1, got {max_rounds}")
        self.max_rounds = max_rounds
        self._instructions = INSTRUCTIONS if instructions is None else instructions
        self._engine = engine
        self._task: Any = None
        self._state: EngineState | None = None
        self._opening = ""
        self._steps = 0
        self._repairing = False
        self._ended: str | None = None
        self._inadmissible = self._repairs = 0
        self._cpu = 0.0

    @property
    def engine(self) -> RemoteEngine:
        if self._engine is None:
            self._engine = pool().engine()
        return self._engine

    def instructions(self) -> str:
        return self._instructions

    def task_prompt(self, task: Task) -> str:
        if self._task is not task:
            raise RuntimeError("task_prompt(task) after reset(task): the opening comes from the engine")
        return self._opening

    def reset(self, task: Task) -> str:
        if getattr(task, "env", None) != "alfworld":
            raise TypeError(f"the ALFWorld environment plays ALFWorld tasks, got {type(task).__name__}")
        self._task, self._state = None, None
        state = self.engine.start(task.path, task.sha256)  # type: ignore[attr-defined]
        self._task, self._state, self._opening = task, state, state.text
        self._steps, self._repairing, self._ended = 0, False, None
        self._inadmissible = self._repairs = 0
        self._cpu = state.cpu
        return self._opening

    def step(self, reply: str) -> StepResult:
        self.check_step(started=self._task is not None, ended=self._ended)
        assert self._state is not None
        command = parse_action(reply)
        admissible = command is not None and command in self._state.admissible
        action: dict[str, Any] = {"kind": "command" if command else "none", "command": command,
                                  "admissible": admissible, "call": "repair" if self._repairing else "action"}
        if not admissible:
            self._inadmissible += 1
            if not self._repairing:
                self._repairs += 1
                self._repairing = True
                return StepResult(repair_prompt(command, self._state.admissible), False, None, action, repair=True)
        self._repairing = False
        state = self._state = self.engine.step(command or "")
        self._cpu += state.cpu
        self._steps += 1
        action["step"] = self._steps
        action["executed"] = state.executed
        if state.won:
            self._ended = "completed"
        elif self._steps >= self.max_rounds:
            self._ended = "round_limit"
        return StepResult(state.text, self._ended is not None, self._ended, action)  # type: ignore[arg-type]

    def judge(self) -> Judgement:
        if self._task is None or self._state is None:
            raise RuntimeError("judge() after reset(task)")
        won = bool(self._state.won)
        return Judgement(int(won), {"won": won, "steps": self._steps, "repair_calls": self._repairs,
                                    "inadmissible": self._inadmissible, "game": self._task.game,
                                    "engine_cpu_s": round(self._cpu, 3)})


__all__ = ["ALFWorldEnvironment", "EngineError", "EnginePool", "INSTRUCTIONS", "RemoteEngine", "TransitionCache",
           "normalise", "parse_action", "pool"]
