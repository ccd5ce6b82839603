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

This module only parses: ``run`` and ``sweep`` turn their flags into a
:class:`~tokenworth_agent.experiment.config.RunConfig` and call :func:`tokenworth_agent.experiment.launch.launch`
(the application layer), then print what it returns.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import inspect
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, Sequence, TypeVar, get_type_hints

import typer

from tokenworth_agent.experiment.config import (BackboneConfig, BudgetConfig, ConnectionConfig, DataConfig, EngineConfig,
                                     ExecutorConfig, HarnessConfig, OutputConfig, RunConfig, SlurmConfig, Streams,
                                     Sweep)
from tokenworth_agent.experiment.launch import LaunchResult, launch
from tokenworth_agent.policies.registry import POLICIES

app = typer.Typer(add_completion=False, no_args_is_help=False,
                  help="Run the lifelong benchmark, sweep TokenWorth, fetch the task data. With no command: "
                       "`tokenworth run` with its defaults.")
data_app = typer.Typer(add_completion=False, help="The task data.")
app.add_typer(data_app, name="data")

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
_DEBUG = {"on": False}

F = TypeVar("F", bound=Callable[..., Any])

# --help panels. Each option's name fits in 80 columns: flags are single (`--no-progress`, not
# `--progress/--no-progress`, whose second name would take a column of its own) and no help text
# or shown default holds a word much longer than an option name (tests/test_cli_help.py).
EXPERIMENT = "Experiment"
SWEEP = "Sweep"
BUDGET = "Budget"
HARNESS = "Data and harness"
BACKBONE = "Backbone: sim (no flags), vllm or openai"
OPENAI = "OpenAI-compatible server (--backbone openai)"
VLLM = "In-process vLLM and the GPU split (--backbone vllm)"
OUTPUT = "Output"
EXECUTOR = "Executor: local, ray or slurm (docs/distributed.md)"
PANELS = (SWEEP, EXPERIMENT, BUDGET, HARNESS, BACKBONE, OPENAI, VLLM, OUTPUT, EXECUTOR)


def _option(panel: str, help: str, *names: str, **extra: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=panel, **extra)


DEFAULT = RunConfig()  # every flag's default is the typed run's (harness/tokenworth_agent/experiment/config.py)


