"""KG's data: LAB's KG parquet file and LAB's ontology (AgentBench's ``vocab.json`` and ``fb_roles``), checked by sha256."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Sequence

from tokenworth_agent.tasks.base import DataError, DataFolder, benchmark_dir, file_sha256
from tokenworth_agent.tasks.download import TIMEOUT_S, Download, Say, fetch_file, hub_source, hub_url, sync_folder, tasks_digest

ONTOLOGY_URL_VARIABLE = "TOKENWORTH_KG_ONTOLOGY_URL"
ONTOLOGY_COMMIT = "578c5e9f706fc2dd96188ca6c8cf9095ca0c6528"  # THUDM/AgentBench, where both files' sha256 match
DEFAULT_ONTOLOGY_URL = (f"https://github.com/THUDM/AgentBench/raw/{ONTOLOGY_COMMIT}/src/server/tasks/knowledgegraph/"
                        "ontology")
ONTOLOGY_SHA256 = {  # the KG ontology folder's README (AgentBench 578c5e9)
    "vocab.json": "6a178fa7f348631d816e37a384a89039b6ef1903c8797c4a20fbe97074ba6453",
    "fb_roles": "052ec0a1083b5cf83cfbf7f56f5d864e363382e3210e9a482da6e52ca37392ba",
}


def downloads(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder]) -> list[Download]:
    """The KG tasks' parquet file, then the ontology's two files."""
    from tokenworth_agent.tasks.lab import LAB, ONTOLOGY_DIR, lab_downloads

    folder = benchmark_dir(LAB, data_dir, benchmarks)
    base = (os.environ.get(ONTOLOGY_URL_VARIABLE) or DEFAULT_ONTOLOGY_URL).rstrip("/")
    return lab_downloads("kg", data_dir, benchmarks) + [
        Download(f"kg (ontology {file})", f"{base}/{file}", folder / ONTOLOGY_DIR / file, sha256=digest)
        for file, digest in ONTOLOGY_SHA256.items()]


__all__ = ["ONTOLOGY_URL_VARIABLE", "ONTOLOGY_COMMIT", "DEFAULT_ONTOLOGY_URL", "ONTOLOGY_SHA256", "downloads"]
