"""BigCodeBench (Zhuo et al. 2024, arXiv 2406.15877) as one lifelong stream: App. C's protocol.

**The data.** Either of two files under ``<data root>/bigcodebench/`` (the first wins when both are there):

* ``BigCodeBench.jsonl.gz``: the 1,140 tasks of the first Hugging Face release (``v0.1.0_hf``),
  one JSON object a line. The loader rebuilds ``v0.1.4``, the paper's release, from it
  (:mod:`tokenworth_agent.benchmarks.bigcodebench.patches`) and refuses a file the edits do not match.
* ``BigCodeBench-v0.1.4.parquet``: the hub's parquet file of split ``v0.1.4`` (hub dataset
  ``bigcode/bigcodebench``), as ``tokenworth data fetch`` stores it; read as it is. Both give the
  same records (``tests/test_data_fetch.py`` compares them).

**The stream.** Instruct format, one pass: the 992 tasks that are not in BigCodeBench-Hard in
file order (ascending task number), then the 148 Hard tasks in ascending order, as the Hard
split orders them (the list ships as ``bigcodebench_hard.txt``, with its provenance). Nothing is
shuffled or revisited.

**The record.** :class:`BCBTask`: what the agent reads (``instruct_prompt``, the
``query_text`` similarity-based methods index), what the judge needs (``code_prompt``,
``test``, ``entry_point``), the skills (``libs``, the libraries the task imports: the
benchmark's own notion of the tools a task needs) and the reference solution, which only the
simulated backbone and the gold replay read.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.tasks.base import (DataFolder, DataError, Task, benchmark_dir, corrupt, data_error, literal,
                                         parquet_rows, text)
from tokenworth_agent.benchmarks.bigcodebench.patches import BASE_RELEASE, PAPER_RELEASE, ReleaseError, to_release

ENV = "bigcodebench"
FILE = "BigCodeBench.jsonl.gz"
SPLIT_FILE = "BigCodeBench-v0.1.4.parquet"  # the hub's split v0.1.4, as `tokenworth data fetch` stores it
HARD_SPLIT_FILE = "BigCodeBench-Hard-v0.1.4.parquet"  # the Hard split, kept as the check of the shipped ids
EXPECTED_TASKS = 1140
EXPECTED_HARD = 148

BCB = DataFolder(
    "bigcodebench", markers=(FILE, SPLIT_FILE),
    how_to_get=(f"{FILE} (BigCodeBench v0.1.0_hf: bigcode-project/bigcodebench-annotation, hf_data/{FILE}) "
                f"or {SPLIT_FILE} (the hub's split v0.1.4) must be in {{folder}}; with internet, "
                "`tokenworth data fetch --env bigcodebench --data-dir {root}` downloads the second."))


@dataclasses.dataclass(frozen=True)
class BCBTask:
    sample_index: int  # place in the stream (non-Hard tasks first)
    task_id: str  # "BigCodeBench/<n>", upstream's id
    instruct_prompt: str  # the task as the agent reads it (instruct format)
    code_prompt: str  # the imports and signature the solution starts with (the judge calibrates with it)
    entry_point: str
    test: str  # the unittest class the judge runs; never shown to the agent
    libs: tuple[str, ...]
    hard: bool
    canonical_solution: str  # the reference body; only the simulated backbone and the gold replay read it
    complete_prompt: str  # the docstring form; the gold replay runs complete_prompt + canonical_solution
    env: str = ENV

    @property
    def number(self) -> int:
        return int(self.task_id.rpartition("/")[2])

    @property
    def skill_list(self) -> tuple[str, ...]:
        return self.libs

    @property
    def query_text(self) -> str:
        return self.instruct_prompt


def hard_numbers() -> tuple[int, ...]:
    """The 148 BigCodeBench-Hard task numbers, ascending (package data, with its provenance)."""
    lines = resources.files(__package__).joinpath("bigcodebench_hard.txt").read_text().splitlines()
    return tuple(int(line) for line in lines if line.strip() and not line.startswith("#"))


_REQUIRED = ("task_id", "instruct_prompt", "code_prompt", "entry_point", "test", "canonical_solution",
             "complete_prompt", "libs", "doc_struct")


def decode(row: dict[str, Any], index: int, path: Path, sample_index: int, hard: bool) -> BCBTask:
    libs = literal(row["libs"], "libs", index, path, (list, tuple))
    if not all(isinstance(lib, str) and lib for lib in libs):
        raise corrupt(path, index, "libs", "must be a list of library names")
    return BCBTask(sample_index=sample_index, task_id=text(row, "task_id", index, path),
                   instruct_prompt=text(row, "instruct_prompt", index, path),
                   code_prompt=text(row, "code_prompt", index, path),
                   entry_point=text(row, "entry_point", index, path), test=text(row, "test", index, path),
                   libs=tuple(libs), hard=hard,
                   canonical_solution=text(row, "canonical_solution", index, path),
                   complete_prompt=text(row, "complete_prompt", index, path))


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The file's JSON objects in file order; DataError naming the line that is not one."""
    rows = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise DataError(f"{path}: line {number} is not JSON ({exc}); the file looks corrupt") from exc
                if not isinstance(row, dict):
                    raise DataError(f"{path}: line {number} is not a JSON object; the file looks corrupt")
                rows.append(row)
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # gzip: truncated or not gzip at all
        raise DataError(f"{path} is not a readable gzip file ({exc}); the file looks corrupt") from exc
    return rows


