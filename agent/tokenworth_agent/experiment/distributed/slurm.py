"""``--executor slurm``: the plan's streams as one Slurm job array, through submitit.

The driver (a login node; this process) has planned the run and prepared the folder, which must be
on storage the compute nodes mount at the same path. :class:`SlurmExecutor` then:

1. ``check`` (before anything is written): ``sbatch`` is on the PATH (``--slurm-cluster local``
   runs the array as processes here instead: submitit's local executor, to try a setup);
2. ``run``: holds ``<out>/.driver.lock``, submits one array of ``--workers`` tasks (default one per
   :data:`STREAMS_PER_TASK` pending streams; ``sbatch --array=0-(N-1)``), records it in
   ``<out>/slurm.json`` and waits for it, showing progress from the records on disk. A rerun while
   the recorded array is still queued or running waits for it instead of submitting another.

Each array task (:class:`ArrayTask`, a ``submitit.helpers.Checkpointable``) applies its GPU's
split and loads the backbone (:func:`~.worker.worker_backbone`), then runs the same worker loop as
a Ray worker (:func:`~.worker.run_worker`) with a :class:`ClaimLease`: **the stream locks are the
queue** (an array task cannot call back to the login node). A task walks every stream from its
own offset and claims an unfinished one by taking its lock; it exits once every unfinished stream
is locked by someone else. On preemption or timeout Slurm sends ``SIGUSR2``
(``--signal=USR2@120``), submitit requeues the task with the same arguments, the kernel drops its
locks with its process, and the requeued task (or any other with room) resumes those streams from
their checkpoints. The signal stops a task as a first Ctrl-C does (:class:`Preemption`): the tasks
in flight are dropped at their next check, never cut mid-commit or mid-SQLite, and only then does
submitit requeue and exit. An array that ends with streams still unfinished (a task that failed
for good) is followed by a new array for them, :data:`MAX_ROUNDS` times at most.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import pickle
import shutil
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any, Callable

import submitit

from tokenworth_agent.core import interrupt
from tokenworth_agent.experiment.config import ExecutorConfig
from tokenworth_agent.experiment.distributed.worker import (pending_streams, progress, run_worker, where_here,
                                                 worker_backbone)
from tokenworth_agent.experiment.engine import ExperimentResult, HookFactory, StreamHook
from tokenworth_agent.experiment.plan import ExecutorLost, LaunchError, Plan, note
from tokenworth_agent.results.record import TaskRecord, read_records
from tokenworth_agent.storage import runfolder
from tokenworth_agent.storage.checkpoint import atomic_write_bytes, atomic_write_json

STREAMS_PER_TASK = 16  # default array size: one task per this many pending streams
SIGNAL_DELAY_S = 120  # Slurm signals a task this long before its end (the last task's commit fits)
MAX_ROUNDS = 3  # arrays submitted by one command for streams a failed task left unfinished
POLL_S = 5.0  # the driver reads progress from the folder this often
RECORD = "slurm.json"
FOLDER = ".slurm"  # submitit's scripts, pickles and logs, inside the run folder
DRIVER_LOCK = ".driver.lock"


class ClaimLease:
    """A Slurm task's streams, claimed by their locks (see the module docstring)."""

    def __init__(self, plan: Plan, shard: int, shards: int) -> None:
        names = list(plan.names)
        offset = shard * len(names) // max(1, shards)
        self.out, self.order = plan.out_dir, names[offset:] + names[:offset]
        self.finished_names = {n for n, (_, done) in progress(self.out, names).items() if done}
        self.held: set[str] = set()
        self.not_before: dict[str, float] = {}

    def _candidates(self) -> list[str]:
        now = time.monotonic()
        return [n for n in self.order if n not in self.finished_names and n not in self.held
                and self.not_before.get(n, 0.0) <= now]

    def take(self, n: int) -> list[str]:
        taken = self._candidates()[:n]
        self.held.update(taken)
        return taken  # the worker's source takes each lock; a busy one comes back through defer()

    def finished(self, name: str) -> None:
        self.held.discard(name)
        self.finished_names.add(name)

    def defer(self, name: str) -> None:
        self.held.discard(name)
        self.not_before[name] = time.monotonic() + 5.0

    def give_back(self, name: str) -> None:
        self.held.discard(name)

    def complete(self) -> bool:
        """Every stream is finished, or running in another process (its lock is held): nothing to claim."""
        self.finished_names |= {n for n, (_, done) in progress(self.out, self._unfinished()).items() if done}
        for name in self._unfinished():
            try:
                with runfolder.locked(*runfolder.method_lock(self.out, name)):
                    return False  # free and unfinished: claim it
            except runfolder.FolderLocked:
                continue
        return True

    def _unfinished(self) -> list[str]:
        return [n for n in self.order if n not in self.finished_names]