@dataclasses.dataclass(frozen=True)
class ExperimentFlags:
    """The options `run` and `sweep` share, declared once (:func:`with_experiment_flags` adds them to both).

    ``bench agent`` has its own argparse parser (it passes its arguments through) with the same names."""

    budget_accounting: Annotated[str, _option(
        BUDGET, "How O_max is spent: per-call (each model call may write O_max tokens) or per-task.")] = \
        DEFAULT.budget.accounting
    limit: Annotated[Optional[int], _option(EXPERIMENT, "Only the first N tasks of each stream.", min=1)] = None
    schedule: Annotated[str, _option(
        EXPERIMENT, "lockstep: every stream's pending request in one batched model call per tick; continuous "
                    "(openai backbone): every request in flight on its own, a stream moves on as soon as its reply "
                    "is back; sequential: streams one after another, one conversation per call.")] = \
        DEFAULT.schedule
    data_dir: Annotated[Optional[Path], _option(
        HARNESS, "Data root: a folder per benchmark (lifelongagentbench/, ...); a benchmark's own folder works "
                 "too.", show_default="$TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth")] = None
    kg_endpoint: Annotated[Optional[str], _option(
        HARNESS, "SPARQL endpoint for --env kg.", show_default="$TOKENWORTH_KG_ENDPOINT")] = None
    memory_from: Annotated[str, _option(
        HARNESS, "Which successes write a memory: completed (reward 1 and ended by its own answer or finish, "
                 "LAB's rule) or reward (reward 1 alone).")] = \
        DEFAULT.harness.memory_from
    memory_format: Annotated[str, _option(
        HARNESS, "How a memory is injected: compact (copyable actions), transcript (LAB's raw replies and "
                 "observations) or abstract (compact with OS names replaced by placeholders).")] = \
        DEFAULT.harness.memory_format
    kg_parser: Annotated[str, _option(HARNESS, "KG reply parser: strict (exactly LAB's) or lenient.")] = \
        DEFAULT.harness.kg_parser
    kg_vocab: Annotated[Optional[Path], _option(
        HARNESS, "KG: LAB's ontology (vocab.json, fb_roles); default: the data's; none: off.")] = None
    instructions: Annotated[Optional[Path], _option(
        HARNESS, "Folder of <env>.txt texts replacing the instructions (turn 0).")] = None
    bcb_venv: Annotated[Optional[Path], _option(
        HARNESS, "BigCodeBench: the evaluation venv the judge runs (make bcb-setup builds it).",
        show_default="$TOKENWORTH_BCB_VENV, else .venv-bcb of the checkout")] = None
    bcb_verdicts: Annotated[Optional[Path], _option(
        HARNESS, "BigCodeBench: a file of verdicts; a reply judged before for the same task is not judged "
                 "again.", show_default="kept in memory for the run")] = None
    bcb_time_limit: Annotated[float, _option(
        HARNESS, "BigCodeBench: the evaluator's limit for one task's tests, seconds.")] = \
        DEFAULT.harness.bcb_time_limit
    backbone: Annotated[str, _option(BACKBONE, "sim (simulated, the default), vllm (in process) or openai.")] = \
        DEFAULT.backbone.name
    model: Annotated[Optional[str], _option(BACKBONE, "Model name (vllm, openai): what the server serves, or a "
                                                      "Hugging Face id or local folder for vllm.")] = None
    base_url: Annotated[Optional[list[str]], _option(
        OPENAI, "Server URL, e.g. http://HOST:8000/v1; repeat it (or separate with commas) for replicas: "
                "requests spread over them and fail over.")] = None
    timeout: Annotated[Optional[float], _option(OPENAI, "Read timeout per request, seconds.",
                                                show_default="600")] = None
    retry_for: Annotated[Optional[float], _option(
        OPENAI, "While no request gets through, keep retrying this long, seconds; one window for the whole "
                "experiment, then it stops (rerun to resume).", show_default="300")] = None
    max_retries: Annotated[Optional[int], _option(
        OPENAI, "At most this many retries per request.", show_default="no limit; --retry-for bounds them",
        min=0)] = None
    concurrency: Annotated[Optional[int], _option(
        OPENAI, "At most this many requests in flight.", show_default="all of a batch at once", min=1)] = None
    extra_body: Annotated[Optional[str], _option(
        OPENAI, 'JSON object added to every request, e.g. \'{"top_k": -1}\'.')] = None
    jax_mem_fraction: Annotated[Optional[float], _option(
        VLLM, "Share of the GPU for JAX, any backbone.", show_default="what the controller needs, with headroom")] \
        = None
    gpu_memory_utilization: Annotated[Optional[float], _option(
        VLLM, "Share of the GPU's total memory for the engine.", show_default="the card's limit minus JAX's share")] \
        = None
    max_model_len: Annotated[Optional[int], _option(VLLM, "Context length.", show_default="the model's", min=1)] = None
    tensor_parallel_size: Annotated[Optional[int], _option(VLLM, "GPUs per engine.", show_default="1", min=1)] = None
    dtype: Annotated[Optional[str], _option(VLLM, "Weights' dtype: auto, bfloat16, float16, float32.")] = None
    enforce_eager: Annotated[bool, _option(VLLM, "No CUDA graphs (less memory, slower decoding).",
                                           "--enforce-eager")] = False
    no_prefix_caching: Annotated[bool, _option(VLLM, "Do not reuse the KV cache of shared prompt prefixes.",
                                               "--no-prefix-caching")] = False
    batch_invariant: Annotated[bool, _option(
        VLLM, "VLLM_BATCH_INVARIANT=1: greedy replies independent of batching (slower).", "--batch-invariant")] = False
    engine_arg: Annotated[Optional[list[str]], _option(
        VLLM, "Any other EngineArgs field, KEY=VALUE (repeatable), e.g. max_num_seqs=64.")] = None
    allow_untested_vllm: Annotated[bool, _option(
        VLLM, "Start even when the installed vLLM is outside the tested releases.", "--allow-untested-vllm")] = False
    overwrite: Annotated[bool, _option(
        OUTPUT, "Redo: delete this command's results in --out (a run's named streams, a whole sweep; only in a "
                "run folder) and start over. Without it the same command resumes.", "--overwrite")] = False
    no_progress: Annotated[bool, _option(
        OUTPUT, "No progress (bars on a terminal, else a line per tenth).",
        "--no-progress")] = False
    track: Annotated[Optional[list[str]], _option(
        OUTPUT, "Log streams live: mlflow or tensorboard.")] = None
    executor: Annotated[str, _option(
        EXECUTOR, "Who runs the streams: local (this process), ray (a Ray cluster) or slurm (a job "
                  "array).")] = DEFAULT.executor.name
    ray_address: Annotated[Optional[str], _option(
        EXECUTOR, "The Ray head, HOST:PORT; run on a node of that cluster.",
        show_default="$RAY_ADDRESS, else a new cluster here")] = None
    workers: Annotated[Optional[int], _option(
        EXECUTOR, "Ray actors (one per GPU for vllm, else per CPU) or Slurm array tasks.",
        show_default="ray: all; slurm: one per 16 streams", min=1)] = None
    streams_per_worker: Annotated[Optional[int], _option(
        EXECUTOR, "Most streams a worker keeps live at once.",
        show_default="a fair share of all", min=1)] = None
    slurm_partition: Annotated[Optional[str], _option(EXECUTOR, "Slurm partition.",
                                                      show_default="the cluster's default")] = None
    slurm_time: Annotated[int, _option(
        EXECUTOR, "Minutes per array task (then requeued; it resumes).", min=1)] = \
        DEFAULT.executor.slurm.time_min
    slurm_gpus: Annotated[Optional[int], _option(EXECUTOR, "GPUs per array task.",
                                                 show_default="vllm: its GPUs, else 0", min=0)] = None
    slurm_option: Annotated[Optional[list[str]], _option(
        EXECUTOR, "Other sbatch options, KEY=VALUE (repeatable).")] = None
    slurm_cluster: Annotated[str, _option(
        EXECUTOR, "slurm, or local (the array as processes here).")] = \
        DEFAULT.executor.slurm.cluster

    def config(self, what: Streams | Sweep, *, out: Path | None = None,
               summary_dir: Path | None = None) -> RunConfig:
        """The typed run of these flags (a bad value: :class:`~tokenworth_agent.experiment.config.ConfigError`)."""
        return RunConfig(
            what=what, budget=BudgetConfig(self.budget_accounting), schedule=self.schedule,
            data=DataConfig(data_dir=self.data_dir, limit=self.limit, kg_endpoint=self.kg_endpoint),
            harness=HarnessConfig(memory_from=self.memory_from, memory_format=self.memory_format,
                                  kg_parser=self.kg_parser, kg_vocab=self.kg_vocab, instructions=self.instructions,
                                  bcb_venv=self.bcb_venv, bcb_verdicts=self.bcb_verdicts,
                                  bcb_time_limit=self.bcb_time_limit),
            backbone=BackboneConfig(
                name=self.backbone, model=self.model,
                connection=ConnectionConfig(base_url=tuple(self.base_url or ()), timeout=self.timeout,
                                            retry_for=self.retry_for, max_retries=self.max_retries,
                                            concurrency=self.concurrency, extra_body=self.extra_body),
                engine=EngineConfig(jax_mem_fraction=self.jax_mem_fraction,
                                    gpu_memory_utilization=self.gpu_memory_utilization,
                                    max_model_len=self.max_model_len, tensor_parallel_size=self.tensor_parallel_size,
                                    dtype=self.dtype, enforce_eager=self.enforce_eager,
                                    prefix_caching=not self.no_prefix_caching, batch_invariant=self.batch_invariant,
                                    engine_arg=tuple(self.engine_arg or ()),
                                    allow_untested_vllm=self.allow_untested_vllm)),
            output=OutputConfig(out=out, summary_dir=summary_dir, overwrite=self.overwrite,
                                progress=not self.no_progress, track=tuple(self.track or ())),
            executor=ExecutorConfig(
                name=self.executor.strip().lower(), workers=self.workers, streams_per_worker=self.streams_per_worker,
                ray_address=self.ray_address,
                slurm=SlurmConfig(partition=self.slurm_partition, time_min=self.slurm_time,
                                  gpus_per_task=self.slurm_gpus, options=tuple(self.slurm_option or ()),
                                  cluster=self.slurm_cluster.strip().lower())))


