"""Crash-safe files for a resumable run.

* :func:`atomic_write_bytes` / :func:`atomic_write_text`: write a temp file in the same
  directory, fsync it, ``os.replace`` it over the target, fsync the directory. A reader
  (or a resumed run) sees the old file or the new one, never a torn one.
* :class:`RecordLog`: the per-task JSONL. Each record is appended and fsynced; its byte
  offset after the write is what the checkpoint stores. On resume the file is truncated
  back to the checkpointed offset, so a record written after the last checkpoint (the run
  died between the two writes) is dropped and re-made — never duplicated, never lost.
* :func:`save_checkpoint` / :func:`load_checkpoint`: a pickled dict (controller state,
  bank, policy state, RNG state, JSONL offset), written atomically. Pickle is used because
  the state holds NumPy arrays; these files are the run's own, never untrusted input.
* :class:`CheckpointWriter`: what the runner and the sweep use after every task.

Durability (group commit). A process that dies (``kill -9``, Ctrl-C, an exception) loses
nothing that was written: the page cache outlives it, so the record and checkpoint of every
finished task survive without ``fsync``. Only a machine crash or power loss can drop writes
that were not synced. ``fsync`` costs milliseconds per file (measured: 38 % of a TokenWorth
task with the simulated backbone when three files were synced per task, see
bench/results/checkpoint_cost.md), so :class:`CheckpointWriter` replaces the checkpoint after
every task without syncing, and makes it durable at most every ``durable_every_s`` seconds
(and when the stream stops): sync the records, write the checkpoint synced, and copy it to
``<name>.durable.pkl``. After a power loss the newest checkpoint may be missing, torn, or
ahead of the records that reached the disk; :func:`load_checkpoint` then falls back to the
durable copy (the caller's ``valid`` check compares a checkpoint with its records). At most
``durable_every_s`` seconds of work are redone; nothing is duplicated or lost.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

CHECKPOINT_VERSION = 1


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some filesystems do not allow opening directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; ``durable`` also fsyncs the file and its folder."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _fsync_dir(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


class CheckpointError(RuntimeError):
    """A checkpoint is unreadable or belongs to another run."""


DURABLE_EVERY_S = 5.0


def durable_path(path: str | os.PathLike[str]) -> Path:
    """``checkpoint.pkl`` -> ``checkpoint.durable.pkl``: the last synced copy."""
    target = Path(path)
    return target.with_name(f"{target.stem}.durable{target.suffix}")


def _encode(state: dict[str, Any]) -> bytes:
    return pickle.dumps({"version": CHECKPOINT_VERSION, **state}, protocol=pickle.HIGHEST_PROTOCOL)


def save_checkpoint(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Write a checkpoint durably (synced, plus its durable copy)."""
    data = _encode(state)
    atomic_write_bytes(path, data)
    atomic_write_bytes(durable_path(path), data)


def _decode(target: Path) -> dict[str, Any]:
    try:
        state = pickle.loads(target.read_bytes())
    except Exception as exc:  # atomic writes make this a foreign, damaged or power-cut file
        raise CheckpointError(f"{target} is not a readable checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{target} has an unknown checkpoint format (not written by this version of tokenworth)")
    return state


def load_checkpoint(path: str | os.PathLike[str],
                    valid: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any] | None:
    """The newest usable saved state, or ``None`` when there is no checkpoint yet.

    Tries ``path``, then its durable copy (see the module docstring); a state is usable when
    it unpickles, has this version, and passes ``valid`` (e.g. its records reached the disk).
    Raises :class:`CheckpointError` when files exist but none is usable.
    """
    candidates = [p for p in (Path(path), durable_path(path)) if p.exists()]
    if not candidates:
        return None
    errors = []
    for candidate in candidates:
        try:
            state = _decode(candidate)
        except CheckpointError as exc:
            errors.append(str(exc))
            continue
        if valid is None or valid(state):
            return state
        errors.append(f"{candidate} does not match its records (they were cut short or edited)")
    raise CheckpointError("; ".join(errors))


class CheckpointWriter:
    """Save a checkpoint after every task; make it durable every ``durable_every_s`` seconds.

    ``log`` (the task records) is synced before each durable checkpoint, so a durable
    checkpoint never points past durable records. ``flush()`` makes the last save durable
    (call it when the stream stops). ``clock`` is injectable for tests.
    """

    def __init__(self, path: str | os.PathLike[str], *, log: "RecordLog | None" = None,
                 durable_every_s: float = DURABLE_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.log = log
        self.durable_every_s = durable_every_s
        self.clock = clock
        self._last_durable = clock()
        self._pending: bytes | None = None
        self.durable_saves = 0

    def save(self, state: dict[str, Any], *, durable: bool = False) -> None:
        data = _encode(state)
        if durable or self.clock() - self._last_durable >= self.durable_every_s:
            self._write_durable(data)
        else:
            atomic_write_bytes(self.path, data, durable=False)
            self._pending = data

    def flush(self) -> None:
        if self._pending is not None:
            self._write_durable(self._pending)

    def _write_durable(self, data: bytes) -> None:
        if self.log is not None:
            self.log.sync()
        atomic_write_bytes(self.path, data)
        atomic_write_bytes(durable_path(self.path), data)
        self._pending = None
        self._last_durable = self.clock()
        self.durable_saves += 1


class RecordLog:
    """Append-only JSONL with fsync per record and truncation back to a known offset."""

    def __init__(self, path: str | os.PathLike[str], resume_offset: int = 0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        size = self.path.stat().st_size if self.path.exists() else 0
        if resume_offset > size:
            raise CheckpointError(
                f"{self.path} is shorter ({size} bytes) than its checkpoint says ({resume_offset}); "
                "the records were modified after the checkpoint"
            )
        self._handle = open(self.path, "ab")
        self._handle.truncate(resume_offset)  # drop whatever was written after the checkpoint
        self._handle.seek(resume_offset)
        os.fsync(self._handle.fileno())

    @property
    def offset(self) -> int:
        return self._handle.tell()

    def append(self, record: dict[str, Any], *, sync: bool = True) -> int:
        """Append one record (flushed to the OS; ``sync`` also fsyncs); returns the new offset."""
        line = json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"
        self._handle.write(line.encode("utf-8"))
        self._handle.flush()
        if sync:
            os.fsync(self._handle.fileno())
        return self.offset

    def sync(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "RecordLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def records_reach(path: str | os.PathLike[str], offset: int, next_index: int) -> bool:
    """Whether the JSONL holds ``offset`` bytes ending in the record of task ``next_index - 1``."""
    if offset == 0:
        return next_index == 0
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size < offset:
                return False
            window = 4096
            while True:  # widen the window until it holds the whole last line
                start = max(0, offset - window)
                handle.seek(start)
                chunk = handle.read(offset - start)
                if b"\n" in chunk[:-1] or start == 0:
                    break
                window *= 4
    except OSError:
        return False
    if not chunk.endswith(b"\n"):
        return False
    last = chunk[:-1].rsplit(b"\n", 1)[-1]
    try:
        record = json.loads(last)
    except ValueError:
        return False
    return isinstance(record, dict) and record.get("index") == next_index - 1


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return list(iter_records(path))


def iter_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    target = Path(path)
    if not target.exists():
        return
    with open(target, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise CheckpointError(f"{target}:{number} is not valid JSON ({exc})") from exc
