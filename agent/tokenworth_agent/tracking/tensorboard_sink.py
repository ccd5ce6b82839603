"""TensorBoard: each stream's scalars as event files in its own folder of the run folder.

``tensorboard --logdir RUN`` then lists every stream (its folder name) side by side. Events are
written with TensorBoard's own writer (``EventFileWriter``, its protobufs; no TensorFlow), one event
per task holding all of that task's scalars, stepped by the task's index. The steps a stream already
holds are read back from its event files (a torn last event, from a kill, is simply not there), so
a resumed run appends only what is missing, in a new event file beside the old ones.
"""

from __future__ import annotations

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
        """Nothing to make: the writer opens with the first events."""

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

        name = meta["name"]
        writer = self.writers.get(name)
        if writer is None:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            writer = self.writers[name] = EventFileWriter(str(self.out / name), flush_secs=5)
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


__all__ = ["TensorBoardSink"]
