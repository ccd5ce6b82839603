"""What ``--track`` asks for, checked before anything is written: :class:`TrackSettings`.

MLflow goes to ``MLFLOW_TRACKING_URI`` when it is set, else to a store inside the run folder
(``<run>/mlflow.db``, SQLite, with its artifacts in ``<run>/mlartifacts``). TensorBoard's event files
always go into the run folder, one per stream folder, so ``tensorboard --logdir RUN`` shows every
stream side by side. Only the URI's form is checked here: a server that is down at the start does
not stop the run (:mod:`tokenworth_agent.tracking.courier`).

The trackers run in child processes at ``nice`` 19 (:mod:`tokenworth_agent.tracking.child_sink`), so
they take only CPU the engine leaves idle: on a machine whose every core the run keeps busy they lag
behind it, and catch up when it ends. ``TOKENWORTH_TRACK_NICE`` (0 to 19) sets another priority, e.g.
0 to follow such a run closely at some cost to its speed."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import urlparse

from tokenworth_agent.tracking import BACKENDS, TrackError

URI_ENV = "MLFLOW_TRACKING_URI"
NICE_ENV = "TOKENWORTH_TRACK_NICE"
NICE = 19  # the lowest priority: tracking never takes CPU the engine could use
LOCAL_STORE = "mlflow.db"
LOCAL_ARTIFACTS = "mlartifacts"
# schemes an MLflow client can log to (a database URL may name its driver: postgresql+psycopg2)
SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks", "file")


def parse_backends(values: Sequence[str]) -> tuple[str, ...]:
    """``--track`` values (repeatable, or comma-separated) as backend names, in order, each once."""
    names: list[str] = []
    for value in ([values] if isinstance(values, str) else values):
        for item in str(value).split(","):
            item = item.strip().lower()
            if not item:
                continue
            if item not in BACKENDS:
                raise TrackError(f"--track {item!r}: unknown tracker; choose {' or '.join(BACKENDS)}")
            if item not in names:
                names.append(item)
    return tuple(names)


def check_uri(uri: str, what: str = URI_ENV) -> str:
    """``uri`` if an MLflow client can log to it, else a one-line :class:`TrackError` saying what would."""
    text = uri.strip()
    hint = "give http(s)://HOST:PORT of an MLflow server, or sqlite:///PATH/mlflow.db"
    try:
        parsed = urlparse(text)
        port = parsed.port  # a port that is not a number raises here
    except ValueError as exc:
        raise TrackError(f"{what} {uri!r} is not a URI ({exc}); {hint}") from None
    scheme = parsed.scheme.split("+", 1)[0].lower()
    if not scheme:
        raise TrackError(f"{what} {uri!r} has no scheme; {hint}")
    if scheme not in SCHEMES:
        raise TrackError(f"{what} {uri!r}: MLflow cannot log to {scheme}:// URIs; {hint}")
    if scheme in ("http", "https") and not parsed.hostname:
        raise TrackError(f"{what} {uri!r} names no host; {hint}")
    if scheme in ("http", "https") and port == 0:
        raise TrackError(f"{what} {uri!r}: port 0 is no server's port; {hint}")
    if scheme == "sqlite" and not parsed.path.strip("/"):
        raise TrackError(f"{what} {uri!r} names no database file; {hint}")
    return text


@dataclasses.dataclass(frozen=True)
class TrackSettings:
    """A run's trackers: which, where, and what every stream's run is tagged with."""

    backends: tuple[str, ...]
    out_dir: Path  # absolute: workers on other nodes see the same folder
    mlflow_uri: str | None  # None: MLflow not asked for
    local_store: bool  # the MLflow store is the run folder's own
    run: Mapping[str, Any]  # backbone, model, config hash: the same for every stream
    nice: int = NICE  # the trackers' child processes' niceness (workers take the driver's)
    # what config.json says of each stream's harness options and releases (metrics.stream_params reads it)
    streams: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def artifact_location(self) -> str | None:
        """Where a new experiment keeps its artifacts: the run folder for the local store, else the server's."""
        return (self.out_dir / LOCAL_ARTIFACTS).as_uri() if self.local_store else None

    def describe(self) -> str:
        parts = [f"mlflow -> {self.mlflow_uri}"] if self.mlflow_uri else []
        if "tensorboard" in self.backends:
            parts.append(f"tensorboard -> {self.out_dir} (tensorboard --logdir {self.out_dir})")
        return "tracking: " + "; ".join(parts)


def config_hash(settings: Mapping[str, Any]) -> str:
    """16 hex digits of the run's ``config.json`` settings, without the connection (which may move) and the
    per-stream entries (each stream's releases are parameters of their own)."""
    from tokenworth_agent.storage.runfolder import PER_STREAM_SETTINGS

    identity = {k: v for k, v in settings.items() if k != "connection" and k not in PER_STREAM_SETTINGS}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def track_settings(backends: Sequence[str], out_dir: Path, *, settings: Mapping[str, Any], backbone: str,
                   model: str | None, environ: Mapping[str, str] | None = None) -> TrackSettings | None:
    """The run's :class:`TrackSettings` (None without ``--track``); a bad value is a :class:`TrackError`."""
    names = parse_backends(backends)
    if not names:
        return None
    for name in names:  # looked up, not imported: only the trackers' child processes import them
        if importlib.util.find_spec(name) is None:
            raise TrackError(f"--track {name} needs {'MLflow' if name == 'mlflow' else 'TensorBoard'}, which is not "
                             "installed: pip install 'tokenworth-agent[track]'")
    env = os.environ if environ is None else environ
    out = Path(out_dir).absolute()
    uri, local = None, False
    if "mlflow" in names:
        given = env.get(URI_ENV, "").strip()
        if given:
            uri = check_uri(given)
        else:
            uri, local = local_store_uri(out), True
    run = {"backbone": backbone, "model": model or "", "config_hash": config_hash(settings)}
    streams = {k: settings[k] for k in ("env", "harness", "releases") if k in settings}
    return TrackSettings(names, out, uri, local, run, parse_nice(env.get(NICE_ENV, "")), streams)


def parse_nice(text: str) -> int:
    """``TOKENWORTH_TRACK_NICE``: the trackers' niceness, 0 to 19 (empty: 19)."""
    if not text.strip():
        return NICE
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 19:
        raise TrackError(f"{NICE_ENV}={text!r}: give a niceness from 0 (the engine's priority) to 19 (the lowest)")
    return value


def local_store_uri(out: Path) -> str:
    """The MLflow store inside a run folder."""
    return f"sqlite:///{Path(out).absolute() / LOCAL_STORE}"


__all__ = ["TrackSettings", "track_settings", "parse_backends", "check_uri", "config_hash", "local_store_uri",
           "parse_nice", "URI_ENV", "NICE_ENV", "LOCAL_STORE", "LOCAL_ARTIFACTS"]
