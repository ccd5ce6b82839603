"""The run folder: what makes a folder one, who may write it, and what ``--overwrite`` deletes.

Layout (everything here is written by tokenworth; nothing else is ever deleted)::

    <out>/config.json                 the run's settings (env, backbone, seed, limit, budget, ...)
    <out>/.lock                       held briefly while config/summary are checked or written
    <out>/<method>/records.jsonl      one JSON record per task
    <out>/<method>/checkpoint.pkl     policy state + JSONL offset + next task index
    <out>/<method>/checkpoint.durable.pkl  its last fsynced copy (agent/tokenworth_agent/storage/checkpoint.py)
    <out>/<method>/.lock              held for as long as a process runs that method
    <out>/<method>/node.json          where it ran, when a distributed executor ran it (the node id
                                      and hostname of the latest attempt, and every attempt)
    <out>/<method>/tracking.json, events.out.tfevents.*
                                      with --track: its MLflow run ids, its TensorBoard events
    <out>/tracking.json, mlflow.db, mlartifacts/, tracking-undelivered.jsonl
                                      with --track (agent/tokenworth_agent/tracking)
    <out>/summary.md|json, cumulative_sr.png, difference_along_stream.png
                                      (+ budget_levels.png for a grid over budget levels)

``<method>`` above is a *stream* name: an experiment with several envs, seeds or grid points
nests it as ``<env>/seed<k>/<method>@<point>`` (agent/tokenworth_agent/experiment/streams.py); every rule below
applies per stream folder.

Rules:

* **Run folder.** A folder is a run folder when it holds a ``config.json`` written by
  tokenworth (a JSON object with ``env``, ``backbone`` and ``seed``). A folder that does not
  exist or is empty becomes one, and so does one that holds only what another run makes before
  its config (its locks, the config's temporary file): two runs may start into one new folder
  together. Any other folder is refused: tokenworth never writes into, and never deletes from, a
  folder it did not create.
* **Locks.** Each method's results are guarded by an exclusive ``flock`` on
  ``<method>/.lock``, taken for every named method before any task runs; a second process that
  asks for a method in use fails at once with the holder's pid, host, command and start time.
  Different methods may run in parallel into one folder. The kernel drops a lock when its
  process dies (even by ``kill -9``), so there are no stale locks. In a read-only folder no
  lock can be created; nothing can be written there either, so reading goes on unlocked.
* **Settings.** A run whose settings differ from ``config.json`` is refused while any method
  holds results; when none does (every earlier attempt failed before its first task, e.g.
  with a wrong server URL), the new settings simply replace the old ones.
* **Per-stream settings** (``releases``: the distribution and version of each stream's method,
  benchmark and backbone; ``parameters``: the values of its method's declared parameters, only for
  methods that declare any) are kept by stream name and merged, never compared as a whole; a stream
  with results is checked against its own entry (agent/tokenworth_agent/experiment/releases.py, and
  for the parameters its checkpoint's identity).
* **Overwrite** deletes only the named methods' files (records, checkpoint, temporary
  checkpoint files) and the summary; other methods' results are kept. If other methods hold
  results made with different settings, the overwrite is refused (they would be mixed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from tokenworth_agent.storage.checkpoint import atomic_write_json, durable_path

CONFIG = "config.json"
LOCK = ".lock"
RECORDS = "records.jsonl"
CHECKPOINT = "checkpoint.pkl"
NODE = "node.json"  # written by agent/tokenworth_agent/experiment/distributed; not a result (has_results ignores it)
TRACKING = "tracking.json"  # --track: the stream's MLflow run ids (agent/tokenworth_agent/tracking); not a result
TB_EVENTS = "events.out.tfevents.*"  # --track tensorboard: a stream's event files
SUMMARY_FILES = ("summary.md", "summary.json", "cumulative_sr.png", "difference_along_stream.png")
REQUIRED_CONFIG_KEYS = frozenset({"env", "backbone", "seed"})


class RunFolderError(RuntimeError):
    """The folder cannot be used as asked; the message says what to do instead."""


class FolderLocked(RunFolderError):
    """Another process holds the lock."""


# ------------------------------------------------------------------------- locks
@dataclasses.dataclass
class _Held:
    fd: int
    depth: int = 1


_HELD: dict[Path, _Held] = {}


def holder_info() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv),
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def describe_holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text())
        return f"pid {info['pid']} on {info['host']}, started {info['started']}: {info['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its details are unreadable)"


def _open_lock(path: Path) -> int | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
    try:  # read-only folder: an existing lock file can still be locked for reading
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None  # nothing can be written here, by us or anyone else


@contextlib.contextmanager
def locked(path: str | os.PathLike[str], what: str, *, wait_s: float = 0.0) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (re-entrant within this process).

    ``wait_s`` > 0 waits that long for a busy lock (for short critical sections); 0 fails at once.
    """
    target = Path(path).absolute()
    held = _HELD.get(target)
    if held is not None:
        held.depth += 1
        try:
            yield
        finally:
            held.depth -= 1
        return
    fd = _open_lock(target)
    if fd is None:
        yield
        return
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
        os.close(fd)
        raise FolderLocked(f"{what} is in use by {describe_holder(target)}; wait for it to finish, "
                           "stop it, or pass another --out") from None
    try:
        with contextlib.suppress(OSError):  # read-only descriptor: the lock holds, the note is skipped
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder_info()).encode(), 0)
        _HELD[target] = _Held(fd)
        yield
    finally:
        _HELD.pop(target, None)
        os.close(fd)  # releases the flock


