"""The task protocol, once: ``select -> observe -> offer (optional) -> end_task``.

The open task's :class:`Progress` (its phase, its judged reward, whether it offered its memory)
is part of the controller's device state (``State.task.progress``); every pure function of the
controller advances it with :func:`after`.

Two ways to walk it, both pure, both leaving the same learners, bank and decisions:

* **Eager** (``tw.select``, ``tw.observe``, ``tw.offer``, ``tw.end_task``; ``tw.step``): each step
  does its work at once.
* **Deferred** (the host ``Controller``): ``observe`` only records the judged reward (phase
  ``judged``) and ``end_task`` only marks the task ended (:func:`deferred_end`, phase ``ended``),
  both in the host's copy of the progress alone; the task's feedback (credit, windows, refits),
  its admission and its end then run in the one call that closes it, which is given the reward:
  ``offer`` (``tw.finish_task``) or the next ``select`` (``tw.advance``). The phase says which
  work is pending, and the host writes its copy into every state it hands out, so a checkpoint
  describes itself. A task thus runs at most two device calls, not four (each costs a dispatch of
  the whole state).

A pure function cannot raise under ``jit``, so the rules are enforced where calls are made: the
host keeps a host copy of the progress (Python values, kept in step with the same transitions,
read back from the device state only when a checkpoint is loaded), runs :func:`check` on it
before each call, and so raises :class:`ProtocolError` before touching anything: the state is
unchanged, with no device round trip and no ``checkify`` in the compiled code.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax.numpy as jnp

IDLE, SELECTED, JUDGED, ENDED = 0, 1, 2, 3
PHASES = ("idle", "selected", "judged", "ended")  # by phase number; "ended": its feedback still pending
Step = Literal["select", "observe", "offer", "end_task"]


class ProtocolError(RuntimeError):
    """A call out of order (e.g. selecting while a task is open). State is unchanged."""


class Progress(NamedTuple):
    """Where the open task stands: device arrays in the state, Python values in the host's copy."""

    phase: Any  # int: IDLE, SELECTED, JUDGED or ENDED
    reward: Any  # int: the judged reward 0/1, -1 before
    offered: Any  # bool: the task offered its memory


START = Progress(phase=IDLE, reward=-1, offered=False)


def after(progress: Progress, step: Step, value: Any = None) -> Progress:
    """The progress after an eager ``step`` (``value``: the reward of ``observe``, whether ``offer``
    offered). Plain Python operations: the same function moves the device state and the host's copy."""
    if step == "select":
        return Progress(phase=SELECTED, reward=-1, offered=False)
    if step == "observe":
        return Progress(phase=JUDGED, reward=value, offered=progress.offered)
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


def check(progress: Progress, step: Step) -> None:
    """Raise :class:`ProtocolError` unless ``step`` may run now."""
    phase = progress.phase
    if step == "select" and phase == SELECTED:
        raise ProtocolError("a task is still open: call observe(reward) before the next select()")
    if step == "observe" and phase != SELECTED:
        raise ProtocolError("observe() needs an open task: call select() first (and observe only once)")
    if step == "offer":
        if phase != JUDGED:
            raise ProtocolError("offer() is only allowed after observe(reward) of the current task, before it ends")
        if progress.reward != 1:
            raise ProtocolError("a failed task never creates a memory: offer() needs observe(1)")
        if progress.offered:
            raise ProtocolError("this task already offered its memory")
    if step == "end_task" and phase == SELECTED:
        raise ProtocolError("the task is not judged yet: call observe(reward) first")


def validate(progress: Progress) -> Progress:
    """A progress read from a checkpoint, checked to be one the protocol can reach (ValueError if not)."""
    p = on_host(progress)
    if p.phase not in (IDLE, SELECTED, JUDGED, ENDED):
        raise ValueError(f"checkpoint phase must be one of {dict(enumerate(PHASES))}, got {p.phase}")
    if pending(p) != (p.reward in (0, 1)) or p.reward not in (-1, 0, 1):
        raise ValueError(f"checkpoint in phase {PHASES[p.phase]!r} has reward {p.reward}: needs 0 or 1 exactly "
                         "when judged or ended, -1 otherwise")
    if p.offered and not (p.phase == JUDGED and p.reward == 1):
        raise ValueError(f"checkpoint in phase {PHASES[p.phase]!r} (reward {p.reward}) says its memory was offered")
    return p
