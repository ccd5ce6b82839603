"""``launch(config)``: a whole run, as ``tokenworth run`` / ``sweep`` and the benches start it.

Three steps:

1. **Plan** (:func:`tokenworth_agent.experiment.plan.make_plan`): every check, and the streams, folder and
   settings; nothing is written, so a refused run leaves the file system as it was.
2. **Run**: the run folder is prepared under its lock (``config.json``; ``--overwrite`` deletes
   this command's streams first) while every stream's lock is held, so a busy folder or stream
   fails before any model loads; then an executor (:mod:`tokenworth_agent.experiment.executor`, chosen by
   ``config.executor``: by default :class:`~tokenworth_agent.experiment.executor.LocalExecutor`, every stream
   in this process; or Ray or Slurm workers, :mod:`tokenworth_agent.experiment.distributed`) runs the
   streams. An executor that runs them elsewhere checks its cluster before step 2 (nothing
   written yet) and the GPU split is then each worker's (:func:`~tokenworth_agent.experiment.plan.make_plan`'s
   ``engine_here``).
   With ``--until-decided`` the executor runs the streams in rounds of task orders
   (:mod:`tokenworth_agent.experiment.rounds`), each round the streams of comparisons still undecided.
3. **Summarise**: the driver writes ``summary.md`` / ``summary.json`` and the figures (and a
   sweep's ``sweep.md``) from every finished stream in the folder.

Ctrl-C stops between two tasks (:mod:`tokenworth_agent.core.interrupt`); the same call resumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Sequence

import numpy as np

from tokenworth_agent.experiment.config import RunConfig, Streams, Sweep
from tokenworth_agent.experiment import rounds, tracked
from tokenworth_agent.experiment.engine import ExperimentResult, HookFactory
from tokenworth_agent.experiment.executor import Executor, make_executor
from tokenworth_agent.experiment.plan import Plan, make_plan, note
from tokenworth_agent.experiment.progress import ProgressBars
from tokenworth_agent.experiment.summary import Summary, write_summary, write_sweep_table
from tokenworth_agent.policies.registry import POLICIES
from tokenworth_agent.results.record import read_records
from tokenworth_agent.storage import runfolder
from tokenworth_agent.storage.checkpoint import atomic_write_text


@dataclasses.dataclass(frozen=True)
class LaunchResult:
    """A finished launch: the plan, every stream's records, the summary, and a sweep's table."""

    plan: Plan
    result: ExperimentResult
    summary: Summary
    sweep_table: str | None
    seconds: float  # from the first task to the summary

    @property
    def table(self) -> str:
        """What the command prints: a sweep's table, else the summary's."""
        return self.sweep_table if self.sweep_table is not None else self.summary.table


def launch(config: RunConfig, *, executor: Executor | None = None, hooks: HookFactory | None = None) -> LaunchResult:
    """Plan, run and summarise ``config`` (see the module docstring). ``hooks``: the streams' hooks
    (default: progress bars or lines, ``config.output.progress``)."""
    executor = executor or make_executor(config.executor)
    plan = make_plan(config, engine_here=executor.in_process)
    executor.check(plan)
    with contextlib.ExitStack() as held:
        prepare(plan, held)
        if not executor.in_process:
            held.close()  # each worker locks its own streams
        until = config.what.until_decided if isinstance(config.what, Streams) else None
        note(f"{', '.join(plan.envs)}: {'up to ' if until else ''}{len(plan.streams)} streams, {plan.stream_tasks} stream-tasks, backbone "
             f"{config.backbone.name}, schedule {plan.schedule} -> {plan.out_dir}")
        started = time.perf_counter()
        tracker = tracked.open_tracker(plan)  # None without --track; in workers, each worker tracks its own streams

        def run(part: Plan) -> Sequence[ExperimentResult]:
            bars = None if hooks is not None else ProgressBars(config.output.progress, part.streams, part.tasks)
            front = hooks or bars
            try:
                return executor.run(part, hooks=tracked.combined(front, tracker) if executor.in_process else front,
                                    on_resume=bars.resuming if bars else None)
            finally:
                if bars is not None:
                    bars.close()

        try:
            if until is None:
                results = run(plan)
            else:  # --until-decided: order after order while some comparison is open (experiment/rounds.py)
                results = [r for part in rounds.run_rounds(plan, until, run) for r in part]
                plan = rounds.ran(plan)
        except BaseException:
            tracked.close(tracker)  # what was committed still gets sent, or written down for a replay
            raise
        result = merged(plan, results, time.perf_counter() - started)
        if result.batch_sizes:
            note(f"{len(result.batch_sizes)} model calls, mean batch {np.mean(result.batch_sizes):.1f}, "
                 f"max {max(result.batch_sizes)}")
        sweep_table = write_sweep_table(plan, result) if isinstance(config.what, Sweep) else None
        summary = write_summary(plan)
        tracked.finish(tracker, plan, summary=summary, sync=not executor.in_process)
    return LaunchResult(plan, result, summary, sweep_table, time.perf_counter() - started)


def prepare(plan: Plan, held: contextlib.ExitStack) -> None:
    """The folder, its config and this command's stream locks (held in ``held``), checked again under the lock."""
    out_dir = plan.out_dir
    with runfolder.locked(*runfolder.folder_lock(out_dir), wait_s=runfolder.FOLDER_LOCK_WAIT_S):
        runfolder.check_run_folder(out_dir)
        owned = list(plan.replaced)
        if isinstance(plan.config.what, Sweep) and plan.config.output.overwrite:  # streams made since the plan too
            owned = list(dict.fromkeys([*owned, *runfolder.streams_in(out_dir)]))
        for name in owned:  # every named stream's lock before any task runs
            held.enter_context(runfolder.locked(*runfolder.method_lock(out_dir, name)))
        runfolder.prepare(out_dir, dict(plan.settings), owned, [*POLICIES.names, *plan.names],
                          overwrite=plan.config.output.overwrite)
        for name, text in plan.run_files.items():  # e.g. ALFWorld's manifest, checked against the folder's in the plan
            atomic_write_text(out_dir / name, text)


def merged(plan: Plan, results: list[ExperimentResult] | tuple[ExperimentResult, ...], seconds: float
           ) -> ExperimentResult:
    """The shards' results as one, in the plan's stream order."""
    records = {name: records for r in results for name, records in r.records.items()}
    for name in plan.names:  # --until-decided: a stream of an earlier round that this call had no need to run
        if name not in records:
            records[name] = read_records(plan.out_dir / name / runfolder.RECORDS)
    return ExperimentResult(list(plan.streams), list(plan.names), {n: records[n] for n in plan.names},
                            [size for r in results for size in r.batch_sizes], seconds)


__all__ = ["launch", "LaunchResult", "prepare", "merged"]
