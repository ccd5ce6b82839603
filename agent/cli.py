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
from typing import Annotated, Any, Callable, Optional, TypeVar

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
ConcurrencyFlag = Annotated[Optional[int], typer.Option(min=1, help="openai: requests in flight at once (default 8).")]
ExtraBodyFlag = Annotated[Optional[str], typer.Option(
    help='openai: JSON object added to every request, e.g. \'{"top_k": -1}\'.')]


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
    methods = [m.strip().lower() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in POLICIES]  # the default run's METHOD_NAMES plus opt-in ones
    if unknown or not methods:
        fail(f"unknown method(s) {unknown or [text]}; choose from {','.join(POLICIES.names)}")
    if len(set(methods)) != len(methods):
        fail(f"--methods lists a method twice: {text}")
    return methods


def backbone_options(backbone: str, seed: int, model: str | None, base_url: str | None,
                     **connection: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(identity options, connection options): see agent/backbones/options.py."""
    from agent.backbones.options import split_options

    try:
        return split_options(backbone, seed, model=model, base_url=base_url, **connection)
    except ValueError as exc:
        fail(str(exc))
        raise  # unreachable: fail() exits


def checked_budget(env: str, accounting: str) -> Any:
    from agent.budget import Budget

    if accounting not in ACCOUNTINGS:
        fail(f"--budget-accounting {accounting!r}: choose {' or '.join(ACCOUNTINGS)}")
    return Budget.for_env(env, accounting)


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

    def __init__(self, method: str, total: int, enabled: bool, file: Any = None) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=f"{method:>10}", unit="task", disable=not enabled, dynamic_ncols=True,
                        file=file or sys.stderr)
        self.n = self.successes = self.tokens = 0

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
    env: str = typer.Option("db", help="Task stream: db, os or kg."),
    methods: str = typer.Option(",".join(METHOD_NAMES), help="Comma-separated methods, run in this order; "
                                f"known: {', '.join(POLICIES.names)}."),
    backbone: str = typer.Option("sim", help="sim (default), vllm or openai."),
    seed: int = typer.Option(0, help="Seed of the backbone and of every seeded policy."),
    out: Optional[Path] = typer.Option(None, help=OUT_HELP,
                                       show_default="runs/<env>-<backbone>-seed<seed>[-limit<N>]"),
    data_dir: Optional[Path] = typer.Option(None, help="Dataset folder.",
                                            show_default="$TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth/"
                                                         "lifelongagentbench"),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N tasks of the stream."),
    kg_endpoint: Optional[str] = typer.Option(None, help="SPARQL endpoint for --env kg.",
                                              show_default="$TOKENWORTH_KG_ENDPOINT"),
    model: Optional[str] = typer.Option(None, help="Model name for the vllm/openai backbones."),
    base_url: Optional[str] = typer.Option(None, help="Server URL for the openai backbone."),
    budget_accounting: AccountingFlag = DEFAULT_ACCOUNTING,
    timeout: TimeoutFlag = None, retry_for: RetryForFlag = None, max_retries: MaxRetriesFlag = None,
    concurrency: ConcurrencyFlag = None, extra_body: ExtraBodyFlag = None,
    overwrite: bool = typer.Option(False, help="Delete the named methods' results in --out (only those, only in a "
                                               "run folder) and run them again; without it a run resumes."),
    summary_dir: Optional[Path] = typer.Option(None, help="Where summary.md/.json and the plot go.",
                                               show_default="the run folder"),
    progress: bool = typer.Option(True, help="Show progress bars."),
) -> None:
    """Run each method over the full stream, in dataset order, and write records + summary + plot."""
    run_benchmark(env=env, methods=methods, backbone=backbone, seed=seed, out=out, data_dir=data_dir, limit=limit,
                  kg_endpoint=kg_endpoint, model=model, base_url=base_url, overwrite=overwrite, progress=progress,
                  summary_dir=summary_dir, budget_accounting=budget_accounting,
                  connection=dict(timeout=timeout, retry_for=retry_for, max_retries=max_retries,
                                  concurrency=concurrency, extra_body=extra_body))


@expected_failures
def run_benchmark(env: str = "db", methods: str = ",".join(METHOD_NAMES), backbone: str = "sim", seed: int = 0,
                  out: Path | None = None, data_dir: Path | None = None, limit: int | None = None,
                  kg_endpoint: str | None = None, model: str | None = None, base_url: str | None = None,
                  overwrite: bool = False, progress: bool = True, summary_dir: Path | None = None,
                  budget_accounting: str = DEFAULT_ACCOUNTING, connection: dict[str, Any] | None = None) -> None:
    """The body of `tokenworth run` (plain defaults, so the bare `tokenworth` can call it)."""
    from agent import runfolder
    from agent.backbones.registry import make_backbone
    from agent.data import load_tasks, resolve_data_dir
    from agent.runner import run_stream

    method_list = parse_methods(methods)
    endpoint = check_env(env, kg_endpoint)
    out_dir = out or default_out(f"{env}-{backbone}-seed{seed}", limit)
    tasks = load_tasks(env, data_dir, limit=limit)  # type: ignore[arg-type]
    budget = checked_budget(env, budget_accounting)
    options, links = backbone_options(backbone, seed, model, base_url, **(connection or {}))
    try:
        bb = make_backbone(backbone, **options, **links)
    except (ValueError, ImportError) as exc:
        fail(str(exc))
    config = {"env": env, "backbone": backbone, "backbone_options": options, "seed": seed, "limit": limit,
              "tasks": len(tasks), "data_dir": str(resolve_data_dir(data_dir)), "budget": budget.as_dict(),
              "connection": links}
    with contextlib.ExitStack() as held:
        with runfolder.locked(*runfolder.folder_lock(out_dir), wait_s=runfolder.FOLDER_LOCK_WAIT_S):
            runfolder.check_run_folder(out_dir)
            for method in method_list:  # every named method's lock before any task runs
                held.enter_context(runfolder.locked(*runfolder.method_lock(out_dir, method)))
            runfolder.prepare(out_dir, config, method_list, POLICIES.names, overwrite=overwrite)
        typer.echo(f"{env}: {len(tasks)} tasks, backbone {backbone}, seed {seed}, budget {budget.as_dict()} "
                   f"-> {out_dir}", err=True)
        started = time.perf_counter()
        for method in method_list:
            bar = Progress(method, len(tasks), progress)
            note = getattr(POLICIES.factory(method), "first_task_note", None)
            try:
                run_stream(method, env, tasks, bb, budget, seed, out_dir, kg_endpoint=endpoint, on_record=bar,
                           on_start=(lambda _index, bar=bar: bar.note(note)) if note else None)
            finally:
                bar.close()
        title = f"{env.upper()} · backbone {backbone} · seed {seed} · {len(tasks)} tasks · O_max {budget.accounting}"
        write_summary(out_dir, summary_dir, title, started, accounting=budget.accounting)


def write_summary(out_dir: Path, summary_dir: Path | None, title: str, started: float, *,
                  accounting: str | None = None) -> None:
    """Summarise every finished method in the folder (also those other processes ran) and print it."""
    from agent import runfolder
    from agent.checkpoint import atomic_write_json, atomic_write_text
    from agent.report import finished_records, markdown_table, plot_cumulative_sr, summaries_json, summarize

    target = summary_dir or out_dir
    with runfolder.locked(*runfolder.folder_lock(out_dir), wait_s=runfolder.FOLDER_LOCK_WAIT_S):
        records = finished_records(out_dir, POLICIES.names)
        summaries = summarize(records)
        table = markdown_table(summaries, title)
        typer.echo(table)
        try:
            atomic_write_text(target / "summary.md", table)
            atomic_write_json(target / "summary.json",
                              [dict(row, accounting=accounting) for row in summaries_json(summaries)])
            plot = plot_cumulative_sr(records, target / "cumulative_sr.png", title)
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or summary_dir is not None:
                raise
            typer.echo(f"note: {target} is read-only, so the summary above was not saved; "
                       "pass --summary-dir DIR to save it elsewhere", err=True)
            return
    typer.echo(f"records: {out_dir}/<method>/records.jsonl; summary: {target}/summary.md; plot: {plot}; "
               f"{time.perf_counter() - started:.1f}s", err=True)


@app.command()
def sweep(
    env: str = typer.Option("db", help="Task stream: db, os or kg."),
    grid: list[str] = typer.Option([], help="NAME=v1,v2,... (repeatable); the full product is run."),
    table_a3: bool = typer.Option(False, "--table-a3", help="The spec §9 one-at-a-time sensitivity grid."),
    backbone: str = typer.Option("sim", help="sim (default), vllm or openai."),
    seed: int = typer.Option(0, help="Seed of the backbone."),
    out: Optional[Path] = typer.Option(None, help="Sweep folder; a folder holding the same sweep is resumed.",
                                       show_default="runs/sweep-<env>-seed<seed>[-limit<N>]"),
    data_dir: Optional[Path] = typer.Option(None, help="Dataset folder.",
                                            show_default="$TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth/"
                                                         "lifelongagentbench"),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N tasks."),
    kg_endpoint: Optional[str] = typer.Option(None, help="SPARQL endpoint for --env kg.",
                                              show_default="$TOKENWORTH_KG_ENDPOINT"),
    model: Optional[str] = typer.Option(None, help="Model name for the vllm/openai backbones."),
    base_url: Optional[str] = typer.Option(None, help="Server URL for the openai backbone."),
    budget_accounting: AccountingFlag = DEFAULT_ACCOUNTING,
    timeout: TimeoutFlag = None, retry_for: RetryForFlag = None, max_retries: MaxRetriesFlag = None,
    concurrency: ConcurrencyFlag = None, extra_body: ExtraBodyFlag = None,
    overwrite: bool = typer.Option(False, help="Discard the sweep this folder holds (only a sweep folder) and "
                                               "start over; without it a sweep resumes."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
    plus: bool = typer.Option(False, "--plus", help="TokenWorth+ controllers (docs/tokenworth-plus.md)."),
) -> None:
    """Run N TokenWorth configurations as N lockstep streams (two compiled controller calls per task)."""
    run_sweep_command(env=env, grid=grid, table_a3=table_a3, backbone=backbone, seed=seed, out=out,
                      data_dir=data_dir, limit=limit, kg_endpoint=kg_endpoint, model=model, base_url=base_url,
                      overwrite=overwrite, progress=progress, budget_accounting=budget_accounting, plus=plus,
                      connection=dict(timeout=timeout, retry_for=retry_for, max_retries=max_retries,
                                      concurrency=concurrency, extra_body=extra_body))


@expected_failures
def run_sweep_command(env: str, grid: list[str], table_a3: bool, backbone: str, seed: int, out: Path | None,
                      data_dir: Path | None, limit: int | None, kg_endpoint: str | None, model: str | None,
                      base_url: str | None, overwrite: bool, progress: bool,
                      budget_accounting: str = DEFAULT_ACCOUNTING, connection: dict[str, Any] | None = None,
                      plus: bool = False) -> None:
    from agent.backbones.registry import make_backbone
    from agent.data import load_tasks, resolve_data_dir
    from agent.sweep import SweepError, configs_from_grid, run_sweep, table_a3_configs, write_sweep_results

    endpoint = check_env(env, kg_endpoint)
    try:
        configs = table_a3_configs(env) if table_a3 else configs_from_grid(grid)
        if table_a3 and grid:
            raise SweepError("use either --table-a3 or --grid, not both")
    except SweepError as exc:
        fail(str(exc))
    tasks = load_tasks(env, data_dir, limit=limit)  # type: ignore[arg-type]
    budget = checked_budget(env, budget_accounting)
    options, links = backbone_options(backbone, seed, model, base_url, **(connection or {}))
    try:
        bb = make_backbone(backbone, **options, **links)
    except (ValueError, ImportError) as exc:
        fail(str(exc))
    out_dir = out or default_out(f"sweep-{env}-seed{seed}", limit)
    settings = {"env": env, "backbone": backbone, "backbone_options": options, "seed": seed, "limit": limit,
                "tasks": len(tasks), "data_dir": str(resolve_data_dir(data_dir)), "budget": budget.as_dict(),
                "configs": configs}
    typer.echo(f"sweep: {len(configs)} configurations x {len(tasks)} {env} tasks -> {out_dir}", err=True)
    try:
        result = run_sweep(env, tasks, bb, budget, configs, seed, kg_endpoint=endpoint,
                           progress=progress, out_dir=out_dir, settings=settings, overwrite=overwrite, plus=plus)
    except SweepError as exc:
        fail(str(exc))
    table = write_sweep_results(result, out_dir)
    typer.echo(table)


@app.command()
def show(
    run_dir: Path = typer.Argument(..., metavar="RUN", help="A run folder (e.g. runs/db-sim-seed0)."),
    method: Optional[str] = typer.Option(None, help="Method [default: the first with records]."),
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
