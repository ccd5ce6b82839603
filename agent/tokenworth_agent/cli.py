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
import functools
import inspect
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, Sequence, TypeVar, get_type_hints

import typer
from typer.core import TyperCommand, TyperGroup

from tokenworth_agent.experiment.config import ConfigError, Streams, Sweep, UntilDecided
from tokenworth_agent.experiment.failures import INTERRUPTED, describe_failure
from tokenworth_agent.experiment.flags import (BACKBONE, BUDGET, EXECUTOR, EXPERIMENT, HARNESS, OPENAI, OUTPUT, PANELS,
                                               SWEEP, UNTIL, VLLM, ExperimentFlags, _option, benchmark_flags,
                                               flag_fields, parse_list)
from tokenworth_agent.experiment.launch import LaunchResult, launch
from tokenworth_agent.envs.registry import env_names

def warn(line: str) -> None:
    """A ``warning:`` line on stderr (given once per process: :func:`tokenworth_agent.core.plugins.warn_once`)."""
    typer.echo(f"warning: {line}", err=True)


# a flag's help that lists the benchmarks or methods -> (its text before the list, the kind, its text after)
_NAME_LISTS: dict[str, tuple[str, str, str]] = {}


def _names(kind: str, usable: Sequence[str] | None = None) -> list[str]:
    """The names of ``kind`` as a flag's help lists them (methods in the registry's order), from the metadata, or
    those of ``usable``."""
    from tokenworth_agent.policies import registry

    listed = registry.POLICIES.names if kind == "method" else env_names()
    return [n for n in listed if usable is None or n in usable]


def _listing_help(before: str, kind: str, after: str) -> str:
    """A flag's help that lists every installed name of ``kind`` (read from the metadata as the CLI is imported:
    nothing imported); its ``--help`` lists only the usable ones (:func:`_offer_usable`)."""
    text = before + ", ".join(_names(kind)) + after
    _NAME_LISTS[text] = (before, kind, after)
    return text


def _offer_usable(params: Sequence[Any]) -> None:
    """For ``--help``: each flag's list of benchmarks or methods (:func:`_listing_help`) without the plugins that
    are refused when asked for (:func:`tokenworth_agent.core.plugins.offered`; ``tokenworth plugins`` says why)."""
    from tokenworth_agent.core.plugins import offered

    for param in params:
        before, kind, after = _NAME_LISTS.get(getattr(param, "help", None) or "", (None, None, None))
        if kind is not None:
            param.help = before + ", ".join(_names(kind, offered(kind))) + after


class _OffersUsable(TyperCommand):
    """A command whose ``--help`` lists only the benchmarks and methods that can be used (:func:`_offer_usable`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if any(a in ctx.help_option_names for a in args):
            _offer_usable(self.params)
        return super().parse_args(ctx, args)


class _Commands(TyperGroup):
    """``tokenworth``'s commands, and each benchmark's own (``tokenworth kg serve``) under its name, loaded only when
    that name is the command (or to list them in ``--help``), so a broken plugin costs no other command anything."""

    def list_commands(self, ctx: Any) -> list[str]:
        from tokenworth_agent.core.plugins import benchmarks

        own = [name for name, bench in benchmarks(None, warn=warn).items() if bench.commands is not None]
        return [*super().list_commands(ctx), *(n for n in own if n not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        from tokenworth_agent.core.plugins import PluginError, installed, load

        if cmd_name not in installed("benchmark").entries and cmd_name not in installed("benchmark").clashes:
            return None
        try:
            bench = load("benchmark", cmd_name)
        except PluginError as exc:
            fail(str(exc))
        if bench.commands is None:
            return None
        group = typer.main.get_command(bench.commands())
        group.name = cmd_name
        return group


app = typer.Typer(add_completion=False, no_args_is_help=False, cls=_Commands,
                  help="Run the lifelong benchmark, sweep TokenWorth, fetch the task data. With no command: "
                       "`tokenworth run` with its defaults.")
data_app = typer.Typer(add_completion=False, help="The task data.")
app.add_typer(data_app, name="data")

_DEBUG = {"on": False}

F = TypeVar("F", bound=Callable[..., Any])

BENCHMARK_OPTIONS = "tokenworth.benchmark_options"  # where the benchmark command keeps its benchmarks' values
CONTEXT = "typer_context"  # the wrapper's parameter typer passes the command's context in


def with_experiment_flags(command: F) -> F:
    """Give ``command`` (which takes ``flags: ExperimentFlags``) every :class:`ExperimentFlags` option.

    Typer reads a command's options from its signature, so the wrapper's signature is the
    command's own parameters followed by the dataclass's fields; the wrapper gathers the latter
    into one ``ExperimentFlags``, with the benchmarks' own options (:func:`benchmark_command`)."""
    hints = get_type_hints(ExperimentFlags, include_extras=True)
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
              for f in flag_fields()]
    own = inspect.signature(command, eval_str=True)

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        context = kwargs.pop(CONTEXT)
        options = dict(context.meta.get(BENCHMARK_OPTIONS, {}))
        flags = ExperimentFlags(**{p.name: kwargs.pop(p.name) for p in shared}, benchmark_options=options)
        return command(**kwargs, flags=flags)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for n, p in own.parameters.items() if n != "flags"]
    context = inspect.Parameter(CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)  # typer gives it
    # --help shows the panels in the order of their first option: this order (the benchmarks' after the harness's)
    wrapper.__signature__ = own.replace(  # type: ignore[attr-defined]
        parameters=[context, *sorted([*params, *shared], key=_panel_order)])
    return wrapper  # type: ignore[return-value]


