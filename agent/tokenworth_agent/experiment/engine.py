"""The experiment engine: every stream of a run or a sweep, in lockstep, one batched model call per tick.

Each stream (:class:`~tokenworth_agent.experiment.streams.StreamSpec`) runs its tasks through
:func:`~tokenworth_agent.experiment.task.task_steps`, a coroutine that yields each model call it needs
(the agent's rounds and the policy's auxiliary calls). A **tick**:

1. every live stream that is waiting for the model contributes its one pending request;
2. **one** ``backbone.generate`` serves them all (vLLM: one ``LLM.chat``; the OpenAI backbone
   sends them concurrently; the simulator answers the batch in one call);
3. each stream takes its reply and runs on (environment step, judge, policy update, record and
   checkpoint, next task's retrieval) until it needs the model again.

No stream waits for another's task or round: a stream at round 2 of task 7 shares a tick with
one at round 0 of task 8. But a tick still waits for its longest reply before any stream
moves on (for in-process vLLM that is what ``LLM.chat`` does anyway).

``schedule="continuous"``, for backbones that offer ``submit`` (the OpenAI-compatible one, in
front of ``vllm serve``'s continuous batching): every stream's request is in flight on its
own, and a stream advances the moment its reply is back, so a short reply never waits for a
long one. A backbone without ``submit`` runs lockstep. ``schedule="sequential"`` runs the
streams one after another with one conversation per call (what the harness did before; kept
for comparisons). The schedule never changes a stream's records (streams are independent).

Failures stay in their stream. An environment that fails a task fails that task
(``env_error``, in :class:`~tokenworth_agent.experiment.episode.Episode`); an environment whose own machinery
breaks (:class:`~tokenworth_agent.envs.base.InfrastructureError`, e.g. BigCodeBench's evaluator) stops the
experiment instead, every finished task kept, and the same command resumes it. When a batched ``generate`` raises
:class:`~tokenworth_agent.backbones.base.BackboneError`, the tick's requests are retried one by one:
a request that fails again fails its task (``backbone_error``, the error recorded), the
others go on. Only when every request of the tick fails (the model is wrong) does the
experiment stop, with every finished task kept. An outage
(:class:`~tokenworth_agent.backbones.base.ServerUnreachable`: nothing got through for the backbone's whole
retry window) stops it at once, in every schedule: the window was waited out once for all
streams, and no task records the outage as its own failure.

Streams may also **join between ticks** (``source=``, a :class:`StreamSource`: a distributed
worker's leases, :mod:`tokenworth_agent.experiment.distributed`): whenever a stream ends, and after every
tick, the source may hand over more streams, which open and join the next tick; a stream that
ends is closed at once and reported back. So a worker keeps its batch full without waiting for
its slowest stream, and a stream's records are the same whenever it joined (streams are
independent). Before each commit such a stream asks its source whether this process still owns
it (:meth:`StreamSource.check_owner`); a stream taken over by another process stops without
writing anything more (:class:`StreamTakenOver`).

Resume: each stream has its own folder, lock, JSONL records and checkpoint (policy state incl.
bank, controller and RNG state, JSONL offset, next task index), committed together after
every task (:mod:`tokenworth_agent.storage.checkpoint`). A stream's decisions depend only on its own history,
so after ``kill -9`` anywhere the same command resumes every stream exactly, and a stream's
records equal the records of that stream run alone, field for field except ``time_s``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping, Protocol, Sequence

from tokenworth_agent.core import interrupt
from tokenworth_agent.experiment import releases
from tokenworth_agent.storage import runfolder
from tokenworth_agent.backbones.base import BackboneError, Generation, ServerUnreachable, Submitting
from tokenworth_agent.storage.checkpoint import (DURABLE_EVERY_S, CheckpointError, CheckpointWriter, RecordLog, load_checkpoint,
                                      records_reach)
from tokenworth_agent.tasks import Task
from tokenworth_agent.envs.base import Environment
from tokenworth_agent.envs.registry import make_environment
from tokenworth_agent.experiment.episode import Request, answer
from tokenworth_agent.experiment.streams import PARAMETERS, StreamSpec, digest, parameters_in_use, stream_names
from tokenworth_agent.experiment.task import Reply, RequestFailed, task_steps
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.policies.base import MemoryPolicy
from tokenworth_agent.policies.registry import make_policy
from tokenworth_agent.results.record import TaskRecord, read_records
from tokenworth_agent.sim import facts as sim_facts
from tokenworth_agent.sim.facts import AnyBackbone

Schedule = Literal["lockstep", "continuous", "sequential"]
# Worker threads for streams whose environment allows it (OS: a sandbox reset is ~1 s of waiting on
# the kernel). Measured on 2 cores, 5 OS streams x 10 tasks: see docs/performance.md.
ENV_THREADS = 8
SCHEDULES: tuple[str, ...] = ("lockstep", "continuous", "sequential")


class StreamHook(Protocol):
    """What the engine tells a front end about one stream (progress bars, tests).

    The engine calls all three. A front end that needs only some may subclass this class: its
    methods do nothing.
    """

    def resumed(self, records: list[TaskRecord]) -> None:
        """The stream's records from earlier calls, before any new task: work done, not new work."""

    def started(self, next_index: int) -> None:
        """The stream is open and its next task is ``next_index`` (0 for a fresh stream)."""

    def __call__(self, record: TaskRecord) -> None:
        """One new task's record, once it is committed."""


