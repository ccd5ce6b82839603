"""``tokenworth``: run the lifelong benchmark, sweep TokenWorth, fetch the data.

``tokenworth`` with no arguments is ``tokenworth run`` with its defaults: the DB stream,
the simulated backbone, all five methods, seed 0, output in ``runs/db-sim-seed0``.
A run directory that already holds a (partial) run with the same settings is resumed.

Every expected failure (bad input, a busy or foreign folder, a damaged checkpoint, a full or
read-only disk, a backbone that cannot be reached) prints one ``error:`` line saying what
failed, where, and what to do, and exits non-zero; ``--debug`` shows the full traceback
instead. Ctrl-C stops a run between two tasks and exits 130; the same command resumes it.
The benchmarks have their own entry point, ``tokenworth-bench`` (``bench`` imports ``agent``,
never the reverse).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, Sequence, TypeVar

import numpy as np
import typer

from agent.budget import ACCOUNTINGS, DEFAULT_ACCOUNTING
from agent.envs.registry import ENV_NAMES
from agent.policies.registry import METHOD_NAMES, POLICIES

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="Run the lifelong benchmark, sweep TokenWorth, fetch the task data. With no command: "
                       "`tokenworth run` with its defaults.")
data_app = typer.Typer(add_completion=False, help="The LifelongAgentBench task data.")
app.add_typer(data_app, name="data")

ENVS = ENV_NAMES
INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
_DEBUG = {"on": False}

F = TypeVar("F", bound=Callable[..., Any])

# Flags shared by `run` and `sweep` (`bench agent` mirrors them): the budget accounting and the
# openai backbone's connection settings (agent/backbones/options.py has their defaults).
AccountingFlag = Annotated[str, typer.Option(help="How O_max is spent: per-call or per-task.")]
TimeoutFlag = Annotated[Optional[float], typer.Option(help="openai: read timeout per request, seconds (default 600).")]
RetryForFlag = Annotated[Optional[float], typer.Option(
    help="openai: keep retrying a failing request this long, seconds (default 300).")]
MaxRetriesFlag = Annotated[Optional[int], typer.Option(
    min=0, help="openai: at most this many retries per request (default: no limit, --retry-for bounds them).")]
ConcurrencyFlag = Annotated[Optional[int], typer.Option(
    min=1, help="openai: at most this many requests in flight (default: all of a batch at once).")]
ExtraBodyFlag = Annotated[Optional[str], typer.Option(
    help='openai: JSON object added to every request, e.g. \'{"top_k": -1}\'.')]
# In-process vLLM engine and the GPU split (agent/backbones/engine_options.py, colocation.py).
JaxMemFractionFlag = Annotated[Optional[float], typer.Option(
    help="Share of the GPU for JAX (default: what the controller needs, from its Spec, with headroom).")]
GpuMemoryUtilizationFlag = Annotated[Optional[float], typer.Option(
    help="vllm: share of the GPU's total memory for the engine (default: the card's limit minus JAX's share).")]
MaxModelLenFlag = Annotated[Optional[int], typer.Option(min=1, help="vllm: context length (default: the model's).")]
TensorParallelSizeFlag = Annotated[Optional[int], typer.Option(min=1, help="vllm: GPUs per engine (default 1).")]
DtypeFlag = Annotated[Optional[str], typer.Option(help="vllm: weights' dtype: auto, bfloat16, float16, float32.")]
EnforceEagerFlag = Annotated[Optional[bool], typer.Option(
    "--enforce-eager/--no-enforce-eager", help="vllm: no CUDA graphs (less memory, slower decoding).")]
PrefixCachingFlag = Annotated[bool, typer.Option(
    "--prefix-caching/--no-prefix-caching", help="vllm: reuse the KV cache of shared prompt prefixes.")]
BatchInvariantFlag = Annotated[bool, typer.Option(
    "--batch-invariant", help="vllm: VLLM_BATCH_INVARIANT=1, greedy replies independent of batching (slower).")]
AllowUntestedVLLMFlag = Annotated[bool, typer.Option(
    "--allow-untested-vllm", help="vllm: start even when the installed vLLM is outside the tested releases.")]
EngineArgFlag = Annotated[Optional[list[str]], typer.Option(
    help="vllm: any other EngineArgs field, KEY=VALUE (repeatable), e.g. max_num_seqs=64.")]
# Fidelity to LifelongAgentBench (agent/harness.py; docs/running.md "Harness options").
MemoryFromFlag = Annotated[str, typer.Option(
    help="Which successes write a memory: completed (reward 1 and ended by its own answer/finish, LAB's rule) "
         "or reward (reward 1 alone).")]
MemoryFormatFlag = Annotated[str, typer.Option(
    help="How a memory is injected: compact (copyable actions), transcript (LAB's raw replies and observations) "
         "or abstract (compact with OS names replaced by placeholders).")]
KGParserFlag = Annotated[str, typer.Option(help="KG reply parser: strict (exactly LAB's) or lenient.")]
KGVocabFlag = Annotated[Optional[Path], typer.Option(
    help="KG: folder with LAB's vocab.json and fb_roles; listings and types go through them.")]
InstructionsFlag = Annotated[Optional[Path], typer.Option(
    help="Folder holding <env>.txt: replaces the environment's instruction text (user turn 0).")]
ScheduleFlag = Annotated[str, typer.Option(
    help="lockstep: every stream's pending request in one batched model call per tick; continuous (openai "
         "backbone): every request in flight on its own, a stream moves on as soon as its reply is back; "
         "sequential: streams one after another, one conversation per call (for comparisons).")]


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def describe_os_error(exc: OSError) -> str:
    """One line for a filesystem failure: what, where, what to do."""
    where = exc.filename or "the run folder"
    if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
        return (f"disk full while writing {where}; free some space and rerun the same command "
                "(the run resumes after its last complete task)")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"cannot write {where} ({exc.strerror}); pass an --out folder you can write to"
    return f"{exc.strerror or exc} ({where})"


def expected_failures(function: F) -> F:
    """Turn the failures a user can cause or fix into one ``error:`` line (``--debug``: traceback)."""
    from agent.backbones.base import BackboneError
    from agent.checkpoint import CheckpointError
    from agent.data import DataError
    from agent.report import ReportError
    from agent.runfolder import RunFolderError

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from agent.interrupt import InterruptGuard

        try:
            with InterruptGuard():  # Ctrl-C during start-up stops before the first task, never mid-import
                return function(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            if _DEBUG["on"]:
                raise
            typer.echo("\ninterrupted: the records and checkpoints hold every finished task; "
                       "rerun the same command to resume", err=True)
            raise typer.Exit(INTERRUPTED) from None
        except (RunFolderError, CheckpointError, DataError, ReportError) as exc:
            if _DEBUG["on"]:
                raise
            fail(str(exc), 2)
        except BackboneError as exc:
            if _DEBUG["on"]:
                raise
            fail(f"backbone failed: {exc}; fix the backbone settings (--base-url, --model) and rerun the same "
                 "command (finished tasks are kept)", 1)
        except OSError as exc:
            if _DEBUG["on"]:
                raise
            fail(describe_os_error(exc), 1)

    return wrapper  # type: ignore[return-value]


def parse_methods(text: str) -> list[str]:
    """``--methods``: the default run's METHOD_NAMES plus the opt-in ones."""
    return parse_list("--methods", text, POLICIES.names)


