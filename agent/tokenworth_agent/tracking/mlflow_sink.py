"""MLflow: one experiment per run folder, one MLflow run per stream, a parent run for the folder.

The parent run exists from the first stream opened (:meth:`MlflowSink.parent`), so a live run or sweep
is grouped while it runs (its streams' runs are its children from their creation; a worker of a
distributed run finds the same parent: the id the folder's ``tracking.json`` keeps, else the run tagged
with the folder's id). It stays ``RUNNING`` until :meth:`~MlflowSink.finish_folder`; a resumed run
continues it (set ``RUNNING`` again if an earlier call had finished it).

Used only by a courier (:mod:`.courier`): during a run from a child process (:mod:`.child_sink`), in a
replay in the replaying process. The courier calls, per stream: :meth:`MlflowSink.open`
(find or make the stream's run, log its parameters and tags), :meth:`~MlflowSink.logged` (the steps the
run already holds, per metric), :meth:`~MlflowSink.send` (metrics, stepped by task index) and
:meth:`~MlflowSink.finish`; and once per folder :meth:`~MlflowSink.finish_folder` (the summary and
figures as artifacts of the parent run, whose child runs the streams become).

A stream's run is found again, in this order: the run id its ``tracking.json`` keeps for this URI;
a run of the experiment tagged with the stream's key (made just before a kill, before its id was
kept); else it is made. So a resumed run, and a stream another worker takes over, continue the same
MLflow run. Every call is one request with no retries of MLflow's own (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
defaults to 0 and the timeout to 10 s here, unless set): the courier retries, off the engine's path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from tokenworth_agent.storage.runfolder import TRACKING
from tokenworth_agent.tracking import files

BATCH = 1000  # metrics per log_batch request (MLflow's own limit)
FOLDER_TAG = "tokenworth.folder_run"
KEY_TAG = "tokenworth.stream_key"
PARENT_TAG = "mlflow.parentRunId"  # what MLflow's UI nests child runs by


class MlflowSink:
    """See the module docstring."""

    name = "mlflow"

    def __init__(self, uri: str, out_dir: Path, artifact_location: str | None = None) -> None:
        self.target, self.out, self.artifact_location = uri, Path(out_dir), artifact_location
        self._client: Any = None
        self._experiment: str | None = None
        self.runs: dict[str, str] = {}  # stream -> run id
        self._parent: str | None = None

    # ------------------------------------------------------------------ plumbing
    @property
    def client(self) -> Any:
        if self._client is None:
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.target)
        return self._client

    def warm(self) -> None:
        """Import MLflow (the courier calls it first thing on its thread)."""
        assert self.client is not None

    def experiment(self) -> str:
        if self._experiment is None:
            from mlflow.exceptions import MlflowException

            name = files.experiment_name(self.out)
            found = self.client.get_experiment_by_name(name)
            if found is None:
                try:
                    self._experiment = self.client.create_experiment(
                        name, artifact_location=self.artifact_location,
                        tags={"tokenworth.run_folder": str(self.out)})
                except MlflowException:  # another worker made it first
                    found = self.client.get_experiment_by_name(name)
                    if found is None:
                        raise
            if found is not None:
                if found.lifecycle_stage == "deleted":
                    self.client.restore_experiment(found.experiment_id)
                self._experiment = found.experiment_id
        assert self._experiment is not None
        return self._experiment

    def _existing(self, run: str | None) -> str | None:
        from mlflow.exceptions import MlflowException

        if not run:
            return None
        try:
            found = self.client.get_run(run)
        except MlflowException as exc:
            if getattr(exc, "error_code", "") in ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND"):
                return None
            raise
        return run if found.info.lifecycle_stage == "active" else None

    def _tagged(self, tag: str, value: str) -> str | None:
        runs = self.client.search_runs([self.experiment()], filter_string=f"tags.`{tag}` = '{value}'",
                                       max_results=1, order_by=["attributes.start_time ASC"])
        return runs[0].info.run_id if runs else None

    def parent(self) -> str:
        """The folder's parent run: found (kept id, then the folder's tag) or made, once per process; RUNNING."""
        if self._parent is not None:
            return self._parent
        kept = self.out / TRACKING
        run = self._existing(files.run_id(kept, self.target))
        if run is None:
            folder = files.folder_id(self.out)
            run = self._tagged(FOLDER_TAG, folder)
            if run is None:
                made = self.client.create_run(self.experiment(), run_name=f"{self.out.name} (all streams)",
                                              tags={FOLDER_TAG: folder, "tokenworth.run_folder": str(self.out)}
                                              ).info.run_id
                run = self._tagged(FOLDER_TAG, folder) or made  # the first made, should two workers race
                if run != made:
                    self.client.delete_run(made)
            files.keep_run_id(kept, self.target, run)
        if self.client.get_run(run).info.status != "RUNNING":  # resumed after it had finished: going on
            self.client.update_run(run, status="RUNNING")
        self._parent = run
        return run

    # ------------------------------------------------------------------ a stream
    def open(self, meta: Mapping[str, Any]) -> None:
        """Find or make the stream's run, a child of the folder's parent run, and log its parameters and tags
        (the same values again are fine)."""
        from mlflow.entities import Param, RunTag

        meta = {**meta, "tags": {**meta["tags"], PARENT_TAG: self.parent()}}
        name = meta["name"]
        folder = self.out / name
        kept = folder / TRACKING
        run = self._existing(files.run_id(kept, self.target))
        if run is None:
            key = files.stream_key(folder)  # kept before the run is made: a run made before a kill is found
            run = self._tagged(KEY_TAG, key)
            if run is None:
                made = {**meta["tags"], KEY_TAG: key, "mlflow.runName": name}
                run = self.client.create_run(self.experiment(), run_name=name, tags=made).info.run_id
            files.keep_run_id(kept, self.target, run)
        self.runs[name] = run
        found = self.client.get_run(run).data
        # tags and parameters are written once: the first process that opened the run (its host, commit, pid)
        tags = [RunTag(k, str(v)) for k, v in meta["tags"].items() if k not in found.tags]
        if found.params:
            if tags:
                self.client.log_batch(run, tags=tags)
            return
        params = [Param(k, str(v)[:6000]) for k, v in meta["params"].items()]
        for start in range(0, max(1, len(params)), 100):
            self.client.log_batch(run, params=params[start:start + 100], tags=tags if start == 0 else [])

    def logged(self, meta: Mapping[str, Any]) -> dict[str, set[int]]:
        """The steps the stream's run holds, per metric."""
        run = self.runs[meta["name"]]
        keys = list(self.client.get_run(run).data.metrics)
        return {key: {m.step for m in self.client.get_metric_history(run, key)} for key in keys}

    def send(self, meta: Mapping[str, Any], rows: Sequence[tuple[int, float, Mapping[str, float]]]) -> None:
        """(step, wall time, values) rows: at most :data:`BATCH` metrics (the courier cuts them so)."""
        from mlflow.entities import Metric

        metrics = [Metric(key, float(value), int(at * 1000), int(step))
                   for step, at, values in rows for key, value in values.items()]
        self.client.log_batch(self.runs[meta["name"]], metrics=metrics)

    def finish(self, meta: Mapping[str, Any]) -> None:
        self.client.set_terminated(self.runs[meta["name"]], "FINISHED")

    # ------------------------------------------------------------------ the folder
    def finish_folder(self, artifacts: Sequence[str], streams: Sequence[str], params: Mapping[str, Any]) -> None:
        """The folder's parent run: the summary and figures as artifacts, every stream's run its child."""
        run = self.parent()
        from mlflow.entities import Param

        self.client.log_batch(run, params=[Param(k, str(v)) for k, v in params.items()])
        for path in artifacts:
            if Path(path).is_file():
                self.client.log_artifact(run, str(path))
        for stream in streams:
            child = self._existing(files.run_id(self.out / stream / TRACKING, self.target))
            if child is not None:  # a stream's run made before it had a parent (an older version) too
                self.client.set_tag(child, PARENT_TAG, run)
        self.client.set_terminated(run, "FINISHED")

    def close(self) -> None:
        """Nothing held open: every call is one request."""


__all__ = ["MlflowSink", "BATCH"]