HookFactory = Callable[[str, StreamSpec], "StreamHook | None"]  # (stream name, spec) -> the stream's hook


class StreamTakenOver(RuntimeError):
    """Another process owns this stream now (a fenced-out writer); the stream stops without writing."""


class StreamSource(Protocol):
    """Streams that join a running experiment between ticks (a distributed worker's leases).

    The engine calls :meth:`take` before the first tick, after every tick and whenever a stream
    ends; it locks and opens what it gets (the source may hold the locks already: they are
    re-entrant). A source rations itself (how many streams, how often it asks anyone else)."""

    def take(self, live: int) -> Sequence[tuple[str, StreamSpec]]:
        """(name, spec) of streams to start now, while ``live`` streams run here; none: not now."""

    def check_owner(self, name: str) -> None:
        """Called before each of the stream's commits; raises :class:`StreamTakenOver` when this
        process no longer owns the stream."""

    def ended(self, name: str, finished: bool) -> None:
        """The stream stopped here and its folder is closed (``finished``: it ran its last task;
        else it was taken over or stopped by ``stop_after``)."""


@dataclasses.dataclass
class ExperimentResult:
    streams: list[StreamSpec]
    names: list[str]
    records: dict[str, list[TaskRecord]]  # by stream name: every record, old and new
    batch_sizes: list[int]  # the number of requests of each generate call this call made
    seconds: float

    def by_stream(self) -> Iterator[tuple[StreamSpec, str, list[TaskRecord]]]:
        for spec, name in zip(self.streams, self.names):
            yield spec, name, self.records[name]


# ------------------------------------------------------------------------- identity and resume
def stream_identity(spec: StreamSpec, tasks: Sequence[Task], backbone_name: str,
                    harness: HarnessOptions) -> dict[str, Any]:
    """What makes a checkpoint this stream's: method, env, seed, budget, backbone, task ids, the harness
    options (memory rule and format, KG parser and vocabulary, instruction file hashes; ``harness`` is the
    stream's own, a grid's option values in it), the method's settings (only when there are any, so preset
    streams keep their identity), the values of the parameters the method declares (``parameters``, only for a
    method that declares any: :func:`~tokenworth_agent.experiment.streams.parameters_in_use`) and the releases of
    its method, benchmark and backbone (:mod:`tokenworth_agent.experiment.releases`)."""
    identity: dict[str, Any] = {"method": spec.method, "env": spec.env, "seed": spec.seed,
                                "budget": spec.budget.as_dict(), "backbone": backbone_name,
                                "task_ids": digest({"ids": [t.task_id for t in tasks]}),
                                "harness": harness.identity(spec.env)}
    if spec.hparams:
        identity["hparams"] = spec.overrides
    in_use = parameters_in_use(spec)
    if in_use:
        identity[PARAMETERS] = in_use
    identity[releases.KEY] = releases.stream_releases(spec.method, spec.env, backbone_name)
    return json.loads(json.dumps(identity, default=str))


