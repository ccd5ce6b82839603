"""The tracking files a run folder keeps, so every process (a resume, another worker) finds the same runs.

* ``<run>/tracking.json``: the folder's id (which names its MLflow experiment) and, per tracking
  URI, the id of the folder's parent run (the one holding the summary and figures);
* ``<run>/<stream>/tracking.json``: the stream's key (a tag on its MLflow run, so a run made just
  before a kill is found again) and, per tracking URI, its MLflow run id;
* ``<run>/tracking-undelivered.jsonl``: what could not be sent (:mod:`.courier`, :mod:`.replay`).

The folder's file is made once, whoever comes first (an exclusive link: never two ids); a stream's
is written only by the process that owns the stream. ``--overwrite`` deletes a stream's file with
its records (:func:`tokenworth_agent.storage.runfolder.remove_method_results`), so a redone stream gets a new run.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from tokenworth_agent.storage.checkpoint import atomic_write_json
from tokenworth_agent.storage.runfolder import TRACKING

UNDELIVERED = "tracking-undelivered.jsonl"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _create_once(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Write ``data`` to ``path`` unless it exists (atomically: a hard link fails on an existing name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        Path(tmp).unlink(missing_ok=True)
    return _read(path)


def folder_id(out: Path) -> str:
    """The run folder's tracking id (made on first use)."""
    data = _read(out / TRACKING)
    if not data.get("id"):
        data = _create_once(out / TRACKING, {"id": uuid.uuid4().hex})
    return str(data["id"])


def experiment_name(out: Path) -> str:
    """The MLflow experiment of a run folder: its name, told apart from namesakes by its id."""
    return f"tokenworth/{Path(out).name}-{folder_id(out)[:8]}"


def stream_key(folder: Path) -> str:
    """The stream's key (made, and written, before its MLflow run is made)."""
    data = _read(folder / TRACKING)
    if not data.get("key"):
        data = {**data, "key": uuid.uuid4().hex}
        atomic_write_json(folder / TRACKING, data)
    return str(data["key"])


def run_id(path: Path, uri: str) -> str | None:
    """The MLflow run id kept in ``path`` (a tracking.json) for ``uri``."""
    return (_read(path).get("mlflow") or {}).get(uri)


def keep_run_id(path: Path, uri: str, run: str) -> None:
    """Keep ``run`` as the MLflow run id for ``uri`` in ``path`` (a tracking.json), beside what it holds."""
    data = _read(path)
    data["mlflow"] = {**(data.get("mlflow") or {}), uri: run}
    atomic_write_json(path, data)


__all__ = ["UNDELIVERED", "folder_id", "experiment_name", "stream_key", "run_id", "keep_run_id"]
