"""LifelongAgentBench (LAB): its data folder, one parquet file per environment, and its download.

The public dataset (hub id ``csyq/LifelongAgentBench``) ships one parquet file per environment
under ``<data root>/lifelongagentbench/<env folder>/``. Columns holding dicts or lists are
Python-literal strings, decoded with :func:`ast.literal_eval` (never JSON) by each environment's
record module (:mod:`tokenworth_agent.tasks.db`, :mod:`~tokenworth_agent.tasks.os_env`, :mod:`~tokenworth_agent.tasks.kg`).
Records come back in stream order (``sample_index`` 0..N-1), the order every method processes them in.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from tokenworth_agent.tasks.base import Benchmark, DataError, Task, benchmark_dir, data_error

HUB_ID = "csyq/LifelongAgentBench"
ENV_SUBDIR: dict[str, str] = {"db": "db_bench", "os": "os_interaction", "kg": "knowledge_graph"}
PARQUET_NAME = "train-00000-of-00001.parquet"
EXPECTED_ROWS: dict[str, int] = {"db": 500, "os": 500, "kg": 396}
# LAB's KG ontology (not on the hub; AgentBench's files), read by default when present (docs/kg.md)
ONTOLOGY_DIR = "knowledge_graph/ontology"
ONTOLOGY_FILES = ("vocab.json", "fb_roles")

LAB = Benchmark(
    "lifelongagentbench", markers=tuple(ENV_SUBDIR.values()),
    how_to_get=(f"{', '.join(f'{d}/{PARQUET_NAME}' for d in ENV_SUBDIR.values())} under it; with internet, "
                f"`tokenworth data fetch --data-dir {{root}}` downloads them into {{folder}} (hub id {HUB_ID})."))

Decoder = Callable[[dict[str, Any], Path], Task]  # one parquet row -> the env's record


@dataclasses.dataclass(frozen=True)
class LabSource:
    """One LAB environment's task stream: its folder, its row count and its row decoder."""

    env: str
    decode: Decoder
    benchmark: Benchmark = LAB

    def path(self, folder: Path) -> Path:
        return folder / ENV_SUBDIR[self.env] / PARQUET_NAME

    def load(self, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[Benchmark] = ()) -> list[Task]:
        """The whole stream as typed records, in stream order.

        Raises :class:`DataError` (with instructions) if the file is missing, unreadable, has
        the wrong columns, does not hold the stream's :data:`EXPECTED_ROWS` tasks (an empty file
        is never "0 tasks"), has a null or empty required text (an ``instruction`` is never the
        string "None"), a wrongly shaped literal (naming its row and column), or a
        ``sample_index`` that is not a permutation of 0..N-1.
        """
        import pyarrow.parquet as pq  # heavy import kept out of module import time

        folder = benchmark_dir(LAB, data_dir, benchmarks)
        path = self.path(folder)

        def error(message: str) -> DataError:
            return data_error(message, LAB, data_dir, folder)

        if not path.is_file():
            raise error(f"no {self.env} task data at {path}")
        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # pyarrow raises several types for truncated/garbled files
            raise error(f"{path} is not a readable parquet file ({exc})") from exc
        try:
            records = [self.decode(row, path) for row in rows]
        except KeyError as exc:
            raise error(f"{path} lacks column {exc}; the file looks corrupt") from exc
        except DataError as exc:
            raise error(str(exc)) from exc
        if len(records) != EXPECTED_ROWS[self.env]:
            raise error(f"{path} holds {len(records)} tasks, but the {self.env} stream has "
                        f"{EXPECTED_ROWS[self.env]}; the file is incomplete or not the public release")
        records.sort(key=lambda r: r.sample_index)
        if [r.sample_index for r in records] != list(range(len(records))):
            raise DataError(f"{path}: sample_index is not 0..{len(records) - 1}; the file looks corrupt.")
        return records


def ontology_folder(folder: Path) -> Path | None:
    """LAB's KG ontology under LAB's ``folder`` when it holds both files the KG task reads, else None."""
    ontology = folder / ONTOLOGY_DIR
    return ontology if all((ontology / name).is_file() for name in ONTOLOGY_FILES) else None


__all__ = ["HUB_ID", "ENV_SUBDIR", "PARQUET_NAME", "EXPECTED_ROWS", "LAB", "LabSource", "ONTOLOGY_DIR",
           "ONTOLOGY_FILES", "ontology_folder"]