# what later versions added to a stream's identity: a checkpoint without one was made before it existed, and resumes
# once (the entry is recorded from its next commit)
ADDED_TO_IDENTITY = (releases.KEY, PARAMETERS)


def _without_releases(identity: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in identity.items() if k != releases.KEY}


def _as_recorded(identity: Mapping[str, Any], recorded: Mapping[str, Any]) -> dict[str, Any]:
    """``identity`` without what :data:`ADDED_TO_IDENTITY` holds that ``recorded`` lacks (made before it existed)."""
    return {k: v for k, v in identity.items() if k in recorded or k not in ADDED_TO_IDENTITY}


def _redo_hint(folder: Path, method: str) -> str:
    return (f"the records are kept; to redo {method} alone, rerun with --methods {method} --overwrite "
            f"(it deletes only {folder}'s records and checkpoint), or move {folder} aside")


def _rebuild_stateless(records_path: Path, policy: MemoryPolicy, tasks: Sequence[Task]) -> tuple[int, int] | None:
    """(next_index, offset) recovered from the records alone, for a policy with no state.

    Only a policy whose state is empty (``standard``) can resume without its checkpoint: its
    decisions do not depend on earlier tasks. The records must be tasks 0..n-1 in order; a
    torn last line is dropped (it is re-made).
    """
    if policy.state_dict():
        return None
    offset = n = 0
    with open(records_path, "rb") as handle:
        for line in handle:
            if not line.endswith(b"\n"):
                break
            try:
                record = json.loads(line)
            except ValueError:
                return None
            if n >= len(tasks) or record.get("index") != n or record.get("task_id") != tasks[n].task_id:
                return None
            n, offset = n + 1, offset + len(line)
    return n, offset