def method_lock(out: Path, method: str) -> tuple[Path, str]:
    return out / method / LOCK, f"{out / method} ({method})"


def folder_lock(out: Path) -> tuple[Path, str]:
    return out / LOCK, str(out)


FOLDER_LOCK_WAIT_S = 60.0  # the folder lock guards only config and summary writes: wait for it


# ------------------------------------------------------------------------- folder state
def read_config(out: Path) -> dict[str, Any] | None:
    """``config.json`` as a dict, ``None`` when absent; garbage raises :class:`RunFolderError`."""
    path = out / CONFIG
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFolderError(f"cannot read {path} ({exc})") from exc
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunFolderError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                             "restore it or move the folder aside and pass another --out") from exc
    if not isinstance(config, dict) or not REQUIRED_CONFIG_KEYS <= set(config):
        raise RunFolderError(f"{path} is not a tokenworth run config (it lacks {sorted(REQUIRED_CONFIG_KEYS)}); "
                             "pass another --out")
    return config


def _before_config(path: Path) -> bool:
    """What a run makes before its config exists: a lock file (:func:`locked`), the config's own temporary
    file while another run writes it atomically (or after a kill cut that write), or a folder of these.

    The check runs before any lock is taken, so a run started beside another into the same new folder
    can see that folder half made; it must not take it for someone else's."""
    if path.name == LOCK:
        return True
    if path.name.startswith(f".{CONFIG}.") and path.name.endswith(".tmp"):
        return not path.is_symlink() and (path.is_file() or not path.exists())  # gone: renamed to the config
    return path.is_dir() and not path.is_symlink() and all(_before_config(c) for c in path.iterdir())


def check_run_folder(out: Path) -> dict[str, Any] | None:
    """The folder's config, or ``None`` for a new/empty folder; refuses anything else, naming ``--out``.

    Writes nothing, so the CLI calls it before it creates any folder, lock or config."""
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out} is a file, not a folder; pass --out a new folder or an earlier run's folder")
    if not out.exists():
        parent = next(p for p in out.absolute().parents if p.exists())
        if not parent.is_dir():
            raise RunFolderError(f"--out {out}: {parent} is a file, so no folder can be made under it; pass another --out")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise RunFolderError(f"--out {out}: cannot create it, {parent} is not writable; pass --out a folder you "
                                 "can write to")
    config = read_config(out) if out.is_dir() else None
    if config is None and out.is_dir() and not all(_before_config(p) for p in out.iterdir()):
        config = read_config(out)  # another run may have finished writing it since the first look
    if config is None and out.is_dir() and not all(_before_config(p) for p in out.iterdir()):
        raise RunFolderError(f"--out {out} holds files but is not a tokenworth run folder (no {CONFIG}); tokenworth "
                             "writes only into new or empty folders and its own run folders: pass --out a new folder")
    return config


def has_results(out: Path, method: str) -> bool:
    """Whether ``method`` ran at least one task here (a checkpoint or a non-empty record file)."""
    folder = out / method
    records = folder / RECORDS
    return (folder / CHECKPOINT).exists() or durable_path(folder / CHECKPOINT).exists() or (
        records.exists() and records.stat().st_size > 0)


def methods_with_results(out: Path, methods: Sequence[str]) -> list[str]:
    return [m for m in methods if has_results(out, m)]


def streams_in(out: Path, depth: int = 3) -> list[str]:
    """Names (relative folders) of every stream folder under ``out`` that holds results, up to ``depth`` deep."""
    found: list[str] = []
    if not out.is_dir():
        return found
    for folder in sorted(p for p in out.rglob("*") if p.is_dir() and len(p.relative_to(out).parts) <= depth):
        name = folder.relative_to(out).as_posix()
        if has_results(out, name):
            found.append(name)
    return found


