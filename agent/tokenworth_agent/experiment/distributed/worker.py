"""What every distributed worker does, wherever it runs (a Ray actor, a Slurm array task).

1. :func:`worker_backbone`: apply this machine's GPU split (before anything imports JAX or vLLM),
   then make the run's backbone from the plan and load its engine: once per worker process.
2. :func:`run_worker`: the engine (:func:`~tokenworth_agent.experiment.engine.run_experiment`) with a
   :class:`WorkerSource`: up to ``slots`` streams live in one batch, the next pending one joining
   between ticks as one ends, until the :class:`Lease` (the driver's queue, or the run folder's
   locks on Slurm) has nothing left for anyone.

Per stream, the source takes the stream's lock (a busy one is deferred: another live process runs
it), writes ``node.json`` when the engine opens it (``{"node_id", "hostname", "pid", "worker",
"attempt", "from_task", "started", "attempts": [...]}``: the latest attempt at the top level,
every attempt in ``attempts``) and, before each commit, reads ``node.json`` back: if the latest
attempt is no longer this one, another worker owns the stream now (storage whose locks did not
hold across nodes, a lock lease that expired while this node was cut off), and the stream stops
without writing (:class:`~tokenworth_agent.experiment.engine.StreamTakenOver`).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import math
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

from tokenworth_agent.core import interrupt
from tokenworth_agent.experiment import tracked
from tokenworth_agent.experiment.engine import HookFactory, StreamHook, StreamTakenOver, run_experiment
from tokenworth_agent.experiment.plan import Plan, backbone_spec, engine_settings, note
from tokenworth_agent.experiment.streams import StreamSpec
from tokenworth_agent.results.record import TaskRecord
from tokenworth_agent.storage import runfolder
from tokenworth_agent.storage.checkpoint import CheckpointError, atomic_write_json, load_checkpoint

POLL_S = 1.0  # while streams run, the queue is asked for more at most this often (and whenever one ends)
IDLE_S = 1.0  # a worker with nothing to run asks again after this long


class Lease(Protocol):
    """Where a worker's streams come from: the driver's queue (Ray) or the locks themselves (Slurm)."""

    def take(self, n: int) -> list[str]:
        """Up to ``n`` stream names to run now."""

    def finished(self, name: str) -> None:
        """The stream ran its last task."""

    def defer(self, name: str) -> None:
        """Another process holds the stream's lock: try it later."""

    def give_back(self, name: str) -> None:
        """This worker stopped the stream unfinished."""

    def complete(self) -> bool:
        """Nothing is pending or running anywhere: the worker may stop."""


Report = Callable[[str, str, Any], None]  # (event, stream, payload): "started" next_index, "record" TaskRecord


# ------------------------------------------------------------------------- node.json
def where_here(worker: str, **extra: Any) -> dict[str, Any]:
    """What ``node.json`` says about this process (``extra``: the executor's own ids, e.g. the Ray node id)."""
    return {"node_id": None, **extra, "hostname": socket.gethostname(), "pid": os.getpid(), "worker": worker}


def note_attempt(folder: Path, where: Mapping[str, Any], from_task: int) -> str:
    """Write ``node.json`` for a new attempt at the stream in ``folder``; returns the attempt's id."""
    path = folder / runfolder.NODE
    try:
        attempts = list(json.loads(path.read_text()).get("attempts", []))
    except (OSError, ValueError, AttributeError):
        attempts = []  # none yet (or unreadable: this attempt starts the list again)
    attempt = uuid.uuid4().hex
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    here = {**where, "attempt": attempt, "from_task": from_task, "started": now}
    atomic_write_json(path, {**here, "attempts": [*attempts, here]})
    return attempt


def attempt_of(folder: Path) -> str | None:
    """The latest attempt's id in ``folder``'s ``node.json`` (None: none, or unreadable)."""
    try:
        return json.loads((folder / runfolder.NODE).read_text()).get("attempt")
    except (OSError, ValueError, AttributeError):
        return None