class Preemption:
    """While active, the preemption signal stops this array task between steps, then requeues it.

    submitit's own handler checkpoints, requeues and raises ``SystemExit`` wherever the main thread
    is: inside a SQLite callback that becomes the task's error outcome, and between a record and its
    checkpoint it costs the committed task. Here an :class:`~tokenworth_agent.core.interrupt.InterruptGuard`
    spans the whole worker (the engine's own guards nest in it and share its flag, so a stop asked
    between two experiments still holds for the next), the signal asks it to stop
    (:func:`~tokenworth_agent.core.interrupt.request_stop`), and the ``KeyboardInterrupt`` that ends the tasks
    in flight makes the block's exit hand over to submitit's handler (:meth:`requeue`)."""

    NOTICE = "\npreempted: stopping after the current step, then requeued"

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.received = False
        self._submitit: Any = None
        self._guard = interrupt.InterruptGuard()

    def __enter__(self) -> "Preemption":
        self._guard.__enter__()
        self._submitit = signal.signal(self.signum, self._handler)
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, trace: Any) -> None:
        signal.signal(self.signum, self._submitit)
        self._guard.__exit__(kind, exc, trace)
        if self.received and isinstance(exc, KeyboardInterrupt):
            self.requeue()  # the stop we asked for, not a Ctrl-C: hand over to submitit

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        if not interrupt.request_stop(self.NOTICE):
            self.requeue()

    def requeue(self) -> None:
        """submitit's preemption handling: checkpoint, requeue and ``SystemExit``."""
        if callable(self._submitit):
            self._submitit(self.signum, None)


class ArrayTask(submitit.helpers.Checkpointable):
    """One array task: ``task(shard)`` runs streams until none is left to claim; requeued as it is."""

    def __init__(self, plan_path: str, slots: int, shards: int) -> None:
        self.plan_path, self.slots, self.shards = plan_path, slots, shards

    def __call__(self, shard: int) -> dict[str, Any]:
        plan: Plan = pickle.loads(Path(self.plan_path).read_bytes())  # the harness only: no JAX, no vLLM yet
        backbone = worker_backbone(plan, slots=self.slots)
        job = submitit.JobEnvironment()
        where = where_here(f"task{shard}", executor="slurm", job_id=job.job_id)
        with Preemption(getattr(signal, "SIG" + job.USR_SIG)):  # the signal submitit handles
            done = run_worker(plan, backbone, ClaimLease(plan, shard, self.shards), slots=self.slots, where=where)
        return {"shard": shard, "job_id": job.job_id, **done}


