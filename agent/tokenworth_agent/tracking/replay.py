"""After the fact: ``tokenworth track replay RUN`` and ``tokenworth track send RUN --to URI``.

* :func:`replay` sends ``<run>/tracking-undelivered.jsonl`` (what a run could not send: its streams'
  parameters and rows, and the folder's summary) to where it was meant to go. What still cannot be
  sent is written back to the file, so the command can be run again.
* :func:`send` sends a whole run from its records (the source of truth) to an MLflow tracking URI
  (or writes its TensorBoard events): a finished run, a run made without ``--track``, a copy for
  another server. Both go through the courier, and each tracker is first asked what it holds, so
  running either twice sends nothing twice.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.results.record import read_records
from tokenworth_agent.storage import runfolder
from tokenworth_agent.tracking import TrackError
from tokenworth_agent.tracking.courier import Courier
from tokenworth_agent.tracking.files import UNDELIVERED
from tokenworth_agent.tracking.metrics import Scalars, stream_meta
from tokenworth_agent.tracking.settings import (LOCAL_ARTIFACTS, URI_ENV, check_uri, config_hash, local_store_uri,
                                                parse_backends)
from tokenworth_agent.tracking.tracker import REPLAY


@dataclasses.dataclass(frozen=True)
class Sent:
    """What a replay or send did: task steps sent, streams, and the line about what is left (None: nothing)."""

    steps: int
    streams: int
    left: str | None


def _run_folder(run: Path) -> dict[str, Any]:
    try:
        config = runfolder.read_config(run) if run.is_dir() else None
    except runfolder.RunFolderError as exc:
        raise TrackError(str(exc)) from None
    if config is None:
        raise TrackError(f"{run} is not a run folder (no {runfolder.CONFIG}); name the folder a run wrote")
    return config


def _sink(backend: str, target: str, run: Path) -> Any:
    if backend == "mlflow":
        from tokenworth_agent.tracking.mlflow_sink import MlflowSink

        local = target == local_store_uri(run)
        return MlflowSink(target, run, (run / LOCAL_ARTIFACTS).as_uri() if local else None)
    if backend == "tensorboard":
        from tokenworth_agent.tracking.tensorboard_sink import TensorBoardSink

        return TensorBoardSink(Path(target))
    raise TrackError(f"{UNDELIVERED} names an unknown tracker {backend!r}")


def replay(run: Path, *, close_wait_s: float = 60.0) -> Sent:
    """Send ``run``'s undelivered file (see the module docstring)."""
    run = Path(run).absolute()
    _run_folder(run)
    path = run / UNDELIVERED
    if not path.is_file():
        return Sent(0, 0, None)
    lines = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text.strip():
            try:
                lines.append(json.loads(text))
            except ValueError:
                raise TrackError(f"{path}:{number} is not JSON; it was cut short or edited") from None
    aside = path.with_name(path.name + ".replaying")
    os.replace(path, aside)  # what is still left is written to a new file
    steps, streams, left = 0, set(), []
    for backend, target in dict.fromkeys((x["backend"], x["target"]) for x in lines):
        courier = Courier([_sink(backend, target, run)], run, thread=False, close_wait_s=close_wait_s)
        for line in lines:
            if (line["backend"], line["target"]) != (backend, target):
                continue
            if "folder" in line:
                courier.take(("folder", *line["folder"]))
                continue
            if line.get("meta"):
                courier.take(("meta", line["stream"], line["meta"]))
            courier.take(("rows", line["stream"], [tuple(r) for r in line["rows"]], line.get("finished", False)))
            streams.add(line["stream"])
        courier.close()
        steps += courier.sent_steps
        if courier.report(""):
            left.append(courier.report(f"{REPLAY} {run}"))
    aside.unlink()
    return Sent(steps, len(streams), "; ".join(x for x in left if x) or None)


def _tasks(config: dict[str, Any], env: str) -> int:
    tasks = config.get("tasks")
    return int(tasks.get(env, 0)) if isinstance(tasks, dict) else int(tasks or 0)


def send(run: Path, *, to: str | None = None, backends: Sequence[str] = ("mlflow",),
         close_wait_s: float = 60.0) -> Sent:
    """Send every stream of ``run`` from its records (see the module docstring)."""
    run = Path(run).absolute()
    names = parse_backends(backends) or ("mlflow",)
    config = _run_folder(run)
    sinks: list[Any] = []
    if "mlflow" in names:
        uri = to or os.environ.get(URI_ENV, "").strip()
        if not uri:
            raise TrackError(f"name the MLflow server: --to URI (or set {URI_ENV})")
        sinks.append(_sink("mlflow", check_uri(uri, "--to"), run))
    if "tensorboard" in names:
        sinks.append(_sink("tensorboard", str(run), run))
    info = {"backbone": config.get("backbone", ""), "model": str((config.get("backbone_options") or {}).get("model")
                                                                   or ""), "config_hash": config_hash(config)}
    courier = Courier(sinks, run, thread=False, close_wait_s=close_wait_s)
    streams = runfolder.streams_in(run)
    for name in streams:
        records = read_records(run / name / runfolder.RECORDS)
        if not records:
            continue
        first = records[0]
        describe = first.stream or {"env": first.env, "method": first.method, "seed": config.get("seed", 0),
                                    "budget": {}, "hparams": {}}
        tasks = _tasks(config, first.env) or len(records)
        scalars = Scalars(tasks, simulated=info["backbone"] == "sim")
        courier.take(("meta", name, stream_meta(name, describe, info, run, config)))
        now = time.time()
        courier.take(("rows", name, [(r.index, now, scalars(r)) for r in records],
                      len(records) >= tasks))
    summary = [run / n for n in (*runfolder.SUMMARY_FILES, "budget_levels.png")]
    courier.take(("folder", [str(p) for p in summary if p.is_file()], streams, {"run_folder": str(run), **info}))
    courier.close()
    return Sent(courier.sent_steps, len(streams), courier.report(f"{REPLAY} {run}"))


__all__ = ["replay", "send", "Sent"]
