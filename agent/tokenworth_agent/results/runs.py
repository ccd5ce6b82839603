"""Reading run folders: every stream of a run with its identity and typed records, and one table of them all.

The one place that turns a run folder (:mod:`tokenworth_agent.storage.runfolder`) into data for analysis:
the statistics (:mod:`tokenworth_agent.results.compare`), the notebooks and the Inspect export read runs
through it.

* :func:`streams` — the run's streams (:class:`Stream`): where each lives (``name``, the folder under the run),
  what it is (``env``, ``method``, ``seed``, grid ``point``, ``budget``, controller ``hparams``), the run's
  ``config.json``, whether its checkpoint says it ``finished``, and its records (:class:`~.record.TaskRecord`).
  Finished streams and partial ones (a run stopped or still running) alike: a partial stream holds the
  records on disk, a half-written last line (a process killed mid-write) left out.
* :func:`load_run` — a :class:`pandas.DataFrame`, one row per record (:data:`COLUMNS`).

Identity: each record names its stream (``record.stream``: env, method, seed, budget, hparams, and ``order``
in a run of several task orders, absent meaning 0), so that is read first; the folder name
(``[<env>/][seed<k>/][order<k>/]<method>[@<grid point>]``,
:mod:`tokenworth_agent.experiment.streams`) and ``config.json`` fill in what a stream without records or of an
older release lacks. The grid point (``o_max=64``, ``eta_max=0.1``) is only in the folder name.

A stream's **conditions** (:meth:`Stream.conditions`) are the settings two streams must share to be compared
task by task: the backbone and its options (but the seed), the stream's budget, the harness settings and
the task data. The task order is checked on the records themselves (:mod:`~.compare`). Releases are not
among them: ``config.json`` lists them only for the streams its run made, so two runs made apart (one of
``standard``, one of ``rag``) would differ there by construction; each stream's own entry is
:attr:`Stream.release`, and :func:`~.compare.release_difference` compares what two streams both record.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from tokenworth_agent.results.record import RecordError, TaskRecord
from tokenworth_agent.storage import runfolder
from tokenworth_agent.storage.checkpoint import CheckpointError, load_checkpoint

# The columns of load_run's table, in order (see load_run's docstring for their meaning).
COLUMNS = ("run", "stream", "env", "method", "seed", "order", "point", "finished", "index", "task_id", "reward", "status",
           "output_tokens", "execution_tokens", "auxiliary_tokens", "rounds", "skills", "injected_memory_ids",
           "bank_size", "error", "time_s")

# config.json entries that do not change what a task's outcome means: where things are, how many tasks, and
# the run's axes (each stream's own env, seed and budget are compared on the stream itself).
_NOT_CONDITIONS = frozenset({"connection", "data_dir", "limit", "tasks", "env", "seed", "grid", "configs", "plus",
                             "kind", "budget", "releases", "orders", "order"})
# How deep a stream folder can lie: <env>/seed<k>/order<k>/<method>.
STREAM_DEPTH = 4


class RunError(ValueError):
    """A folder that is not a run folder, or a stream whose records cannot be read; the message says which."""


@dataclasses.dataclass(frozen=True)
class Stream:
    """One stream of a run folder: its identity, the run's config, and its records in task order."""

    run: Path  # the run folder
    name: str  # the stream's folder under the run, e.g. "rag" or "db/seed1/rag@o_max=64"
    env: str
    method: str
    seed: int
    point: tuple[tuple[str, float | int], ...]  # the grid point, in the folder name's order; () for none
    budget: Mapping[str, Any]  # the stream's budget (Budget.as_dict())
    hparams: Mapping[str, Any]  # the controller's overrides (TokenWorth methods in a grid), else {}
    config: Mapping[str, Any]  # the run's config.json
    finished: bool  # its checkpoint says every task ran
    records: tuple[TaskRecord, ...]
    order: int = 0  # the task order (0: the benchmark's own; k > 0 a fixed permutation of the same tasks)

    @property
    def point_label(self) -> str:
        """The grid point as the folder names it (``o_max=64``), ``""`` for none."""
        return ",".join(f"{k}={v}" for k, v in self.point)

    @property
    def arm(self) -> str:
        """What is compared: the method, and its controller overrides when a grid sets them
        (``tokenworth@eta_max=0.1``). Budget axes are not part of it: they are the conditions."""
        from tokenworth_agent.core.budget import BUDGET_AXES

        own = [(k, v) for k, v in self.point if k not in BUDGET_AXES]
        return self.method + ("@" + ",".join(f"{k}={v}" for k, v in own) if own else "")

    @property
    def budget_point(self) -> tuple[tuple[str, float | int], ...]:
        """The budget axes of the grid point (``(("o_max", 64),)``): streams pair only within one."""
        from tokenworth_agent.core.budget import BUDGET_AXES

        return tuple((k, v) for k, v in self.point if k in BUDGET_AXES)

    def conditions(self) -> dict[str, Any]:
        """The settings a stream must share with another to be paired task by task (module docstring)."""
        config = {k: _for_env(v, self.env) for k, v in self.config.items() if k not in _NOT_CONDITIONS}
        options = config.get("backbone_options")
        if isinstance(options, Mapping):
            config["backbone_options"] = {k: v for k, v in options.items() if k != "seed"}
        return {**config, "budget": dict(self.budget)}

    @property
    def release(self) -> Mapping[str, Any] | None:
        """This stream's release entry in ``config.json``: its method's, benchmark's and backbone's
        ``distribution version`` (:mod:`tokenworth_agent.experiment.releases`); None for a stream made before
        releases were recorded."""
        entry = (self.config.get("releases") or {}).get(self.name)
        return entry if isinstance(entry, Mapping) else None

    def rewards(self) -> list[int]:
        return [r.reward for r in self.records]


