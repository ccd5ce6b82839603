"""Experiments: one lockstep engine for every stream of a run or a sweep.

* :mod:`agent.experiment.streams` — what a stream is, grids, folder names;
* :mod:`agent.experiment.task` — the per-task procedure as a coroutine (the only copy);
* :mod:`agent.experiment.engine` — the tick loop: one batched model call per tick, per-stream
  records, checkpoints and resume.

``tokenworth run`` and ``tokenworth sweep`` are two front ends of :func:`run_experiment`.
"""

from agent.experiment.engine import SCHEDULES, ExperimentResult, comparable, run_experiment
from agent.experiment.streams import GridError, StreamSpec, expand, grid_points, parse_grid_item, stream_names
from agent.experiment.task import RequestFailed, run_task, task_steps

__all__ = ["run_experiment", "ExperimentResult", "comparable", "SCHEDULES", "StreamSpec", "GridError", "expand",
           "grid_points", "parse_grid_item", "stream_names", "RequestFailed", "run_task", "task_steps"]
