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
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, Iterator

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


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


class CheckpointError(RuntimeError):
    """A checkpoint is unreadable or belongs to another run."""


def save_checkpoint(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    atomic_write_bytes(path, pickle.dumps({"version": CHECKPOINT_VERSION, **state}, protocol=pickle.HIGHEST_PROTOCOL))


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The saved state, or ``None`` when there is no checkpoint yet."""
    target = Path(path)
    if not target.exists():
        return None
    try:
        state = pickle.loads(target.read_bytes())
    except Exception as exc:  # atomic writes make this a foreign or damaged file
        raise CheckpointError(f"{target} is not a readable checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{target} has an unknown checkpoint format (not written by this version of tokenworth)")
    return state


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

    def append(self, record: dict[str, Any]) -> int:
        line = json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"
        self._handle.write(line.encode("utf-8"))
        self._handle.flush()
        os.fsync(self._handle.fileno())
        return self.offset

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "RecordLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
