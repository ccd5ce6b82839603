"""``--executor ray``: the plan's streams on a Ray cluster, one worker actor per GPU (or per CPU).

The driver (this process, on a node of the cluster) has planned the run and prepared the folder;
:class:`RayExecutor` then:

1. ``check`` (before anything is written): joins the cluster or refuses it, surveys every node
   (Ray, Python and project versions), and places the workers (:mod:`.ray_cluster`);
2. ``run``: holds ``<out>/.driver.lock`` (one driver per run folder), checks every node sees the
   folder and its locks, and queues the unfinished streams, longest first, in a
   :class:`LeaseActor` on its own node (:class:`~.leases.StreamLeases`: fair shares, a start
   barrier). Each :class:`StreamWorker` (``num_gpus`` = the engine's GPUs, ``max_restarts=-1``)
   applies its GPU's split and loads the backbone in its first ``run`` call, says hello, and runs
   streams until the queue is empty (:func:`~.worker.run_worker`). Progress comes back as events
   the driver feeds to its progress bars.

Faults. A worker process that dies (``kill -9``, a crash, its node gone) fails its ``run`` call:
the driver gives its streams back to the front of the queue, where the others take them (their
fair share grows), and calls ``run`` again, which Ray delivers once it has restarted the actor
(on any node with room). Every stream resumes from its own checkpoint, whoever takes it, so the
records equal an uninterrupted run's. Nothing is detached: if the driver dies, Ray ends its
actors and the kernel drops their locks; if the head dies, the driver stops with one line. Either
way the same command resumes everything. A worker's own failure (a damaged checkpoint, a backbone
that cannot be reached) stops the run with that failure's one line.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from tokenworth_agent.experiment.config import ExecutorConfig
from tokenworth_agent.experiment.distributed.leases import StreamLeases
from tokenworth_agent.experiment.distributed.ray_cluster import (Node, Placement, check_nodes, check_plugins, check_storage, connect, pinned,
                                                      placement, survey)
from tokenworth_agent.experiment.distributed.worker import (forward_progress, pending_streams, run_worker, where_here,
                                                 worker_backbone)
from tokenworth_agent.experiment.engine import ExperimentResult, HookFactory
from tokenworth_agent.experiment.plan import ExecutorLost, Plan, note
from tokenworth_agent.results.record import read_records
from tokenworth_agent.storage import runfolder

DRIVER_LOCK = ".driver.lock"
POLL_S = 0.5  # the driver's loop: progress, deaths, completion
RETRY_S = 2.0  # a dead worker's next run call, after this long (Ray answers at once while it restarts)
HEAD_TIMEOUT_S = 30.0  # the queue (on the driver's node) silent this long: the cluster is gone
STALL_S = 1800.0  # no task finished anywhere for this long, with streams pending: stop (rerun to resume)


@ray.remote(num_cpus=0, max_restarts=0)
class LeaseActor:
    """The driver's :class:`StreamLeases` as an actor, and the workers' progress events."""

    def __init__(self, names: list[str], workers: int) -> None:
        self.leases = StreamLeases(names, workers=workers)
        self.events: list[tuple[str, str, Any]] = []

    def hello(self, worker: str) -> None:
        self.leases.hello(worker)

    def take(self, worker: str, n: int) -> list[str]:
        return self.leases.take(worker, n)

    def finished(self, worker: str, name: str) -> None:
        self.leases.finished(worker, name)
        self.events.append(("finished", name, worker))

    def defer(self, worker: str, name: str) -> None:
        self.leases.defer(worker, name)

    def give_back(self, worker: str, name: str) -> None:
        self.leases.give_back(worker, name)

    def release(self, worker: str) -> list[str]:
        return self.leases.release(worker)

    def status(self) -> dict[str, Any]:
        return self.leases.status()

    def report(self, event: str, name: str, payload: Any) -> None:
        self.events.append((event, name, payload))

    def drain(self) -> list[tuple[str, str, Any]]:
        events, self.events = self.events, []
        return events


class RayLease:
    """A worker's side of the :class:`LeaseActor` (calls from one worker run in the order it made them)."""

    def __init__(self, actor: Any, worker: str) -> None:
        self.actor, self.worker = actor, worker

    def take(self, n: int) -> list[str]:
        return ray.get(self.actor.take.remote(self.worker, n))

    def finished(self, name: str) -> None:
        ray.get(self.actor.finished.remote(self.worker, name))

    def defer(self, name: str) -> None:
        self.actor.defer.remote(self.worker, name)

    def give_back(self, name: str) -> None:
        self.actor.give_back.remote(self.worker, name)

    def complete(self) -> bool:
        return bool(ray.get(self.actor.status.remote())["complete"])


