"""``tokenworth``: run the lifelong benchmark, sweep TokenWorth, fetch the data.

``tokenworth`` with no arguments is ``tokenworth run`` with its defaults: the DB stream,
the simulated backbone, all five methods, seed 0, output in ``runs/db-sim-seed0``.
A run directory that already holds a (partial) run with the same settings is resumed.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from agent.budget import ACCOUNTINGS, DEFAULT_ACCOUNTING
from agent.runner import METHOD_NAMES

app = typer.Typer(add_completion=False, no_args_is_help=False, help=__doc__)
data_app = typer.Typer(add_completion=False, help="The LifelongAgentBench task data.")
app.add_typer(data_app, name="data")
bench_app = typer.Typer(add_completion=False, help="Benchmarks (results under bench/results/).")
app.add_typer(bench_app, name="bench")


@bench_app.command("controller", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench_controller(ctx: typer.Context) -> None:
    """Controller suite: per-task cost vs NumPy, roofline, bank scaling, sweeps (`--full` for full sizes)."""
    from bench.controller.suite import main as suite_main

    suite_main(list(ctx.args))


@bench_app.command("agent", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench_agent(ctx: typer.Context) -> None:
    """Table-1-shaped comparison of all policies on DB and OS over seeds (mean ± std)."""
    from bench.agent import main as agent_main

    agent_main(list(ctx.args))

ENVS = ("db", "os", "kg")

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


def parse_methods(text: str) -> list[str]:
    methods = [m.strip().lower() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHOD_NAMES]
    if unknown or not methods:
        fail(f"unknown method(s) {unknown or [text]}; choose from {','.join(METHOD_NAMES)}")
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


class Progress:
    """A tqdm bar per method: tasks/s, running SR and mean output tokens."""

    def __init__(self, method: str, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=f"{method:>10}", unit="task", disable=not enabled, dynamic_ncols=True,
                        file=sys.stderr)
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

    def __call__(self, record: dict[str, Any]) -> None:
        self.n += 1
        self.successes += int(record["reward"])
        self.tokens += int(record["output_tokens"])
        self.bar.update(1)
        self.bar.set_postfix(SR=f"{100 * self.successes / self.n:.1f}%", tok=f"{self.tokens / self.n:.1f}", refresh=False)

    def close(self) -> None:
        self.bar.close()


@app.callback(invoke_without_command=True)
def main(ctx: typer.Context) -> None:
    """With no command, run the default benchmark (same as `tokenworth run`)."""
    if ctx.invoked_subcommand is None:
        run_benchmark()


@app.command()
def run(
    env: str = typer.Option("db", help="Task stream: db, os or kg."),
    methods: str = typer.Option(",".join(METHOD_NAMES), help="Comma-separated methods, run in this order."),
    backbone: str = typer.Option("sim", help="sim (default), vllm or openai."),
    seed: int = typer.Option(0, help="Seed of the backbone and of every seeded policy."),
    out: Optional[Path] = typer.Option(None, help="Run directory [default: runs/<env>-<backbone>-seed<seed>]."),
    data_dir: Optional[Path] = typer.Option(None, help="Dataset folder [default: $TOKENWORTH_DATA_DIR or the cache]."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N tasks of the stream."),
    kg_endpoint: Optional[str] = typer.Option(None, help="SPARQL endpoint for --env kg [$TOKENWORTH_KG_ENDPOINT]."),
    model: Optional[str] = typer.Option(None, help="Model name for the vllm/openai backbones."),
    base_url: Optional[str] = typer.Option(None, help="Server URL for the openai backbone."),
    budget_accounting: AccountingFlag = DEFAULT_ACCOUNTING,
    timeout: TimeoutFlag = None, retry_for: RetryForFlag = None, max_retries: MaxRetriesFlag = None,
    concurrency: ConcurrencyFlag = None, extra_body: ExtraBodyFlag = None,
    overwrite: bool = typer.Option(False, help="Delete what --out holds and start over (else: resume)."),
    progress: bool = typer.Option(True, help="Show progress bars."),
) -> None:
    """Run each method over the full stream, in dataset order, and write records + summary + plot."""
    run_benchmark(env=env, methods=methods, backbone=backbone, seed=seed, out=out, data_dir=data_dir, limit=limit,
                  kg_endpoint=kg_endpoint, model=model, base_url=base_url, overwrite=overwrite, progress=progress,
                  budget_accounting=budget_accounting, connection=dict(timeout=timeout, retry_for=retry_for,
                  max_retries=max_retries, concurrency=concurrency, extra_body=extra_body))


def run_benchmark(env: str = "db", methods: str = ",".join(METHOD_NAMES), backbone: str = "sim", seed: int = 0,
                  out: Path | None = None, data_dir: Path | None = None, limit: int | None = None,
                  kg_endpoint: str | None = None, model: str | None = None, base_url: str | None = None,
                  overwrite: bool = False, progress: bool = True, budget_accounting: str = DEFAULT_ACCOUNTING,
                  connection: dict[str, Any] | None = None) -> None:
    """The body of `tokenworth run` (plain defaults, so the bare `tokenworth` can call it)."""
    from agent.backbones.base import BackboneError
    from agent.backbones.registry import make_backbone
    from agent.checkpoint import atomic_write_json, atomic_write_text
    from agent.data import DataError, load_tasks, resolve_data_dir
    from agent.report import markdown_table, plot_cumulative_sr, summaries_json, summarize
    from agent.runner import run_stream, write_run_config

    method_list = parse_methods(methods)
    endpoint = check_env(env, kg_endpoint)
    out_dir = out or Path("runs") / f"{env}-{backbone}-seed{seed}"
    try:
        tasks = load_tasks(env, data_dir, limit=limit)  # type: ignore[arg-type]
    except DataError as exc:
        fail(str(exc))
    budget = checked_budget(env, budget_accounting)
    options, links = backbone_options(backbone, seed, model, base_url, **(connection or {}))
    try:
        bb = make_backbone(backbone, **options, **links)
    except (ValueError, ImportError) as exc:
        fail(str(exc))
    if overwrite and out_dir.exists():
        shutil.rmtree(out_dir)
    config = {"env": env, "backbone": backbone, "backbone_options": options, "seed": seed, "limit": limit,
              "tasks": len(tasks), "data_dir": str(resolve_data_dir(data_dir)), "budget": budget.as_dict(),
              "connection": links}
    try:
        write_run_config(out_dir, config)
    except RuntimeError as exc:
        fail(str(exc))
    typer.echo(f"{env}: {len(tasks)} tasks, backbone {backbone}, seed {seed}, budget {budget.as_dict()} -> {out_dir}",
               err=True)
    records: dict[str, list[dict[str, Any]]] = {}
    started = time.perf_counter()
    for method in method_list:
        bar = Progress(method, len(tasks), progress)
        try:
            records[method] = run_stream(method, env, tasks, bb, budget, seed, out_dir, kg_endpoint=endpoint,
                                         on_record=bar)
        except BackboneError as exc:
            bar.close()
            fail(str(exc), code=1)
        finally:
            bar.close()
    summaries = summarize(records)
    title = f"{env.upper()} · backbone {backbone} · seed {seed} · {len(tasks)} tasks · O_max {budget.accounting}"
    table = markdown_table(summaries, title)
    atomic_write_text(out_dir / "summary.md", table)
    atomic_write_json(out_dir / "summary.json",
                      [dict(row, accounting=budget.accounting) for row in summaries_json(summaries)])
    plot = plot_cumulative_sr(records, out_dir / "cumulative_sr.png", title)
    typer.echo(table)
    typer.echo(f"records: {out_dir}/<method>/records.jsonl; summary: {out_dir}/summary.md; plot: {plot}; "
               f"{time.perf_counter() - started:.1f}s", err=True)


@app.command()
def sweep(
    env: str = typer.Option("db", help="Task stream: db, os or kg."),
    grid: list[str] = typer.Option([], help="NAME=v1,v2,... (repeatable); the full product is run."),
    table_a3: bool = typer.Option(False, "--table-a3", help="The spec §9 one-at-a-time sensitivity grid."),
    backbone: str = typer.Option("sim", help="sim (default), vllm or openai."),
    seed: int = typer.Option(0, help="Seed of the backbone."),
    out: Optional[Path] = typer.Option(None, help="Output folder [default: runs/sweep-<env>-seed<seed>]."),
    data_dir: Optional[Path] = typer.Option(None, help="Dataset folder."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N tasks."),
    kg_endpoint: Optional[str] = typer.Option(None, help="SPARQL endpoint for --env kg."),
    model: Optional[str] = typer.Option(None, help="Model name for the vllm/openai backbones."),
    base_url: Optional[str] = typer.Option(None, help="Server URL for the openai backbone."),
    budget_accounting: AccountingFlag = DEFAULT_ACCOUNTING,
    timeout: TimeoutFlag = None, retry_for: RetryForFlag = None, max_retries: MaxRetriesFlag = None,
    concurrency: ConcurrencyFlag = None, extra_body: ExtraBodyFlag = None,
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Run N TokenWorth configurations as N lockstep streams (one vmapped controller step per phase)."""
    from agent.backbones.registry import make_backbone
    from agent.data import DataError, load_tasks
    from agent.sweep import SweepError, configs_from_grid, run_sweep, table_a3_configs, write_sweep_results

    endpoint = check_env(env, kg_endpoint)
    try:
        configs = table_a3_configs(env) if table_a3 else configs_from_grid(grid)
        if table_a3 and grid:
            raise SweepError("use either --table-a3 or --grid, not both")
    except SweepError as exc:
        fail(str(exc))
    try:
        tasks = load_tasks(env, data_dir, limit=limit)  # type: ignore[arg-type]
    except DataError as exc:
        fail(str(exc))
    budget = checked_budget(env, budget_accounting)
    options, links = backbone_options(backbone, seed, model, base_url, timeout=timeout, retry_for=retry_for,
                                      max_retries=max_retries, concurrency=concurrency, extra_body=extra_body)
    try:
        bb = make_backbone(backbone, **options, **links)
    except (ValueError, ImportError) as exc:
        fail(str(exc))
    out_dir = out or Path("runs") / f"sweep-{env}-seed{seed}"
    typer.echo(f"sweep: {len(configs)} configurations x {len(tasks)} {env} tasks -> {out_dir}", err=True)
    from agent.backbones.base import BackboneError

    try:
        result = run_sweep(env, tasks, bb, budget, configs, seed, kg_endpoint=endpoint, progress=progress)
    except BackboneError as exc:
        fail(str(exc), code=1)
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
    data_dir: Optional[Path] = typer.Option(None, help="Where to put it [default: $TOKENWORTH_DATA_DIR or the cache]."),
) -> None:
    """Download the public dataset (needs internet and huggingface_hub)."""
    from agent.data import DataError, fetch

    try:
        target = fetch(data_dir)
    except DataError as exc:
        fail(str(exc))
    except Exception as exc:  # network errors come in many types; say what happened
        fail(f"download failed: {type(exc).__name__}: {exc}")
    typer.echo(f"dataset ready in {target}")


if __name__ == "__main__":  # pragma: no cover
    app()