def backbone_options(backbone: str, seed: int, model: str | None, base_url: str | None,
                     **connection: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(identity options, connection options): see agent/backbones/options.py."""
    from agent.backbones.options import split_options

    try:
        return split_options(backbone, seed, model=model, base_url=base_url, **connection)
    except ValueError as exc:
        fail(str(exc))
        raise  # unreachable: fail() exits


ENGINE_FLAGS = ("jax_mem_fraction", "gpu_memory_utilization", "max_model_len", "tensor_parallel_size", "dtype",
                "enforce_eager", "prefix_caching", "batch_invariant", "engine_arg", "allow_untested_vllm")


def engine_flags(values: dict[str, Any]) -> dict[str, Any]:
    """The engine/GPU-split flags out of a command's parameters (``locals()``)."""
    return {name: values[name] for name in ENGINE_FLAGS}


def engine_settings(backbone: str, flags: dict[str, Any] | None, *, model: str | None, env: str,
                    controller_streams: int) -> Any:
    """Check the engine flags and apply the GPU split (before JAX starts); one error line otherwise."""
    from agent.backbones.engine_options import engine_for_run

    try:
        engine, plan = engine_for_run(backbone, flags, model=model, env=env,
                                      controller_streams=max(1, controller_streams))
    except ValueError as exc:
        fail(str(exc))
        raise  # unreachable: fail() exits
    if plan is not None:
        typer.echo(plan.describe(), err=True)
    return engine


def open_engine(backbone: Any) -> None:
    """Load an in-process engine now (``VLLMBackbone.open``); other backbones have nothing to load.

    Called once the run folder is checked, so a busy folder fails fast; and before the first
    task, so vLLM measures free memory before JAX's pool has grown (docs/backbones.md)."""
    opener = getattr(backbone, "open", None)
    if callable(opener):
        opener()


def checked_budget(env: str, accounting: str) -> Any:
    from agent.budget import Budget

    if accounting not in ACCOUNTINGS:
        fail(f"--budget-accounting {accounting!r}: choose {' or '.join(ACCOUNTINGS)}")
    return Budget.for_env(env, accounting)


def checked_harness(envs: Sequence[str], options: dict[str, Any] | None) -> Any:
    """The run's HarnessOptions from the harness flags (agent/harness.py), checked for every env, or one error line."""
    from agent.harness import HarnessError, harness_from_cli

    try:
        harness = None
        for env in envs:
            harness = harness_from_cli(env, **{k: v for k, v in (options or {}).items() if v is not None})
        return harness
    except HarnessError as exc:
        fail(str(exc))


def check_env(env: str, kg_endpoint: str | None) -> str | None:
    if env not in ENVS:
        fail(f"unknown environment {env!r}; choose from {', '.join(ENVS)}")
    endpoint = kg_endpoint or os.environ.get("TOKENWORTH_KG_ENDPOINT")
    if env == "kg" and not endpoint:
        from agent.envs.kg import KGEndpointRequired, make_kg_environment

        try:
            make_kg_environment(None)
        except KGEndpointRequired as exc:
            fail(f"{exc} Pass --kg-endpoint URL or set TOKENWORTH_KG_ENDPOINT.")
    return endpoint


def default_out(kind: str, limit: int | None) -> Path:
    """``runs/<kind>`` plus ``-limit<N>`` for a shortened stream (so it never clashes with the full run)."""
    return Path("runs") / (kind + (f"-limit{limit}" if limit is not None else ""))


class Progress:
    """A tqdm bar per method: tasks/s, running SR and mean output tokens."""

    def __init__(self, method: str, total: int, enabled: bool, file: Any = None, first_note: str | None = None) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=f"{method:>10}", unit="task", disable=not enabled, dynamic_ncols=True,
                        file=file or sys.stderr)
        self.n = self.successes = self.tokens = 0
        self.first_note = first_note  # shown while the stream's first task runs (e.g. compiling)

    def started(self, _next_index: int) -> None:
        if self.first_note:
            self.note(self.first_note)

    def resumed(self, records: list[dict[str, Any]]) -> None:
        """Records replayed from an earlier run: counted in SR/tokens and as done, not as new work."""
        for record in records:
            self.n += 1
            self.successes += int(record["reward"])
            self.tokens += int(record["output_tokens"])
        self.bar.n = self.bar.initial = self.n  # tqdm's rate and ETA count only work done after initial
        self.bar.last_print_n = self.n
        self.bar.refresh()

    def note(self, text: str) -> None:
        """Show ``text`` on the bar until the next task finishes (e.g. while the controller compiles)."""
        self.bar.set_postfix_str(text, refresh=True)

    def __call__(self, record: dict[str, Any]) -> None:
        self.n += 1
        self.successes += int(record["reward"])
        self.tokens += int(record["output_tokens"])
        self.bar.update(1)
        self.bar.set_postfix(SR=f"{100 * self.successes / self.n:.1f}%", tok=f"{self.tokens / self.n:.1f}", refresh=False)

    def close(self) -> None:
        self.bar.close()