def benchmark_command(default_envs: Sequence[str]) -> type:
    """The command class of ``run`` and ``sweep``: their flags, and the benchmarks' own flags, added as the command
    line is parsed (:func:`tokenworth_agent.core.plugins.benchmarks`): the built-ins' always, a plugin's when
    ``--env`` names it (``default_envs`` without ``--env``), and every plugin's for ``--help``, where one that is
    refused is left out with one ``warning:`` line. A plugin not asked for is never imported."""

    class BenchmarkFlags(_OffersUsable):
        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            from tokenworth_agent.core.plugins import benchmarks

            shared = [p for p in self.params if p.name not in getattr(self, "_benchmark_params", ())]
            helping = any(a in ctx.help_option_names for a in args)
            asked = None if helping else _asked_envs(args, default_envs)
            taken = [o for p in shared for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))]
            try:
                found = benchmark_flags(benchmarks(asked, warn=warn if helping else None),
                                        taken=taken, warn=warn if helping else None)
            except ConfigError as exc:
                fail(str(exc))
            extra = _typer_params([inspect.Parameter(b.name, inspect.Parameter.KEYWORD_ONLY, default=b.default,
                                                     annotation=Annotated[b.type, b.option]) for b in found])
            self._benchmark_params = tuple(p.name for p in extra)
            after = max((i + 1 for i, p in enumerate(shared) if getattr(p, "rich_help_panel", None) == HARNESS),
                        default=len(shared))
            self.params = [*shared[:after], *extra, *shared[after:]]
            try:
                return super().parse_args(ctx, args)
            except Exception as exc:  # an unknown flag that is a benchmark's: say which --env it needs
                # by name: the class is click's, or the copy of click that newer typers ship
                if type(exc).__name__ == "NoSuchOption":
                    hint = _whose_flag(getattr(exc, "option_name", ""), asked or ())
                    if hint:
                        fail(hint)
                raise

        def invoke(self, ctx: Any) -> Any:
            ctx.meta[BENCHMARK_OPTIONS] = {name: ctx.params.pop(name) for name in getattr(self, "_benchmark_params", ())
                                           if name in ctx.params}
            return super().invoke(ctx)

    return BenchmarkFlags


def _asked_envs(args: Sequence[str], default: Sequence[str]) -> tuple[str, ...]:
    """The benchmarks a command line names with ``--env`` (the last one given), else ``default``."""
    given = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--env" and i + 1 < len(args):
            given = args[i + 1]
        elif arg.startswith("--env="):
            given = arg.split("=", 1)[1]
    try:
        return parse_list("--env", given) if given is not None else tuple(default)
    except ConfigError:
        return tuple(default)


def _typer_params(parameters: list[inspect.Parameter]) -> list[Any]:
    """Typer's own parameters for ``parameters`` (Typer builds them from a signature; only its public API is used)."""
    if not parameters:
        return []

    def holder(**kwargs: Any) -> None:
        return None

    holder.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    scratch = typer.Typer(add_completion=False)
    scratch.command()(holder)
    return list(typer.main.get_command(scratch).params)


