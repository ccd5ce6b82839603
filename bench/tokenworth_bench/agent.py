"""Agent-level benchmark: the Table-1-shaped comparison of every policy on DB and OS.

Runs every (environment, seed, method) as the streams of one lockstep experiment
(``tokenworth run --env db,os --seeds 0,1,2``, one process and one model engine), then writes
the mean ± std over seeds of SR, OutputTok and ΔTok per method to ``agent.md`` / ``agent.json``
and a bar plot to ``agent.png``. It takes ``tokenworth run``'s flags (the budget, data and
harness, backbone, OpenAI-server and vLLM ones, ``--limit``, ``--overwrite``, ``--no-progress``),
read from the same declaration (:class:`tokenworth_agent.experiment.flags.ExperimentFlags`), so the two never
drift, and runs them as ``tokenworth run`` does: a :class:`~tokenworth_agent.experiment.config.RunConfig` given to
:func:`tokenworth_agent.experiment.launch.launch`. It uses the application layer only (the flags, ``launch``
and what a failure means to a user), never the ``tokenworth`` command's module.

Where it writes (decision: nothing lands in the repository unless asked):

- by default into one run folder, ``runs/bench-agent-<envs>-<backbone>-<accounting>-seeds<s>
  [-limit<N>]``: the streams and the tables side by side (an interrupted benchmark resumes);
- ``--publish``: the tables to ``bench/results/agent_<envs>[_per_task]/`` (the committed results),
  the streams under its ``runs/`` (ignored by git);
- ``--out DIR``: the tables to ``DIR``, the streams under ``DIR/runs/``.

With ``--backbone vllm`` the process loads one engine, on the first run's first call, and every
later (env, seed) run reuses it (same settings; the seed does not matter to greedy decoding);
it is shut down explicitly when the benchmark ends, also after an error.

With the simulated backbone the numbers measure the harness and the policies under the sim's
documented generative model (``agent/tokenworth_agent/sim/``), not an LLM.
"""

from __future__ import annotations

from .paths import RESULTS
import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tokenworth_agent.policies.registry import METHOD_NAMES
from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text

METHODS = ",".join(METHOD_NAMES)  # the default run's methods
DEFAULT_ENVS = "db,os"  # the default run's benchmarks


KEYS = ("sr", "output_tok", "delta_tok", "auxiliary_tok")