@app.callback(invoke_without_command=True)
def main(ctx: typer.Context,
         debug: bool = typer.Option(False, "--debug", help="Show full tracebacks instead of one error line.")) -> None:
    """With no command, run the default benchmark (same as `tokenworth run`)."""
    _DEBUG["on"] = debug
    if ctx.invoked_subcommand is None:
        run_benchmark()


OUT_HELP = "Run folder; a folder holding the same run is resumed."


@app.command()
def run(
    env: str = typer.Option("db", help="Task stream(s): db, os, kg, or a comma-separated list (one experiment)."),
    methods: str = typer.Option(",".join(METHOD_NAMES), help="Comma-separated methods; known: "
                                + ", ".join(POLICIES.names) + "."),
    backbone: str = typer.Option("sim", help="sim (default), vllm or openai."),
    seed: Optional[int] = typer.Option(None, help="Seed of the backbone and of every seeded policy (default 0)."),
    seeds: Optional[str] = typer.Option(None, help="Several seeds as one experiment, e.g. 0,1,2 (instead of --seed)."),
    grid: list[str] = typer.Option([], help="NAME=v1,v2,... (repeatable; the product is run): budget levels "
                                            "o_max, j_max, b_max, k_max, l_max, and for TokenWorth methods any "
                                            "HParams field."),
    out: Optional[Path] = typer.Option(None, help=OUT_HELP,
                                       show_default="runs/<env>-<backbone>-seed<seed>[-limit<N>]"),
    data_dir: Optional[Path] = typer.Option(None, help="Dataset folder.",
                                            show_default="$TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth/"
                                                         "lifelongagentbench"),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N tasks of each stream."),
    kg_endpoint: Optional[str] = typer.Option(None, help="SPARQL endpoint for --env kg.",
                                              show_default="$TOKENWORTH_KG_ENDPOINT"),
    model: Optional[str] = typer.Option(None, help="Model name for the vllm/openai backbones."),
    base_url: Optional[str] = typer.Option(None, help="Server URL for the openai backbone; several, comma-separated, "
                                                      "are replicas (requests spread, failover)."),
    budget_accounting: AccountingFlag = DEFAULT_ACCOUNTING,
    timeout: TimeoutFlag = None, retry_for: RetryForFlag = None, max_retries: MaxRetriesFlag = None,
    concurrency: ConcurrencyFlag = None, extra_body: ExtraBodyFlag = None,
    schedule: ScheduleFlag = "lockstep",
    jax_mem_fraction: JaxMemFractionFlag = None, gpu_memory_utilization: GpuMemoryUtilizationFlag = None,
    max_model_len: MaxModelLenFlag = None, tensor_parallel_size: TensorParallelSizeFlag = None,
    dtype: DtypeFlag = None, enforce_eager: EnforceEagerFlag = None, prefix_caching: PrefixCachingFlag = True,
    batch_invariant: BatchInvariantFlag = False, engine_arg: EngineArgFlag = None,
    allow_untested_vllm: AllowUntestedVLLMFlag = False,
    memory_from: MemoryFromFlag = "completed", memory_format: MemoryFormatFlag = "compact",
    kg_parser: KGParserFlag = "strict", kg_vocab: KGVocabFlag = None, instructions: InstructionsFlag = None,
    overwrite: bool = typer.Option(False, help="Delete the named methods' results in --out (only those, only in a "
                                               "run folder) and run them again; without it a run resumes."),
    summary_dir: Optional[Path] = typer.Option(None, help="Where summary.md/.json and the plot go.",
                                               show_default="the run folder"),
    progress: bool = typer.Option(True, help="Show progress bars."),
) -> None:
    """Run every (env, method, seed, grid point) stream over its task stream as one lockstep experiment."""
    run_benchmark(env=env, methods=methods, backbone=backbone, seed=seed, seeds=seeds, grid=grid, out=out,
                  data_dir=data_dir, limit=limit, kg_endpoint=kg_endpoint, model=model, base_url=base_url,
                  overwrite=overwrite, progress=progress, summary_dir=summary_dir,
                  budget_accounting=budget_accounting, schedule=schedule,
                  connection=dict(timeout=timeout, retry_for=retry_for, max_retries=max_retries,
                                  concurrency=concurrency, extra_body=extra_body),
                  harness=dict(memory_from=memory_from, memory_format=memory_format, kg_parser=kg_parser,
                               kg_vocab=kg_vocab, instructions=instructions),
                  engine=engine_flags(locals()))