def with_experiment_flags(command: F) -> F:
    """Give ``command`` (which takes ``flags: ExperimentFlags``) every :class:`ExperimentFlags` option.

    Typer reads a command's options from its signature, so the wrapper's signature is the
    command's own parameters followed by the dataclass's fields; the wrapper gathers the latter
    into one ``ExperimentFlags``."""
    hints = get_type_hints(ExperimentFlags, include_extras=True)
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
              for f in dataclasses.fields(ExperimentFlags)]
    own = inspect.signature(command, eval_str=True)

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        flags = ExperimentFlags(**{p.name: kwargs.pop(p.name) for p in shared})
        return command(**kwargs, flags=flags)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for n, p in own.parameters.items() if n != "flags"]
    # --help shows the panels in the order of their first option: this order
    wrapper.__signature__ = own.replace(  # type: ignore[attr-defined]
        parameters=sorted([*params, *shared], key=lambda p: PANELS.index(_panel(p))))
    return wrapper  # type: ignore[return-value]


def _panel(parameter: inspect.Parameter) -> str:
    info = getattr(parameter.annotation, "__metadata__", (None,))[0]
    return getattr(info, "rich_help_panel", None) or EXPERIMENT


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
    from tokenworth_agent.backbones.base import BackboneError, ServerUnreachable
    from tokenworth_agent.envs.base import InfrastructureError
    from tokenworth_agent.experiment.config import ConfigError
    from tokenworth_agent.experiment.plan import ExecutorLost, LaunchError
    from tokenworth_agent.results.record import RecordError
    from tokenworth_agent.results.report import ReportError
    from tokenworth_agent.storage.checkpoint import CheckpointError
    from tokenworth_agent.storage.runfolder import RunFolderError
    from tokenworth_agent.tasks import DataError

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from tokenworth_agent.core.interrupt import InterruptGuard

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
        except (ConfigError, LaunchError, RunFolderError, CheckpointError, DataError, ReportError, RecordError) as exc:
            if _DEBUG["on"]:
                raise
            fail(str(exc), 2)
        except (ServerUnreachable, ExecutorLost) as exc:  # its message is whole: what, the cause, "rerun to resume"
            if _DEBUG["on"]:
                raise
            fail(str(exc), 1)
        except InfrastructureError as exc:  # the environment's machinery, never a task's failure
            if _DEBUG["on"]:
                raise
            fail(f"{str(exc).rstrip('.')}; the run stopped before recording that task: fix it and rerun the same "
                 "command to resume (finished tasks are kept)", 1)
        except BackboneError as exc:
            if _DEBUG["on"]:
                raise
            fail(f"backbone failed: {str(exc).rstrip('.')}; fix the backbone settings (--base-url, --model) and "
                 "rerun the same command to resume (finished tasks are kept)", 1)
        except OSError as exc:
            if _DEBUG["on"]:
                raise
            fail(describe_os_error(exc), 1)

    return wrapper  # type: ignore[return-value]