class _Stream:
    """One stream's runtime: folder, policy, environment, records, checkpoint, and its task coroutine."""

    def __init__(self, spec: StreamSpec, name: str, out: Path, tasks: Sequence[Task], backbone_name: str, *,
                 harness: HarnessOptions, hook: StreamHook | None, stop_after: int | None,
                 checkpoint_every: int = 1, fence: Callable[[], None] | None = None) -> None:
        self.spec, self.name, self.tasks, self.hook, self.stop_after = spec, name, tasks, hook, stop_after
        self.checkpoint_every = checkpoint_every
        self.fence = fence  # raises StreamTakenOver before a commit when another process owns the stream
        self.taken_over = False
        self.folder = out / name
        self.records_path = self.folder / runfolder.RECORDS
        self.checkpoint_path = self.folder / runfolder.CHECKPOINT
        harness = harness.with_options(spec.option_overrides)  # a grid's benchmark options for this stream
        self.identity = stream_identity(spec, tasks, backbone_name, harness)
        self.harness = harness
        self.policy = make_policy(spec.method, spec.env, spec.budget, spec.seed, harness=harness,
                                  **spec.overrides)
        self.describe = spec.describe()
        self.env: Environment | None = None
        self.concurrent = False  # set by open(): whether its environment may be advanced in a worker thread
        self.log: RecordLog | None = None
        self.writer: CheckpointWriter | None = None
        self.first_checkpoint: dict[str, Any] | None = None  # set by steps() before task 0 runs
        self.next_index, self.offset = self._resume_point()

    @property
    def finished(self) -> bool:
        return self.next_index >= len(self.tasks)

    def _resume_point(self) -> tuple[int, int]:
        """Where to carry on: (next task index, JSONL offset); restores the policy's state."""
        method = self.spec.method
        try:
            state = load_checkpoint(self.checkpoint_path, valid=lambda s: records_reach(
                self.records_path, int(s.get("jsonl_offset", -1)), int(s.get("next_index", -1))))
        except CheckpointError as exc:
            raise CheckpointError(f"{exc}; {_redo_hint(self.folder, method)}") from exc
        if state is None:
            if not self.records_path.exists() or self.records_path.stat().st_size == 0:
                return 0, 0
            rebuilt = _rebuild_stateless(self.records_path, self.policy, self.tasks)
            if rebuilt is None:
                raise CheckpointError(
                    f"{self.records_path} holds records but {self.checkpoint_path} is missing, so {method}'s state "
                    f"(its memory bank and learned values) cannot be restored; {_redo_hint(self.folder, method)}")
            return rebuilt
        recorded = state["identity"]
        now = _as_recorded(self.identity, recorded)  # an entry made before it was recorded: resumed once
        if recorded != now and _without_releases(recorded) == _without_releases(now):
            names = {"method": method, "benchmark": self.spec.env, "backbone": self.identity["backbone"]}
            line = releases.changed_line(
                str(self.folder), names, recorded[releases.KEY], now[releases.KEY],
                f"--overwrite --methods {method} (it deletes only {self.folder}'s records and checkpoint)")
            if line is not None:  # None: an entry made before the code's digests were recorded, resumed once
                raise CheckpointError(line)
        elif recorded != now:
            raise CheckpointError(
                f"{self.checkpoint_path} belongs to a different run ({state['identity']} vs {self.identity}); "
                f"use another --out, or {_redo_hint(self.folder, method)}")
        self.policy.load_state_dict(state["policy"])
        return int(state["next_index"]), int(state["jsonl_offset"])

    def open(self, env: Environment | None, durable_every_s: float) -> None:
        for stale in runfolder.stale_temp_files(self.folder):
            stale.unlink(missing_ok=True)  # a kill mid-write left it; we hold the lock, so nobody is writing it
        try:
            self.log = RecordLog(self.records_path, resume_offset=self.offset)
        except CheckpointError as exc:
            raise CheckpointError(f"{exc}; {_redo_hint(self.folder, self.spec.method)}") from exc
        self.env = env if env is not None else make_environment(self.spec.env, self.spec.budget, harness=self.harness)
        self.writer = CheckpointWriter(self.checkpoint_path, log=self.log, durable_every_s=durable_every_s)
        self.concurrent = self.env.concurrent_steps
        if self.hook is not None:
            self.hook.resumed(read_records(self.records_path))
            self.hook.started(self.next_index)

    def steps(self, guard: interrupt.InterruptGuard) -> Iterator[Request]:
        """The stream's tasks from its resume point: yields model requests, receives replies."""
        assert self.env is not None and self.log is not None and self.writer is not None
        processed = 0
        for index in range(self.next_index, len(self.tasks)):
            if self.stop_after is not None and processed >= self.stop_after:
                return
            guard.check()
            if index == 0:
                # The state task 0 starts from, copied now: the task updates the policy in place before
                # its commit, and the stream's first checkpoint must resume *before* task 0.
                self.first_checkpoint = copy.deepcopy(self._checkpoint(0))
            record = yield from task_steps(self.policy, self.env, self.tasks[index], index, self.spec.budget,
                                           self.spec.seed, self.describe)
            try:
                self.commit(index, record, guard)
            except StreamTakenOver:
                self.taken_over = True  # its new owner redoes this task; nothing of ours may reach the folder
                return
            processed += 1
            if self.hook is not None:
                self.hook(record)

    def commit(self, index: int, record: TaskRecord, guard: interrupt.InterruptGuard) -> None:
        """Record + checkpoint of one task, whole or not at all."""
        assert self.log is not None and self.writer is not None
        finished = index + 1 == len(self.tasks)
        with guard.deferred():
            if self.fence is not None:
                self.fence()
            if index == 0:
                # The stream's first checkpoint (the state from before task 0, see steps), written just
                # before its first record: a kill -9 between task 0's record and its checkpoint then
                # resumes from here (the record is dropped and re-made), as between any later task's two
                # writes. Not at open: a run that fails before its first task leaves no results, so the
                # folder still takes other settings.
                assert self.first_checkpoint is not None
                self.writer.save(self.first_checkpoint)
                self.first_checkpoint = None
            self.offset = self.log.append(record.to_json(), sync=False)
            if (index + 1) % self.checkpoint_every == 0 or finished:
                self.writer.save(self._checkpoint(index + 1, finished), durable=finished)
        self.next_index = index + 1

    def _checkpoint(self, next_index: int, finished: bool = False) -> dict[str, Any]:
        return {"identity": self.identity, "policy": self.policy.state_dict(), "next_index": next_index,
                "jsonl_offset": self.offset, "finished": finished}

    def close(self, own_env: bool) -> None:
        try:
            if self.writer is not None and not self.taken_over:
                self.writer.flush()  # whatever stopped the stream, its last checkpoint reaches the disk
        finally:
            if self.log is not None:
                self.log.close()
            if own_env and self.env is not None:
                self.env.close()