def _whose_flag(flag: str, asked: Sequence[str]) -> str | None:
    """The line for a flag this command line does not know that is an installed benchmark's (None: it is no one's).
    Every plugin is loaded for it: the command line failed already."""
    from tokenworth_agent.core.plugins import PluginError, benchmarks, load

    for name in asked:  # a benchmark asked for that was refused: its own line says why its flags are missing
        try:
            load("benchmark", name)
        except PluginError as exc:
            return str(exc)
        except ValueError:
            pass
    for name, bench in benchmarks(None).items():
        if any(option.flag == flag for option in bench.options):
            return f"{flag} is an option of the benchmark {name}; add --env {name} (this command line runs " \
                   f"{', '.join(asked) or 'none'})"
    return None


def _panel(parameter: inspect.Parameter) -> str:
    info = getattr(parameter.annotation, "__metadata__", (None,))[0]
    return getattr(info, "rich_help_panel", None) or EXPERIMENT


def _panel_order(parameter: inspect.Parameter) -> float:
    panel = _panel(parameter)
    return PANELS.index(panel) if panel in PANELS else PANELS.index(HARNESS) + 0.5


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def expected_failures(function: F) -> F:
    """Turn the failures a user can cause or fix into one ``error:`` line (``--debug``: traceback); what each
    means is :func:`~tokenworth_agent.experiment.failures.describe_failure`."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from tokenworth_agent.core.interrupt import InterruptGuard

        try:
            with InterruptGuard():  # Ctrl-C during start-up stops before the first task, never mid-import
                return function(*args, **kwargs)
        except typer.Exit:
            raise
        except (KeyboardInterrupt, Exception) as exc:
            known = describe_failure(exc)
            if known is None or _DEBUG["on"]:
                raise
            message, code = known
            if isinstance(exc, KeyboardInterrupt):
                typer.echo(f"\n{message}", err=True)
                raise typer.Exit(code) from None
            fail(message, code)

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


def parse_orders(orders: str | None) -> tuple[int, ...]:
    """``--orders``: None is the benchmark's own order alone (no order axis); else
    :func:`tokenworth_agent.experiment.orders.parse_orders` (a bad value: one error line)."""
    from tokenworth_agent.experiment.orders import OrderError, parse_orders as parsed

    if orders is None:
        return Streams().orders
    try:
        return parsed(orders)
    except OrderError as exc:
        fail(str(exc))
        raise  # unreachable


def parse_until(on: bool, *, max_orders: int | None, effect: float | None) -> UntilDecided | None:
    """``--until-decided [--max-orders M] [--effect PP]`` (the two only with it; a bad value: one error line)."""
    if not on:
        given = [flag for flag, value in (("--max-orders", max_orders), ("--effect", effect)) if value is not None]
        if given:
            fail(f"{' and '.join(given)}: only with --until-decided (the rounds of orders they set)")
        return None
    given = {k: v for k, v in (("effect", effect), ("max_orders", max_orders)) if v is not None}
    try:
        return UntilDecided(**given)
    except ConfigError as exc:
        fail(str(exc))
        raise  # unreachable


ORDERS_HELP = "Task orders, like --seeds: N is 0..N-1, or a list, e.g. 0,2."


@app.callback(invoke_without_command=True)
def main(ctx: typer.Context,
         debug: bool = typer.Option(False, "--debug", help="Show full tracebacks instead of one error line.")) -> None:
    """With no command, run the default benchmark (same as `tokenworth run`)."""
    _DEBUG["on"] = debug
    if ctx.invoked_subcommand is None:
        run_command(ExperimentFlags())


@app.command(cls=benchmark_command(Streams().envs))
@with_experiment_flags
def run(
    env: Annotated[str, _option(EXPERIMENT, _listing_help(
        "Task stream(s): ", "benchmark", ", or a comma-separated list (one experiment)."))] = ",".join(Streams().envs),
    methods: Annotated[str, _option(EXPERIMENT, _listing_help("Comma-separated methods; known: ", "method", "."),
                                    show_default=", ".join(Streams().methods))] = ",".join(Streams().methods),
    seed: Annotated[Optional[int], _option(EXPERIMENT, "Seed of the backbone and of every seeded policy.",
                                           show_default=str(Streams().seeds[0]))] = None,
    seeds: Annotated[Optional[str], _option(EXPERIMENT, "Several seeds as one experiment, e.g. 0,1,2 (instead of "
                                                        "--seed).")] = None,
    orders: Annotated[Optional[str], _option(EXPERIMENT, ORDERS_HELP)] = None,
    until_decided: Annotated[bool, _option(UNTIL, "Add orders until each method is decided.",
                                           "--until-decided")] = False,
    max_orders: Annotated[Optional[int], _option(UNTIL, "At most M orders (default 10).")] = None,
    effect: Annotated[Optional[float], _option(UNTIL, "Effect to find, in pp (default 3).")] = None,
    grid: Annotated[Optional[list[str]], _option(
        EXPERIMENT, "NAME=v1,v2,... (repeatable; the product is run): budget levels o_max, j_max, b_max, k_max, "
                    "l_max, for TokenWorth methods any HParams field, a method's parameter as METHOD.NAME "
                    "(tokenworth plugins METHOD lists them), a benchmark's option by its name.")] = None,
    out: Annotated[Optional[Path], _option(
        OUTPUT, "Run folder; one holding the same run is resumed.",
        show_default="a folder under runs/ named after the settings, e.g. runs/db-sim-seed0")] = None,
    summary_dir: Annotated[Optional[Path], _option(
        OUTPUT, "Where summary.md/.json and the plots go.", show_default="the run folder")] = None,
    *, flags: ExperimentFlags,
) -> None:
    """Run every (env, method, seed, grid point) stream over its task stream as one lockstep experiment."""
    run_command(flags, env=env, methods=methods, seed=seed, seeds=seeds, grid=grid or [], out=out,
                summary_dir=summary_dir, orders=orders,
                until=parse_until(until_decided, max_orders=max_orders, effect=effect))


@expected_failures
def run_command(flags: ExperimentFlags, *, env: str = ",".join(Streams().envs),
                methods: str = ",".join(Streams().methods), seed: int | None = None, seeds: str | None = None,
                grid: Sequence[str] = (), out: Path | None = None, summary_dir: Path | None = None,
                orders: str | None = None, until: UntilDecided | None = None) -> LaunchResult:
    """The body of `tokenworth run` (plain defaults, so the bare `tokenworth` can call it)."""
    what = Streams(envs=parse_list("--env", env), methods=parse_list("--methods", methods),
                   seeds=parse_seeds(seed, seeds), grid=tuple(grid), orders=parse_orders(orders),
                   until_decided=until)
    result = launch(flags.config(what, out=out, summary_dir=summary_dir))
    present(result)
    return result


@app.command(cls=benchmark_command((Sweep().env,)))
@with_experiment_flags
def sweep(
    env: Annotated[str, _option(SWEEP, _listing_help("Task stream: ", "benchmark", "."))] = Sweep().env,
    grid: Annotated[Optional[list[str]], _option(SWEEP, "NAME=v1,v2,... (repeatable); the full product is "
                                                        "run.")] = None,
    table_a3: Annotated[bool, _option(SWEEP, "The spec §9 one-at-a-time sensitivity grid.", "--table-a3")] = False,
    plus: Annotated[bool, _option(SWEEP, "TokenWorth+ controllers (docs/tokenworth-plus.md).", "--plus")] = False,
    method: Annotated[Optional[str], _option(SWEEP, "Sweep this method instead; --grid METHOD.NAME sets its "
                                                    "parameters.", show_default="tokenworth")] = None,
    seed: Annotated[int, _option(SWEEP, "Seed of the backbone and of TokenWorth+'s exploration.")] = Sweep().seed,
    orders: Annotated[Optional[str], _option(SWEEP, ORDERS_HELP)] = None,
    out: Annotated[Optional[Path], _option(
        OUTPUT, "Sweep folder; one holding the same sweep is resumed.", show_default="runs/sweep-ENV-seedSEED")] \
        = None,
    *, flags: ExperimentFlags,
) -> None:
    """A TokenWorth grid (or, with --method, any method's): one lockstep stream per configuration (the same engine
    as `run`)."""
    sweep_command(flags, env=env, grid=grid or [], table_a3=table_a3, plus=plus, seed=seed, out=out, method=method,
                  orders=orders)


@expected_failures
def sweep_command(flags: ExperimentFlags, *, env: str, grid: Sequence[str], table_a3: bool, plus: bool, seed: int,
                  out: Path | None, method: str | None = None, orders: str | None = None) -> LaunchResult:
    what = Sweep(env=env.strip().lower(), seed=seed, grid=tuple(grid), table_a3=table_a3, plus=plus,
                 method=None if method is None else method.strip().lower(), orders=parse_orders(orders))
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


@app.command()
def compare(
    runs: list[Path] = typer.Argument(..., metavar="RUN...", help="Run folders: their streams are paired by env, "
                                                                  "seed, grid point and task."),
    baseline: Optional[str] = typer.Option(None, help="The method every other is compared with.",
                                           show_default="standard, or a sweep's preset"),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list, one object per method compared."),
    plan: Optional[float] = typer.Option(None, "--plan", metavar="PP", help="Also say how many tasks and seeds "
                                         "detect a difference of PP percentage points with 80 % power."),
    sequential: bool = typer.Option(False, "--sequential", help="Also replay the sequential rule over the runs' "
                                    "task orders: per comparison the decision, after how many orders, the interval."),
    effect: Optional[float] = typer.Option(None, "--effect", metavar="PP", help="The sequential rule's smallest "
                                           "difference worth finding (futility below it).", show_default="3"),
    max_orders: Optional[int] = typer.Option(None, "--max-orders", metavar="M", help="The sequential rule's "
                                             "planned orders at most.", show_default="10"),
) -> None:
    """Paired comparison of each method with the baseline: ΔSR and ΔOutputTok with 95 % intervals, p-values
    (Holm-adjusted), a verdict, the minimum detectable effect and the gain over the stream; with several task
    orders, the difference in each order and over orders (docs/results.md)."""
    from tokenworth_agent.results import sequential as rule
    from tokenworth_agent.results.compare import CompareError, RunError, render

    try:
        if sequential:
            text = rule.render(runs, baseline, as_json=as_json, plan=plan, effect=effect, max_orders=max_orders)
        elif effect is not None or max_orders is not None:
            raise CompareError("--effect and --max-orders set the sequential rule; add --sequential")
        else:
            text = render(runs, baseline, as_json=as_json, plan=plan)
        typer.echo(text, nl=False)
    except (CompareError, RunError) as exc:
        fail(str(exc))


export_app = typer.Typer(add_completion=False, help="Export a run for other tools (docs/viewing.md).")
app.add_typer(export_app, name="export")


@export_app.command("inspect")
def export_inspect(
    run_dir: Path = typer.Argument(..., metavar="RUN", help="A run folder (e.g. runs/db-sim-seed0)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where the logs go.", show_default="RUN/inspect"),
    force: bool = typer.Option(False, "--force", help="Rewrite every log, also those already up to date."),
) -> None:
    """Write each stream of RUN as an Inspect eval log (<stream>.eval), for Inspect View and samples_df."""
    from tokenworth_agent.results.inspect_export import ExportError, export_run
    from tokenworth_agent.storage.runfolder import RunFolderError

    try:
        result = export_run(run_dir, out, force=force, say=typer.echo)
    except (ExportError, RunFolderError) as exc:
        fail(str(exc))
        raise  # unreachable
    for path in result.removed:
        typer.echo(f"{path}: removed (the run no longer holds this stream)")
    typer.echo(f"{len(result.written)} logs written, {len(result.kept)} up to date in {result.out}", err=True)


@app.command("view")
def view_command(
    run_dir: Path = typer.Argument(..., metavar="RUN", help="A run folder (e.g. runs/db-sim-seed0)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where the run's Inspect logs are (or go).",
                                       show_default="RUN/inspect"),
    bundle: Optional[Path] = typer.Option(None, "--bundle", metavar="DIR",
                                          help="Write Inspect View's static site into DIR instead of serving it."),
    host: str = typer.Option("127.0.0.1", help="Address the viewer listens on."),
    port: int = typer.Option(7575, help="Port the viewer listens on."),
) -> None:
    """Open RUN in Inspect View (its logs exported first if missing or stale), printing the address."""
    from tokenworth_agent.results.inspect_export import ExportError
    from tokenworth_agent.results.inspect_view import bundle as write_bundle, serve
    from tokenworth_agent.storage.runfolder import RunFolderError

    try:
        if bundle is not None:
            site = write_bundle(run_dir, bundle, out=out, say=typer.echo)
            typer.echo(f"static site in {site}: serve it from any web server (index.html); docs/viewing.md")
            return
        code = serve(run_dir, out=out, host=host, port=port, say=typer.echo)
    except (ExportError, RunFolderError) as exc:
        fail(str(exc))
        raise  # unreachable
    except KeyboardInterrupt:  # Ctrl-C is how a viewer is stopped
        typer.echo("viewer stopped", err=True)
        return
    if code:
        raise typer.Exit(code)


@data_app.command("fetch", cls=_OffersUsable)
def data_fetch(
    data_dir: Optional[Path] = typer.Option(None, help="Data root: each benchmark goes into its folder under it "
                                                       "(a benchmark's folder named directly is used as it is).",
                                            show_default="$TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth"),
    env: Optional[str] = typer.Option(None, help=_listing_help("Which benchmarks, comma-separated: ", "benchmark", "."),
                                      show_default="every one that names its data"),
) -> None:
    """Download the task data (needs internet), each file checked against its recorded checksum.

    An interrupted download resumes; a file already there and verified is not downloaded again."""
    from tokenworth_agent.core.plugins import PluginError
    from tokenworth_agent.tasks import DataError, fetch

    envs = None if env is None else [e.strip().lower() for e in env.split(",") if e.strip()]
    if envs == []:
        fail(f"--env names no benchmark; use some of {', '.join(env_names())}")
    try:
        folders = fetch(data_dir, envs=envs, say=typer.echo, warn=warn)
    except (DataError, PluginError) as exc:
        fail(" ".join(str(exc).split()))
    except Exception as exc:  # anything else that goes wrong on the way; say what happened
        if _DEBUG["on"]:
            raise
        fail(f"download failed: {type(exc).__name__}: {exc}")
    for name, folder in folders.items():
        typer.echo(f"{name}: tasks ready in {folder}")


@app.command("plugins")
def plugins_command(name: Optional[str] = typer.Argument(
        None, metavar="[NAME]", help="A method or benchmark: print its parameters, one per line.")) -> None:
    """List the installed methods, benchmarks and backbones, each ok, broken or clashing, and why; with NAME, that
    plugin's parameters.

    Each row: name, kind, distribution, version, status (ok; broken: refused when asked for; clash: its name is
    registered twice, and a plugin reusing a built-in's name is the one refused) and the reason, or a benchmark's
    description (docs/plugins.md). Each entry is loaded on its
    own: a broken one is its own row. With NAME: its parameters (name, type, default, help), as `--grid` takes
    them."""
    from tokenworth_agent.core.plugins import listing

    if name is not None:
        _plugin_parameters(name)
        return

    rows = listing()
    columns = (("NAME", "name"), ("KIND", "kind"), ("DISTRIBUTION", "distribution"), ("VERSION", "version"),
               ("STATUS", "status"))
    widths = [max(len(h), *(len(r[k]) for r in rows)) for h, k in columns]
    typer.echo("  ".join(h.ljust(w) for (h, _), w in zip(columns, widths)) + "  DETAIL")
    for r in rows:
        typer.echo(("  ".join(r[k].ljust(w) for (_, k), w in zip(columns, widths)) + f"  {r['detail']}").rstrip())


def _plugin_parameters(name: str) -> None:
    """`tokenworth plugins NAME`: the plugin's release, then its parameters (docs/plugins.md, Parameters)."""
    from tokenworth_agent.core.parameters import listing as parameter_lines
    from tokenworth_agent.core.plugins import GROUPS, PluginError, describe, load, names

    found = False
    for kind in GROUPS:
        try:
            plugin = describe(kind, name)
            loaded = load(kind, name)
            if kind == "method":
                from tokenworth_agent.policies.registry import method_parameters

                declared, how = method_parameters(name), f"--grid {name}.NAME=v1,v2 sets them"
            elif kind == "benchmark":
                declared = tuple(getattr(loaded, "options", ()))
                swept = [o.name for o in declared if o.identity and o.type is not Path]
                how = ("each the flag --NAME-with-dashes of run and sweep" +
                       (f"; --grid NAME=v1,v2 sweeps {', '.join(swept)}" if swept else ""))
            else:
                declared, how = (), "set by the Backbone flags of `tokenworth run --help`"
        except PluginError as exc:
            fail(str(exc))
        except ValueError as exc:
            if str(exc).startswith(f"unknown {kind} "):
                continue
            fail(str(exc))
        found = True
        typer.echo(f"{name}: {kind} of {plugin.release}; its parameters ({how}):")
        typer.echo("\n".join(parameter_lines(declared)) or "(none)")
    if not found:
        fail(f"no plugin named {name!r}; installed: {', '.join(n for kind in GROUPS for n in names(kind))}")



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