def parse_list(flag: str, text: str, known: Sequence[str] | None = None) -> list[str]:
    items = [x.strip().lower() for x in text.split(",") if x.strip()]
    if not items:
        fail(f"{flag} {text!r}: name at least one")
    if len(set(items)) != len(items):
        fail(f"{flag} lists a value twice: {text}")
    if known is not None:
        unknown = [x for x in items if x not in known]
        if unknown:
            what = {"--env": "environment", "--methods": "method(s)"}.get(flag, flag.lstrip("-"))
            fail(f"unknown {what} {', '.join(repr(u) for u in unknown)}; choose from {', '.join(known)}")
    return items


def parse_seeds(seed: int | None, seeds: str | None) -> list[int]:
    if seed is not None and seeds is not None:
        fail("use either --seed or --seeds, not both")
    if seeds is None:
        return [0 if seed is None else seed]
    try:
        return [int(x) for x in parse_list("--seeds", seeds)]
    except ValueError:
        fail(f"--seeds {seeds!r}: expected integers like 0,1,2")
        raise  # unreachable


def experiment_folder(envs: Sequence[str], backbone: str, seeds: Sequence[int], grid: Sequence[str],
                      limit: int | None, kind: str = "") -> Path:
    """``runs/<env>-<backbone>-seed<k>`` (as before) for one env and seed; lists and a grid digest otherwise."""
    from agent.experiment.streams import digest

    seed_part = f"seed{seeds[0]}" if len(seeds) == 1 else "seeds" + "-".join(map(str, seeds))
    name = f"{kind}{'+'.join(envs)}-{backbone}-{seed_part}" + (f"-grid{digest(list(grid))[:8]}" if grid else "")
    return default_out(name, limit)


