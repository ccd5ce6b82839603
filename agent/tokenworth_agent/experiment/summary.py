"""The driver's last step: ``summary.md`` / ``summary.json`` and the figures of a run folder (and a sweep's table).

It summarises every finished stream in the folder, also those other processes or machines ran.
A one-env, one-seed, no-grid run gets the per-method table (every finished method in the
folder); an experiment over several envs, seeds or grid points gets one row per (env, grid
point, method) with SR over all seeds, and, for a grid over budget levels, ``budget_levels.png``.
Every SR and OutputTok carries its 95 % interval (clustered by task over seeds). ``summary.md`` ends with
the paired comparison of every method against Standard when it ran (a sweep: against its preset) and
the gain over the stream (:mod:`tokenworth_agent.results.compare`); each row of ``summary.json`` carries its
comparison (``comparison``: what ``tokenworth compare --json`` prints for it), and
``difference_along_stream.png`` draws each paired difference along the stream with its band. A sweep
also gets ``sweep.md`` / ``sweep.json`` (one row per configuration).
"""

from __future__ import annotations

import dataclasses
import errno
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.experiment.engine import ExperimentResult
from tokenworth_agent.experiment.plan import Plan
from tokenworth_agent.policies.registry import POLICIES
from tokenworth_agent.results.compare import CompareError, Comparison, compare, markdown as comparison_markdown
from tokenworth_agent.results.report import (experiment_rows, experiment_table, markdown_table, plot_budget_levels,
                                  plot_cumulative_sr, plot_difference_along_stream, plot_experiment_sr, rewards_of,
                                  summaries_json, summarize)
from tokenworth_agent.results.runs import streams as read_streams
from tokenworth_agent.storage import runfolder
from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text


@dataclasses.dataclass(frozen=True)
class Summary:
    """What the driver wrote: the table (Markdown), where, and the figures (``saved`` False: a read-only folder)."""

    table: str
    folder: Path
    figures: tuple[Path, ...]
    saved: bool = True


def write_summary(plan: Plan) -> Summary:
    """Summarise the plan's run folder into ``--summary-dir`` (default: the folder itself); see the module docstring.

    A read-only run folder (and no ``--summary-dir``) is no error: the summary is made but not saved.
    """
    out_dir, title = plan.out_dir, summary_title(plan)
    target = plan.config.output.summary_dir or out_dir
    grouped = any(n not in POLICIES.names for n in plan.names)
    with runfolder.locked(*runfolder.folder_lock(out_dir), wait_s=runfolder.FOLDER_LOCK_WAIT_S):
        figures: list[Path] = []
        present = set(runfolder.streams_in(out_dir))
        wanted = [n for n in (plan.names if grouped else POLICIES.names) if n in present]
        found = {s.name: s for s in read_streams(out_dir, finished_only=True, names=wanted)}
        comparisons, refused = _comparisons(list(found.values()))
        if grouped:
            finished = [(s, list(found[n].records)) for s, n in zip(plan.streams, plan.names) if n in found]
            rows = experiment_rows(finished)
            table = experiment_table(rows, title)
            payload: Any = [{k: v for k, v in r.items() if k not in ("reward_curve", "reward_curves")} for r in rows]
            for row in payload:
                row["comparison"] = _comparison_of(comparisons, row["env"], row["point"], row["method"])
        else:
            records = {n: list(found[n].records) for n in wanted if n in found}
            summaries = summarize(records)
            table = markdown_table(summaries, title)
            payload = [dict(row, accounting=plan.config.budget.accounting) for row in summaries_json(summaries)]
            for row in payload:
                row["comparison"] = _comparison_of(comparisons, plan.settings["env"], {}, row["method"])
        if comparisons:
            table += "\n" + comparison_markdown(comparisons)
        elif refused:
            table += f"\nNo paired comparison: {refused}\n"
        try:
            atomic_write_text(target / "summary.md", table)
            atomic_write_json(target / "summary.json", payload)
            if grouped:
                figure = plot_budget_levels(rows, target / "budget_levels.png", title)
                if figure is not None:
                    figures.append(figure)
                figures.append(plot_experiment_sr(rows, target / "cumulative_sr.png", title, streams=len(finished)))
            else:
                figures.append(plot_cumulative_sr({m: rewards_of(r) for m, r in records.items()},
                                                  target / "cumulative_sr.png", title))
            difference = plot_difference_along_stream(comparisons, target / DIFFERENCE_FIGURE, title)
            if difference is not None:
                figures.append(difference)
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or plan.config.output.summary_dir is not None:
                raise
            return Summary(table, target, (), saved=False)
    return Summary(table, target, tuple(figures))


DIFFERENCE_FIGURE = "difference_along_stream.png"


def _comparisons(found: list[Any]) -> tuple[list[Comparison], str]:
    """Every method against Standard (a sweep: its preset) where it ran; what stopped it, else ""."""
    if not found:
        return [], ""
    try:
        return compare(found, strict=False), ""
    except CompareError as exc:  # streams of one folder always pair; say so rather than lose the summary
        return [], str(exc)


def _comparison_of(comparisons: Sequence[Comparison], env: str, point: Any, method: str) -> Any:
    """The JSON of the comparison of ``method`` at grid ``point`` in ``env`` (None for the baseline or when
    none ran): a point's budget axes name its cell, its controller axes the arm (``tokenworth@eta_max=0.1``)."""
    from tokenworth_agent.core.budget import BUDGET_AXES
    from tokenworth_agent.results.compare import plain

    budget = ",".join(f"{k}={v}" for k, v in dict(point).items() if k in BUDGET_AXES)
    own = ",".join(f"{k}={v}" for k, v in dict(point).items() if k not in BUDGET_AXES)
    arm = method + (f"@{own}" if own else "")
    found = [c for c in comparisons if (c.env, c.point, c.method) == (env, budget, arm)]
    return plain(found[0].to_json()) if found else None


def summary_title(plan: Plan) -> str:
    """The summary's heading: the run, the tasks per stream, the accounting."""
    tasks = "/".join(str(len(t)) for t in plan.tasks.values())
    return f"{plan.title} · {tasks} tasks · O_max {plan.config.budget.accounting}"


def write_sweep_table(plan: Plan, result: ExperimentResult) -> str:
    """``sweep.md`` / ``sweep.json``: one row per configuration (ΔSR against the preset); returns the table."""
    from tokenworth_agent.experiment.sweep import SweepResult, write_sweep_results

    configs: Sequence[Any] = plan.sweep_configs or ()
    env, seed = plan.settings["env"], plan.settings["seed"]
    return write_sweep_results(SweepResult.from_experiment(result, [dict(c) for c in configs], env, seed),
                               plan.out_dir)


__all__ = ["Summary", "write_summary", "summary_title", "write_sweep_table", "DIFFERENCE_FIGURE"]
