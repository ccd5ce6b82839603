"""Verdicts the BigCodeBench judge has reached, so that a solution it has run is not run again.

Why it is sound: a verdict is a function of what the evaluator is given: its version and libraries
(the venv's fingerprint), the judge's limits, the task's code prompt, test and entry point, and the
*sanitised* solution (the evaluator calibrates and tests that, nothing else of the reply). Two
levels follow:

* by **reply**: the exact reply text → its verdict, answered on the host at no cost;
* by **solution**: per task, the sanitised solutions already tested and their verdicts. The judge
  asks the host's sanitiser (:mod:`tokenworth_agent.benchmarks.bigcodebench.sanitiser`: the runner's own sanitising
  code in a long-lived process, a few ms) which solution the new reply holds; when it is one of
  them, that verdict is the answer (a reply that only differs in its prose, e.g. the simulator's
  ``Thought:`` line, costs no sandbox). Where the host's sanitiser cannot say, the digests go into
  the judgement's request and the runner sanitises inside its sandbox and reports a known solution
  instead of running the tests again.

A test that is not deterministic (one that reads the clock, a timeout under load) so gets one
verdict per solution for every stream, the common-random-numbers choice the simulator makes too;
docs/bigcodebench.md says how often a re-judged solution's verdict differs. Only final verdicts are
kept (an infrastructure error is never one), the first for a solution wins, and concurrent requests
for one reply wait for the first (:meth:`VerdictCache.judged`), so streams that write the same reply
in the same tick run one sandbox between them. With a ``path``, entries are appended to that
JSON-lines file as they come and read back when the cache is made, so an interrupted run, or the
next one, reuses them; a torn last line is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Mapping

Verdict = dict[str, Any]


def digest(*parts: Any) -> str:
    """sha256 (hex) of ``parts`` as canonical JSON."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def solution_digest(solution: str) -> str:
    """The digest the runner computes of a sanitised solution (sha256 of its UTF-8 text)."""
    return hashlib.sha256(solution.encode("utf-8")).hexdigest()


class VerdictCache:
    """Verdicts by reply and by (task, solution), in memory and, with ``path``, in a JSON-lines file."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._replies: dict[str, Verdict] = {}
        self._solutions: dict[str, dict[str, Verdict]] = {}  # task key -> solution digest -> verdict
        self._pending: dict[str, Future[Verdict]] = {}
        self._lock = threading.Lock()
        self.counts = {"reply": 0, "solution": 0, "tested": 0}  # how each verdict of this process was reached
        if self.path is not None and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    self._remember(json.loads(line))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue  # a line torn by a kill: that verdict is reached again

    def __len__(self) -> int:
        return len(self._replies) + sum(len(v) for v in self._solutions.values())

    def _remember(self, entry: Mapping[str, Any]) -> None:
        if entry["kind"] == "reply":
            self._replies[entry["key"]] = entry["verdict"]
        elif entry["kind"] == "solution":
            self._solutions.setdefault(entry["task"], {}).setdefault(entry["digest"], entry["verdict"])

    def _append(self, entry: dict[str, Any]) -> None:
        self._remember(entry)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def solutions(self, task: str) -> dict[str, Verdict]:
        """The tested solutions of ``task`` (its key): digest -> verdict."""
        with self._lock:
            return dict(self._solutions.get(task, {}))

    def add_solution(self, task: str, solution: str, verdict: Verdict) -> Verdict:
        """Keep ``verdict`` for ``solution`` of ``task``; the verdict kept (an earlier one wins)."""
        key = solution_digest(solution)
        with self._lock:
            kept = self._solutions.get(task, {}).get(key)
            if kept is not None:
                return kept
            self._append({"kind": "solution", "task": task, "digest": key, "verdict": verdict})
            return verdict

    def count(self, how: str) -> None:
        with self._lock:
            self.counts[how] += 1

    def judged(self, key: str, judge: Callable[[], Verdict]) -> tuple[Verdict, bool]:
        """``(verdict, known before)`` for the reply ``key``: the stored verdict, else ``judge()``'s (stored
        unless it raised). A second caller with the same key while the first is judging waits for it."""
        with self._lock:
            if key in self._replies:
                self.counts["reply"] += 1
                return self._replies[key], True
            pending = self._pending.get(key)
            owner = pending is None
            if owner:
                pending = self._pending[key] = Future()
            else:
                self.counts["reply"] += 1
        assert pending is not None
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
            self._append({"kind": "reply", "key": key, "verdict": verdict})
            del self._pending[key]
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


__all__ = ["VerdictCache", "Verdict", "digest", "solution_digest", "shared_cache"]
