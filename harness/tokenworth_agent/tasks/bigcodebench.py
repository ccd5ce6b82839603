"""BigCodeBench (Zhuo et al. 2024, arXiv 2406.15877) as one lifelong stream: App. C's protocol.

**The data.** ``<data root>/bigcodebench/BigCodeBench.jsonl.gz``: the 1,140 tasks of the first
Hugging Face release (``v0.1.0_hf``), one JSON object a line. The loader rebuilds ``v0.1.4``, the
paper's release, from it (:mod:`tokenworth_agent.tasks.bigcodebench_patches`) and refuses a file the edits
do not match.

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

from tokenworth_agent.tasks.base import Benchmark, DataError, Task, benchmark_dir, corrupt, data_error, literal, text
from tokenworth_agent.tasks.bigcodebench_patches import PAPER_RELEASE, ReleaseError, to_release

ENV = "bigcodebench"
FILE = "BigCodeBench.jsonl.gz"
EXPECTED_TASKS = 1140
EXPECTED_HARD = 148

BCB = Benchmark(
    "bigcodebench", markers=(FILE,),
    how_to_get=(f"{FILE} (BigCodeBench v0.1.0_hf: bigcode-project/bigcodebench-annotation, hf_data/{FILE}) "
                "must be in {folder}."))


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


def stream(rows: Sequence[dict[str, Any]], path: Path, hard: Sequence[int]) -> list[BCBTask]:
    """The v0.1.4 records in stream order: non-Hard tasks ascending, then Hard ones ascending."""
    for index, row in enumerate(rows):
        missing = [name for name in _REQUIRED if name not in row]
        if missing:
            raise corrupt(path, index, missing[0], "is missing")
        if not all(isinstance(row[name], str) for name in _REQUIRED):
            wrong = next(name for name in _REQUIRED if not isinstance(row[name], str))
            raise corrupt(path, index, wrong, f"holds a {type(row[wrong]).__name__}, expected text")
    try:
        patched = to_release(rows, PAPER_RELEASE)
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
    benchmark: Benchmark = BCB

    def load(self, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[Benchmark] = ()) -> list[Task]:
        """All 1,140 tasks in stream order; DataError (saying how to get the file) if it is missing,
        unreadable, incomplete, not v0.1.0_hf or has a malformed record (naming its line and field)."""
        folder = benchmark_dir(BCB, data_dir, benchmarks)
        path = folder / FILE
        if not path.is_file():
            raise data_error(f"no BigCodeBench task data at {path}", BCB, data_dir, folder)
        rows = read_rows(path)
        if len(rows) != EXPECTED_TASKS:
            raise data_error(f"{path} holds {len(rows)} tasks, but BigCodeBench has {EXPECTED_TASKS}; the file is "
                             "incomplete or not the public release", BCB, data_dir, folder)
        return list(stream(rows, path, hard_numbers()))


SOURCE = BigCodeBenchSource()

__all__ = ["BCBTask", "BCB", "ENV", "FILE", "EXPECTED_TASKS", "EXPECTED_HARD", "SOURCE", "hard_numbers", "read_rows",
           "stream", "decode"]
