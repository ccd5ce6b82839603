"""The task protocol, once: ``select -> observe -> offer (optional) -> end_task``.

The open task's :class:`Progress` (its phase, its judged reward, whether it offered its memory)
is part of the controller's device state (``State.task.progress``); every pure function of the
controller advances it with :func:`after`.

Two ways to walk it, both pure, both leaving the same learners, bank and decisions:

* **Eager** (``tw.select``, ``tw.observe``, ``tw.offer``, ``tw.end_task``; ``tw.step``): each step
  does its work at once (``observe`` leaves phase ``observed``: judged, its feedback applied, so a
  second observe is told from a host's pending one).
* **Deferred** (the host ``Controller``): ``observe`` only records the judged reward (phase
  ``judged``) and ``end_task`` only marks the task ended (:func:`deferred_end`, phase ``ended``),
  both in the host's copy of the progress alone; the task's feedback (credit, windows, refits),
  its admission and its end then run in the one call that closes it, which is given the reward:
  ``offer`` (``tw.finish_task``) or the next ``select`` (``tw.advance``). The phase says which
  work is pending, and the host writes its copy into every state it hands out, so a checkpoint
  describes itself. A task thus runs at most two device calls, not four (each costs a dispatch of
  the whole state).

A pure function cannot raise under ``jit``, so the rules (:func:`refusals`, written once) are
enforced where calls are made: ``tw.checked`` compiles them in as ``checkify`` checks read from the
state's phase (:func:`device_check`; dropped from the plain functions, which instead treat an
out-of-order call as documented: a no-op observe, a NOT_OFFERED offer), and the host keeps a
host copy of the progress (Python values, kept in step with the same transitions, read back from
the device state only when a checkpoint is loaded), runs :func:`check` on it before each call,
and so raises :class:`ProtocolError` before touching anything: the state is unchanged, with no
device round trip and no ``checkify`` in the compiled code.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax.numpy as jnp
from jax.experimental import checkify

IDLE, SELECTED, JUDGED, ENDED = 0, 1, 2, 3
# The eager walk's judged task (tw.observe applied its feedback at once). The host never holds it: a
# host's "judged" / "ended" task has its feedback still pending, which is how the pure functions tell
# a second observe (refused, a no-op) from the deferred one that closes a host's task (applied).
OBSERVED = 4
PHASES = ("idle", "selected", "judged", "ended", "observed")  # by phase number; "ended": its feedback still pending
HOST_PHASES = (IDLE, SELECTED, JUDGED, ENDED)  # those a host's copy (and so a checkpoint) can be in
REWARD_RULE = "reward must be 0 or 1 (0: the task failed, 1: it succeeded)"
Step = Literal["select", "observe", "offer", "end_task"]


class ProtocolError(RuntimeError):
    """A call out of order (e.g. selecting while a task is open). State is unchanged."""


class Progress(NamedTuple):
    """Where the open task stands: device arrays in the state, Python values in the host's copy."""

    phase: Any
    reward: Any
    offered: Any


Progress.phase.__doc__ = ("int32 (int on the host): ``IDLE`` 0, ``SELECTED`` 1, ``JUDGED`` 2 or ``ENDED`` 3 (a host's "
                          "judged or ended task, its feedback pending); ``OBSERVED`` 4 after a pure ``tw.observe`` "
                          "(its feedback applied).")
Progress.reward.__doc__ = "int32 (int on the host): the judged reward, 0 or 1; -1 before ``observe``."
Progress.offered.__doc__ = "bool: the task has offered its memory."


START = Progress(phase=IDLE, reward=-1, offered=False)


def after(progress: Progress, step: Step | Literal["feedback"], value: Any = None) -> Progress:
    """The progress after ``step`` (``value``: the reward of ``observe``, whether ``offer`` offered).

    ``"observe"`` is the host's (judged, the feedback pending); ``"feedback"`` is the pure functions'
    observe (phase :data:`OBSERVED`: judged, the feedback applied). Plain Python operations: the same
    function moves the device state and the host's copy."""
    if step == "select":
        return Progress(phase=SELECTED, reward=-1, offered=False)
    if step == "observe":
        return Progress(phase=JUDGED, reward=value, offered=progress.offered)
    if step == "feedback":  # the eager observe: judged, and its feedback applied (device only)
        return Progress(phase=OBSERVED, reward=value, offered=progress.offered)
    if step == "offer":
        return progress._replace(offered=True if value is None else value)
    if step == "end_task":
        return START
    raise ValueError(f"unknown protocol step {step!r}")


def deferred_end(progress: Progress) -> Progress:
    """The progress after a deferred ``end_task``: ended, its feedback pending."""
    return progress._replace(phase=ENDED)


def pending(progress: Progress) -> bool:
    """Whether a judged task's feedback is still to be applied (host copy)."""
    return progress.phase in (JUDGED, ENDED)


def on_device(progress: Progress) -> Progress:
    """The same progress as the state's arrays (int32, int32, bool)."""
    return Progress(phase=jnp.asarray(progress.phase, jnp.int32), reward=jnp.asarray(progress.reward, jnp.int32),
                    offered=jnp.asarray(progress.offered, bool))