def present(result: LaunchResult) -> None:
    """Print a launch's table (stdout), then where everything is (stderr)."""
    typer.echo(result.table)
    summary = result.summary
    if not summary.saved:
        typer.echo(f"note: {summary.folder} is read-only, so the summary above was not saved; "
                   "pass --summary-dir DIR to save it elsewhere", err=True)
        return
    typer.echo(f"records: {result.plan.out_dir}/<stream>/records.jsonl; summary: {summary.folder}/summary.md; plots: "
               f"{', '.join(map(str, summary.figures))}; {result.seconds:.1f}s", err=True)


def parse_list(flag: str, text: str) -> tuple[str, ...]:
    """``a,b,c`` as (a, b, c), trimmed and lower-cased; the config checks the values."""
    items = tuple(x.strip().lower() for x in text.split(",") if x.strip())
    if not items:
        fail(f"{flag} {text!r}: name at least one")
    return items


def parse_seeds(seed: int | None, seeds: str | None) -> tuple[int, ...]:
    if seed is not None and seeds is not None:
        fail("use either --seed or --seeds, not both")
    if seeds is None:
        return (Streams().seeds[0] if seed is None else seed,)
    try:
        return tuple(int(x) for x in parse_list("--seeds", seeds))
    except ValueError:
        fail(f"--seeds {seeds!r}: expected integers like 0,1,2")
        raise  # unreachable


