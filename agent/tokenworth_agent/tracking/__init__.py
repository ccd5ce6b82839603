"""Runs in the trackers researchers already use: ``--track mlflow`` and ``--track tensorboard``.

Nothing here imports MLflow or TensorBoard until a run asks for them (``tokenworth run`` without
``--track`` never loads either). The pieces, one idea per module:

* :mod:`.settings` — what ``--track`` asks for, checked before anything is written
  (:class:`TrackSettings`; the MLflow URI: ``MLFLOW_TRACKING_URI``, else a store in the run folder);
* :mod:`.metrics` — what is tracked: a stream's parameters and tags, and one set of scalars per
  committed task, computed from the records alone;
* :mod:`.mlflow_sink`, :mod:`.tensorboard_sink` — the two backends behind one small interface: each
  knows which steps it already holds, so nothing is sent twice;
* :mod:`.child_sink` — a sink run in a child process at the lowest priority (both are, in a run):
  its import, store and writes stay off the engine's process;
* :mod:`.courier` — the background thread, fed through a bounded inbox, that sends, retries, and at
  the end writes what could not be sent to ``tracking-undelivered.jsonl``;
* :mod:`.tracker` — the engine's hooks: log a task once its record is committed;
* :mod:`.replay` — ``tokenworth track replay RUN`` and ``tokenworth track send RUN``: the records are
  the source of truth, so any run can be sent again, after the fact, idempotently.
"""

from __future__ import annotations

BACKENDS: tuple[str, ...] = ("mlflow", "tensorboard")


class TrackError(ValueError):
    """A ``--track`` setting that cannot work (an unknown backend, a bad URI); one line."""


__all__ = ["BACKENDS", "TrackError"]
