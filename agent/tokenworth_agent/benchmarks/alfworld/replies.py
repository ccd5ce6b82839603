"""ALFWorld replies: the walkthrough with slips and recoveries, or the walkthrough cut short and then lost.

The simulator's skill model is the one every environment shares (:mod:`tokenworth_agent.sim`): ``decide`` draws
the outcome from the task's difficulty and the injected memory's skill overlap; the real TextWorld
engine then judges what the simulator actually played.

* **Skills = the task type alone** (:class:`~tokenworth_agent.benchmarks.alfworld.tasks.ALFWorldTask`): a memory of a
  game of the same type has J = 1 (helps, +gain), one of another type J = 0 (harmful, -harm). Why
  not objects or receptacles too: with (type, object, receptacle) a same-type memory about another
  object has J = 1/5 < the harm threshold and would count as harmful, and (type, object) makes
  "heat an apple" help "clean an apple" (J = 1/3); the procedure for the task type is what carries
  over between ALFWorld games. BM25 over goal texts separates the types imperfectly (clean, heat and
  cool of one object share words), which gives the methods something to learn.
* **Success: the walkthrough with slips and recoveries.** Before each walkthrough command, with
  probability ``SLIP_RATE`` a slip: half are format slips (a near miss that is never an
  admissible command, "pick up X", "put X in Y", "walk to Y", "turn on Y", "heat X"), which the repair
  call corrects; half are detours ("look", or "go to" another receptacle of the opening and back).
  A harmful memory adds ``harmful_extra_rounds`` detours first.
* **Failure: the walkthrough cut short, then lost.** The first k commands (k uniform in 0..len-2, so
  the last is never played), then wandering: "go to" receptacles in a seeded order, every
  ``WANDER_SLIP_EVERY``-th move a "look" or a format slip. Wandering never takes, moves,
  heats, cools, cleans or uses anything, so it cannot win by accident (the engine checks it).
* **Common random numbers.** The moves are drawn from a stream keyed by the task's difficulty draw
  (which depends on the run's seed and the task, not on the memory), so the same game plays the same
  slips with or without a memory.
* **Which call this is** is read from the conversation, as a model reads it: the number of
  observations so far is the environment step, and a last user turn that is the repair turn makes
  this the repair call (:func:`tokenworth_agent.benchmarks.alfworld.tasks.is_repair_turn`).
"""

from __future__ import annotations

import dataclasses
import functools
import re

from tokenworth_agent.backbones.base import Conversation
from tokenworth_agent.sim.model import Episode, SimParams, stable_rng
from tokenworth_agent.benchmarks.alfworld.tasks import ALFWorldTask, is_repair_turn

_RECEPTACLES = re.compile(r"you see (.*?)\.\s*(?:\n|$)", re.IGNORECASE)
# The simulator's ALFWorld knobs, fixed with the rest before any method comparison: mean no-memory p about 0.675
# (P0_RANGE), the paper's local ALFWorld SRs being in the 70s; slips before a walkthrough command (half format
# slips the repair call corrects, half detours) and, on the failure path, a look or a format slip every 5th
# wandering move.
P0_RANGE = (0.40, 0.95)
SLIP_RATE = 0.10
FORMAT_SLIP_SHARE = 0.5
WANDER_SLIP_EVERY = 5
TASK_TURN = 3  # the conversation's index of the game's opening (system, instructions, "OK.", opening)


@dataclasses.dataclass(frozen=True)
class Move:
    action: str  # what the action call answers
    repair: str | None = None  # what the repair call answers (when ``action`` is a format slip)
    kind: str = "gold"  # gold | format_slip | detour | return (a success's) | wander (after a failure's cut)


def receptacles(opening: str) -> list[str]:
    """The receptacles of the opening ("you see a bed 2, a bed 1, and a desk 1.")."""
    match = _RECEPTACLES.search(opening)
    if not match:
        return []
    items = re.split(r",\s*(?:and\s+)?|\s+and\s+", match.group(1))
    return [re.sub(r"^(a|an)\s+", "", i.strip()) for i in items if i.strip()]