@expected_failures
def run_benchmark(env: str = "db", methods: str = ",".join(METHOD_NAMES), backbone: str = "sim",
                  seed: int | None = None, seeds: str | None = None, grid: Sequence[str] = (), out: Path | None = None,
                  data_dir: Path | None = None, limit: int | None = None, kg_endpoint: str | None = None,
                  model: str | None = None, base_url: str | None = None, overwrite: bool = False,
                  progress: bool = True, summary_dir: Path | None = None,
                  budget_accounting: str = DEFAULT_ACCOUNTING, connection: dict[str, Any] | None = None,
                  schedule: str = "lockstep", harness: dict[str, Any] | None = None,
                  engine: dict[str, Any] | None = None) -> None:
    """The body of `tokenworth run` (plain defaults, so the bare `tokenworth` can call it).

    ``harness``: the harness flags (agent/harness.py ``harness_from_cli`` arguments)."""
    from agent.experiment.streams import GridError, expand, grid_points

    envs = parse_list("--env", env, ENVS)
    method_list = parse_methods(methods)
    seed_list = parse_seeds(seed, seeds)
    budgets = {e: checked_budget(e, budget_accounting) for e in envs}
    try:
        streams = expand(envs, method_list, seed_list, budgets, grid_points(grid))
    except GridError as exc:
        fail(str(exc))
    out_dir = out or experiment_folder(envs, backbone, seed_list, grid, limit)
    single = len(envs) == 1 and len(seed_list) == 1
    settings: dict[str, Any] = {"env": envs[0] if len(envs) == 1 else ",".join(envs), "backbone": backbone,
                                "seed": seed_list[0] if len(seed_list) == 1 else seed_list, "limit": limit}
    if not single or grid:
        settings["grid"] = list(grid)
    title = (f"{'+'.join(e.upper() for e in envs)} · backbone {backbone} · "
             f"seed{'s' if len(seed_list) > 1 else ''} {','.join(map(str, seed_list))}")
    run_experiment_command(streams, envs, settings, out_dir, title, backbone=backbone, seed=seed_list[0],
                           model=model, base_url=base_url, data_dir=data_dir, limit=limit, kg_endpoint=kg_endpoint,
                           overwrite=overwrite, progress=progress, summary_dir=summary_dir, schedule=schedule,
                           accounting=budget_accounting, connection=connection, harness=harness, engine=engine)


