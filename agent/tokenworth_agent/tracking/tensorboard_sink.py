"""TensorBoard: each stream's scalars as event files in its own folder of the run folder.

``tensorboard --logdir RUN`` then lists every stream (its folder name) side by side. Events are
written with TensorBoard's own writer (``EventFileWriter``, its protobufs; no TensorFlow), one event
per task holding all of that task's scalars, stepped by the task's index. The steps a stream already
holds are read back from its event files (a torn last event, from a kill, is simply not there), so
a resumed run appends only what is missing, in a new event file beside the old ones.

Each stream's parameters (the MLflow run's: method, hyperparameters, harness options, releases, ...) are
its TensorBoard hparams (the HPARAMS tab, one session per stream folder), written once per stream with
TensorBoard's own summary (``hparams_pb``); numbers as numbers, so the tab filters and sorts by them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from tokenworth_agent.storage.runfolder import TB_EVENTS


class TensorBoardSink:
    """See the module docstring. Used only from the courier's thread."""

    name = "tensorboard"

    def __init__(self, out_dir: Path) -> None:
        self.out = Path(out_dir)
        self.target = str(self.out)
        self.writers: dict[str, Any] = {}

    def warm(self) -> None:
        """Import TensorBoard's writer (the courier calls it first thing on its thread)."""
        from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: F401

    def open(self, meta: Mapping[str, Any]) -> None:
        """The stream's hparams, unless its event files hold them already (a resumed stream)."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.plugins.hparams.metadata import SESSION_START_INFO_TAG
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb

        if SESSION_START_INFO_TAG in self.logged(meta):
            return
        values = {k: _typed(v) for k, v in meta.get("params", {}).items()}
        self._writer(meta["name"]).add_event(Event(wall_time=time.time(), step=0,
                                                   summary=hparams_pb(values, trial_id=meta["name"])))

    def _writer(self, name: str) -> Any:
        writer = self.writers.get(name)
        if writer is None:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            writer = self.writers[name] = EventFileWriter(str(self.out / name), flush_secs=5)
        return writer

    def logged(self, meta: Mapping[str, Any]) -> dict[str, set[int]]:
        from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
        from tensorboard.compat.proto.event_pb2 import Event

        found: dict[str, set[int]] = {}
        for path in sorted((self.out / meta["name"]).glob(TB_EVENTS)):
            try:
                for raw in RawEventFileLoader(str(path)).Load():
                    event = Event.FromString(raw)
                    for value in event.summary.value:
                        found.setdefault(value.tag, set()).add(int(event.step))
            except Exception:  # noqa: BLE001 - a torn tail: what was read is what is there
                continue
        return found

    def send(self, meta: Mapping[str, Any], rows: Sequence[tuple[int, float, Mapping[str, float]]]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        writer = self._writer(meta["name"])
        for step, at, values in rows:
            writer.add_event(Event(wall_time=at, step=int(step), summary=Summary(
                value=[Summary.Value(tag=key, simple_value=float(v)) for key, v in values.items()])))
        writer.flush()

    def finish(self, meta: Mapping[str, Any]) -> None:
        writer = self.writers.pop(meta["name"], None)
        if writer is not None:
            writer.close()

    def finish_folder(self, artifacts: Sequence[str], streams: Sequence[str], params: Mapping[str, Any]) -> None:
        """The summary and figures are in the run folder already."""

    def close(self) -> None:
        for name in list(self.writers):
            self.writers.pop(name).close()


def _typed(text: Any) -> bool | float | str:
    """A parameter as the hparams tab takes it: a number as a number, true/false as a bool, else text."""
    if str(text) in ("True", "False"):
        return str(text) == "True"
    try:
        number = float(text)
    except (TypeError, ValueError):
        return str(text)
    return number if number == number and abs(number) != float("inf") else str(text)


__all__ = ["TensorBoardSink"]