# ------------------------------------------------------------------------- serving a tick
def serve(backbone: AnyBackbone, requests: Sequence[Request]) -> list[Reply]:
    """One batched ``generate`` for the tick; on failure, isolate the failing requests."""
    try:
        generations = answer(backbone, requests)
    except ServerUnreachable:
        raise  # an outage: one request at a time would wait out the retry window once per request
    except BackboneError as exc:
        if len(requests) == 1:
            raise
        replies: list[Reply] = []
        for request in requests:
            try:
                [generation] = answer(backbone, [request])
                replies.append(generation)
            except ServerUnreachable:
                raise
            except BackboneError as single:
                replies.append(RequestFailed(f"{type(single).__name__}: {single}"))
        if all(isinstance(r, RequestFailed) for r in replies):
            raise exc
        return replies
    if len(generations) != len(requests) or not all(isinstance(g, Generation) for g in generations):
        raise BackboneError(f"the backbone answered {len(generations)} of {len(requests)} requests of a batch")
    return list(generations)


# ------------------------------------------------------------------------- the experiment
def stream_tasks(spec: StreamSpec, tasks: Mapping[str, Sequence[Task]],
                 data_digests: Mapping[str, str] | None) -> Sequence[Task]:
    """``spec``'s tasks in its order (:mod:`tokenworth_agent.experiment.orders`): the benchmark's own for order 0;
    for order k > 0 computed here, wherever the stream runs, from the spec and its env's data digest."""
    from tokenworth_agent.experiment.orders import ordered

    if spec.task_order == 0:
        return tasks[spec.env]
    if data_digests is None or spec.env not in data_digests:
        raise ValueError(f"stream order{spec.order}: no data digest given for env {spec.env} (the plan's "
                         "data_digests), so its order cannot be made")
    return ordered(spec.env, tasks[spec.env], data_digests[spec.env], spec.task_order)


