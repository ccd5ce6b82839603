"""The courier: sends what the engine logs, off the engine's path, and never takes the run down.

The engine's thread only appends an item to a bounded inbox (:meth:`Courier.put`, which never
waits and wakes nobody: if the inbox is full, the stream is marked and its scalars are read again
from its records at the end). A daemon thread sleeps ``flush_s`` seconds at a time, then takes the
items into per-stream buffers and delivers them to every sink, in batches. It is never woken per
item: on a busy engine each wake-up would contend for the GIL, and at a task every few milliseconds
that is what made tracking cost more than its work. A sink that fails (a server down, slow, refusing) is
tried again later, with a backoff up to ``retry_max_s``; the other sinks go on. Each sink knows
which steps it already holds (:meth:`logged`, asked once per stream), so a step is never sent twice,
whatever was sent before a kill.

At the end (:meth:`Courier.close`) the courier tries once more: a healthy sink gets up to
``close_wait_s`` to take the rest, a sink that was already failing gets one more try. What is left
is appended to ``<run>/tracking-undelivered.jsonl`` (the stream's parameters and its rows, as JSON),
and :meth:`Courier.report` gives the one line the front end prints. ``tokenworth track replay RUN``
sends that file (:mod:`.replay`), through the same courier, synchronously.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tokenworth_agent.tracking.files import UNDELIVERED

Row = tuple[int, float, dict[str, float]]  # (task index, wall time, scalars)
METRICS_PER_SEND = 1000  # MLflow's own limit per log_batch
FLUSH_S = 2.0  # the courier sends at most this often (batches: one request per stream and flush)
FLUSH_ENV = "TOKENWORTH_TRACK_FLUSH_S"  # another period, e.g. for a dashboard that must follow closely


@dataclasses.dataclass
class _Stream:
    """One stream at one sink: what waits, and what the sink holds."""

    pending: dict[int, tuple[float, dict[str, float]]] = dataclasses.field(default_factory=dict)
    logged: dict[str, set[int]] | None = None  # None: not asked yet
    opened: bool = False
    finished: bool = False
    finish_sent: bool = False

    def busy(self) -> bool:
        return bool(self.pending) or not self.opened or (self.finished and not self.finish_sent)


class Courier:
    """See the module docstring. ``make_meta(name)``: a stream's run name, parameters and tags;
    ``rescan(name)``: a stream's rows (and whether it finished) read again from its records."""

    def __init__(self, sinks: Sequence[Any], out_dir: Path, *, make_meta: Callable[[str], dict[str, Any]] | None = None,
                 rescan: Callable[[str], tuple[list[Row], bool]] | None = None, inbox_size: int = 10_000,
                 flush_s: float | None = None, retry_max_s: float = 30.0, close_wait_s: float = 30.0,
                 thread: bool = True) -> None:
        if flush_s is None:
            flush_s = float(os.environ.get(FLUSH_ENV, "") or FLUSH_S)
        self.sinks = list(sinks)
        self.out = Path(out_dir)
        self.make_meta, self.rescan = make_meta, rescan
        self.flush_s, self.retry_max_s, self.close_wait_s = flush_s, retry_max_s, close_wait_s
        self.inbox: collections.deque[tuple[Any, ...]] = collections.deque()  # appends and pops are thread-safe
        self.inbox_size = inbox_size
        self._stop = threading.Event()  # set by close(): the only thing that wakes the thread early
        self.metas: dict[str, dict[str, Any]] = {}
        self.streams: list[dict[str, _Stream]] = [{} for _ in self.sinks]
        self.folder_jobs: list[list[tuple[Any, ...]]] = [[] for _ in self.sinks]
        self.failures = [0] * len(self.sinks)
        self.next_try = [0.0] * len(self.sinks)
        self.errors: list[str | None] = [None] * len(self.sinks)
        self.dropped: set[str] = set()  # streams whose items the full inbox refused
        self.left: list[dict[str, Any]] = []  # what close() could not deliver, as written to the file
        self.sent_steps = 0
        self._thread: threading.Thread | None = None
        if thread:
            self._thread = threading.Thread(target=self._loop, name="tokenworth-tracking", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ the engine's side
    def put(self, item: tuple[Any, ...], *, bounded: bool = True) -> None:
        """Hand over an item; never waits. A full inbox refuses a bounded item and marks its stream for a
        rescan at the end; ``bounded=False`` is for the few end-of-run items (a sync, the folder)."""
        if bounded and len(self.inbox) >= self.inbox_size:
            if item[0] == "rows":
                self.dropped.add(item[1])
            return
        self.inbox.append(item)

    def close(self) -> None:
        """Deliver what is left (within the limits of the module docstring), write the rest down, stop."""
        if self._thread is None:
            self._drain()
            self._finish()
            return
        self._stop.set()
        self._thread.join(self.close_wait_s + 60.0)

    # ------------------------------------------------------------------ the thread
    def _loop(self) -> None:
        for sink in self.sinks:  # import the tracker's library now, while the engine starts, not at the first flush
            try:
                getattr(sink, "warm", lambda: None)()
            except Exception:  # noqa: BLE001 - a library that fails to import fails the deliveries, said at the end
                pass
        while not self._stop.wait(self.flush_s):
            self._drain()
            self._attempt(final=False)
        self._drain()
        self._finish()

    def _drain(self) -> None:
        """Take everything in the inbox now."""
        while self.inbox:
            self.take(self.inbox.popleft())

    def take(self, item: tuple[Any, ...]) -> None:
        """One item into the buffers: ``("rows", stream, rows, finished)``, ``("meta", stream, meta)``
        or ``("folder", artifacts, streams, params)``."""
        kind = item[0]
        if kind == "rows":
            _, name, rows, finished = item
            for i in range(len(self.sinks)):
                stream = self.streams[i].setdefault(name, _Stream())
                for step, at, values in rows:
                    stream.pending[int(step)] = (float(at), dict(values))
                stream.finished = stream.finished or bool(finished)
        elif kind == "meta":
            self.metas[item[1]] = item[2]
        elif kind == "folder":
            for jobs in self.folder_jobs:
                jobs.append(tuple(item[1:]))

    def _meta(self, name: str) -> dict[str, Any]:
        if name not in self.metas:
            if self.make_meta is None:
                raise KeyError(f"no parameters known for stream {name}")
            self.metas[name] = self.make_meta(name)
        return self.metas[name]

    def _busy(self, i: int) -> bool:
        return bool(self.folder_jobs[i]) or any(s.busy() for s in self.streams[i].values())

    def _attempt(self, *, final: bool) -> None:
        now = time.monotonic()
        for i in range(len(self.sinks)):
            if not self._busy(i) or (not final and now < self.next_try[i]):
                continue
            try:
                self._deliver(i)
                self.failures[i], self.next_try[i], self.errors[i] = 0, 0.0, None
            except Exception as exc:  # noqa: BLE001 - whatever the tracker does, the run goes on
                self.failures[i] += 1
                self.errors[i] = _one_line(exc)
                self.next_try[i] = time.monotonic() + min(self.retry_max_s, 2.0 ** (self.failures[i] - 1))

    def _deliver(self, i: int) -> None:
        sink = self.sinks[i]
        for name, stream in self.streams[i].items():
            if not stream.busy():
                continue
            meta = self._meta(name)
            if not stream.opened:
                sink.open(meta)
                stream.opened = True
            if stream.logged is None:
                stream.logged = sink.logged(meta)
            logged = stream.logged
            todo: list[Row] = []
            for step in sorted(stream.pending):
                at, values = stream.pending[step]
                fresh = {k: v for k, v in values.items() if step not in logged.get(k, ())}
                if fresh:
                    todo.append((step, at, fresh))
                else:
                    del stream.pending[step]
            while todo:  # batches of whole steps, at most METRICS_PER_SEND metrics each (one step may exceed)
                batch: list[Row] = []
                count = 0
                while todo and (not batch or count + len(todo[0][2]) <= METRICS_PER_SEND):
                    batch.append(todo.pop(0))
                    count += len(batch[-1][2])
                sink.send(meta, batch)
                for step, _, values in batch:
                    for key in values:
                        logged.setdefault(key, set()).add(step)
                    stream.pending.pop(step, None)
                    self.sent_steps += 1
            if stream.finished and not stream.finish_sent:
                sink.finish(meta)
                stream.finish_sent = True
        while self.folder_jobs[i]:
            sink.finish_folder(*self.folder_jobs[i][0])
            self.folder_jobs[i].pop(0)

    def _finish(self) -> None:
        if self.rescan is not None:
            for name in sorted(self.dropped):
                try:
                    rows, finished = self.rescan(name)
                except Exception:  # noqa: BLE001 - unreadable records: nothing more to send for it
                    continue
                self.take(("rows", name, rows, finished))
        deadline = time.monotonic() + self.close_wait_s
        tried = [False] * len(self.sinks)
        while any(self._busy(i) for i in range(len(self.sinks))):
            for i in range(len(self.sinks)):
                if not self._busy(i):
                    continue
                if self.failures[i] and tried[i]:
                    continue  # known to fail: one more try was all it gets
                if time.monotonic() >= self.next_try[i] or not self.failures[i] or not tried[i]:
                    tried[i] = True
                    self.next_try[i] = 0.0
                    self._attempt_one(i)
            waiting = [i for i in range(len(self.sinks)) if self._busy(i) and not (self.failures[i] and tried[i])]
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        self._spill()
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:  # noqa: BLE001
                pass

    def _attempt_one(self, i: int) -> None:
        try:
            self._deliver(i)
            self.failures[i], self.errors[i] = 0, None
        except Exception as exc:  # noqa: BLE001
            self.failures[i] += 1
            self.errors[i] = _one_line(exc)

    def _spill(self) -> None:
        lines = []
        for i, sink in enumerate(self.sinks):
            where = {"backend": sink.name, "target": sink.target}
            for name, stream in self.streams[i].items():
                if stream.busy():
                    try:
                        meta = self._meta(name)  # a stream never opened: its parameters go along for the replay
                    except Exception:  # noqa: BLE001
                        meta = None
                    lines.append({**where, "stream": name, "meta": meta,
                                  "rows": [[s, at, v] for s, (at, v) in sorted(stream.pending.items())],
                                  "finished": stream.finished})
            for job in self.folder_jobs[i]:
                lines.append({**where, "folder": list(job)})
        self.left = lines
        if lines:
            path = self.out / UNDELIVERED
            with open(path, "a", encoding="utf-8") as handle:
                for line in lines:
                    handle.write(json.dumps(line, sort_keys=True, default=str) + "\n")

    # ------------------------------------------------------------------ what happened
    def report(self, command: str) -> str | None:
        """One line about what could not be sent (None: everything was)."""
        if not self.left:
            return None
        parts = []
        for i, sink in enumerate(self.sinks):
            mine = [x for x in self.left if x["backend"] == sink.name and x["target"] == sink.target]
            if mine:
                steps = sum(len(x.get("rows", [])) for x in mine)
                streams = len({x["stream"] for x in mine if "stream" in x})
                parts.append(f"{sink.name} at {sink.target}: {steps} task steps of {streams} streams"
                             f"{' and the summary' if any('folder' in x for x in mine) else ''}"
                             f" ({self.errors[i] or 'not sent in time'})")
        return (f"tracking: could not send {'; '.join(parts)}; kept in {self.out / UNDELIVERED}: send them with "
                f"`{command}`")


CAUSE_CHARS = 300  # of the cause's own words; the call that failed gets what is left of a short line


def _one_line(exc: BaseException) -> str:
    """What went wrong as the last exception of the chain says it (``ConnectionRefusedError: [Errno 111]
    Connection refused``, ``TimeoutError: timed out``, an HTTP status), then the failing call's words, cut.
    Never the head of the outermost message alone: MLflow's starts with the request's URL, which filled
    the line before and left every failure reading the same."""
    from tokenworth_agent.tracking.child_sink import chain

    def said(e: BaseException, limit: int) -> str:
        lines = str(e).strip().splitlines()
        text = lines[0] if lines else ""
        return f"{type(e).__name__}: {text[:limit]}{'…' if len(text) > limit else ''}".rstrip(": ")

    links = chain(exc)
    if len(links) == 1:
        return said(exc, CAUSE_CHARS)
    return f"{said(links[-1], CAUSE_CHARS)}; in {said(exc, 120)}"


def rows_of(values: Sequence[Mapping[str, float]], start: int = 0, at: float | None = None) -> list[Row]:
    """Consecutive steps from ``start`` as rows stamped ``at`` (now by default)."""
    stamp = time.time() if at is None else at
    return [(start + k, stamp, dict(v)) for k, v in enumerate(values)]


__all__ = ["Courier", "Row", "rows_of", "METRICS_PER_SEND"]
