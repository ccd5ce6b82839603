"""What every task record is, where the data lives, and how a loader reports a bad file.

**The task record.** Each environment has its own frozen record type (:mod:`tokenworth_agent.benchmarks.db.tasks`,
...); every layer above reads only :class:`Task`, the fields they all share. An environment adds
its record without touching this module.

**The data root.** Task data is read at run time, never copied into the repository. One folder,
the *data root*, holds one folder per benchmark (``lifelongagentbench/``, ``bigcodebench/``,
``alfworld/``). The root is, first match wins:

1. the ``data_dir`` argument (the CLI's ``--data-dir``);
2. the ``TOKENWORTH_DATA_DIR`` environment variable;
3. ``~/.cache/tokenworth`` (where ``tokenworth data fetch`` writes).

A benchmark's own folder named instead of the root still works, as ``--data-dir`` meant before
the root existed: a folder that is a benchmark's (by its name, or by an entry only that
benchmark's folder holds, e.g. LAB's ``db_bench/``) stands for the root that is its parent
(:func:`benchmark_dir`).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

EnvName = str  # an environment's registry name: "db", "os", "kg", ...

DATA_ENV_VARIABLE = "TOKENWORTH_DATA_DIR"
DEFAULT_DATA_ROOT = Path("~/.cache/tokenworth").expanduser()


class Task(Protocol):
    """The fields every environment's task record has (each record is a frozen dataclass, with whatever else its
    benchmark needs: the gold answer, the judge's inputs; no method ever reads those)."""

    @property
    def env(self) -> EnvName:
        """The benchmark's name (``Benchmark.name``): the simulator and the memory construction find the
        benchmark by it."""

    @property
    def sample_index(self) -> int:
        """The task's place in its stream, 0..N-1: the order every method processes tasks in."""

    @property
    def skill_list(self) -> tuple[str, ...]:
        """The benchmark's skill labels (only the simulated backbone and the per-skill summary read them)."""

    @property
    def task_id(self) -> str:
        """A stable id, unique in the stream (e.g. ``"db-17"``): records, memories' ``source_task_id`` and
        ``tokenworth show`` name the task by it."""

    @property
    def query_text(self) -> str:
        """The question as the agent reads it: what similarity-based methods index."""


class DataError(RuntimeError):
    """Task data is missing or corrupt. The message says how to get it."""


@dataclasses.dataclass(frozen=True)
class DataFolder:
    """A benchmark's folder under the data root, and how to tell that folder when it is named directly.

    Attributes:
        folder: its name under the data root (e.g. ``"lifelongagentbench"``; benchmarks may share one).
        markers: entries only this benchmark's folder holds (e.g. LAB's ``"db_bench"``), so a folder named
            directly (``--data-dir .../lifelongagentbench``) is told as this one.
        how_to_get: what the folder must hold and how to get it, for error messages (``{root}``: the data root,
            ``{folder}``: the folder).
    """

    folder: str  # e.g. "lifelongagentbench"
    markers: tuple[str, ...] = ()  # entries only this benchmark's folder holds (e.g. LAB's "db_bench")
    how_to_get: str = ""  # what the folder must hold and how to get it, for error messages ("{root}": the data root)

    def is_its_folder(self, folder: Path) -> bool:
        """Whether ``folder`` is this benchmark's folder (by its name or a marker)."""
        return folder.name == self.folder or any((folder / marker).exists() for marker in self.markers)