def run_experiment(streams: Sequence[StreamSpec], backbone: AnyBackbone, out_dir: str | Path, *,
                   tasks: Mapping[str, Sequence[Task]], schedule: Schedule = "lockstep",
                   harness: HarnessOptions = DEFAULT_HARNESS,
                   hooks: HookFactory | None = None, on_resume: Callable[[int, int], None] | None = None,
                   environments: Mapping[str, Environment] | None = None, stop_after: int | None = None,
                   names: Sequence[str] | None = None, checkpoint_every: int = 1,
                   durable_every_s: float = DURABLE_EVERY_S, env_threads: int = ENV_THREADS,
                   source: StreamSource | None = None, data_digests: Mapping[str, str] | None = None
                   ) -> ExperimentResult:
    """Run (or resume) every stream over its env's ``tasks``; see the module docstring.

    ``tasks`` are each env's in the benchmark's order; a stream with an order k > 0 runs them in that order
    (:func:`stream_tasks`), keyed by its env's ``data_digests`` entry (the plan's: the whole stream's digest).

    ``out_dir`` must be a prepared run folder (:func:`tokenworth_agent.storage.runfolder.prepare`); each stream's
    folder is ``out_dir/<name>`` (``names``, by default :func:`stream_names`) and is locked for
    the whole call. ``environments`` gives a stream (by name) an environment to use instead of
    a new one (it is not closed here). ``hooks`` makes each stream's hook (:class:`StreamHook`);
    ``on_resume(done, total)`` is called once, before any task runs, if earlier runs finished
    ``done`` of the experiment's ``total`` tasks (the front end's resume banner). ``stop_after`` processes at most that many tasks per
    stream in this call. ``env_threads`` > 1 advances the streams of environments that allow it
    (``Environment.concurrent_steps``: OS) in that many worker threads between ticks. ``source``
    adds streams between ticks (:class:`StreamSource`; lockstep and continuous schedules); each
    is locked while it runs here and closed as soon as it ends. SIGINT stops between committed tasks (:mod:`tokenworth_agent.core.interrupt`) and
    ``KeyboardInterrupt`` propagates; a second Ctrl-C stops at once.
    """
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if source is not None and schedule == "sequential":
        raise ValueError("a stream source adds streams to a running batch: use the lockstep or continuous schedule")
    out = Path(out_dir)
    streams = list(streams)
    names = list(names) if names is not None else stream_names(streams)
    if len(names) != len(streams) or len(set(names)) != len(names):
        raise ValueError("need one distinct name per stream")
    missing = sorted({s.env for s in streams} - set(tasks))
    if missing:
        raise ValueError(f"no tasks given for env {', '.join(missing)}")
    backbone_name = backbone.name
    environments = dict(environments or {})
    started = time.perf_counter()
    batch_sizes: list[int] = []

    def make(spec: StreamSpec, name: str) -> _Stream:
        fence = (lambda: source.check_owner(name)) if source is not None else None
        return _Stream(spec, name, out, stream_tasks(spec, tasks, data_digests), backbone_name, harness=harness,
                       hook=hooks(name, spec) if hooks else None, stop_after=stop_after,
                       checkpoint_every=checkpoint_every, fence=fence)

    with contextlib.ExitStack() as stack:
        guard = stack.enter_context(interrupt.InterruptGuard())
        for name in names:  # every stream's lock before any task runs
            stack.enter_context(runfolder.locked(*runfolder.method_lock(out, name)))
        runs = [make(spec, name) for spec, name in zip(streams, names)]
        done = sum(r.next_index for r in runs)
        if done and on_resume is not None:
            on_resume(done, sum(len(r.tasks) for r in runs))
        live = [r for r in runs if not r.finished]
        for run in runs:
            if run.finished and run.hook is not None:  # nothing to write (works in a read-only folder)
                run.hook.resumed(read_records(run.records_path))
        for run in live:
            stack.callback(run.close, run.name not in environments)
            run.open(environments.get(run.name), durable_every_s)
        if source is None or schedule == "sequential":
            roster = _Roster(live)
        else:
            roster = _Roster(live, _Joiner(source, make, out, lambda run: run.open(None, durable_every_s)))
            stack.callback(roster.close)
        if schedule == "continuous" and isinstance(backbone, Submitting):
            _run_continuous(roster, backbone, guard, batch_sizes, env_threads)
        else:
            groups = [_Roster([r]) for r in live] if schedule == "sequential" else [roster]
            for group in groups:
                _run_lockstep(group, backbone, guard, batch_sizes, env_threads)
        streams, names = streams + [r.spec for r in roster.joined], names + [r.name for r in roster.joined]
    records = {name: read_records(out / name / runfolder.RECORDS) for name in names}
    return ExperimentResult(streams, names, records, batch_sizes, time.perf_counter() - started)


@dataclasses.dataclass
class _Joiner:
    """How streams join a call: the source, how to make a stream, how to open it."""

    source: StreamSource
    make: Callable[[StreamSpec, str], _Stream]
    out: Path
    open: Callable[[_Stream], None]


