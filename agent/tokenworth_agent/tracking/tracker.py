"""The engine's side: a :class:`Tracker` makes each stream's hook, which logs a task once it is committed.

The engine calls a stream's hook with a task's record only after the record and the checkpoint
that covers it are written (:meth:`tokenworth_agent.experiment.engine._Stream.commit`), so what is logged is
what a resume keeps: a task redone after a kill was never logged the first time, and is logged once,
with its final values. On opening a stream the engine hands the hook the records of earlier calls;
the hook queues them all, and the courier sends only the steps each tracker does not hold yet (asked
once per stream), so a resumed run fills exactly the steps a kill left out.

The hook does little on the engine's thread: it computes the task's scalars (:class:`~.metrics.Scalars`)
and appends one item to the courier's inbox (:mod:`.courier`). Parameters are computed on the
courier's thread; each backend runs in a child process (:mod:`.child_sink`).
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from tokenworth_agent.results.record import TaskRecord, read_records
from tokenworth_agent.storage import runfolder
from tokenworth_agent.tracking.courier import Courier, Row
from tokenworth_agent.tracking.metrics import Scalars, stream_meta
from tokenworth_agent.tracking.settings import TrackSettings

REPLAY = "tokenworth track replay"


def make_sinks(settings: TrackSettings) -> list[Any]:
    """The sinks ``settings`` asks for, each in a child process (:mod:`.child_sink`): neither library is
    imported in the engine's process, and neither's writing competes with it for the GIL."""
    from tokenworth_agent.tracking.child_sink import ChildSink

    sinks: list[Any] = []
    if settings.mlflow_uri:
        sinks.append(ChildSink("tokenworth_agent.tracking.mlflow_sink:MlflowSink", "mlflow", settings.mlflow_uri,
                               settings.mlflow_uri, settings.out_dir, settings.artifact_location, nice=settings.nice))
    if "tensorboard" in settings.backends:
        sinks.append(ChildSink("tokenworth_agent.tracking.tensorboard_sink:TensorBoardSink", "tensorboard",
                               str(settings.out_dir), settings.out_dir, nice=settings.nice))
    return sinks


class StreamTrack:
    """One stream's hook (the engine's ``StreamHook``: ``resumed``, ``started``, ``__call__``)."""

    def __init__(self, tracker: "Tracker", name: str, tasks: int) -> None:
        self.tracker, self.name, self.tasks = tracker, name, tasks
        self.scalars = Scalars(tasks, simulated=tracker.simulated)

    def resumed(self, records: list[TaskRecord]) -> None:
        now = time.time()
        rows = [(r.index, now, self.scalars(r)) for r in records]
        self.tracker.courier.put(("rows", self.name, rows, len(records) >= self.tasks))

    def started(self, next_index: int) -> None:
        """Nothing more: :meth:`resumed` came first and opened the stream's runs."""

    def __call__(self, record: TaskRecord) -> None:
        row = (record.index, time.time(), self.scalars(record))
        self.tracker.courier.put(("rows", self.name, [row], record.index + 1 >= self.tasks))


class Tracker:
    """A run's trackers in one process (the driver's, or one worker's): hooks, the courier, the end."""

    def __init__(self, settings: TrackSettings, tasks: Mapping[str, int], specs: Mapping[str, Any], *,
                 courier: Courier | None = None, **courier_options: Any) -> None:
        self.settings, self.tasks, self.specs = settings, dict(tasks), dict(specs)
        self.simulated = settings.run.get("backbone") == "sim"
        self.courier = courier or Courier(make_sinks(settings), settings.out_dir, make_meta=self.meta,
                                          rescan=self.rescan, **courier_options)
        self.closed = False

    def hooks(self, name: str, spec: Any) -> StreamTrack:
        """The engine's hook factory: ``hooks(stream name, spec)``."""
        self.specs[name] = spec
        return StreamTrack(self, name, self.tasks[spec.env])

    def meta(self, name: str) -> dict[str, Any]:
        return stream_meta(name, self.specs[name].describe(), self.settings.run, self.settings.out_dir,
                           self.settings.streams)

    def rescan(self, name: str) -> tuple[list[Row], bool]:
        """A stream's rows from its records (what the full inbox refused, or a stream run elsewhere)."""
        spec = self.specs[name]
        records = read_records(self.settings.out_dir / name / runfolder.RECORDS)
        scalars, now = Scalars(self.tasks[spec.env], simulated=self.simulated), time.time()
        return [(r.index, now, scalars(r)) for r in records], len(records) >= self.tasks[spec.env]

    def sync(self, names: Sequence[str]) -> None:
        """Queue every record of these streams (the driver of a distributed run, at the end: the workers
        logged them; only a step some tracker lacks is sent)."""
        for name in names:
            rows, finished = self.rescan(name)
            self._put(("rows", name, rows, finished))

    def finish_folder(self, artifacts: Sequence[Any], streams: Sequence[str]) -> None:
        """The summary and figures, as the parent run's artifacts (MLflow), once the driver wrote them."""
        params = {"run_folder": str(self.settings.out_dir), **{k: v for k, v in self.settings.run.items() if v}}
        self._put(("folder", [str(a) for a in artifacts], list(streams), params))

    def _put(self, item: tuple[Any, ...]) -> None:
        self.courier.put(item, bounded=False)  # rare, end-of-run items: never refused

    def close(self) -> str | None:
        """Deliver or write down what is left; the one line to print when something could not be sent."""
        if self.closed:
            return None
        self.closed = True
        self.courier.close()
        return self.courier.report(f"{REPLAY} {self.settings.out_dir}")


__all__ = ["Tracker", "StreamTrack", "make_sinks", "REPLAY"]