def _for_env(value: Any, env: str) -> Any:
    """A config entry of a several-env run (and ``data_source`` always) is a dict keyed by env: this env's
    part of it. No other entry has an env's name as a key."""
    if isinstance(value, Mapping) and env in value:
        return value[env]
    return value


def _number(text: str) -> float | int | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def parse_name(name: str) -> tuple[str | None, int | None, str, tuple[tuple[str, float | int], ...], int | None]:
    """``[<env>/][seed<k>/][order<k>/]<method>[@k=v,...]`` → (env or None, seed or None, method, grid point,
    order or None)."""
    parts = name.split("/")
    leaf, env, seed, order = parts[-1], None, None, None
    for part in parts[:-1]:
        if part.startswith("seed") and part[4:].lstrip("-").isdigit():
            seed = int(part[4:])
        elif part.startswith("order") and part[5:].isdigit():
            order = int(part[5:])
        else:
            env = part
    method, _, label = leaf.partition("@")
    point = tuple((k, _number(v)) for k, _, v in (item.partition("=") for item in label.split(",") if item)) \
        if label else ()
    return env, seed, method, point, order  # type: ignore[return-value]


def read_stream_records(path: Path) -> list[TaskRecord]:
    """A stream's records, typed; a half-written last line (a killed writer) is left out, any other bad line
    is a :class:`RunError` naming it."""
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # the last line had no newline: cut short by a kill
                break
            raise RunError(f"{path}:{number} is not valid JSON") from None
        try:
            records.append(TaskRecord.from_json(raw, f"{path}:{number}"))
        except RecordError as exc:
            raise RunError(str(exc)) from None
    return records


def _finished(folder: Path) -> bool:
    try:
        state = load_checkpoint(folder / runfolder.CHECKPOINT)
    except CheckpointError:
        return False
    return bool(state and state.get("finished"))


def _config(run: Path) -> dict[str, Any]:
    if not run.is_dir():
        raise RunError(f"{run} is not a folder; pass a run folder (e.g. runs/db-sim-seed0)")
    try:
        config = runfolder.read_config(run)
    except runfolder.RunFolderError as exc:
        raise RunError(str(exc)) from None
    if config is None:
        raise RunError(f"{run} is not a run folder (no {runfolder.CONFIG}); pass a folder `tokenworth run` wrote")
    return config


def _in_order(names: Sequence[str]) -> list[str]:
    """Stream names grouped by their env/seed folders, methods in the registry's order (the tables' order)."""
    from tokenworth_agent.policies.registry import POLICIES

    order = {m: i for i, m in enumerate(POLICIES.names)}

    def key(name: str) -> tuple[Any, ...]:
        folders = name.split("/")[:-1]
        _, seed, method, point, number = parse_name(name)
        # seed and order folders by number (order10 after order2), not as text
        named = [f for f in folders if not (f.startswith(("seed", "order")) and f.lstrip("seedorder-").isdigit())]
        return (len(folders), named, seed or 0, number or 0, point, order.get(method, len(order)), method)

    return sorted(names, key=key)


def stream_names(run: str | Path) -> list[str]:
    """The names of the run's streams that hold results: by env and seed folder, then in the methods' order."""
    run = Path(run)
    _config(run)
    return _in_order(runfolder.streams_in(run, depth=STREAM_DEPTH))