def run_experiment_command(streams: Sequence[Any], envs: Sequence[str], settings: dict[str, Any], out_dir: Path,
                           title: str, *, backbone: str, seed: int, model: str | None, base_url: str | None,
                           data_dir: Path | None, limit: int | None, kg_endpoint: str | None, overwrite: bool,
                           progress: bool, summary_dir: Path | None, schedule: str, accounting: str,
                           connection: dict[str, Any] | None, sweep_configs: Sequence[dict[str, Any]] | None = None,
                           harness: dict[str, Any] | None = None, engine: dict[str, Any] | None = None) -> None:
    """The one front-end body of `run` and `sweep`: checks, folder, backbone, engine, summary.

    Order (docs/backbones.md): every check that needs no model (flags, grid, harness, data, GPU
    split) first; then the run folder, its locks and config; only then the backbone, and an
    in-process vLLM engine loads (``open_engine``) before the controller's JAX pool grows."""
    from agent import runfolder
    from agent.backbones.registry import make_backbone
    from agent.data import load_tasks, resolve_data_dir
    from agent.experiment import SCHEDULES, run_experiment, stream_names

    if schedule not in SCHEDULES:
        fail(f"--schedule {schedule!r}: choose {' or '.join(SCHEDULES)}")
    options_harness = checked_harness(envs, harness)
    endpoints = {e: check_env(e, kg_endpoint) for e in envs}
    endpoint = endpoints.get("kg")
    tasks = {e: load_tasks(e, data_dir, limit=limit) for e in envs}  # type: ignore[arg-type]
    controllers = sum(s.method.startswith("tokenworth") for s in streams)  # the GPU split, before JAX starts
    engine_options = engine_settings(backbone, engine, model=model, env=envs[0], controller_streams=controllers)
    options, links = backbone_options(backbone, seed, model, base_url, engine=engine_options, **(connection or {}))
    names = stream_names(streams)
    budgets = {e: checked_budget(e, accounting).as_dict() for e in envs}
    config = {**settings, "backbone_options": options, "tasks": (len(tasks[envs[0]]) if len(envs) == 1
                                                                 else {e: len(t) for e, t in tasks.items()}),
              "data_dir": str(resolve_data_dir(data_dir)),
              "budget": budgets[envs[0]] if len(envs) == 1 else budgets, "connection": links,
              "harness": (options_harness.identity(envs[0]) if len(envs) == 1
                          else {e: options_harness.identity(e) for e in envs})}
    with contextlib.ExitStack() as held:
        # folder, locks and config first: a busy or foreign folder fails before any model loads
        with runfolder.locked(*runfolder.folder_lock(out_dir), wait_s=runfolder.FOLDER_LOCK_WAIT_S):
            runfolder.check_run_folder(out_dir)
            # a sweep's --overwrite discards the whole sweep the folder holds, a run's only the named streams
            replaced = list(dict.fromkeys([*names, *runfolder.streams_in(out_dir)])) if (
                sweep_configs is not None and overwrite) else names
            for name in replaced:  # every named stream's lock before any task runs
                held.enter_context(runfolder.locked(*runfolder.method_lock(out_dir, name)))
            runfolder.prepare(out_dir, config, replaced, [*POLICIES.names, *names], overwrite=overwrite)
        try:
            bb = make_backbone(backbone, **options, **links)  # a vllm engine loads in open_engine, just below
        except (ValueError, ImportError) as exc:
            fail(str(exc))
        open_engine(bb)
        n_tasks = sum(len(tasks[s.env]) for s in streams)
        typer.echo(f"{', '.join(envs)}: {len(streams)} streams, {n_tasks} stream-tasks, backbone {backbone}, "
                   f"schedule {schedule} -> {out_dir}", err=True)
        started = time.perf_counter()
        bars = ProgressBars(progress, streams, tasks)
        try:
            result = run_experiment(streams, bb, out_dir, tasks=tasks, schedule=schedule,  # type: ignore[arg-type]
                                    kg_endpoint=endpoint, hooks=bars.hook, names=names, harness=options_harness)
        finally:
            bars.close()
        if result.batch_sizes:
            typer.echo(f"{len(result.batch_sizes)} model calls, mean batch {np.mean(result.batch_sizes):.1f}, "
                       f"max {max(result.batch_sizes)}", err=True)
        if sweep_configs is not None:
            write_sweep_summary(result, sweep_configs, out_dir, settings)
        write_summary(out_dir, summary_dir, f"{title} · {result_tasks(tasks)} tasks · O_max {accounting}", started,
                      accounting=accounting, streams=streams, names=names)


def result_tasks(tasks: dict[str, Sequence[Any]]) -> str:
    return "/".join(str(len(t)) for t in tasks.values())


class ProgressBars:
    """A bar per stream (up to 12 streams), else one bar over all stream-tasks."""

    MAX_BARS = 12

    def __init__(self, enabled: bool, streams: Sequence[Any], tasks: dict[str, Sequence[Any]]) -> None:
        self.enabled, self.tasks = enabled, tasks
        self.per_stream = len(streams) <= self.MAX_BARS
        self.bars: list[Progress] = []
        self.total: Progress | None = None
        if not self.per_stream:
            self.total = Progress("all streams", sum(len(tasks[s.env]) for s in streams), enabled)

    def hook(self, name: str, spec: Any) -> Any:
        if not self.per_stream:
            return self.total
        note = getattr(POLICIES.factory(spec.method), "first_task_note", None)
        bar = Progress(name, len(self.tasks[spec.env]), self.enabled, first_note=note)
        self.bars.append(bar)
        return bar

    def close(self) -> None:
        for bar in [*self.bars, *([self.total] if self.total else [])]:
            bar.close()


