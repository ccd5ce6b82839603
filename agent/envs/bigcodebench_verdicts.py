"""Verdicts by (judge, task, reply): a reply the judge has seen is not run again.

Why it is sound: the judge's verdict is a function of what it is given: the evaluator and its
libraries (the venv's fingerprint), the judge's limits, the task's code prompt, test and entry
point, and the reply's exact text. Streams that write the same reply to the same task (the
simulated backbone writes one of a few replies per task; a greedy model often repeats itself
across methods) would otherwise run the same test suite again, seconds each. A test that is not
deterministic (one that reads the clock, or a timeout under load) gets one verdict for all of
them, which is the common-random-numbers choice the simulator makes too; docs/bigcodebench.md says
how often a verdict differs when the same reply is judged twice.

The key is the sha256 of those parts; only final verdicts are kept (an infrastructure error is
never one). Concurrent requests for one key wait for the first (:meth:`VerdictCache.judged`), so
streams that reach the same task in the same tick run one sandbox between them. With a ``path``,
verdicts are appended to that JSON-lines file as they come and read back at start, so an
interrupted run (or the next run) reuses them; a torn last line is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Mapping


def verdict_key(judge: Mapping[str, Any], task: Mapping[str, str], reply: str) -> str:
    """sha256 of the judge's identity, the task's judged fields and the reply (hex)."""
    text = json.dumps([dict(judge), dict(task), reply], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class VerdictCache:
    """Verdicts (plain dicts) by key, in memory and, with ``path``, in a JSON-lines file."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._done: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        if self.path is not None and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self._done[entry["key"]] = entry["verdict"]
                except (ValueError, KeyError, TypeError):
                    continue  # a line torn by a kill: that verdict is made again

    def __len__(self) -> int:
        return len(self._done)

    def judged(self, key: str, judge: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """``(verdict, from the cache)``: the stored verdict, else ``judge()``'s (stored unless it raised).

        A second caller with the same key while the first is judging waits for that verdict.
        """
        with self._lock:
            if key in self._done:
                self.hits += 1
                return self._done[key], True
            pending = self._pending.get(key)
            if pending is None:
                pending = self._pending[key] = Future()
                owner = True
                self.misses += 1
            else:
                owner = False
                self.hits += 1
        if not owner:
            return pending.result(), True
        try:
            verdict = judge()
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            self._done[key] = verdict
            del self._pending[key]
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"key": key, "verdict": verdict}, ensure_ascii=False) + "\n")
        pending.set_result(verdict)
        return verdict, False


_SHARED: dict[str | None, VerdictCache] = {}
_SHARED_LOCK = threading.Lock()


def shared_cache(path: str | os.PathLike[str] | None) -> VerdictCache:
    """The process's one cache for ``path`` (None: in memory), so every stream of a run shares it."""
    name = None if path is None else str(Path(path).resolve())
    with _SHARED_LOCK:
        if name not in _SHARED:
            _SHARED[name] = VerdictCache(name)
        return _SHARED[name]


__all__ = ["VerdictCache", "verdict_key", "shared_cache"]