def streams(run: str | Path, *, finished_only: bool = False, names: Sequence[str] | None = None) -> list[Stream]:
    """Every stream of the run folder ``run`` that holds results (see the module docstring).

    ``finished_only``: only those whose checkpoint says they finished. ``names``: only these streams
    (a name the run lacks is a :class:`RunError` listing those it has)."""
    run = Path(run)
    config = _config(run)
    present = _in_order(runfolder.streams_in(run, depth=STREAM_DEPTH))
    if names is not None:
        missing = [n for n in names if n not in present]
        if missing:
            raise RunError(f"{run} has no stream {', '.join(missing)}; it has: {', '.join(present) or 'none'}")
        present = list(names)
    found = []
    for name in present:
        stream = read_stream(run, name, config)
        if stream.finished or not finished_only:
            found.append(stream)
    return found


def read_stream(run: Path, name: str, config: Mapping[str, Any] | None = None) -> Stream:
    """One stream of ``run`` by its folder name."""
    config = _config(run) if config is None else config
    records = read_stream_records(run / name / runfolder.RECORDS)
    env, seed, method, point, order = parse_name(name)
    described = next((r.stream for r in records if r.stream), None) or {}
    env = described.get("env") or (records[0].env if records else None) or env or str(config["env"]).split(",")[0]
    method = described.get("method") or (records[0].method if records else None) or method
    if "seed" in described:
        seed = int(described["seed"])
    elif seed is None:
        seed = int(config["seed"] if not isinstance(config["seed"], list) else config["seed"][0])
    order = int(described["order"]) if "order" in described else (order or 0)  # absent: the benchmark's own
    budget = described.get("budget") or _for_env(config.get("budget") or {}, env)
    return Stream(run=run, name=name, env=str(env), method=str(method), seed=int(seed), point=point,
                  budget=dict(budget), hparams=dict(described.get("hparams") or {}), config=dict(config),
                  finished=_finished(run / name), records=tuple(records), order=order)


def iter_rows(stream: Stream) -> Iterator[dict[str, Any]]:
    """One :func:`load_run` row per record of ``stream``."""
    for r in stream.records:
        yield {"run": str(stream.run), "stream": stream.name, "env": stream.env, "method": stream.method,
               "seed": stream.seed, "order": stream.order, "point": stream.point_label, "finished": stream.finished, "index": r.index,
               "task_id": r.task_id, "reward": r.reward, "status": r.status, "output_tokens": r.output_tokens,
               "execution_tokens": r.execution_tokens, "auxiliary_tokens": r.auxiliary_tokens, "rounds": r.rounds,
               "skills": list(r.skill_list), "injected_memory_ids": list(r.injected_memory_ids)
               or ([r.injected_memory_id] if r.injected_memory_id is not None else []),
               "bank_size": r.bank_size, "error": r.error, "time_s": r.time_s}


def load_run(run: str | Path, *, finished_only: bool = False) -> Any:
    """The run folder ``run`` as a :class:`pandas.DataFrame`, one row per task record of every stream.

    Columns (:data:`COLUMNS`):

    * ``run``: the run folder, as given; ``stream``: the stream's folder under it (``rag``,
      ``db/seed1/rag@o_max=64``);
    * ``env``, ``method``, ``seed``: the stream's environment, method (policy) and seed (of the backbone
      and of seeded policies); ``order``: its task order (0 the benchmark's own, k > 0 a fixed permutation
      of the same task ids); ``point``: its grid point as the folder names it (``o_max=64``), ``""`` for
      none; ``finished``: whether its checkpoint says it finished (False: a partial stream);
    * ``index``, ``task_id``: the task's place in the stream (0..N-1) and its id (``db-17``);
    * ``reward``: 0 or 1, the environment's verdict; ``status``: how the episode ended (``completed``,
      ``round_limit``, ``invalid_action``, ...);
    * ``output_tokens``: execution + auxiliary tokens (what OutputTok averages), ``execution_tokens`` and
      ``auxiliary_tokens`` each; ``rounds``: the model turns of the episode;
    * ``skills``: the task's skill list (a list of str); ``injected_memory_ids``: the memories injected
      into the task's prompt (a list of int, empty for none); ``bank_size``: memories in the bank when
      the task ran;
    * ``error``: the task's error text (None for none); ``time_s``: the task's wall clock (the one field
      that does not replay).

    ``finished_only``: leave out partial streams. Rows are in stream order, then task order.
    """
    import pandas as pd

    rows = [row for stream in streams(run, finished_only=finished_only) for row in iter_rows(stream)]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.astype({"seed": "int64", "order": "int64", "index": "int64", "reward": "int64", "output_tokens": "int64",
                         "execution_tokens": "int64", "auxiliary_tokens": "int64", "rounds": "int64",
                         "bank_size": "int64", "finished": "bool", "time_s": "float64"})


__all__ = ["COLUMNS", "RunError", "Stream", "streams", "read_stream", "read_stream_records", "stream_names",
           "parse_name", "iter_rows", "load_run"]