class _Roster:
    """The streams of one call: those given, then those a source adds between ticks (indices stay put).

    A joined stream holds its own lock and files (``_stacks``) and is closed as soon as it ends; the
    streams given are closed when the call ends, as before."""

    def __init__(self, runs: Sequence[_Stream], joiner: _Joiner | None = None) -> None:
        self.runs: list[_Stream] = list(runs)
        self.live: set[int] = set(range(len(self.runs)))
        self.joiner = joiner
        self.joined: list[_Stream] = []
        self._stacks: dict[int, contextlib.ExitStack] = {}

    def join(self) -> list[int]:
        """Open what the source hands over now; the indices of the streams that joined."""
        if self.joiner is None:
            return []
        joiner, new = self.joiner, []
        for name, spec in joiner.source.take(len(self.live)):
            if any(r.name == name for i, r in enumerate(self.runs) if i in self.live):
                raise ValueError(f"stream {name} is already running in this call")
            stack = contextlib.ExitStack()
            try:
                stack.enter_context(runfolder.locked(*runfolder.method_lock(joiner.out, name)))
                run = joiner.make(spec, name)
                self.joined.append(run)
                if run.finished:  # finished by an earlier attempt: nothing to open or write
                    if run.hook is not None:
                        run.hook.resumed(read_records(run.records_path))
                    stack.close()
                    joiner.source.ended(name, True)
                    continue
                stack.callback(run.close, True)
                joiner.open(run)
            except BaseException:
                stack.close()
                raise
            index = len(self.runs)
            self.runs.append(run)
            self.live.add(index)
            self._stacks[index] = stack
            new.append(index)
        return new

    def ended(self, index: int) -> None:
        """Stream ``index`` ran out of tasks (or was stopped): a joined one is closed and reported now."""
        self.live.discard(index)
        stack = self._stacks.pop(index, None)
        if stack is not None and self.joiner is not None:
            run = self.runs[index]
            stack.close()
            self.joiner.source.ended(run.name, run.finished)

    @property
    def concurrent(self) -> bool:
        """Whether worker threads may be needed: two concurrent streams, or a source that may add them."""
        return self.joiner is not None or sum(r.concurrent for r in self.runs) > 1

    def close(self) -> None:
        """On the way out (an error, Ctrl-C): every joined stream still open is closed, its checkpoint kept."""
        for index in list(self._stacks):
            self._stacks.pop(index).close()


def _advance(steps: Iterator[Request], reply: Reply | None) -> Request | None:
    """Run a stream on to its next model request (None: the stream is done)."""
    try:
        return next(steps) if reply is None else steps.send(reply)  # type: ignore[attr-defined]
    except StopIteration:
        return None


def _advance_all(runs: Sequence[_Stream], work: Sequence[tuple[int, Iterator[Request], Reply | None]],
                 pool: ThreadPoolExecutor | None) -> dict[int, Request | None]:
    """Advance the given streams; those whose env allows it in worker threads, the rest here, in order.

    Each stream is advanced by one thread at a time, so its environment and policy never see two
    threads at once; commits are per stream folder. A failure in a worker is raised here.
    """
    threaded = [(i, s, r) for i, s, r in work if pool is not None and runs[i].concurrent]
    futures = {i: pool.submit(_advance, s, r) for i, s, r in threaded} if pool is not None else {}
    out = {i: _advance(s, r) for i, s, r in work if i not in futures}
    for i, future in futures.items():
        out[i] = future.result()
    return dict(sorted(out.items()))


def _env_pool(stack: contextlib.ExitStack, roster: _Roster, env_threads: int) -> ThreadPoolExecutor | None:
    """Worker threads for the streams whose environment allows them (None when never more than one)."""
    if env_threads <= 1 or not roster.concurrent:
        return None
    return stack.enter_context(ThreadPoolExecutor(env_threads, "stream"))  # threads start as work comes


def _run_lockstep(roster: _Roster, backbone: AnyBackbone, guard: interrupt.InterruptGuard,
                  batch_sizes: list[int], env_threads: int) -> None:
    """Tick until every stream of ``roster`` is done and its source hands over no more."""
    with contextlib.ExitStack() as stack:
        pool = _env_pool(stack, roster, env_threads)
        streams: dict[int, Iterator[Request]] = {}
        pending: dict[int, Request] = {}

        def settle(advanced: Mapping[int, Request | None]) -> None:
            for i, request in advanced.items():
                if request is None:
                    streams.pop(i)
                    roster.ended(i)
                else:
                    pending[i] = request

        def start(indices: Sequence[int]) -> None:
            streams.update({i: roster.runs[i].steps(guard) for i in indices})
            settle(_advance_all(roster.runs, [(i, streams[i], None) for i in indices], pool))

        start(range(len(roster.runs)))
        while new := roster.join():
            start(new)
        while pending:
            order = sorted(pending)
            replies = serve(backbone, [pending.pop(i) for i in order])
            batch_sizes.append(len(order))
            interrupt.check()
            settle(_advance_all(roster.runs, [(i, streams[i], reply) for i, reply in zip(order, replies)], pool))
            while new := roster.join():
                start(new)


