"""LifelongAgentBench (LAB): its data folder, one parquet file per environment, and its download.

The public dataset (hub id ``csyq/LifelongAgentBench``) ships one parquet file per environment
under ``<data root>/lifelongagentbench/<env folder>/``. Columns holding dicts or lists are
Python-literal strings, decoded with :func:`ast.literal_eval` (never JSON) by each environment's
record module (:mod:`tokenworth_agent.benchmarks.db.tasks`, :mod:`~tokenworth_agent.benchmarks.os_env.tasks`, :mod:`~tokenworth_agent.benchmarks.kg.tasks`).
Records come back in stream order (``sample_index`` 0..N-1), the order every method processes them in.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from tokenworth_agent.tasks.base import DataFolder, DataError, Task, benchmark_dir, data_error, parquet_rows

HUB_ID = "csyq/LifelongAgentBench"
ENV_SUBDIR: dict[str, str] = {"db": "db_bench", "os": "os_interaction", "kg": "knowledge_graph"}
PARQUET_NAME = "train-00000-of-00001.parquet"
EXPECTED_ROWS: dict[str, int] = {"db": 500, "os": 500, "kg": 396}
# LAB's KG ontology (not on the hub; AgentBench's files), read by default when present (docs/kg.md)
ONTOLOGY_DIR = "knowledge_graph/ontology"
ONTOLOGY_FILES = ("vocab.json", "fb_roles")

LAB = DataFolder(
    "lifelongagentbench", markers=tuple(ENV_SUBDIR.values()),
    how_to_get=(f"{', '.join(f'{d}/{PARQUET_NAME}' for d in ENV_SUBDIR.values())} under it; with internet, "
                f"`tokenworth data fetch --data-dir {{root}}` downloads them into {{folder}} (hub id {HUB_ID})."))

Decoder = Callable[[dict[str, Any], Path], Task]  # one parquet row -> the env's record


@dataclasses.dataclass(frozen=True)
class LabSource:
    """One LAB environment's task stream: its folder, its row count and its row decoder."""

    env: str
    decode: Decoder
    benchmark: DataFolder = LAB

    def path(self, folder: Path) -> Path:
        return folder / ENV_SUBDIR[self.env] / PARQUET_NAME

    def load(self, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder] = ()) -> list[Task]:
        """The whole stream as typed records, in stream order.

        Raises :class:`DataError` (with instructions) if the file is missing, unreadable, has
        the wrong columns, does not hold the stream's :data:`EXPECTED_ROWS` tasks (an empty file
        is never "0 tasks"), has a null or empty required text (an ``instruction`` is never the
        string "None"), a wrongly shaped literal (naming its row and column), or a
        ``sample_index`` that is not a permutation of 0..N-1.
        """
        folder = benchmark_dir(LAB, data_dir, benchmarks)
        path = self.path(folder)

        def error(message: str) -> DataError:
            return data_error(message, LAB, data_dir, folder)

        if not path.is_file():
            raise error(f"no {self.env} task data at {path}")
        try:
            rows = parquet_rows(path)
        except DataError as exc:
            raise error(str(exc)) from exc
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


# ------------------------------------------------------------------ what `tokenworth data fetch` brings for LAB
LAB_REVISION = "main"  # the data folder's README names no hub commit for LAB; the sha256 below pins the bytes
LAB_SHA256 = {  # the LAB data folder's README.md (lifelongagentbench/ of the data root): the hub's files, byte for byte
    "db": "9559d085c4747ae5afb28d45155040af0743e4dfdb5759a3f13da84501c52f51",
    "os": "61795fd6a0231fad9a509f8dbb8863bb0cdde1daa1db05e1b2e6dbb077946b13",
    "kg": "204e8246c77d1e2e62cebf8bee0babfc87e1e83858d061b8328e2cade27f72a4",
}


def lab_downloads(env: str, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder]) -> list[Any]:
    """``env``'s parquet file of LAB's hub dataset (db, os, kg), checked by its sha256."""
    from tokenworth_agent.tasks.download import Download, hub_url

    folder = benchmark_dir(LAB, data_dir, benchmarks)
    name = f"{ENV_SUBDIR[env]}/{PARQUET_NAME}"
    return [Download(env, hub_url(HUB_ID, name, LAB_REVISION), folder / name, sha256=LAB_SHA256[env])]


def lab_data_source(env: str, data_dir: str | os.PathLike[str] | None,
                    benchmarks: Sequence[DataFolder]) -> dict[str, str | None]:
    """Where ``env``'s LAB file came from and its sha256 (None without the file), for the run's ``config.json``."""
    from tokenworth_agent.tasks.download import file_digest, hub_source

    name = f"{ENV_SUBDIR[env]}/{PARQUET_NAME}"
    return {"source": hub_source(HUB_ID, name, LAB_REVISION),
            "sha256": file_digest(benchmark_dir(LAB, data_dir, benchmarks) / name)}


__all__ = ["LAB_REVISION", "LAB_SHA256", "lab_downloads", "lab_data_source", "HUB_ID", "ENV_SUBDIR", "PARQUET_NAME", "EXPECTED_ROWS", "LAB", "LabSource", "ONTOLOGY_DIR",
           "ONTOLOGY_FILES", "ontology_folder"]
