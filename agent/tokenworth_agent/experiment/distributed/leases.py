"""The driver's queue of a distributed run: which worker runs which stream (pure Python, no Ray).

Streams are leased to workers by name. A worker asks for up to ``n`` streams whenever it has room
(:meth:`StreamLeases.take`), reports each one finished (:meth:`~StreamLeases.finished`), gives
back one it could not open because another process still holds its lock (:meth:`~StreamLeases.defer`:
takeable again after a delay; a node Ray lost may still run it) or one it stopped unfinished
(:meth:`~StreamLeases.give_back`). When a worker dies, everything it leased goes back to the front
of the queue (:meth:`~StreamLeases.release`), so it resumes first.

Two rules keep the cluster busy (docs/distributed.md, "Scheduling"):

* **a fair share**: a worker holds at most ``ceil(unfinished / live workers)`` streams, so a
  generous per-worker cap (``--streams-per-worker``) never starves the others, and when a worker
  dies the survivors' share grows and they take its streams;
* **a start barrier**: nothing is dealt until every expected worker said hello (its engine is
  loaded) or ``barrier_s`` passed since the first did, so the first worker up does not take it all.

The queue is rebuilt from the run folder at every start (only unfinished streams are pending); it
holds nothing a rerun needs, so a dead driver loses nothing.
"""

from __future__ import annotations

import collections
import math
import time
from typing import Callable, Iterable

DEFER_S = 5.0  # a busy stream's lock is tried again after this long
BARRIER_S = 60.0  # the longest the first worker up waits for the others


class StreamLeases:
    """Pending streams, who holds which, and which are done (see the module docstring)."""

    def __init__(self, names: Iterable[str], *, workers: int, barrier_s: float = BARRIER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pending: collections.deque[str] = collections.deque(names)
        if len(set(self.pending)) != len(self.pending):
            raise ValueError("a stream is queued twice")
        self.leases: dict[str, str] = {}  # stream -> worker
        self.done: set[str] = set()
        self.live: set[str] = set()  # workers that said hello and have not died since
        self.expected, self.barrier_s = workers, barrier_s
        self.not_before: dict[str, float] = {}
        self.first_hello: float | None = None
        self._dealing = False
        self._clock = clock

    def hello(self, worker: str) -> None:
        """``worker`` is up (its engine loaded) and will ask for streams."""
        if self.first_hello is None:
            self.first_hello = self._clock()
        self.live.add(worker)

    @property
    def dealing(self) -> bool:
        """Past the start barrier: every expected worker was up, or the first waited ``barrier_s`` (once past, for good)."""
        if not self._dealing and self.first_hello is not None:
            self._dealing = len(self.live) >= self.expected or self._clock() - self.first_hello >= self.barrier_s
        return self._dealing

    def share(self, worker: str) -> int:
        """How many more streams ``worker`` may hold now (its fair share less what it holds)."""
        unfinished = len(self.pending) + len(self.leases)
        held = sum(1 for w in self.leases.values() if w == worker)
        return max(0, math.ceil(unfinished / max(1, len(self.live))) - held)

    def take(self, worker: str, n: int) -> list[str]:
        """Up to ``n`` pending streams for ``worker``, within its fair share; deferred ones once their delay is over."""
        if worker not in self.live or not self.dealing:
            return []
        n = min(n, self.share(worker))
        now, taken, skipped = self._clock(), [], []
        while self.pending and len(taken) < n:
            name = self.pending.popleft()
            if self.not_before.get(name, 0.0) > now:
                skipped.append(name)
                continue
            self.not_before.pop(name, None)
            self.leases[name] = worker
            taken.append(name)
        self.pending.extendleft(reversed(skipped))
        return taken

    def finished(self, worker: str, name: str) -> None:
        """``name`` ran its last task (whoever reports it: a finished stream is done for everyone)."""
        if self.leases.get(name) == worker:
            del self.leases[name]
        if name in self.pending:
            self.pending.remove(name)
        self.done.add(name)

    def defer(self, worker: str, name: str, delay_s: float = DEFER_S) -> None:
        """Another process holds ``name``'s lock: back to the end of the queue, not before ``delay_s``."""
        if self.leases.get(name) == worker:
            del self.leases[name]
            self.not_before[name] = self._clock() + delay_s
            self.pending.append(name)

    def give_back(self, worker: str, name: str) -> None:
        """``worker`` stopped ``name`` unfinished (it was taken over, or stopped early): pending again, first."""
        if self.leases.get(name) == worker:
            del self.leases[name]
            self.pending.appendleft(name)

    def release(self, worker: str) -> list[str]:
        """``worker`` died: its streams go back to the front of the queue, in the order it took them."""
        back = [n for n, w in self.leases.items() if w == worker]
        for name in back:
            del self.leases[name]
        self.pending.extendleft(reversed(back))
        self.live.discard(worker)
        return back

    @property
    def complete(self) -> bool:
        return not self.pending and not self.leases

    def status(self) -> dict[str, object]:
        return {"pending": len(self.pending), "leased": dict(self.leases), "done": len(self.done),
                "live": sorted(self.live), "complete": self.complete}


__all__ = ["StreamLeases", "DEFER_S", "BARRIER_S"]
