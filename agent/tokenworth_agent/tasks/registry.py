"""``load_tasks(env, data_dir, limit=...)``: each benchmark's task source, by name.

A benchmark's tasks come from its :class:`~tokenworth_agent.benchmarks.base.Benchmark` (``tasks``: a source
with ``benchmark``, its :class:`~tokenworth_agent.tasks.base.DataFolder` under the data root, and
``load(data_dir, folders)``), found through :mod:`tokenworth_agent.core.plugins`; nothing here names one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

from tokenworth_agent.core.plugins import benchmark, installed, loadable, names
from tokenworth_agent.core.plugins import benchmarks as plugin_benchmarks
from tokenworth_agent.tasks.base import DataFolder, Task, benchmark_dir


def source(env: str) -> Any:
    """``env``'s task source (its benchmark's ``tasks``)."""
    return benchmark(env).tasks


def benchmarks(*also: str) -> list[DataFolder]:
    """The data folders a folder named directly is told by, once each: the built-ins', and those of the plugin
    benchmarks ``also`` (a plugin no one asked for is never imported, so a folder named directly is told by the
    built-ins and the benchmarks of the run)."""
    found = (b.tasks.benchmark for b in plugin_benchmarks(also).values())
    return list({id(b): b for b in found}.values())


def data_folder(env: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder ``env``'s tasks are read from: its benchmark's folder under the data root (unchecked)."""
    return benchmark_dir(source(env).benchmark, data_dir, benchmarks(env))


def load_tasks(env: str, data_dir: str | os.PathLike[str] | None = None, *, limit: int | None = None) -> list[Task]:
    """One environment's stream as typed records, in stream order (the first ``limit``); DataError says what is wrong."""
    if env not in names("benchmark"):
        raise ValueError(f"unknown environment {env!r}; expected one of {sorted(names('benchmark'))}")
    records = source(env).load(data_dir, benchmarks(env))
    return records[:limit] if limit is not None else records


def fetch(data_dir: str | os.PathLike[str] | None = None, envs: Sequence[str] | None = None,
          say: Callable[[str], None] = print, warn: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Download ``envs``' task data (default: every installed benchmark that names its data) under the data root,
    each file checked (:mod:`tokenworth_agent.tasks.download`), then load each env's tasks once; env -> the folder
    its tasks are in. A benchmark with a ``fetch`` of its own (an archive unpacked, a file shipped another way)
    does all of it itself. Without ``envs`` every plugin benchmark is loaded: one that is refused is left out, its
    one line given to ``warn``; a refused benchmark named in ``envs`` is its one-line PluginError.

    A file already there and verified is not downloaded again; the first failure is a one-line DataError."""
    from tokenworth_agent.tasks.base import DataError
    from tokenworth_agent.tasks.download import downloads, fetch_file

    if envs is None:  # every one that names its data: each plugin is loaded, a refused one left out with a warning
        loaded = loadable("benchmark", warn=warn)
        envs = tuple(name for name, b in loaded.items() if b.fetch is not None or b.downloads is not None)
    envs = tuple(dict.fromkeys(envs))
    for env in envs:  # each named is loaded and checked: a refused one is its own line
        if env in names("benchmark") or env in installed("benchmark").clashes:
            benchmark(env)
    known = tuple(e for e in envs if e in names("benchmark") and (benchmark(e).fetch is not None
                                                                   or benchmark(e).downloads is not None))
    unknown = [e for e in envs if e not in known]
    if unknown:
        fetchable = [n for n, b in plugin_benchmarks().items() if b.fetch is not None or b.downloads is not None]
        raise DataError(f"--env {','.join(unknown)}: unknown, or it names no data to fetch; data fetch knows "
                        f"{', '.join(fetchable)} and each plugin benchmark that names its data (tokenworth plugins)")
    folders = {}
    for env in envs:
        own = benchmark(env).fetch
        if own is not None:
            own(data_dir, benchmarks(env), say)
        else:
            items = downloads(env, data_dir, benchmarks(env))
            for item in items:
                try:
                    fetch_file(item, say)
                except DataError as exc:
                    raise DataError(f"{exc}{_incomplete(env, items)}") from None
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
    note = benchmark(env).data_note
    needed = f"; {note}" if note else ""
    return (f". {env} is incomplete: in place {', '.join(there) or 'nothing'}; missing {', '.join(missing)}{needed}; "
            f"the same command fetches what is missing")


__all__ = ["source", "benchmarks", "data_folder", "load_tasks", "fetch"]