@ray.remote(max_restarts=-1, max_task_retries=0)
class StreamWorker:
    """One worker: its backbone (loaded in the first ``run`` of each process) and its streams.

    The constructor takes plain values only (a restarted actor gets them again from Ray's own
    record). The plan comes with each ``run`` call as an object reference inside a list (Ray would
    resolve a bare one before the call), so nothing of the harness is unpickled before
    :func:`~.worker.worker_backbone` has applied the GPU split."""

    def __init__(self, key: str, slots: int) -> None:
        self.key, self.slots = key, slots
        self.plan: Plan | None = None
        self.backbone: Any = None

    def run(self, leases: Any, plan_box: list[Any]) -> dict[str, Any]:
        if self.backbone is None:
            self.plan = ray.get(plan_box[0])
            self.backbone = worker_backbone(self.plan, slots=self.slots)
        assert self.plan is not None
        where = where_here(self.key, executor="ray", node_id=ray.get_runtime_context().get_node_id())
        ray.get(leases.hello.remote(self.key))
        return run_worker(self.plan, self.backbone, RayLease(leases, self.key), slots=self.slots, where=where,
                          report=lambda event, name, payload: leases.report.remote(event, name, payload))


class RayExecutor:
    """``--executor ray`` (see the module docstring)."""

    name = "ray"
    in_process = False

    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config
        self.where = ""
        self.nodes: list[Node] = []
        self.placement: Placement | None = None

    def check(self, plan: Plan) -> None:
        """Join the cluster and refuse what it cannot run; nothing is written."""
        self.where = connect(self.config.ray_address)
        try:
            self.nodes = survey()
            check_nodes(self.nodes)
            check_plugins(self.nodes, plan)
            self.placement = placement(self.nodes, plan, self.config)
        except BaseException:
            ray.shutdown()
            raise

    def run(self, plan: Plan, *, hooks: HookFactory | None = None,
            on_resume: Callable[[int, int], None] | None = None) -> list[ExperimentResult]:
        started = time.perf_counter()
        out = plan.out_dir.absolute()
        plan = dataclasses.replace(plan, out_dir=out, backbone=None)  # workers make their own
        try:
            with runfolder.locked(out / DRIVER_LOCK, f"{out} (the driver of a distributed run)"):
                check_storage(out, out / DRIVER_LOCK, self.nodes)
                batch_sizes = self._drive(plan, hooks, on_resume)
        except RayError as exc:  # Ray's own failure anywhere on the way (a worker's error arrives as its cause)
            raise ExecutorLost(f"the Ray cluster failed ({type(exc).__name__}: {_first_line(exc)}); every finished "
                               "task is kept: rerun the same command on a healthy cluster to resume") from None
        finally:
            ray.shutdown()
        records = {name: read_records(out / name / runfolder.RECORDS) for name in plan.names}
        return [ExperimentResult(list(plan.streams), list(plan.names), records, batch_sizes,
                                 time.perf_counter() - started)]

    def _drive(self, plan: Plan, hooks: HookFactory | None, on_resume: Callable[[int, int], None] | None) -> list[int]:
        assert self.placement is not None
        pending, done = pending_streams(plan)
        if done and on_resume is not None:
            on_resume(done, plan.stream_tasks)
        if not pending:
            return []
        place = dataclasses.replace(self.placement, workers=min(self.placement.workers, len(pending)))
        slots = self.config.streams_per_worker or math.ceil(len(pending) / place.workers)
        note(f"{self.where}: {len(self.nodes)} node(s), {place.describe()}, up to {slots} live streams each; "
             f"{len(pending)} streams to run")
        plan_ref = ray.put(plan)
        leases = LeaseActor.options(scheduling_strategy=pinned(ray.get_runtime_context().get_node_id())).remote(
            pending, place.workers)
        options = dict(num_cpus=place.num_cpus, num_gpus=place.num_gpus)
        actors = {f"w{i}": StreamWorker.options(**options).remote(f"w{i}", slots) for i in range(place.workers)}
        deliver = forward_progress(plan, hooks)
        calls = {actors[key].run.remote(leases, [plan_ref]): key for key in actors}
        retry_at: dict[str, float] = {}
        batch_sizes: list[int] = []
        last_done = time.monotonic()
        try:
            while True:
                status = self._status(leases)
                for event, name, payload in self._events(leases):
                    last_done = time.monotonic()
                    deliver(event, name, payload)
                if status["complete"]:
                    break
                if time.monotonic() - last_done > STALL_S:
                    raise ExecutorLost(f"no task finished on the cluster for {STALL_S / 60:.0f} minutes with "
                                       f"{status['pending']} streams pending (no node can host a worker?); every "
                                       "finished task is kept: rerun the same command to resume")
                ready, _ = ray.wait(list(calls), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    key = calls.pop(ref)
                    try:
                        batch_sizes += ray.get(ref)["batch_sizes"]
                    except RayTaskError as exc:
                        cause = exc.cause
                        if isinstance(cause, Exception) and not isinstance(cause, RayError):
                            note(f"worker {key} failed:")
                            raise cause from None
                        retry_at[key] = self._lost(leases, key, cause)
                    except RayActorError as exc:
                        retry_at[key] = self._lost(leases, key, exc)
                for key, at in list(retry_at.items()):
                    if time.monotonic() >= at:
                        del retry_at[key]
                        calls[actors[key].run.remote(leases, [plan_ref])] = key
            finished, _ = ray.wait(list(calls), num_returns=len(calls), timeout=HEAD_TIMEOUT_S)
            for ref in finished:  # the workers return once the queue is complete
                try:
                    batch_sizes += ray.get(ref)["batch_sizes"]
                except RayError:
                    pass  # a worker that died after its last stream: nothing of it is missing
            for event, name, payload in self._events(leases):
                deliver(event, name, payload)
        finally:
            for handle in [*actors.values(), leases]:
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:  # noqa: BLE001 - the cluster may be gone already
                    pass
        return batch_sizes

    @staticmethod
    def _ask(call: Any) -> Any:
        """The queue's answer; a queue that cannot answer (it lives on this driver's node) means the cluster is gone."""
        try:
            return ray.get(call, timeout=HEAD_TIMEOUT_S)
        except (GetTimeoutError, RayError) as exc:
            raise ExecutorLost(f"lost the Ray cluster (the head, or this driver's node, is gone: "
                               f"{type(exc).__name__}); every finished task is kept: rerun the same command on a "
                               "healthy cluster to resume") from None

    def _status(self, leases: Any) -> dict[str, Any]:
        return self._ask(leases.status.remote())

    @staticmethod
    def _events(leases: Any) -> list[tuple[str, str, Any]]:
        try:
            return ray.get(leases.drain.remote(), timeout=HEAD_TIMEOUT_S)
        except (GetTimeoutError, RayError):
            return []  # the next status call says whether the cluster is gone

    def _lost(self, leases: Any, key: str, why: BaseException) -> float:
        """A worker died: its streams go back to the queue; when to call it again (Ray restarts it)."""
        back = self._ask(leases.release.remote(key))
        note(f"worker {key} died ({type(why).__name__}: {_first_line(why)}); "
             f"{len(back)} of its streams go back to the queue")
        return time.monotonic() + RETRY_S


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:160]


__all__ = ["RayExecutor", "StreamWorker", "LeaseActor", "RayLease", "DRIVER_LOCK"]
