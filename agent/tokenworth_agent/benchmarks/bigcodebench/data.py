"""BigCodeBench's data: the hub's split v0.1.4 and the Hard ids at pinned commits, checked by sha256 and by content,
or the shipped first release (v0.1.0_hf) when it is there."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Sequence

from tokenworth_agent.tasks.base import DataError, DataFolder, benchmark_dir, file_sha256
from tokenworth_agent.tasks.download import TIMEOUT_S, Download, Say, fetch_file, hub_source, hub_url, sync_folder, tasks_digest

BCB_HUB_ID = "bigcode/bigcodebench"
BCB_HARD_HUB_ID = "bigcode/bigcodebench-hard"
BCB_HUB_FILE = "data/v0.1.4-00000-of-00001.parquet"  # the hub's parquet of split v0.1.4 (both datasets)
BCB_REVISION = "b74c0d0bf70d2c0bc459be537895cca163007f1a"  # the hub commit of bigcode/bigcodebench fetched
BCB_HARD_REVISION = "298d2cc7b96612e15e47313c3603ee124cee0c1f"  # and of bigcode/bigcodebench-hard
BCB_SPLIT_SHA256 = "d9a4965821c9507ebdfb551c288656b2d5fe553234f5183044333ca8a4018267"  # its LFS object id (published)
BCB_FIRST_RELEASE_SOURCE = "bigcode-project/bigcodebench-annotation@a3b8985:hf_data/BigCodeBench.jsonl.gz"
BCB_FIRST_RELEASE_SHA256 = "58142744edaf6036387f8761701f1b353432b0ed33f2edec1de8a59e7431ef7a"
# sha256 of tasks_digest(the 1,140 records the loader reads from the shipped v0.1.0_hf file)
BCB_TASKS_SHA256 = "bc885f775c1383345bf3a5f943ab560c624190d86f39cf4dc7380c287659bd5c"


def _check_bcb_split(path: Path) -> None:
    from tokenworth_agent.benchmarks.bigcodebench.tasks import load_release_split

    digest = tasks_digest(load_release_split(path))
    if digest != BCB_TASKS_SHA256:
        raise DataError(f"its tasks' digest is {digest[:16]}…, expected {BCB_TASKS_SHA256[:16]}… (the tasks of "
                        "v0.1.0_hf with the v0.1.4 edits)")


def _check_bcb_hard(path: Path) -> None:
    from tokenworth_agent.benchmarks.bigcodebench.tasks import hard_numbers, hard_split_numbers

    found = hard_split_numbers(path)
    if found != hard_numbers():
        extra = sorted(set(found) - set(hard_numbers()))[:5]
        missing = sorted(set(hard_numbers()) - set(found))[:5]
        raise DataError(f"its {len(found)} task ids are not the {len(hard_numbers())} shipped Hard ids "
                        f"(not in the list: {extra}; missing: {missing})")


def downloads(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder]) -> list[Download]:
    from tokenworth_agent.benchmarks.bigcodebench.tasks import BCB, HARD_SPLIT_FILE, SPLIT_FILE

    folder = benchmark_dir(BCB, data_dir, benchmarks)
    return [Download("bigcodebench", hub_url(BCB_HUB_ID, BCB_HUB_FILE, BCB_REVISION), folder / SPLIT_FILE,
                     sha256=BCB_SPLIT_SHA256, check=_check_bcb_split),
            Download("bigcodebench (Hard ids)", hub_url(BCB_HARD_HUB_ID, BCB_HUB_FILE, BCB_HARD_REVISION),
                     folder / HARD_SPLIT_FILE, check=_check_bcb_hard,
                     described=f"the hub's parquet of split v0.1.4 at commit {BCB_HARD_REVISION}")]


def data_source(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder]) -> dict[str, str | None]:
    """The file the loader reads: the shipped first release when it is there, else the hub's split (its sha256;
    None without the file, where the tasks were handed to the plan another way)."""
    from tokenworth_agent.benchmarks.bigcodebench.tasks import BCB, FILE, SPLIT_FILE
    from tokenworth_agent.tasks.download import file_digest

    folder = benchmark_dir(BCB, data_dir, benchmarks)
    if (folder / FILE).is_file():  # the loader's first choice
        return {"source": BCB_FIRST_RELEASE_SOURCE, "sha256": file_digest(folder / FILE)}
    return {"source": hub_source(BCB_HUB_ID, BCB_HUB_FILE, BCB_REVISION), "sha256": file_digest(folder / SPLIT_FILE)}


def present_first_release(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder]) -> Path | None:
    """The shipped BigCodeBench.jsonl.gz when it is there and is v0.1.0_hf (then nothing is fetched for BCB)."""
    from tokenworth_agent.benchmarks.bigcodebench.tasks import BCB, FILE

    path = benchmark_dir(BCB, data_dir, benchmarks) / FILE
    return path if path.is_file() and file_sha256(path) == BCB_FIRST_RELEASE_SHA256 else None


def fetch(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder], say: Say = print) -> bool:
    """Nothing when the shipped first release is there (verified); else the hub's split and Hard ids; then the tasks
    are read once as a check. True if anything was downloaded."""
    from tokenworth_agent.benchmarks.bigcodebench.tasks import SOURCE

    shipped = present_first_release(data_dir, benchmarks)
    fetched = shipped is None
    if shipped is not None:
        say(f"bigcodebench: {shipped} (the first release, verified) is there; nothing to download")
    else:
        for item in downloads(data_dir, benchmarks):
            fetch_file(item, say)
    SOURCE.load(data_dir, benchmarks)  # what is there reads as the tasks
    return fetched


__all__ = ["BCB_HUB_ID", "BCB_HARD_HUB_ID", "BCB_HUB_FILE", "BCB_REVISION", "BCB_HARD_REVISION", "BCB_SPLIT_SHA256",
           "BCB_FIRST_RELEASE_SOURCE", "BCB_FIRST_RELEASE_SHA256", "BCB_TASKS_SHA256", "downloads", "data_source",
           "present_first_release", "fetch"]
