"""Ctrl-C that never becomes a task outcome.

Python delivers SIGINT as a ``KeyboardInterrupt`` raised wherever the main thread happens to
be. Inside a C library that calls back into Python (SQLite running the time-limit progress
handler or a MySQL-compatibility function) the exception is swallowed and turned into that
library's error (``sqlite3.OperationalError: interrupted``); the environment then records an
``env_error`` or a reward of 0, and the run carries on.

:class:`InterruptGuard` closes that hole. While it is active it owns SIGINT: the handler sets
:attr:`InterruptGuard.requested` *and* raises ``KeyboardInterrupt``. Whatever a callee does
with the exception, the flag stays set, and the runner calls :func:`check` after every phase
of a task (retrieve, each backbone reply, judge, policy update) and before committing a
record: once the flag is set, the task in flight is discarded and ``KeyboardInterrupt``
propagates. Inside :meth:`InterruptGuard.deferred` (the commit: append the record, replace the
checkpoint) the handler only sets the flag, so a task is committed whole or not at all; the
interrupt is raised when the commit ends. The CLI turns it into exit status 130.

Guards nest (the innermost one is what :func:`check` consults) and are a no-op off the main
thread, where Python never runs signal handlers.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Any, Iterator

_ACTIVE: list["InterruptGuard"] = []


class InterruptGuard:
    """Own SIGINT for a ``with`` block; see the module docstring."""

    def __init__(self) -> None:
        self.requested = False
        self._deferred = 0
        self._previous: Any = None
        self._installed = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if not self._deferred:
            raise KeyboardInterrupt

    def __enter__(self) -> "InterruptGuard":
        if threading.current_thread() is threading.main_thread():
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
        if self.requested:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A block SIGINT cannot cut in two; a pending interrupt is raised when it ends."""
        self.check()
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1
        self.check()


def check() -> None:
    """:meth:`InterruptGuard.check` of the innermost active guard (no-op without one)."""
    if _ACTIVE:
        _ACTIVE[-1].check()