@app.callback(invoke_without_command=True)
def main(ctx: typer.Context,
         debug: bool = typer.Option(False, "--debug", help="Show full tracebacks instead of one error line.")) -> None:
    """With no command, run the default benchmark (same as `tokenworth run`)."""
    _DEBUG["on"] = debug
    if ctx.invoked_subcommand is None:
        run_command(ExperimentFlags())


@app.command()
@with_experiment_flags
def run(
    env: Annotated[str, _option(EXPERIMENT, "Task stream(s): db, os, kg, bigcodebench, alfworld, or a "
                                            "comma-separated list (one experiment).")] = ",".join(Streams().envs),
    methods: Annotated[str, _option(EXPERIMENT, "Comma-separated methods; known: " + ", ".join(POLICIES.names) + ".",
                                    show_default=", ".join(Streams().methods))] = ",".join(Streams().methods),
    seed: Annotated[Optional[int], _option(EXPERIMENT, "Seed of the backbone and of every seeded policy.",
                                           show_default=str(Streams().seeds[0]))] = None,
    seeds: Annotated[Optional[str], _option(EXPERIMENT, "Several seeds as one experiment, e.g. 0,1,2 (instead of "
                                                        "--seed).")] = None,
    grid: Annotated[Optional[list[str]], _option(
        EXPERIMENT, "NAME=v1,v2,... (repeatable; the product is run): budget levels o_max, j_max, b_max, k_max, "
                    "l_max, and for TokenWorth methods any HParams field.")] = None,
    out: Annotated[Optional[Path], _option(
        OUTPUT, "Run folder; one holding the same run is resumed.",
        show_default="a folder under runs/ named after the settings, e.g. runs/db-sim-seed0")] = None,
    summary_dir: Annotated[Optional[Path], _option(
        OUTPUT, "Where summary.md/.json and the plots go.", show_default="the run folder")] = None,
    *, flags: ExperimentFlags,
) -> None:
    """Run every (env, method, seed, grid point) stream over its task stream as one lockstep experiment."""
    run_command(flags, env=env, methods=methods, seed=seed, seeds=seeds, grid=grid or [], out=out,
                summary_dir=summary_dir)


@expected_failures
def run_command(flags: ExperimentFlags, *, env: str = ",".join(Streams().envs),
                methods: str = ",".join(Streams().methods), seed: int | None = None, seeds: str | None = None,
                grid: Sequence[str] = (), out: Path | None = None, summary_dir: Path | None = None) -> LaunchResult:
    """The body of `tokenworth run` (plain defaults, so the bare `tokenworth` can call it)."""
    what = Streams(envs=parse_list("--env", env), methods=parse_list("--methods", methods),
                   seeds=parse_seeds(seed, seeds), grid=tuple(grid))
    result = launch(flags.config(what, out=out, summary_dir=summary_dir))
    present(result)
    return result