def resolve_data_root(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder named by the argument, else ``TOKENWORTH_DATA_DIR``, else the default root (unchecked)."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    named = os.environ.get(DATA_ENV_VARIABLE)
    if named:
        return Path(named).expanduser()
    return DEFAULT_DATA_ROOT


def benchmark_dir(benchmark: DataFolder, data_dir: str | os.PathLike[str] | None = None,
                  benchmarks: Sequence[DataFolder] = ()) -> Path:
    """``benchmark``'s folder: under the data root, or the named folder itself when it is that benchmark's.

    A folder that is another of ``benchmarks``' folders stands for its parent, the root. A task source calls it
    with what its ``load(data_dir, folders)`` was given: ``benchmark_dir(self.benchmark, data_dir, folders)``
    (unchecked: the source says in one :class:`DataError` what is missing there).
    """
    named = resolve_data_root(data_dir)
    if benchmark.is_its_folder(named):
        return named
    root = named.parent if any(b.is_its_folder(named) for b in benchmarks) else named
    return root / benchmark.folder


def source_of(data_dir: str | os.PathLike[str] | None) -> str:
    """Where the data folder came from, as an error message says it."""
    if data_dir is not None:
        return "from --data-dir"
    if os.environ.get(DATA_ENV_VARIABLE):
        return f"from {DATA_ENV_VARIABLE}"
    return f"the default folder: neither {DATA_ENV_VARIABLE} nor --data-dir is set"


def data_error(message: str, benchmark: DataFolder, data_dir: str | os.PathLike[str] | None,
               folder: Path) -> DataError:
    """``message``, where the folder came from, the two ways to name another (first), then how to get the data."""
    source = source_of(data_dir)
    named = ("Pass --data-dir the data root" if data_dir is not None
             else f"Set {DATA_ENV_VARIABLE}, or pass --data-dir, to the data root")
    return DataError(f"{message} ({source}). {named} that holds {benchmark.folder}/ (or that folder itself); "
                     + benchmark.how_to_get.format(root=folder.parent, folder=folder))


# ------------------------------------------------------------------ decoding a row, with errors that name it
def corrupt(path: Path, index: Any, column: str, problem: str, hint: str = "") -> DataError:
    return DataError(f"{path}: row {index}, column {column!r} {problem}; the file looks corrupt. {hint}".rstrip())


@contextlib.contextmanager
def column(name: str, index: Any, path: Path) -> Iterator[None]:
    """Turn a wrongly shaped value (a list where a dict belongs, a missing key) into a DataError."""
    try:
        yield
    except DataError:
        raise
    except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:
        raise corrupt(path, index, name, f"has the wrong shape ({type(exc).__name__}: {exc})") from exc


def literal(value: Any, name: str, index: int, path: Path, kind: type | tuple[type, ...] | None = None) -> Any:
    """Decode a Python-literal string column; ``kind`` checks the decoded type (null only if it allows None)."""
    if value is None and (kind is None or isinstance(None, kind)):
        return None
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise corrupt(path, index, name, f"is not a Python literal ({exc})") from exc
    if kind is not None and not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise corrupt(path, index, name, f"holds a {type(value).__name__}, expected a {names}")
    return value


def text(row: dict[str, Any], name: str, index: Any, path: Path) -> str:
    """A required text column: null or non-text values are refused, never turned into "None"."""
    value = row[name]
    if not isinstance(value, str) or not value.strip():
        raise corrupt(path, index, name, f"is {'null' if value is None else repr(value)[:60]}, expected text")
    return value


def strings(value: Any, name: str, index: int, path: Path) -> tuple[str, ...]:
    items = literal(value, name, index, path, (list, tuple))
    if items is None or not all(isinstance(x, str) for x in items):
        raise corrupt(path, index, name, "must be a list of strings")
    return tuple(items)


def parquet_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a hub parquet file, in file order; DataError (the file looks corrupt) if it is not one.

    Read as one file (``pyarrow.parquet.ParquetFile``), not as a dataset (``read_table``): the same rows, without
    importing ``pyarrow.dataset``, which was half a CPU-second of every run that loads a stream."""
    import pyarrow.parquet as pq  # heavy import kept out of module import time

    try:
        with pq.ParquetFile(path) as parquet:
            return parquet.read().to_pylist()
    except Exception as exc:  # pyarrow raises several types for truncated/garbled files
        raise DataError(f"{path} is not a readable parquet file ({exc}); the file looks corrupt") from exc


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks (data files run to gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = ["Task", "EnvName", "DataError", "DataFolder", "DATA_ENV_VARIABLE", "DEFAULT_DATA_ROOT",
           "resolve_data_root", "benchmark_dir", "data_error", "corrupt", "column", "literal", "text", "strings",
           "parquet_rows", "file_sha256"]