def stale_temp_files(folder: Path) -> list[Path]:
    """Temp files an atomic write left behind when its process was killed mid-write."""
    return sorted(folder.glob(".checkpoint*.tmp")) if folder.is_dir() else []


def remove_method_results(out: Path, method: str) -> None:
    """Delete exactly the files tokenworth writes for ``method`` (the lock file stays)."""
    folder = out / method
    tracked = [folder / TRACKING, *sorted(folder.glob(TB_EVENTS))] if folder.is_dir() else []  # a new tracked run
    for path in [folder / RECORDS, folder / CHECKPOINT, durable_path(folder / CHECKPOINT), folder / NODE,
                 *stale_temp_files(folder), *tracked]:
        path.unlink(missing_ok=True)


def _differences(old: dict[str, Any], new: dict[str, Any]) -> str:
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return "; ".join(f"{k}: {old.get(k)!r} here, {new.get(k)!r} now" for k in keys)


# Settings a later version added to config.json: a folder whose config lacks one was made before it existed, and
# resumes (its config then gains the entry); a folder that has it is compared on it as on any other setting.
ADDED_SETTINGS = ("data_source",)


# Settings kept per stream (a mapping stream name -> entry): not compared as a whole (each stream's entry is checked
# where it matters: the releases that made a stream, agent/tokenworth_agent/experiment/releases.py), and merged when
# written, so the entries of streams another command ran stay.
PER_STREAM_SETTINGS = ("releases", "parameters")


def _identity(config: dict[str, Any], existing: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings that define a run. ``connection`` (server URL, timeouts, retries, concurrency)
    is not among them: moving the model server must not stop a resume (agent/tokenworth_agent/backbones/options.py);
    nor are the :data:`PER_STREAM_SETTINGS`.
    With ``existing`` (the folder's config), an :data:`ADDED_SETTINGS` entry that config lacks is left out."""
    older = [] if existing is None else [k for k in ADDED_SETTINGS if k not in existing]
    return {k: v for k, v in config.items() if k != "connection" and k not in older and k not in PER_STREAM_SETTINGS}


def merged_config(existing: dict[str, Any] | None, config: dict[str, Any], replaced: Sequence[str]) -> dict[str, Any]:
    """``config`` with the folder's :data:`PER_STREAM_SETTINGS` entries of other streams kept (``replaced``: streams
    whose entries this command discards, those it deletes first)."""
    merged = dict(config)
    for key in PER_STREAM_SETTINGS:
        kept = {k: v for k, v in ((existing or {}).get(key) or {}).items() if k not in replaced}
        if key in config or kept:  # an entry only some runs write (parameters) stays absent where none has one
            merged[key] = {**kept, **config.get(key, {})}
    return merged


def check_settings(out: Path, config: dict[str, Any], methods: Sequence[str], all_methods: Sequence[str], *,
                   overwrite: bool = False) -> dict[str, Any] | None:
    """Refuse the folder (:func:`check_run_folder`) or a run whose settings clash with its results.

    Writes nothing: the CLI calls it before taking any lock, and :func:`prepare` again under them.
    Returns the folder's config (``None`` for a new folder)."""
    config = json.loads(json.dumps(config, default=str))
    existing = check_run_folder(out)
    all_methods = list(dict.fromkeys([*all_methods, *streams_in(out)]))  # streams of earlier experiments too
    others = [m for m in all_methods if m not in methods]
    if existing is not None and _identity(existing) != _identity(config, existing):
        busy = methods_with_results(out, all_methods)
        blocking = [m for m in busy if m in others] if overwrite else busy
        if blocking:
            hint = (f"pass another --out, or add {','.join(blocking)} to --methods with --overwrite to redo them"
                    if overwrite else
                    f"pass another --out, or --overwrite --methods {','.join(busy)} to redo those methods")
            differences = _differences(_identity(existing), _identity(config, existing))
            raise RunFolderError(f"{out} already holds a run with different settings ({differences}),"
                                 f" with results for {', '.join(busy)}; {hint}")
    return existing


def prepare(out: Path, config: dict[str, Any], methods: Sequence[str], all_methods: Sequence[str], *,
            overwrite: bool = False) -> None:
    """Check (and create or update) the run folder for a run of ``methods``.

    Call with the folder lock and the named methods' locks held. See the module docstring
    for the rules.
    """
    config = json.loads(json.dumps(config, default=str))
    existing = check_settings(out, config, methods, all_methods, overwrite=overwrite)
    config = merged_config(existing, config, methods if overwrite else ())
    if overwrite:
        for method in methods:
            remove_method_results(out, method)
        for name in SUMMARY_FILES:
            (out / name).unlink(missing_ok=True)
    if existing != config:  # new settings, or only a new connection entry (rewritten with the latest values)
        atomic_write_json(out / CONFIG, config)
