"""Progress of a run's streams on the user's terminal, through the engine's hooks (:class:`StreamHook`).

On a terminal, a tqdm bar per stream (up to :attr:`ProgressBars.MAX_BARS` streams, else one over
all stream-tasks); anywhere else (a log file, a pipe, CI) a plain line each time a stream passes a
tenth of its tasks.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Sequence

from tokenworth_agent.experiment.plan import note
from tokenworth_agent.policies.registry import POLICIES
from tokenworth_agent.results.record import TaskRecord


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """One stream's progress (or all streams'): tasks done, running SR and mean output tokens.

    On a terminal, a tqdm bar. Anywhere else (a log file, a pipe, CI) bar frames would pile up
    (about 3,000 lines for `make run`), so it writes one plain line each time the stream passes
    a tenth of its tasks, and at least every :data:`QUIET_S` while tasks finish: at most about ten
    lines per stream, whatever its length."""

    QUIET_S = 600.0

    def __init__(self, method: str, total: int, enabled: bool, file: Any = None, first_note: str | None = None,
                 terminal: bool | None = None) -> None:
        from tqdm import tqdm

        self.file = file or sys.stderr
        self.name, self.total = method, total
        terminal = _is_terminal(self.file) if terminal is None else terminal
        self.bar = tqdm(total=total, desc=f"{method:>10}", unit="task", disable=not (enabled and terminal),
                        dynamic_ncols=True, file=self.file)
        self.lines = enabled and not terminal
        self.n = self.successes = self.tokens = 0
        self.first_note = first_note  # shown while the stream's first task runs (e.g. compiling)
        self.started_at = self.said_at = time.monotonic()

    def started(self, _next_index: int) -> None:
        if self.first_note:
            self.note(self.first_note)

    def resumed(self, records: list[TaskRecord]) -> None:
        """Records replayed from an earlier run: counted in SR/tokens and as done, not as new work."""
        for record in records:
            self.n += 1
            self.successes += record.reward
            self.tokens += record.output_tokens
        self.bar.n = self.bar.initial = self.n  # tqdm's rate and ETA count only work done after initial
        self.bar.last_print_n = self.n
        self.bar.refresh()

    def note(self, text: str) -> None:
        """Show ``text`` on the bar until the next task finishes (e.g. while the controller compiles)."""
        if self.lines:
            self._say(text)
        self.bar.set_postfix_str(text, refresh=True)

    def __call__(self, record: TaskRecord) -> None:
        self.n += 1
        self.successes += record.reward
        self.tokens += record.output_tokens
        self.bar.update(1)
        self.bar.set_postfix(SR=f"{100 * self.successes / self.n:.1f}%", tok=f"{self.tokens / self.n:.1f}", refresh=False)
        if self.lines and self.total and (
                self.n * 10 // self.total > (self.n - 1) * 10 // self.total
                or time.monotonic() - self.said_at >= self.QUIET_S):
            self._say(f"{self.n}/{self.total} tasks, SR {100 * self.successes / self.n:.1f}%, "
                      f"{self.tokens / self.n:.1f} tok/task")

    def _say(self, text: str) -> None:
        self.said_at = time.monotonic()
        print(f"{self.name}: {text} [{self.said_at - self.started_at:.0f}s]", file=self.file, flush=True)

    def close(self) -> None:
        self.bar.close()


class ProgressBars:
    """The engine's hooks (``hooks=``): a bar per stream (up to 12 streams), else one over all stream-tasks,
    and the resume banner."""

    MAX_BARS = 12

    def __init__(self, enabled: bool, streams: Sequence[Any], tasks: dict[str, Sequence[Any]]) -> None:
        self.enabled, self.tasks = enabled, tasks
        self.per_stream = len(streams) <= self.MAX_BARS
        self.bars: list[Progress] = []
        self.total: Progress | None = None
        if not self.per_stream:
            self.total = Progress("all streams", sum(len(tasks[s.env]) for s in streams), enabled)

    def resuming(self, done: int, total: int) -> None:
        """The resume banner (the engine's ``on_resume``): earlier runs finished some of the tasks."""
        note(f"resuming: {done} of {total} tasks done")

    def __call__(self, name: str, spec: Any) -> Any:
        if not self.per_stream:
            return self.total
        note = getattr(POLICIES.factory(spec.method), "first_task_note", None)
        bar = Progress(name, len(self.tasks[spec.env]), self.enabled, first_note=note)
        self.bars.append(bar)
        return bar

    def close(self) -> None:
        for bar in [*self.bars, *([self.total] if self.total else [])]:
            bar.close()



__all__ = ["Progress", "ProgressBars"]