class SlurmExecutor:
    """``--executor slurm`` (see the module docstring)."""

    name = "slurm"
    in_process = False

    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config

    def check(self, plan: Plan) -> None:
        if self.config.slurm.cluster == "slurm" and shutil.which("sbatch") is None:
            raise LaunchError("--executor slurm submits with sbatch, which is not on the PATH here; run on a Slurm "
                              "login node (or --slurm-cluster local to try the array as processes on this machine)")

    def run(self, plan: Plan, *, hooks: HookFactory | None = None,
            on_resume: Callable[[int, int], None] | None = None) -> list[ExperimentResult]:
        started = time.perf_counter()
        out = plan.out_dir.absolute()
        plan = dataclasses.replace(plan, out_dir=out, backbone=None)
        with runfolder.locked(out / DRIVER_LOCK, f"{out} (the driver of a distributed run)"):
            pending, done = pending_streams(plan)
            if done and on_resume is not None:
                on_resume(done, plan.stream_tasks)
            shown = _DiskProgress(plan, hooks)
            for _ in range(MAX_ROUNDS):
                if not pending:
                    break
                jobs = self._attach(out) or self._submit(plan, pending)
                self._wait(jobs, shown)
                pending, _ = pending_streams(plan)
            if pending:
                raise ExecutorLost(f"{len(pending)} streams are still unfinished after {MAX_ROUNDS} arrays (see the "
                                   f"task logs in {out / FOLDER}); every finished task is kept: rerun the same command "
                                   "to resume")
        records = {name: read_records(out / name / runfolder.RECORDS) for name in plan.names}
        return [ExperimentResult(list(plan.streams), list(plan.names), records, [], time.perf_counter() - started)]

    def _executor(self, out: Path, tasks: int, plan: Plan) -> submitit.AutoExecutor:
        slurm = self.config.slurm
        engine = plan.config.backbone.engine
        gpus = slurm.gpus_per_task if slurm.gpus_per_task is not None else (
            (engine.tensor_parallel_size or 1) if plan.config.backbone.name == "vllm" else 0)
        executor = submitit.AutoExecutor(folder=out / FOLDER, cluster=slurm.cluster)
        parameters: dict[str, Any] = dict(timeout_min=slurm.time_min, slurm_array_parallelism=tasks,
                                          slurm_signal_delay_s=SIGNAL_DELAY_S, name=f"tokenworth-{out.name}",
                                          slurm_additional_parameters={"requeue": True, **slurm.sbatch_options()})
        if gpus:
            parameters["gpus_per_node"] = gpus
        if slurm.partition:
            parameters["slurm_partition"] = slurm.partition
        executor.update_parameters(**parameters)
        return executor

    def _submit(self, plan: Plan, pending: list[str]) -> list[Any]:
        out = plan.out_dir
        tasks = min(len(pending), self.config.workers or math.ceil(len(pending) / STREAMS_PER_TASK))
        slots = self.config.streams_per_worker or math.ceil(len(pending) / tasks)
        (out / FOLDER).mkdir(exist_ok=True)
        plan_path = out / FOLDER / "plan.pkl"
        atomic_write_bytes(plan_path, pickle.dumps(plan))
        jobs = self._executor(out, tasks, plan).map_array(ArrayTask(str(plan_path), slots, tasks), range(tasks))
        atomic_write_json(out / RECORD, {"cluster": self.config.slurm.cluster, "job_ids": [j.job_id for j in jobs],
                                         "tasks": tasks, "slots": slots, "streams": len(pending),
                                         "submitted": datetime.datetime.now(datetime.timezone.utc).isoformat(
                                             timespec="seconds")})
        note(f"submitted {'a local' if self.config.slurm.cluster == 'local' else 'a Slurm'} array of {tasks} task(s), "
             f"up to {slots} live streams each, for {len(pending)} streams: job {jobs[0].job_id.split('_')[0]} "
             f"(logs in {out / FOLDER})")
        return jobs

    def _attach(self, out: Path) -> list[Any] | None:
        """The array ``slurm.json`` records, when it is still queued or running on Slurm (None otherwise)."""
        try:
            record = json.loads((out / RECORD).read_text())
        except (OSError, ValueError):
            return None
        if record.get("cluster") != "slurm" or self.config.slurm.cluster != "slurm":
            return None  # a local array died with its driver
        jobs = [submitit.SlurmJob(folder=out / FOLDER, job_id=job_id) for job_id in record.get("job_ids", [])]
        if not jobs or all(job.done() for job in jobs):
            return None
        note(f"waiting for the array this folder's last command submitted (job {record['job_ids'][0].split('_')[0]})")
        return jobs

    def _wait(self, jobs: list[Any], shown: "_DiskProgress") -> None:
        while not all(job.done() for job in jobs):
            shown.update()
            time.sleep(POLL_S)
        shown.update()
        for job in jobs:
            try:
                job.result()
            except Exception as exc:  # noqa: BLE001 - submitit wraps the task's own error in text
                lines = [line for line in str(exc).splitlines() if line.strip()]
                note(f"array task {job.job_id} failed: {lines[-1] if lines else type(exc).__name__} "
                     f"(log: {job.paths.stderr})")


class _DiskProgress:
    """The driver's progress bars fed from the records on disk (array tasks cannot report to it): each
    poll reads the complete lines each stream's records file gained since the last one."""

    def __init__(self, plan: Plan, hooks: HookFactory | None) -> None:
        self.plan = plan
        self.hooks: dict[str, StreamHook | None] = {n: hooks(n, s) if hooks else None
                                                    for n, s in zip(plan.names, plan.streams)}
        self.offsets = {n: 0 for n in plan.names}
        for name, (next_index, _) in progress(plan.out_dir, plan.names).items():
            hook = self.hooks[name]
            if hook is not None:
                hook.resumed(self._read(name, next_index))

    def _read(self, name: str, limit: int | None = None) -> list[TaskRecord]:
        """Complete records after this stream's offset (at most ``limit``); the offset moves past them."""
        path = self.plan.out_dir / name / runfolder.RECORDS
        try:
            with open(path, "rb") as handle:
                handle.seek(self.offsets[name])
                data = handle.read()
        except FileNotFoundError:
            return []
        records = []
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n") or (limit is not None and len(records) >= limit):
                break  # a record being written, or past what the checkpoint holds
            self.offsets[name] += len(line)
            if line.strip():
                records.append(TaskRecord.from_json(json.loads(line), f"{path}"))
        return records

    def update(self) -> None:
        for name, hook in self.hooks.items():
            if hook is not None:
                for record in self._read(name):
                    hook(record)


__all__ = ["SlurmExecutor", "ArrayTask", "ClaimLease", "STREAMS_PER_TASK"]
