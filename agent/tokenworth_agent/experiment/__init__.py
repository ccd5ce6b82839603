"""The application layer: a run as a typed config, its launch, and the lockstep engine it runs on.

* :mod:`tokenworth_agent.experiment.config` — :class:`RunConfig` and its parts (every run default, once);
* :mod:`tokenworth_agent.experiment.flags` — the flags every command line shares (:class:`ExperimentFlags` →
  ``RunConfig``); :mod:`tokenworth_agent.experiment.failures` — what a failure means to the user, as one line;
* :mod:`tokenworth_agent.experiment.plan` — the checks and the plan of a run (nothing written);
* :mod:`tokenworth_agent.experiment.executor` — who runs the planned streams (:class:`LocalExecutor`: this process;
  Ray and Slurm: :mod:`tokenworth_agent.experiment.distributed`, imported only when used);
* :mod:`tokenworth_agent.experiment.launch` — :func:`launch`: plan → executor → the driver's summary
  (:mod:`tokenworth_agent.experiment.summary`), with progress lines (:mod:`tokenworth_agent.experiment.progress`);
* :mod:`tokenworth_agent.experiment.streams` — what a stream is, grids, folder names;
* :mod:`tokenworth_agent.experiment.sweep` — the sweep's grids (Table A3) and its table;
* :mod:`tokenworth_agent.experiment.task` — the per-task procedure as a coroutine (the only copy);
* :mod:`tokenworth_agent.experiment.episode` — one task's rounds as a state machine;
* :mod:`tokenworth_agent.experiment.engine` — the tick loop: one batched model call per tick, per-stream
  records, checkpoints and resume;
* :mod:`tokenworth_agent.experiment.runner` — one method over one stream (tests and benches).

``tokenworth run`` and ``tokenworth sweep`` parse their flags into a :class:`RunConfig` and call
:func:`launch`; so does ``tokenworth-bench agent``, through this layer only.
"""

from tokenworth_agent.experiment.config import (BackboneConfig, BudgetConfig, ConfigError, ConnectionConfig, DataConfig,
                                     EngineConfig, ExecutorConfig, HarnessConfig, OutputConfig, RunConfig, SlurmConfig,
                                     Streams, Sweep)
from tokenworth_agent.experiment.engine import SCHEDULES, ExperimentResult, run_experiment
from tokenworth_agent.experiment.executor import Executor, LocalExecutor, Shard, make_executor, run_shard, shards
from tokenworth_agent.experiment.launch import LaunchResult, launch
from tokenworth_agent.experiment.plan import LaunchError, Plan, make_plan
from tokenworth_agent.experiment.streams import GridError, StreamSpec, expand, grid_points, parse_grid_item, stream_names
from tokenworth_agent.experiment.task import RequestFailed, run_task, task_steps
from tokenworth_agent.results.record import comparable

__all__ = ["RunConfig", "Streams", "Sweep", "BudgetConfig", "DataConfig", "HarnessConfig", "ConnectionConfig",
           "EngineConfig", "BackboneConfig", "OutputConfig", "ExecutorConfig", "SlurmConfig", "ConfigError", "launch",
           "LaunchResult", "LaunchError", "Plan", "make_plan", "Executor", "LocalExecutor", "Shard", "shards",
           "make_executor", "run_shard", "run_experiment",
           "ExperimentResult", "comparable", "SCHEDULES", "StreamSpec", "GridError", "expand", "grid_points",
           "parse_grid_item", "stream_names", "RequestFailed", "run_task", "task_steps"]