def _run_continuous(roster: _Roster, backbone: Submitting, guard: interrupt.InterruptGuard,
                    batch_sizes: list[int], env_threads: int) -> None:
    """Every stream's request in flight on its own; each stream advances as soon as its reply is back.

    A stream whose environment allows it (``concurrent_steps``) advances in a worker thread, and the loop
    waits on those steps as it waits on replies: a slow step (a BigCodeBench judge running a long test)
    holds its own stream only, never the others' replies. ``batch_sizes`` gets the number of replies
    handled together each time the loop wakes for replies. A request that fails for good fails its task
    (``backbone_error``); as many failures in a row as there are live streams, with no success between
    them, stop the experiment (the server is down).
    """
    from concurrent.futures import FIRST_COMPLETED, wait

    with contextlib.ExitStack() as stack:
        pool = _env_pool(stack, roster, env_threads)
        streams: dict[int, Iterator[Request]] = {}
        in_flight: dict[Future[Generation], int] = {}  # a stream's request to the model
        stepping: dict[Future[Request | None], int] = {}  # a stream's environment, advancing in a worker thread

        def send(advanced: Mapping[int, Request | None]) -> None:
            for i, request in advanced.items():
                if request is None:
                    streams.pop(i)
                    roster.ended(i)
                else:
                    in_flight[sim_facts.submit(backbone, request.conversation, request.max_tokens, request.facts)] = i

        def advance(work: Sequence[tuple[int, Iterator[Request], Reply | None]]) -> None:
            """Streams that may go to a worker thread do (their next request comes back through ``stepping``);
            the others advance here, now."""
            here = []
            for i, steps, reply in work:
                if pool is not None and roster.runs[i].concurrent:
                    stepping[pool.submit(_advance, steps, reply)] = i
                else:
                    here.append((i, steps, reply))
            send(_advance_all(roster.runs, here, None))

        def start(indices: Sequence[int]) -> None:
            streams.update({i: roster.runs[i].steps(guard) for i in indices})
            advance([(i, streams[i], None) for i in indices])

        start(range(len(roster.runs)))
        while new := roster.join():
            start(new)
        failures_in_a_row = 0
        try:
            while in_flight or stepping:
                done, _ = wait([*in_flight, *stepping], return_when=FIRST_COMPLETED)
                interrupt.check()
                stepped = {stepping.pop(f): f.result() for f in done if f in stepping}  # a worker's failure: raised
                work: list[tuple[int, Iterator[Request], Reply | None]] = []
                live = len(streams)  # every live stream has one request in flight or one step under way
                for future in sorted((f for f in done if f in in_flight), key=lambda f: in_flight[f]):
                    i = in_flight.pop(future)
                    try:
                        reply: Reply = future.result()
                        failures_in_a_row = 0
                    except ServerUnreachable:
                        raise  # an outage stops the experiment before any task records it as its own failure
                    except BackboneError as exc:
                        failures_in_a_row += 1
                        if failures_in_a_row >= live:
                            raise
                        reply = RequestFailed(f"{type(exc).__name__}: {exc}")
                    work.append((i, streams[i], reply))
                send(dict(sorted(stepped.items())))
                if work:
                    batch_sizes.append(len(work))
                    advance(work)
                while new := roster.join():
                    start(new)
        finally:
            for future in in_flight:
                future.cancel()


__all__ = ["run_experiment", "stream_tasks", "ExperimentResult", "StreamHook", "HookFactory", "StreamSource", "StreamTakenOver", "serve",
           "stream_identity", "SCHEDULES"]