def aggregate(per_seed: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per method, (mean, population std) over seeds of SR, OutputTok, ΔTok and auxiliary tokens.

    A method missing from some seeds is reported over the seeds that have it (``seeds``)."""
    methods = list(dict.fromkeys(row["method"] for summary in per_seed for row in summary))
    out = []
    for method in methods:
        rows = [row for summary in per_seed for row in summary if row["method"] == method]
        entry: dict[str, Any] = {"method": method, "seeds": len(rows), "tasks": rows[0].get("tasks")}
        for key in KEYS:
            vals = np.array([r[key] for r in rows if r.get(key) is not None], dtype=float)
            entry[key] = (float(vals.mean()), float(vals.std())) if vals.size else None
        out.append(entry)
    return out


def seed_summaries(run_dir: Path, envs: Sequence[str], methods: Sequence[str], seeds: Sequence[int],
                   accounting: str) -> dict[str, list[list[dict[str, Any]]]]:
    """Per env, one summary per seed (a row per finished method) from an experiment's stream records."""
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.experiment import expand, stream_names
    from tokenworth_agent.results.report import finished_records, summarize

    streams = expand(envs, methods, seeds, {e: Budget.for_env(e, accounting) for e in envs})
    names = dict(zip([(s.env, s.seed, s.method) for s in streams], stream_names(streams)))
    out: dict[str, list[list[dict[str, Any]]]] = {}
    for env in envs:
        for seed in seeds:
            found = finished_records(run_dir, [names[(env, seed, m)] for m in methods])
            by_method = {m: found[names[(env, seed, m)]] for m in methods if names[(env, seed, m)] in found}
            out.setdefault(env, []).append(
                [{"method": s.method, "tasks": s.tasks, "sr": s.sr, "output_tok": s.output_tok,
                  "delta_tok": s.delta_tok, "auxiliary_tok": s.auxiliary_tok} for s in summarize(by_method)])
    return out


def markdown(results: dict[str, list[dict[str, Any]]], backbone: str, seeds: Sequence[int], limit: int | None,
             accounting: str = "per-call") -> str:
    lines = [f"# Agent benchmark · backbone {backbone} · O_max {accounting} · seeds {list(seeds)}"
             + (f" · first {limit} tasks" if limit else " · full streams"), ""]
    for env, rows in results.items():
        lines += [f"## {env.upper()}", "", "| method | SR (%) | OutputTok | ΔTok vs Standard |", "|---|---:|---:|---:|"]
        for r in rows:
            sr = f"{r['sr'][0]:.1f} ± {r['sr'][1]:.1f}" if r["sr"] else "–"
            tok = f"{r['output_tok'][0]:.1f} ± {r['output_tok'][1]:.1f}" if r["output_tok"] else "–"
            dt = f"{100 * r['delta_tok'][0]:+.1f}% ± {100 * r['delta_tok'][1]:.1f}" if r["delta_tok"] else "–"
            lines.append(f"| {r['method']} | {sr} | {tok} | {dt} |")
        lines.append("")
    return "\n".join(lines)


def plot(results: dict[str, list[dict[str, Any]]], path: Path, accounting: str = "per-call") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.5), squeeze=False)
    for ax, (env, rows) in zip(axes[0], results.items()):
        names = [r["method"] for r in rows]
        means = [r["sr"][0] for r in rows]
        stds = [r["sr"][1] for r in rows]
        ax.bar(names, means, yerr=stds, capsize=4, color="tab:blue")
        ax.set_title(f"{env.upper()}: SR, mean ± std over seeds (O_max {accounting})")
        ax.set_ylabel("SR (%)")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _benchmark_flags(argv: Sequence[str]) -> list[Any]:
    """The benchmarks' own flags this command line may use, as ``tokenworth run`` takes them: the built-ins', and a
    plugin's when ``--envs`` names it (every plugin's for --help, a refused one left out with a warning)."""
    from tokenworth_agent.core.plugins import benchmarks
    from tokenworth_agent.experiment.flags import benchmark_flags

    def warn(line: str) -> None:  # given once each (tokenworth_agent.core.plugins.warn_once)
        print(f"warning: {line}", file=sys.stderr)

    if "-h" in argv or "--help" in argv:
        return benchmark_flags(benchmarks(None, warn=warn), warn=warn)
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--envs", "--env", default=DEFAULT_ENVS)
    envs = [e.strip().lower() for e in first.parse_known_args(list(argv))[0].envs.split(",") if e.strip()]
    return benchmark_flags(benchmarks(envs))