@app.command()
@with_experiment_flags
def sweep(
    env: Annotated[str, _option(SWEEP, "Task stream: db, os, kg or bigcodebench.")] = Sweep().env,
    grid: Annotated[Optional[list[str]], _option(SWEEP, "NAME=v1,v2,... (repeatable); the full product is "
                                                        "run.")] = None,
    table_a3: Annotated[bool, _option(SWEEP, "The spec §9 one-at-a-time sensitivity grid.", "--table-a3")] = False,
    plus: Annotated[bool, _option(SWEEP, "TokenWorth+ controllers (docs/tokenworth-plus.md).", "--plus")] = False,
    seed: Annotated[int, _option(SWEEP, "Seed of the backbone and of TokenWorth+'s exploration.")] = Sweep().seed,
    out: Annotated[Optional[Path], _option(
        OUTPUT, "Sweep folder; one holding the same sweep is resumed.", show_default="runs/sweep-ENV-seedSEED")] \
        = None,
    *, flags: ExperimentFlags,
) -> None:
    """A TokenWorth grid: one lockstep stream per configuration (the same engine as `run`)."""
    sweep_command(flags, env=env, grid=grid or [], table_a3=table_a3, plus=plus, seed=seed, out=out)


@expected_failures
def sweep_command(flags: ExperimentFlags, *, env: str, grid: Sequence[str], table_a3: bool, plus: bool, seed: int,
                  out: Path | None) -> LaunchResult:
    what = Sweep(env=env.strip().lower(), seed=seed, grid=tuple(grid), table_a3=table_a3, plus=plus)
    result = launch(flags.config(what, out=out))
    present(result)
    return result


@app.command()
def show(
    run_dir: Path = typer.Argument(..., metavar="RUN", help="A run folder (e.g. runs/db-sim-seed0)."),
    method: Optional[str] = typer.Option(None, help="Stream: a method, or in an experiment over several envs, seeds "
                                                    "or grid points its folder (e.g. db/seed1/rag@o_max=64).",
                                         show_default="the first with records"),
    task: Optional[int] = typer.Option(None, help="Task index in the stream.", show_default="the first recorded"),
) -> None:
    """Print one task's conversation as the model saw it (injection block included) and the judge's verdict."""
    from tokenworth_agent.results.show import ShowError, render

    try:
        typer.echo(render(run_dir, method, task), nl=False)
    except ShowError as exc:
        fail(str(exc))


kg_app = typer.Typer(add_completion=False, help="A local Freebase SPARQL endpoint (Virtuoso 7.2.5) for the KG stream.")
app.add_typer(kg_app, name="kg")


@kg_app.command("serve")
def kg_serve(
    dump: Path = typer.Option(..., help="Freebase RDF: a .nt, .nt.gz, .ttl or .ttl.gz file, or a folder of them."),
    port: int = typer.Option(8890, help="SPARQL/HTTP port on 127.0.0.1."),
    folder: Path = typer.Option(Path("kg-virtuoso"), "--dir", help="Database folder (reused: loaded once)."),
    isql_port: Optional[int] = typer.Option(None, help="Virtuoso's ISQL port.", show_default="port + 10000"),
    memory: Optional[float] = typer.Option(None, help="Buffer pool in GiB.", show_default="15% of RAM"),
    foreground: bool = typer.Option(False, "--foreground", help="Stay attached; Ctrl-C stops the server."),
) -> None:
    """Load a Freebase dump into Virtuoso once and serve it (in the background) for --kg-endpoint."""
    import time

    from tokenworth_agent.envs.virtuoso import VirtuosoError, serve

    try:
        served = serve(dump, folder, port=port, isql_port=isql_port,
                       memory_mb=None if memory is None else max(64, int(memory * 1024)), echo=typer.echo)
    except VirtuosoError as exc:
        fail(str(exc))
    if served.already_running:
        typer.echo(f"already serving {served.folder} (loaded before; not reloaded)")
    else:
        loaded = f"loaded in {served.load_seconds:.1f} s" if served.loaded_now else "already loaded, not reloaded"
        typer.echo(f"Virtuoso started in {served.start_seconds:.1f} s on {served.folder} ({loaded})")
    typer.echo(f"endpoint: --kg-endpoint {served.url}")
    if not foreground:
        typer.echo(f"stop it with: tokenworth kg stop --dir {served.folder}")
        return
    typer.echo("serving in the foreground; Ctrl-C stops the server")
    try:
        while served.server.running():
            time.sleep(1.0)
        fail(f"Virtuoso exited: {served.server.log_tail()}", 1)
    except KeyboardInterrupt:
        served.server.stop()
        typer.echo("stopped")