def near_miss(command: str) -> str:
    """A plausible command in the wrong words: never one of ALFWorld's command templates."""
    words = command.split()
    if command.startswith("take ") and " from " in command:
        return "pick up " + command[5:].split(" from ")[0]
    if command.startswith("move ") and " to " in command:
        obj, recep = command[5:].split(" to ", 1)
        return f"put {obj} in {recep}"
    if command.startswith("go to "):
        return "walk to " + command[6:]
    if command.startswith("use "):
        return "turn on " + command[4:]
    if words[0] in ("heat", "cool", "clean") and " with " in command:
        return command.split(" with ")[0]
    if words[0] in ("open", "close"):
        return f"{words[0]} the {' '.join(words[1:])}"
    return "do " + command


def _target(command: str) -> str | None:
    return command[6:] if command.startswith("go to ") else None


@functools.lru_cache(maxsize=256)
def plan(task: ALFWorldTask, success: bool, harmful: bool, p0: float, opening: str,
         params: SimParams) -> tuple[Move, ...]:
    """Every move of the episode, decided before the first step."""
    rng = stable_rng("tokenworth-sim-alfworld-moves", p0, task.sample_index)
    walk = list(task.walkthrough)
    places = receptacles(opening)
    moves: list[Move] = []
    here: str | None = None

    def detour(avoid: set[str | None]) -> str | None:
        options = [p for p in places if p not in avoid]
        return options[int(rng.integers(len(options)))] if options else None

    if harmful:
        for _ in range(params.harmful_extra_rounds):
            place = detour({here, _target(walk[0])})
            if place:
                moves.append(Move(f"go to {place}", kind="detour"))
                here = place
    cut = len(walk) if success else int(rng.integers(0, max(1, len(walk) - 1)))
    for command in walk[:cut]:
        u, v, w = rng.random(3)
        if u < SLIP_RATE:
            if v < FORMAT_SLIP_SHARE:
                moves.append(Move(near_miss(command), repair=command, kind="format_slip"))
                here = _target(command) or here
                continue
            if w < 1 / 3:
                moves.append(Move("look", kind="detour"))
            else:
                place = detour({here, _target(command)})
                if place:
                    moves.append(Move(f"go to {place}", kind="detour"))
                    if _target(command) is None and here is not None:
                        moves.append(Move(f"go to {here}", kind="return"))
                    else:
                        here = place
        moves.append(Move(command))
        here = _target(command) or here
    if not success:
        order = list(places)
        rng.shuffle(order)
        i = 0
        every = WANDER_SLIP_EVERY
        while len(moves) < 200:  # more than any J_max: the episode stops there
            if every and len(moves) % every == every - 1:
                if rng.random() < 0.5:
                    moves.append(Move("look", kind="wander"))
                else:
                    place = order[i % len(order)] if order else "room"
                    moves.append(Move(f"walk to {place}", repair=f"go to {place}", kind="wander"))
                    i += 1
                    here = place
                continue
            place = order[i % len(order)] if order else None
            i += 1
            if place is None:
                moves.append(Move("look", kind="wander"))
            elif place != here:
                moves.append(Move(f"go to {place}", kind="wander"))
                here = place
    return tuple(moves)


def reply(task: ALFWorldTask, episode: Episode, round_index: int, conversation: Conversation,
          params: SimParams) -> str:
    opening = str(conversation[TASK_TURN]["content"])
    observations = [str(m["content"]) for m in conversation[TASK_TURN + 2::2] if m.get("role") == "user"]
    repairing = bool(observations) and is_repair_turn(observations[-1])
    step = sum(not is_repair_turn(o) for o in observations)  # commands TextWorld has executed
    moves = plan(task, episode.success, episode.harmful, episode.p0, opening, params)
    move = moves[min(step, len(moves) - 1)]
    if repairing:
        return f"Action: {move.repair or move.action}"
    return f"Action: {move.action}"


__all__ = ["Move", "near_miss", "plan", "receptacles", "reply"]