def _flag_arguments(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """``tokenworth run``'s shared flags (:class:`tokenworth_agent.experiment.flags.ExperimentFlags`), grouped as in
    its --help."""
    import typing

    from tokenworth_agent.experiment.flags import ExperimentFlags, flag_fields

    groups: dict[str, Any] = {}
    hints = typing.get_type_hints(ExperimentFlags, include_extras=True)
    # the shared flags, then each benchmark's own (its section of tokenworth run --help)
    fields = [(f.name, *typing.get_args(hints[f.name])[:2], f.default) for f in flag_fields()]
    flags = _benchmark_flags(argv)
    parser.set_defaults(benchmark_flags=[b.name for b in flags])
    fields += [(b.name, b.type, b.option, b.default) for b in flags]
    for name, kind, info, default in fields:
        panel = info.rich_help_panel
        group = groups.setdefault(panel, parser.add_argument_group(panel))
        flag = (info.default if isinstance(info.default, str) and info.default.startswith("--")
                else "--" + name.replace("_", "-"))
        shown = info.show_default if isinstance(info.show_default, str) else default
        text = info.help + (f" [default: {shown}]" if shown not in (None, False) else "")
        if kind is bool:
            group.add_argument(flag, dest=name, action="store_true", help=info.help)
            continue
        inner = [t for t in typing.get_args(kind) if t is not type(None)] or [kind]
        base = inner[0]
        if typing.get_origin(base) is list:
            group.add_argument(flag, dest=name, action="append", default=None, help=text, metavar="TEXT")
        else:
            group.add_argument(flag, dest=name, type=base, default=default, help=text,
                               metavar={int: "N", float: "X", Path: "DIR"}.get(base, "TEXT"))


def parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """``tokenworth-bench agent``'s options (for the command line ``argv``, default ``sys.argv``: which benchmarks'
    own flags it takes)."""
    out = argparse.ArgumentParser(prog="tokenworth-bench agent", description=__doc__.splitlines()[0])
    bench = out.add_argument_group("Benchmark")
    bench.add_argument("--envs", "--env", default=DEFAULT_ENVS, help=f"Comma-separated envs [default: {DEFAULT_ENVS}].")
    bench.add_argument("--methods", default=METHODS, help=f"Comma-separated methods [default: {METHODS}].")
    bench.add_argument("--seeds", default="0,1,2", help="Comma-separated seeds [default: 0,1,2].")
    where = out.add_argument_group("Where it writes (default: one run folder under runs/)")
    where.add_argument("--out", type=Path, default=None, help="Tables in OUT, the streams under OUT/runs/.")
    where.add_argument("--publish", action="store_true",
                       help="Tables in bench/results/agent_<envs>[_per_task]/ (the committed results).")
    _flag_arguments(out, sys.argv[1:] if argv is None else argv)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parser(argv).parse_args(argv)
    from tokenworth_agent.backbones.vllm_backbone import close_engines

    if args.publish and args.out is not None:
        _fail("use either --out or --publish, not both", 2)
    try:
        return _run_all(args)
    finally:
        close_engines()  # one engine per process, shut down explicitly


def _fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def folders(args: argparse.Namespace) -> tuple[Path, Path]:
    """(the experiment's run folder, the folder for agent.md/.json/.png): see the module docstring."""
    envs = args.envs.split(",")
    name = f"{'+'.join(envs)}-{args.backbone}-{args.budget_accounting}-seeds{args.seeds.replace(',', '-')}"
    if args.out is not None or args.publish:
        tables = args.out if args.out is not None else RESULTS / (
            f"agent_{'+'.join(envs)}" + ("_per_task" if args.budget_accounting == "per-task" else ""))
        return tables / "runs" / name, tables
    run = Path("runs") / (f"bench-agent-{name}" + (f"-limit{args.limit}" if args.limit is not None else ""))
    return run, run


def _run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every (env, seed, method) as streams of ONE lockstep experiment, then mean ± std over seeds."""
    from tokenworth_agent.core.interrupt import InterruptGuard
    from tokenworth_agent.experiment import Streams, launch
    from tokenworth_agent.experiment.failures import describe_failure
    from tokenworth_agent.experiment.flags import ExperimentFlags, flag_fields, parse_list

    flags = ExperimentFlags(**{f.name: getattr(args, f.name) for f in flag_fields()},
                            benchmark_options={name: getattr(args, name) for name in args.benchmark_flags})
    accounting = args.budget_accounting
    envs = args.envs.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    run_dir, out = folders(args)

    try:
        with InterruptGuard():  # Ctrl-C stops between two tasks, as in `tokenworth run`
            what = Streams(envs=parse_list("--envs", args.envs), methods=parse_list("--methods", args.methods),
                           seeds=tuple(seeds), grid=())
            result = launch(flags.config(what, out=run_dir))
    except (KeyboardInterrupt, Exception) as exc:
        known = describe_failure(exc)
        if known is None:
            raise
        _fail(*known)
    print(result.table)  # the launch's own table, as `tokenworth run` prints it
    results = {env: aggregate(per_seed)
               for env, per_seed in seed_summaries(run_dir, envs, methods, seeds, accounting).items()}
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(results, args.backbone, seeds, args.limit, accounting)
    atomic_write_text(out / "agent.md", table)
    atomic_write_json(out / "agent.json", {"backbone": args.backbone, "accounting": accounting, "seeds": seeds,
                                           "limit": args.limit, "results": results})
    plot(results, out / "agent.png", accounting)
    print(table)
    print(f"tables: {out}/agent.md, agent.json, agent.png; streams: {run_dir}", file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