def load_release_split(path: Path) -> list[BCBTask]:
    """The stream from the hub's split v0.1.4 file (no edits applied: it is v0.1.4 already)."""
    rows = parquet_rows(path)
    if len(rows) != EXPECTED_TASKS:
        raise DataError(f"{path} holds {len(rows)} tasks, but BigCodeBench has {EXPECTED_TASKS}; the file is "
                        "incomplete or not the public release")
    for row in rows:  # should a parquet hold these as nested values, write them as the jsonl does (text)
        if isinstance(row.get("libs"), (list, tuple)):
            row["libs"] = repr(list(row["libs"]))
        if isinstance(row.get("doc_struct"), (dict, list)):
            row["doc_struct"] = json.dumps(row["doc_struct"])
    return stream(rows, path, hard_numbers(), release=PAPER_RELEASE)


def hard_split_numbers(path: Path) -> tuple[int, ...]:
    """The task numbers of a Hard split file (the hub's ``bigcode/bigcodebench-hard``), ascending."""
    numbers = []
    for index, row in enumerate(parquet_rows(path)):
        head, _, tail = str(row.get("task_id", "")).rpartition("/")
        if head != "BigCodeBench" or not tail.isdigit():
            raise corrupt(path, index, "task_id", f"is {row.get('task_id')!r}, expected BigCodeBench/<n>")
        numbers.append(int(tail))
    return tuple(sorted(numbers))


def stream(rows: Sequence[dict[str, Any]], path: Path, hard: Sequence[int],
           release: str = BASE_RELEASE) -> list[BCBTask]:
    """The v0.1.4 records in stream order: non-Hard tasks ascending, then Hard ones ascending.

    ``rows`` are ``release``'s: the first release is brought to v0.1.4 by the edits; v0.1.4 is read as it is."""
    for index, row in enumerate(rows):
        missing = [name for name in _REQUIRED if name not in row]
        if missing:
            raise corrupt(path, index, missing[0], "is missing")
        if not all(isinstance(row[name], str) for name in _REQUIRED):
            wrong = next(name for name in _REQUIRED if not isinstance(row[name], str))
            raise corrupt(path, index, wrong, f"holds a {type(row[wrong]).__name__}, expected text")
    if release not in (BASE_RELEASE, PAPER_RELEASE):
        raise ValueError(f"release must be {BASE_RELEASE} or {PAPER_RELEASE}, got {release!r}")
    try:
        patched = to_release(rows, PAPER_RELEASE) if release == BASE_RELEASE else [dict(r) for r in rows]
    except ReleaseError as exc:
        raise DataError(f"{path}: {exc}") from exc
    numbers = []
    for index, row in enumerate(patched):
        head, _, tail = row["task_id"].rpartition("/")
        if head != "BigCodeBench" or not tail.isdigit():
            raise corrupt(path, index, "task_id", f"is {row['task_id']!r}, expected BigCodeBench/<n>")
        numbers.append(int(tail))
    if sorted(numbers) != list(range(len(rows))):
        raise DataError(f"{path}: the task ids are not BigCodeBench/0..{len(rows) - 1}, each once; the file looks corrupt")
    hard_set = set(hard)
    order = sorted(range(len(patched)), key=lambda i: (numbers[i] in hard_set, numbers[i]))
    return [decode(patched[i], i, path, position, numbers[i] in hard_set) for position, i in enumerate(order)]


@dataclasses.dataclass(frozen=True)
class BigCodeBenchSource:
    """The stream's task source (``tokenworth_agent.tasks.registry.TASK_SOURCES``)."""

    env: str = ENV
    benchmark: DataFolder = BCB

    def load(self, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder] = ()) -> list[Task]:
        """All 1,140 tasks in stream order, from the first release (preferred) or the hub's v0.1.4 split;
        DataError (saying how to get the file) if neither is there, or the file is unreadable, incomplete,
        not the release it is named for or has a malformed record (naming its line and field)."""
        folder = benchmark_dir(BCB, data_dir, benchmarks)
        path = folder / FILE
        if not path.is_file():
            split = folder / SPLIT_FILE
            if split.is_file():
                try:
                    return list(load_release_split(split))
                except DataError as exc:
                    raise data_error(str(exc), BCB, data_dir, folder) from exc
            raise data_error(f"no BigCodeBench task data at {path} (nor {SPLIT_FILE})", BCB, data_dir, folder)
        rows = read_rows(path)
        if len(rows) != EXPECTED_TASKS:
            raise data_error(f"{path} holds {len(rows)} tasks, but BigCodeBench has {EXPECTED_TASKS}; the file is "
                             "incomplete or not the public release", BCB, data_dir, folder)
        return list(stream(rows, path, hard_numbers()))


SOURCE = BigCodeBenchSource()

__all__ = ["BCBTask", "BCB", "ENV", "FILE", "SPLIT_FILE", "HARD_SPLIT_FILE", "EXPECTED_TASKS", "EXPECTED_HARD",
           "SOURCE", "hard_numbers", "hard_split_numbers", "read_rows", "load_release_split",
           "stream", "decode"]
