"""``--track`` in a run: the tracker of this process, beside the front end's hooks.

Where the streams run in this process (the local executor), the driver's :class:`~tokenworth_agent.tracking.tracker.Tracker`
gets every stream's hook. Where they run in workers (Ray, Slurm), each worker makes its own tracker
from the plan (:func:`worker_tracker`) and logs its own streams; the driver then only sends, at the
end, any step no worker could (:meth:`Tracker.sync`: each tracker is asked what it holds). Either
way the driver adds the summary and figures to the folder's parent run, and prints one line if
anything could not be sent. Nothing here imports a tracker's library: only the trackers' child
processes do, and only with ``--track``.
"""

from __future__ import annotations

from typing import Any, Sequence

from tokenworth_agent.experiment.engine import HookFactory
from tokenworth_agent.experiment.plan import Plan, note
from tokenworth_agent.results.record import TaskRecord


class _Both:
    """Two hooks of one stream as one (the front end's first)."""

    def __init__(self, first: Any, second: Any) -> None:
        self.first, self.second = first, second

    def resumed(self, records: list[TaskRecord]) -> None:
        self.first.resumed(records)
        self.second.resumed(records)

    def started(self, next_index: int) -> None:
        self.first.started(next_index)
        self.second.started(next_index)

    def __call__(self, record: TaskRecord) -> None:
        self.first(record)
        self.second(record)


def combined(front: HookFactory | None, tracker: Any) -> HookFactory | None:
    """The hooks of ``front`` and of ``tracker`` (either may be None)."""
    if tracker is None:
        return front
    if front is None:
        return tracker.hooks

    def hooks(name: str, spec: Any) -> Any:
        mine = front(name, spec)
        return tracker.hooks(name, spec) if mine is None else _Both(mine, tracker.hooks(name, spec))

    return hooks


def open_tracker(plan: Plan, *, say: bool = True) -> Any:
    """This process's tracker for ``plan`` (None without ``--track``)."""
    if plan.tracking is None:
        return None
    from tokenworth_agent.tracking.files import folder_id
    from tokenworth_agent.tracking.tracker import Tracker

    folder_id(plan.out_dir)  # the folder's id exists before any worker looks for its experiment
    if say:
        note(plan.tracking.describe())
    return Tracker(plan.tracking, {e: len(t) for e, t in plan.tasks.items()}, dict(zip(plan.names, plan.streams)))


def worker_tracker(plan: Plan) -> Any:
    """A distributed worker's own tracker (None without ``--track``)."""
    return open_tracker(plan, say=False)


def finish(tracker: Any, plan: Plan, *, summary: Any = None, sync: bool = False) -> None:
    """The end of a tracked run on the driver: what workers could not send, the folder's parent run, one line."""
    if tracker is None:
        return
    try:
        if sync:
            tracker.sync(plan.names)
        if summary is not None and getattr(summary, "saved", False):
            files: Sequence[Any] = [summary.folder / "summary.md", summary.folder / "summary.json", *summary.figures]
            tracker.finish_folder(files, plan.names)
    finally:
        close(tracker)


def close(tracker: Any) -> None:
    """Stop the tracker; say, in one line, what could not be sent."""
    if tracker is None:
        return
    line = tracker.close()
    if line:
        note(line)


__all__ = ["combined", "open_tracker", "worker_tracker", "finish", "close"]