@kg_app.command("stop")
def kg_stop(folder: Path = typer.Option(Path("kg-virtuoso"), "--dir", help="The folder given to kg serve.")) -> None:
    """Stop the Virtuoso server of a folder (the database stays; kg serve restarts it without reloading)."""
    from tokenworth_agent.envs.virtuoso import VirtuosoError, stop_folder

    try:
        stopped = stop_folder(folder)
    except VirtuosoError as exc:
        fail(str(exc))
    typer.echo(f"stopped the server of {folder}" if stopped else f"no server was running for {folder}")


@data_app.command("fetch")
def data_fetch(
    data_dir: Optional[Path] = typer.Option(None, help="Data root: each benchmark goes into its folder under it "
                                                       "(a benchmark's folder named directly is used as it is).",
                                            show_default="$TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth"),
    env: str = typer.Option("db,os,kg,bigcodebench,alfworld",
                            help="Which benchmarks, comma-separated: db, os, kg, bigcodebench, alfworld."),
) -> None:
    """Download the task data (needs internet), each file checked against its recorded checksum.

    An interrupted download resumes; a file already there and verified is not downloaded again."""
    from tokenworth_agent.tasks import DataError, fetch

    envs = [e.strip().lower() for e in env.split(",") if e.strip()]
    if not envs:
        fail("--env names no benchmark; use some of db, os, kg, bigcodebench, alfworld")
    try:
        folders = fetch(data_dir, envs=envs, say=typer.echo)
    except DataError as exc:
        fail(" ".join(str(exc).split()))
    except Exception as exc:  # anything else that goes wrong on the way; say what happened
        if _DEBUG["on"]:
            raise
        fail(f"download failed: {type(exc).__name__}: {exc}")
    for name, folder in folders.items():
        typer.echo(f"{name}: tasks ready in {folder}")


track_app = typer.Typer(add_completion=False, help="Send a run to a tracker after the fact (docs/running.md, Tracking).")
app.add_typer(track_app, name="track")


def _tracked(function: Callable[[], Any]) -> Any:
    """Run a ``track`` command's body; a bad folder or URI is one ``error:`` line."""
    from tokenworth_agent.tracking import TrackError

    try:
        return function()
    except TrackError as exc:
        if _DEBUG["on"]:
            raise
        fail(str(exc))
    except ImportError as exc:
        fail(f"{exc}; install the tracking extra: pip install 'tokenworth-agent[track]'")


def _said(sent: Any, what: str) -> None:
    typer.echo(f"{what}: {sent.steps} task steps of {sent.streams} streams sent")
    if sent.left:
        typer.echo(sent.left, err=True)
        raise typer.Exit(1)


@track_app.command("replay")
def track_replay(run_dir: Path = typer.Argument(..., metavar="RUN", help="A run folder whose tracking-undelivered.jsonl "
                                                                        "holds what a run could not send.")) -> None:
    """Send what a tracked run could not send (RUN/tracking-undelivered.jsonl) to where it was meant to go."""
    from tokenworth_agent.tracking.replay import replay

    _said(_tracked(lambda: replay(run_dir)), "replayed")


@track_app.command("send")
def track_send(
    run_dir: Path = typer.Argument(..., metavar="RUN", help="A run folder."),
    to: Optional[str] = typer.Option(None, "--to", help="The MLflow tracking URI, e.g. http://HOST:5000.",
                                     show_default="$MLFLOW_TRACKING_URI"),
    track: Optional[list[str]] = typer.Option(None, "--track", help="mlflow and/or tensorboard.",
                                              show_default="mlflow"),
) -> None:
    """Send a whole run from its records to MLflow (or write its TensorBoard events); steps already there are skipped."""
    from tokenworth_agent.tracking.replay import send

    _said(_tracked(lambda: send(run_dir, to=to, backends=tuple(track or ("mlflow",)))), "sent")


if __name__ == "__main__":  # pragma: no cover
    app()