# ------------------------------------------------------------------------- the worker's streams
class _Hook:
    """A stream's hook in a worker: records the attempt when the engine opens it, and reports progress."""

    def __init__(self, source: "WorkerSource", name: str, inner: StreamHook | None) -> None:
        self.source, self.name, self.inner = source, name, inner

    def resumed(self, records: list[TaskRecord]) -> None:
        if self.inner is not None:
            self.inner.resumed(records)

    def started(self, next_index: int) -> None:
        self.source.opened(self.name, next_index)
        if self.inner is not None:
            self.inner.started(next_index)

    def __call__(self, record: TaskRecord) -> None:
        self.source.report("record", self.name, record)
        if self.inner is not None:
            self.inner(record)


class WorkerSource:
    """The engine's :class:`~tokenworth_agent.experiment.engine.StreamSource` for one worker (see the module docstring)."""

    def __init__(self, plan: Plan, lease: Lease, *, slots: int, where: Mapping[str, Any],
                 report: Report | None = None, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if slots < 1:
            raise ValueError(f"a worker needs at least one slot, got {slots}")
        self.out, self.lease, self.slots, self.where = plan.out_dir, lease, slots, dict(where)
        self.specs: dict[str, StreamSpec] = dict(zip(plan.names, plan.streams))
        self._report, self.poll_s, self._clock = report, poll_s, clock
        self.locks: dict[str, contextlib.ExitStack] = {}
        self.attempts: dict[str, str] = {}
        self.ran: list[tuple[str, int]] = []  # (stream, first task this worker ran of it)
        self._asked_at = -math.inf
        self._ended_since = False

    def report(self, event: str, name: str, payload: Any) -> None:
        if self._report is not None:
            self._report(event, name, payload)

    def hooks(self, inner: HookFactory | None = None) -> HookFactory:
        """The engine's hooks for this worker's streams (``inner``: a front end's, called too)."""
        return lambda name, spec: _Hook(self, name, inner(name, spec) if inner else None)

    def take(self, live: int) -> list[tuple[str, StreamSpec]]:
        room = self.slots - live
        now = self._clock()
        if room <= 0 or (live and not self._ended_since and now - self._asked_at < self.poll_s):
            return []
        self._asked_at, self._ended_since = now, False
        taken = []
        for name in self.lease.take(room):
            stack = contextlib.ExitStack()
            try:
                stack.enter_context(runfolder.locked(*runfolder.method_lock(self.out, name)))
            except runfolder.FolderLocked:
                self.lease.defer(name)  # a process the cluster lost may still run it: later
                continue
            self.locks[name] = stack
            taken.append((name, self.specs[name]))
        return taken

    def opened(self, name: str, next_index: int) -> None:
        """The engine opened ``name`` at task ``next_index``: this attempt is now the stream's."""
        self.attempts[name] = note_attempt(self.out / name, self.where, next_index)
        self.ran.append((name, next_index))
        self.report("started", name, next_index)

    def check_owner(self, name: str) -> None:
        found = attempt_of(self.out / name)
        if found != self.attempts.get(name):
            raise StreamTakenOver(f"{self.out / name} is run by another worker now (attempt {found}); this one stops")

    def ended(self, name: str, finished: bool) -> None:
        self._ended_since = True
        self.attempts.pop(name, None)
        stack = self.locks.pop(name, None)
        if stack is not None:
            stack.close()
        if finished:
            self.lease.finished(name)
        else:
            self.lease.give_back(name)

    def close(self) -> None:
        """Release every lock still held (the engine stopped on an error)."""
        for name in list(self.locks):
            self.locks.pop(name).close()


# ------------------------------------------------------------------------- one worker
def controller_streams(plan: Plan, slots: int) -> int:
    """How many JAX controllers one worker holds at once at most (what its GPU split sizes JAX's share for)."""
    return max(1, min(slots, sum(s.method.startswith("tokenworth") for s in plan.streams)))


def worker_backbone(plan: Plan, *, slots: int) -> Any:
    """This worker's backbone: the GPU split of this machine applied first, then made and loaded.

    Call it before anything in the process imports JAX or vLLM (the split is read once, when they
    start). The run's identity options must come out as the driver planned them (only the memory
    share, a connection setting, is this machine's own)."""
    config = plan.config
    engine = engine_settings(config, env=plan.envs[0], controller_streams=controller_streams(plan, slots))
    spec = backbone_spec(config, engine)
    if dict(spec.options) != dict(plan.backbone_spec.options):
        raise RuntimeError(f"this worker's backbone options {dict(spec.options)} differ from the plan's "
                           f"{dict(plan.backbone_spec.options)}")
    backbone = spec.make()
    opener = getattr(backbone, "open", None)
    if callable(opener):
        opener()  # an in-process engine loads now, once per worker
    return backbone


def run_worker(plan: Plan, backbone: Any, lease: Lease, *, slots: int, where: Mapping[str, Any],
               report: Report | None = None, idle_s: float = IDLE_S) -> dict[str, Any]:
    """Run streams from ``lease`` until it is complete (see the module docstring); what this worker did."""
    source = WorkerSource(plan, lease, slots=slots, where=where, report=report)
    batch_sizes: list[int] = []
    tracker = tracked.worker_tracker(plan)  # --track: this worker logs its own streams
    try:
        while True:
            interrupt.check()  # a stop asked while idle (a Slurm preemption) claims nothing more
            result = run_experiment([], backbone, plan.out_dir, tasks=plan.tasks, schedule=plan.schedule,
                                    harness=plan.harness, names=[], source=source, data_digests=plan.data_digests,
                                    hooks=source.hooks(tracker.hooks if tracker is not None else None))
            batch_sizes += result.batch_sizes
            if lease.complete():
                break
            time.sleep(idle_s)  # others still run; a dead worker's streams may come back
    finally:
        source.close()
        tracked.close(tracker)
    return {"batch_sizes": batch_sizes, "ran": source.ran}


# ------------------------------------------------------------------------- the driver's view of the folder
def progress(out: Path, names: Sequence[str]) -> dict[str, tuple[int, bool]]:
    """(next task, finished) of every stream from its checkpoint ((0, False) without one, or an unreadable one,
    whose worker then says what is wrong with it)."""
    found = {}
    for name in names:
        try:
            state = load_checkpoint(out / name / runfolder.CHECKPOINT)
        except CheckpointError:
            state = None
        found[name] = (int(state["next_index"]), bool(state.get("finished"))) if state else (0, False)
    return found


def pending_streams(plan: Plan) -> tuple[list[str], int]:
    """The plan's unfinished streams, longest first (by task count; stable), and the tasks already done."""
    done = progress(plan.out_dir, plan.names)
    length = {n: len(plan.tasks[s.env]) for n, s in zip(plan.names, plan.streams)}
    pending = sorted((n for n in plan.names if not done[n][1]), key=lambda n: -length[n])
    return pending, sum(i for i, _ in done.values())


def forward_progress(plan: Plan, hooks: HookFactory | None) -> Callable[[str, str, Any], None]:
    """The driver's side of the workers' reports: each stream's hook (made once), resumed from disk on its first start."""
    made: dict[str, StreamHook | None] = {}
    specs = dict(zip(plan.names, plan.streams))

    def hook(name: str) -> StreamHook | None:
        if name not in made:
            made[name] = hooks(name, specs[name]) if hooks else None
        return made[name]

    for name, (_, finished) in progress(plan.out_dir, plan.names).items():
        if finished and hook(name) is not None:
            from tokenworth_agent.results.record import read_records

            made[name].resumed(read_records(plan.out_dir / name / runfolder.RECORDS))  # type: ignore[union-attr]
    started: set[str] = set()

    def deliver(event: str, name: str, payload: Any) -> None:
        target = hook(name)
        if target is None:
            return
        if event == "started" and name not in started:  # a later attempt's start: its tasks were counted already
            from tokenworth_agent.results.record import iter_task_records

            started.add(name)  # the first ``payload`` records only: the worker may be writing the next one
            target.resumed(list(itertools.islice(iter_task_records(plan.out_dir / name / runfolder.RECORDS), payload)))
            target.started(payload)
        elif event == "record":
            target(payload)

    return deliver


__all__ = ["Lease", "WorkerSource", "worker_backbone", "run_worker", "controller_streams", "note_attempt",
           "attempt_of", "where_here", "pending_streams", "progress", "forward_progress", "POLL_S", "IDLE_S"]
