"""Ctrl-C that never becomes a task outcome and never lands inside native code.

Python delivers SIGINT as a ``KeyboardInterrupt`` raised wherever the main thread happens to
be. Two places make that harmful:

* inside a C library that calls back into Python (SQLite running the time-limit progress
  handler or a MySQL-compatibility function) the exception is swallowed and turned into that
  library's error (``sqlite3.OperationalError: interrupted``); the environment then records an
  ``env_error`` or a reward of 0, and the run carries on;
* inside the import of a native extension (JAX is imported lazily by the first task that
  needs it) a half-initialised module can crash the interpreter (measured: SIGSEGV).

:class:`InterruptGuard` therefore owns SIGINT while it is active, in two stages:

1. The **first** Ctrl-C only sets the flag (and says so on stderr). The runner calls
   :func:`check` before every task and after every phase of one (retrieve, each backbone
   reply, judge, policy update); at the first check after the flag is set, the task in flight
   is discarded and ``KeyboardInterrupt`` propagates from runner code, never from a callee.
   With the simulated backbone that takes milliseconds; with a server it takes at most one
   backbone call.
2. A **second** Ctrl-C raises ``KeyboardInterrupt`` at once (the user insists). The flag is
   set, so a callee that swallows it still cannot turn it into an outcome: the next check
   raises again.

Inside :meth:`InterruptGuard.deferred` (the commit: append the record, replace the checkpoint)
nothing is raised, so a task is committed whole or not at all; a pending interrupt is raised
when the commit ends. The CLI turns the ``KeyboardInterrupt`` into exit status 130.

Guards nest and share one flag (an interrupt seen by the CLI's guard during start-up stops the
runner's first task); off the main thread, where Python runs no signal handlers, they install
nothing. Another signal's handler asks for the same stop with :func:`request_stop` (a Slurm
array task on preemption, see :mod:`tokenworth_agent.experiment.distributed.slurm`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from types import FrameType
from typing import Any, Iterator

NOTICE = "\nstopping after the current step (press Ctrl-C again to stop at once)"


class _Flag:
    def __init__(self) -> None:
        self.requested = False
        self.deferred = 0


_ACTIVE: list["InterruptGuard"] = []


class InterruptGuard:
    """Own SIGINT for a ``with`` block; see the module docstring."""

    def __init__(self) -> None:
        self._flag = _Flag()
        self._previous: Any = None
        self._installed = False

    @property
    def requested(self) -> bool:
        return self._flag.requested

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        flag = self._flag
        if flag.requested and not flag.deferred:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        if not flag.requested:
            flag.requested = True
            print(NOTICE, file=sys.stderr, flush=True)

    def __enter__(self) -> "InterruptGuard":
        if _ACTIVE:  # nested: share the outer guard's flag and handler
            self._flag = _ACTIVE[-1]._flag
        elif threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self._installed = True
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.remove(self)
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if SIGINT arrived, even if a callee swallowed it."""
        if self._flag.requested:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A block SIGINT cannot cut in two; a pending interrupt is raised when it ends."""
        self.check()
        self._flag.deferred += 1
        try:
            yield
        finally:
            self._flag.deferred -= 1
        self.check()


def request_stop(notice: str) -> bool:
    """Stop as a first Ctrl-C does, asked from another signal's handler; whether a guard was active.

    With no active guard nothing is mid-task or mid-commit, so the caller may stop at once."""
    if not _ACTIVE:
        return False
    flag = _ACTIVE[-1]._flag
    if not flag.requested:
        flag.requested = True
        print(notice, file=sys.stderr, flush=True)
    return True


def check() -> None:
    """:meth:`InterruptGuard.check` of the active guards (no-op without one)."""
    if _ACTIVE:
        _ACTIVE[-1].check()