def write_summary(out_dir: Path, summary_dir: Path | None, title: str, started: float, *,
                  accounting: str | None = None, streams: Sequence[Any] | None = None,
                  names: Sequence[str] | None = None) -> None:
    """Summarise every finished stream in the folder (also those other processes ran) and print it.

    A one-env, one-seed, no-grid run gets the per-method table (every finished method in the
    folder); an experiment over several envs, seeds or grid points gets one row per
    (env, grid point, method) with SR mean ± std over seeds, and, for a grid over budget
    levels, ``budget_levels.png``.
    """
    from agent import runfolder
    from agent.checkpoint import atomic_write_json, atomic_write_text
    from agent.report import (experiment_rows, experiment_table, finished_records, markdown_table,
                              plot_budget_levels, plot_cumulative_sr, summaries_json, summarize)

    target = summary_dir or out_dir
    grouped = streams is not None and names is not None and any(n not in POLICIES.names for n in names)
    with runfolder.locked(*runfolder.folder_lock(out_dir), wait_s=runfolder.FOLDER_LOCK_WAIT_S):
        figures: list[Path] = []
        if grouped:
            assert streams is not None and names is not None
            found = finished_records(out_dir, names)
            finished = [(s, found[n]) for s, n in zip(streams, names) if n in found]
            rows = experiment_rows(finished)
            table = experiment_table(rows, title)
            payload: Any = [{k: v for k, v in r.items() if k != "reward_curve"} for r in rows]
        else:
            records = finished_records(out_dir, POLICIES.names)
            summaries = summarize(records)
            table = markdown_table(summaries, title)
            payload = [dict(row, accounting=accounting) for row in summaries_json(summaries)]
        typer.echo(table)
        try:
            atomic_write_text(target / "summary.md", table)
            atomic_write_json(target / "summary.json", payload)
            if grouped:
                figure = plot_budget_levels(rows, target / "budget_levels.png", title)
                if figure is not None:
                    figures.append(figure)
                curves = {" ".join(x for x in (r["env"], r["method"], ",".join(f"{k}={v}" for k, v in r["point"].items()))
                                   if x): [{"reward": v} for v in r["reward_curve"]]
                          for r in rows if r["reward_curve"] is not None}  # mean over seeds
                figures.append(plot_cumulative_sr(curves, target / "cumulative_sr.png", title))
            else:
                figures.append(plot_cumulative_sr(records, target / "cumulative_sr.png", title))
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or summary_dir is not None:
                raise
            typer.echo(f"note: {target} is read-only, so the summary above was not saved; "
                       "pass --summary-dir DIR to save it elsewhere", err=True)
            return
    typer.echo(f"records: {out_dir}/<stream>/records.jsonl; summary: {target}/summary.md; plots: "
               f"{', '.join(map(str, figures))}; {time.perf_counter() - started:.1f}s", err=True)


