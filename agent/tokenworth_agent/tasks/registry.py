"""``load_tasks(env, data_dir, limit=...)``: each environment's task source, by name.

An entry is a source object with ``env``, ``benchmark`` (its :class:`~tokenworth_agent.tasks.base.Benchmark`:
the folder under the data root) and ``load(data_dir, benchmarks)``, imported lazily. Adding an
environment's tasks is a record module with its ``SOURCE`` and one line here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

from tokenworth_agent.core.registry import Registry
from tokenworth_agent.tasks.base import Benchmark, Task, benchmark_dir

TASK_SOURCES: Registry[Any] = Registry("environment", {
    "db": "tokenworth_agent.tasks.db:SOURCE",
    "os": "tokenworth_agent.tasks.os_env:SOURCE",
    "kg": "tokenworth_agent.tasks.kg:SOURCE",
    "bigcodebench": "tokenworth_agent.tasks.bigcodebench:SOURCE",
    "alfworld": "tokenworth_agent.tasks.alfworld:SOURCE",
})


def benchmarks() -> list[Benchmark]:
    """Every registered benchmark, once each (a folder named directly is told by them)."""
    return list({id(b): b for b in (TASK_SOURCES.factory(env).benchmark for env in TASK_SOURCES)}.values())


def data_folder(env: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder ``env``'s tasks are read from: its benchmark's folder under the data root (unchecked)."""
    return benchmark_dir(TASK_SOURCES.factory(env).benchmark, data_dir, benchmarks())


def load_tasks(env: str, data_dir: str | os.PathLike[str] | None = None, *, limit: int | None = None) -> list[Task]:
    """One environment's stream as typed records, in stream order (the first ``limit``); DataError says what is wrong."""
    if env not in TASK_SOURCES:
        raise ValueError(f"unknown environment {env!r}; expected one of {sorted(TASK_SOURCES.names)}")
    records = TASK_SOURCES.factory(env).load(data_dir, benchmarks())
    return records[:limit] if limit is not None else records


def fetch(data_dir: str | os.PathLike[str] | None = None, envs: Sequence[str] | None = None,
          say: Callable[[str], None] = print) -> dict[str, Path]:
    """Download ``envs``' task data (default: all five benchmarks) under the data root, each file checked
    (:mod:`tokenworth_agent.tasks.download`), then load each env's tasks once; env -> the folder its tasks are in.

    A file already there and verified is not downloaded again; the first failure is a one-line DataError."""
    from tokenworth_agent.tasks.base import DataError
    from tokenworth_agent.tasks.download import (FETCH_ENVS, downloads, fetch_alfworld, fetch_file,
                                                 present_first_release)

    envs = FETCH_ENVS if envs is None else tuple(dict.fromkeys(envs))
    unknown = [e for e in envs if e not in FETCH_ENVS]
    if unknown:
        raise DataError(f"--env {','.join(unknown)}: unknown; data fetch knows {', '.join(FETCH_ENVS)}")
    folders = {}
    for env in envs:
        shipped = present_first_release(data_dir, benchmarks()) if env == "bigcodebench" else None
        if shipped is not None:
            say(f"bigcodebench: {shipped} (the first release, verified) is there; nothing to download")
        elif env == "alfworld":  # a zip unpacked into a folder, not a file: download.fetch_alfworld
            fetch_alfworld(data_dir, benchmarks(), say)
        else:
            items = downloads(env, data_dir, benchmarks())
            for item in items:
                try:
                    fetch_file(item, say)
                except DataError as exc:
                    raise DataError(f"{exc}{_incomplete(env, items)}") from None
        if env != "alfworld":  # checked already by the manifest its games give (or the archive's sha256)
            load_tasks(env, data_dir)  # what arrived reads as the env's tasks
        folders[env] = data_folder(env, data_dir)
    return folders


def _incomplete(env: str, items: Sequence[Any]) -> str:
    """What of a several-file env is in place and what is not, for the one line of a failed fetch ("" for one file):
    the files are fetched one by one, so a failure part-way must say which part the env still lacks."""
    if len(items) < 2:
        return ""

    def named(item: Any) -> str:
        return f"{env} (tasks)" if item.label == env else item.label

    there = [named(i) for i in items if i.path.exists()]
    missing = [named(i) for i in items if not i.path.exists()]
    needed = ("; a KG run refuses to start without its ontology (or runs without it with --kg-vocab none)"
              if env == "kg" else "")
    return (f". {env} is incomplete: in place {', '.join(there) or 'nothing'}; missing {', '.join(missing)}{needed}; "
            f"the same command fetches what is missing")


__all__ = ["TASK_SOURCES", "benchmarks", "data_folder", "load_tasks", "fetch"]
