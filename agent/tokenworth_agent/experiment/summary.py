"""The driver's last step: ``summary.md`` / ``summary.json`` and the figures of a run folder (and a sweep's table).

It summarises every finished stream in the folder, also those other processes or machines ran.
A one-env, one-seed, no-grid run gets the per-method table (every finished method in the
folder); an experiment over several envs, seeds or grid points gets one row per (env, grid
point, method) with SR mean ± std over seeds, and, for a grid over budget levels,
``budget_levels.png``. A sweep also gets ``sweep.md`` / ``sweep.json`` (one row per configuration).
"""

from __future__ import annotations

import dataclasses
import errno
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.experiment.engine import ExperimentResult
from tokenworth_agent.experiment.plan import Plan
from tokenworth_agent.policies.registry import POLICIES
from tokenworth_agent.results.report import (experiment_rows, experiment_table, finished_records, markdown_table,
                                  plot_budget_levels, plot_cumulative_sr, plot_experiment_sr, rewards_of,
                                  summaries_json, summarize)
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
        if grouped:
            found = finished_records(out_dir, plan.names)
            finished = [(s, found[n]) for s, n in zip(plan.streams, plan.names) if n in found]
            rows = experiment_rows(finished)
            table = experiment_table(rows, title)
            payload: Any = [{k: v for k, v in r.items() if k not in ("reward_curve", "reward_curves")} for r in rows]
        else:
            records = finished_records(out_dir, POLICIES.names)
            summaries = summarize(records)
            table = markdown_table(summaries, title)
            payload = [dict(row, accounting=plan.config.budget.accounting) for row in summaries_json(summaries)]
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
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or plan.config.output.summary_dir is not None:
                raise
            return Summary(table, target, (), saved=False)
    return Summary(table, target, tuple(figures))


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


__all__ = ["Summary", "write_summary", "summary_title", "write_sweep_table"]