@app.command()
def sweep(
    env: str = typer.Option("db", help="Task stream: db, os or kg."),
    grid: list[str] = typer.Option([], help="NAME=v1,v2,... (repeatable); the full product is run."),
    table_a3: bool = typer.Option(False, "--table-a3", help="The spec §9 one-at-a-time sensitivity grid."),
    backbone: str = typer.Option("sim", help="sim (default), vllm or openai."),
    seed: int = typer.Option(0, help="Seed of the backbone and of TokenWorth+'s exploration."),
    out: Optional[Path] = typer.Option(None, help="Sweep folder; a folder holding the same sweep is resumed.",
                                       show_default="runs/sweep-<env>-seed<seed>[-limit<N>]"),
    data_dir: Optional[Path] = typer.Option(None, help="Dataset folder.",
                                            show_default="$TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth/"
                                                         "lifelongagentbench"),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N tasks."),
    kg_endpoint: Optional[str] = typer.Option(None, help="SPARQL endpoint for --env kg.",
                                              show_default="$TOKENWORTH_KG_ENDPOINT"),
    model: Optional[str] = typer.Option(None, help="Model name for the vllm/openai backbones."),
    base_url: Optional[str] = typer.Option(None, help="Server URL for the openai backbone; several, comma-separated, "
                                                      "are replicas (requests spread, failover)."),
    budget_accounting: AccountingFlag = DEFAULT_ACCOUNTING,
    timeout: TimeoutFlag = None, retry_for: RetryForFlag = None, max_retries: MaxRetriesFlag = None,
    concurrency: ConcurrencyFlag = None, extra_body: ExtraBodyFlag = None,
    schedule: ScheduleFlag = "lockstep",
    jax_mem_fraction: JaxMemFractionFlag = None, gpu_memory_utilization: GpuMemoryUtilizationFlag = None,
    max_model_len: MaxModelLenFlag = None, tensor_parallel_size: TensorParallelSizeFlag = None,
    dtype: DtypeFlag = None, enforce_eager: EnforceEagerFlag = None, prefix_caching: PrefixCachingFlag = True,
    batch_invariant: BatchInvariantFlag = False, engine_arg: EngineArgFlag = None,
    allow_untested_vllm: AllowUntestedVLLMFlag = False,
    memory_from: MemoryFromFlag = "completed", memory_format: MemoryFormatFlag = "compact",
    kg_parser: KGParserFlag = "strict", kg_vocab: KGVocabFlag = None, instructions: InstructionsFlag = None,
    overwrite: bool = typer.Option(False, help="Discard the sweep this folder holds (only a run folder) and "
                                               "start over; without it a sweep resumes."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    plus: bool = typer.Option(False, "--plus", help="TokenWorth+ controllers (docs/tokenworth-plus.md)."),
) -> None:
    """A TokenWorth grid: one lockstep stream per configuration (the same engine as `run`)."""
    run_sweep_command(env=env, grid=grid, table_a3=table_a3, backbone=backbone, seed=seed, out=out,
                      data_dir=data_dir, limit=limit, kg_endpoint=kg_endpoint, model=model, base_url=base_url,
                      overwrite=overwrite, progress=progress, budget_accounting=budget_accounting, plus=plus,
                      schedule=schedule,
                      connection=dict(timeout=timeout, retry_for=retry_for, max_retries=max_retries,
                                      concurrency=concurrency, extra_body=extra_body),
                      harness=dict(memory_from=memory_from, memory_format=memory_format, kg_parser=kg_parser,
                                   kg_vocab=kg_vocab, instructions=instructions),
                      engine=engine_flags(locals()))


@expected_failures
def run_sweep_command(env: str, grid: list[str], table_a3: bool, backbone: str, seed: int, out: Path | None,
                      data_dir: Path | None, limit: int | None, kg_endpoint: str | None, model: str | None,
                      base_url: str | None, overwrite: bool, progress: bool,
                      budget_accounting: str = DEFAULT_ACCOUNTING, connection: dict[str, Any] | None = None,
                      plus: bool = False, schedule: str = "lockstep", harness: dict[str, Any] | None = None,
                      engine: dict[str, Any] | None = None) -> None:
    from agent.sweep import SweepError, configs_from_grid, sweep_streams, table_a3_configs

    if env not in ENVS:
        fail(f"unknown environment {env!r}; choose from {', '.join(ENVS)}")
    budget = checked_budget(env, budget_accounting)
    try:
        if table_a3 and grid:
            raise SweepError("use either --table-a3 or --grid, not both")
        configs = table_a3_configs(env) if table_a3 else configs_from_grid(grid)
        streams = sweep_streams(env, budget, configs, seed, plus=plus)
    except SweepError as exc:
        fail(str(exc))
    out_dir = out or default_out(f"sweep-{env}-seed{seed}", limit)
    settings = {"env": env, "backbone": backbone, "seed": seed, "limit": limit, "configs": configs,
                "plus": plus, "kind": "sweep"}
    title = f"TokenWorth{'+' if plus else ''} sweep · {env.upper()} · backbone {backbone} · seed {seed}"
    run_experiment_command(streams, [env], settings, out_dir, title, backbone=backbone, seed=seed, model=model,
                           base_url=base_url, data_dir=data_dir, limit=limit, kg_endpoint=kg_endpoint,
                           overwrite=overwrite, progress=progress, summary_dir=None, schedule=schedule,
                           accounting=budget_accounting, connection=connection, sweep_configs=configs,
                           harness=harness, engine=engine)


def write_sweep_summary(result: Any, configs: Sequence[dict[str, Any]], out_dir: Path,
                        settings: dict[str, Any]) -> None:
    """``sweep.md`` / ``sweep.json``: one row per configuration (ΔSR against the preset)."""
    from agent.sweep import StreamResult, SweepResult, write_sweep_results

    sweep_result = SweepResult(settings["env"], settings["seed"],
                               [StreamResult.from_records(c, result.records[n]) for c, n in zip(configs, result.names)],
                               result.seconds, result.batch_sizes)
    typer.echo(write_sweep_results(sweep_result, out_dir))


@app.command()
def show(
    run_dir: Path = typer.Argument(..., metavar="RUN", help="A run folder (e.g. runs/db-sim-seed0)."),
    method: Optional[str] = typer.Option(None, help="Stream: a method, or in an experiment over several envs, seeds "
                                                    "or grid points its folder (e.g. db/seed1/rag@o_max=64) "
                                                    "[default: the first with records]."),
    task: Optional[int] = typer.Option(None, help="Task index in the stream [default: the first recorded]."),
) -> None:
    """Print one task's conversation as the model saw it (injection block included) and the judge's verdict."""
    from agent.show import ShowError, render

    try:
        typer.echo(render(run_dir, method, task), nl=False)
    except ShowError as exc:
        fail(str(exc))


@data_app.command("fetch")
def data_fetch(
    data_dir: Optional[Path] = typer.Option(None, help="Where to put it.",
                                            show_default="$TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth/"
                                                         "lifelongagentbench"),
) -> None:
    """Download the public dataset (needs internet and huggingface_hub)."""
    from agent.data import DataError, fetch

    try:
        target = fetch(data_dir)
    except DataError as exc:
        fail(str(exc))
    except Exception as exc:  # network errors come in many types; say what happened
        if _DEBUG["on"]:
            raise
        fail(f"download failed: {type(exc).__name__}: {exc}")
    typer.echo(f"dataset ready in {target}")


if __name__ == "__main__":  # pragma: no cover
    app()
