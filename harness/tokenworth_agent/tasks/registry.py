"""``load_tasks(env, data_dir, limit=...)``: each environment's task source, by name.

An entry is a source object with ``env``, ``benchmark`` (its :class:`~tokenworth_agent.tasks.base.Benchmark`:
the folder under the data root) and ``load(data_dir, benchmarks)``, imported lazily. Adding an
environment's tasks is a record module with its ``SOURCE`` and one line here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

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


def fetch(data_dir: str | os.PathLike[str] | None = None, envs: Sequence[str] | None = None) -> Path:
    """Download LifelongAgentBench (``envs``: all its streams) into its folder under the data root, and check
    what arrived."""
    from tokenworth_agent.tasks.lab import ENV_SUBDIR, LAB, download

    target = benchmark_dir(LAB, data_dir, benchmarks())
    envs = tuple(ENV_SUBDIR) if envs is None else tuple(envs)
    download(target, envs)
    for env in envs:
        load_tasks(env, target)
    return target


__all__ = ["TASK_SOURCES", "benchmarks", "data_folder", "load_tasks", "fetch"]