def on_host(progress: Progress) -> Progress:
    """Python values of a (fetched) device progress."""
    return Progress(phase=int(progress.phase), reward=int(progress.reward), offered=bool(progress.offered))


def refusals(progress: Progress, step: Step, walk: Literal["host", "eager"] = "host") -> list[tuple[Any, str]]:
    """The protocol's rules for ``step``, written once: ``(refused, message)`` pairs, ``refused`` true when
    the rule forbids the call now. ``progress`` may hold Python values (the host's copy: ``refused`` is a
    bool) or arrays (the device state: a bool array, usable under jit, vmap and scan).

    ``walk="host"``: the host ``Controller``'s deferred walk (its ``observe`` and ``end_task`` only move
    its copy; a pending task is closed by the next call). ``walk="eager"``: the pure functions
    (``tw.select``, ``tw.observe``, ``tw.offer``, ``tw.end_task``), which also refuse a second observe,
    a select before ``end_task``, a pure step on a host's task whose feedback is pending, and
    ``end_task`` with no task open; they allow ``offer`` after a failure (it answers NOT_OFFERED)."""
    phase = progress.phase
    pending = (phase == JUDGED) | (phase == ENDED)
    opened = "a task is still open: call observe(reward) before the next select()"
    unjudged = "observe() needs an open task: call select() first (and observe only once)"
    no_offer = "offer() is only allowed after observe(reward) of the current task, before it ends"
    twice = "this task already offered its memory"
    not_judged = "the task is not judged yet: call observe(reward) first"
    if walk == "host":
        return {
            "select": [(phase == SELECTED, opened)],
            "observe": [(phase != SELECTED, unjudged)],
            "offer": [(phase != JUDGED, no_offer),
                      ((phase == JUDGED) & (progress.reward != 1),
                       "a failed task never creates a memory: offer() needs observe(1)"),
                      ((phase == JUDGED) & (progress.offered == True), twice)],  # noqa: E712 (arrays too)
            "end_task": [(phase == SELECTED, not_judged)],
        }[step]
    held = ("this state comes from the host Controller with the last task's feedback still pending: close "
            "the task with advance(state, reward, ...) or finish_task(state, reward, ...)")
    return {
        "select": [(phase == SELECTED, opened),
                   (phase == OBSERVED, "the last task is judged but not ended: call end_task(state, spec) before "
                                       "the next select() (or advance(...), which ends it and selects in one call)"),
                   (pending, held)],
        "observe": [((phase == IDLE) | (phase == OBSERVED), unjudged)],
        "offer": [(pending, held), ((phase == IDLE) | (phase == SELECTED), no_offer),
                  ((phase == OBSERVED) & (progress.offered == True), twice)],  # noqa: E712 (arrays too)
        "end_task": [(phase == SELECTED, not_judged), (pending, held),
                     (phase == IDLE, "no task is open: end_task() closes the task that select() opened")],
    }[step]


def check(progress: Progress, step: Step) -> None:
    """Raise :class:`ProtocolError` unless ``step`` may run now (the host's copy of the progress)."""
    for refused, message in refusals(progress, step):
        if refused:
            raise ProtocolError(message)


def device_check(progress: Progress, step: Step, enabled: Any = True) -> None:
    """The eager walk's rules for ``step`` on the device progress, as ``checkify.debug_check``: reported
    by ``tw.checked.*`` (a ``checkify.JaxRuntimeError`` naming the problem and the fix), and compiled
    out of the plain functions (a ``debug_check`` outside ``checkify`` is dropped: no cost). ``enabled``
    (a bool array) limits them to the calls that really make the step (``finish_task``'s ``offered``)."""
    for refused, message in refusals(progress, step, "eager"):
        checkify.debug_check(~(jnp.asarray(refused, bool) & enabled), f"{step}(): {message}")


def reward_check(reward: Any, step: str = "observe") -> None:
    """``reward`` (an int32 scalar) is 0 or 1, as a ``checkify.debug_check`` (see :func:`device_check`)."""
    checkify.debug_check((reward == 0) | (reward == 1), f"{step}(): {REWARD_RULE}, got {{r}}", r=reward)


def validate(progress: Progress) -> Progress:
    """A progress read from a checkpoint, checked to be one the protocol can reach (ValueError if not)."""
    p = on_host(progress)
    if p.phase not in HOST_PHASES:
        raise ValueError(f"checkpoint phase must be one of {dict((i, PHASES[i]) for i in HOST_PHASES)}, got {p.phase}"
                         + (" (a pure tw.observe's state: its feedback is applied; end the task with tw.offer / "
                            "tw.end_task before handing the state to a Controller)" if p.phase == OBSERVED else ""))
    if pending(p) != (p.reward in (0, 1)) or p.reward not in (-1, 0, 1):
        raise ValueError(f"checkpoint in phase {PHASES[p.phase]!r} has reward {p.reward}: needs 0 or 1 exactly "
                         "when judged or ended, -1 otherwise")
    if p.offered and not (p.phase == JUDGED and p.reward == 1):
        raise ValueError(f"checkpoint in phase {PHASES[p.phase]!r} (reward {p.reward}) says its memory was offered")
    return p
