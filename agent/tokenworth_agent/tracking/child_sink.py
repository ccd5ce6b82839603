"""A sink that runs in a child process, so the engine's process never imports its library nor builds its store.

Importing MLflow costs about 1.1 s of CPU, creating a local SQLite store about 1.3 s, and every request
holds the GIL while it is built and parsed; done in the engine's process, that made the default run
20-30 % slower on a 2-core machine. TensorBoard's writer is lighter but still imports protobuf and
starts a writer thread per stream; it runs in a child too.

:class:`ChildSink` has the interface the courier (:mod:`.courier`) expects of a sink and forwards
each call, pickled, over a socket pair to a child started with ``python -m
tokenworth_agent.tracking.child_sink`` (a fresh interpreter: none of the engine's modules, nothing
forked from its threads), which holds the real sink at the lowest priority
(``nice`` 19 unless told otherwise: :mod:`.settings`): it takes only CPU the engine leaves idle, and
on a busy machine the tracker lags the run rather than slowing it.

The courier's logic is unchanged: it still decides what to send, retries, and writes down what is
left; a call that fails in the child raises here, under the child's exception name (so the one line
the run prints reads the same). A child that dies or hangs past :data:`CALL_TIMEOUT_S` is killed and
the call fails; the next call starts a new child. The child exits when its socket closes, so a
killed run leaves no child behind.
"""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

CALL_TIMEOUT_S = 300.0  # far above one request (10 s) and a store's creation (seconds): only a stuck child hits it


class ChildSink:
    """``ChildSink("module:Class", name, target, *args)``: ``module.Class(*args)``, built and called in a child
    whose niceness is raised by ``nice`` (0: the engine's own priority)."""

    def __init__(self, make: str, name: str, target: str, *args: Any, nice: int = 19) -> None:
        self.make, self.args, self.nice = make, args, nice
        self.name, self.target = name, target  # what the courier's report and undelivered file name
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None

    # ------------------------------------------------------------------ plumbing
    def _start(self) -> None:
        mine, theirs = socket.socketpair()
        try:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the same package
            self._proc = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno()), str(self.nice)],
                                          pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env)
        finally:
            theirs.close()
        self._conn = Connection(mine.detach())
        self._conn.send((self.make, self.args))

    def _stop(self, *, kill: bool) -> None:
        proc, conn, self._proc, self._conn = self._proc, self._conn, None, None
        if conn is not None:
            try:
                if not kill:
                    conn.send(None)
            except OSError:
                pass
            conn.close()
        if proc is not None:
            if kill:
                proc.kill()
            try:
                proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _call(self, method: str, *args: Any) -> Any:
        if self._proc is None or self._proc.poll() is not None:
            self._stop(kill=True)
            self._start()
        assert self._conn is not None
        try:
            self._conn.send((method, args))
            if not self._conn.poll(CALL_TIMEOUT_S):
                raise TimeoutError(f"the {self.name} sender did not answer {method} in {CALL_TIMEOUT_S:.0f} s")
            ok, value = self._conn.recv()
        except (OSError, EOFError, TimeoutError):
            self._stop(kill=True)
            raise
        if ok:
            return value
        raise _rebuilt(value)  # named as the child named them, cause and all, for the run's one line

    # ------------------------------------------------------------------ the sink's interface
    def warm(self) -> None:
        """Start the child and have it import its library (the courier's first call, before the first task)."""
        self._call("warm")

    def open(self, meta: Any) -> None:
        self._call("open", meta)

    def logged(self, meta: Any) -> dict[str, set[int]]:
        return self._call("logged", meta)

    def send(self, meta: Any, rows: Any) -> None:
        self._call("send", meta, list(rows))

    def finish(self, meta: Any) -> None:
        self._call("finish", meta)

    def finish_folder(self, artifacts: Any, streams: Any, params: Any) -> None:
        self._call("finish_folder", list(artifacts), list(streams), dict(params))

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._call("close")
            finally:
                self._stop(kill=False)
        else:
            self._stop(kill=True)


def chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from or during, outermost first (the last is the cause as it happened:
    a refused connection, a read that timed out)."""
    found = [exc]
    while len(found) < 20:
        nxt = found[-1].__cause__ or found[-1].__context__
        if nxt is None or any(nxt is e for e in found):
            break
        found.append(nxt)
    return found


def _rebuilt(links: Any) -> BaseException:
    """A child's exception chain, [(type name, message)] outermost first, as linked exceptions here."""
    if links and isinstance(links[0], str):  # (type name, message): one exception
        links = [links]
    made = [type(kind, (RuntimeError,), {})(message) for kind, message in links]
    for outer, inner in zip(made, made[1:]):
        outer.__cause__ = inner
    return made[0]


def _serve(fd: int, nice: int) -> None:
    """The child: build the sink, then answer calls until the socket closes or a ``None`` comes."""
    if nice:
        try:
            os.nice(nice)  # before the import: the library's import and the store's creation yield too
        except OSError:
            pass
    conn = Connection(fd)
    make, args = conn.recv()
    module, _, cls = make.partition(":")
    sink = getattr(importlib.import_module(module), cls)(*args)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the engine's process is gone
            return
        if message is None:
            return
        method, call_args = message
        try:
            result = getattr(sink, method, lambda *_: None)(*call_args)
            reply = (True, result)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the courier, which retries
            reply = (False, [(type(e).__name__, str(e)) for e in chain(exc)])
        try:
            conn.send(reply)
        except OSError:
            return


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))


__all__ = ["ChildSink", "CALL_TIMEOUT_S", "chain"]
