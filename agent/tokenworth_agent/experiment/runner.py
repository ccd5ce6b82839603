"""One method over one task stream: the single-stream front end of the experiment engine.

:func:`run_stream` is :func:`tokenworth_agent.experiment.run_experiment` with one stream whose folder is
``<out>/<method>`` (the layout of a one-env, one-seed run); :func:`run_task` runs one task
with its model calls sent one at a time. Both run the engine's own per-task procedure
(:func:`tokenworth_agent.experiment.task.task_steps`); there is no second loop here.

Resume: after every task the record is appended and then the checkpoint (policy state incl.
bank, controller and RNG state, JSONL offset, next task index) is replaced atomically. A
resumed run truncates the JSONL to the checkpointed offset and continues at the next task,
so its records equal an uninterrupted run's, field for field, except the wall-clock ``time_s``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.storage import runfolder
from tokenworth_agent.policies.auxiliary import without_model
from tokenworth_agent.core.budget import Budget, InjectionBlock
from tokenworth_agent.storage.checkpoint import DURABLE_EVERY_S
from tokenworth_agent.tasks import Task
from tokenworth_agent.envs.base import Environment
from tokenworth_agent.envs.registry import make_environment  # noqa: F401  (re-exported for benches)
from tokenworth_agent.experiment.episode import (JUDGE_CAP, OBSERVATION_CAP, OVER_MAX_TOKENS, Episode, Request, clipped,  # noqa: F401
                           invalid_reason, round_entry)
from tokenworth_agent.experiment.engine import StreamHook, run_experiment
from tokenworth_agent.experiment.streams import StreamSpec
from tokenworth_agent.experiment.task import make_record, render, run_task  # noqa: F401
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.memory import Memory
from tokenworth_agent.policies.base import MemoryPolicy
from tokenworth_agent.policies.registry import METHOD_NAMES, POLICIES, make_policy  # noqa: F401
from tokenworth_agent.results.record import NONDETERMINISTIC_FIELDS, TaskRecord, comparable  # noqa: F401
from tokenworth_agent.sim.facts import AnyBackbone


def injection_for(policy: MemoryPolicy, task: Task, budget: Budget,
                  ) -> tuple[list[Memory], InjectionBlock, tuple[str, ...] | None]:
    """Retrieve (auxiliary calls skipped) and render; the memories returned are those injected."""
    return render(without_model(policy.retrieve_steps(task)) or [], budget)


def run_stream(method: str, env_name: str, tasks: Sequence[Task], backbone: AnyBackbone, budget: Budget, seed: int,
               out_dir: str | Path, *, env: Environment | None = None,
               hook: StreamHook | None = None, checkpoint_every: int = 1, stop_after: int | None = None,
               durable_every_s: float = DURABLE_EVERY_S, harness: HarnessOptions = DEFAULT_HARNESS,
               hparams: dict[str, Any] | None = None) -> list[TaskRecord]:
    """Run (or resume) ``method`` over ``tasks`` into ``out_dir/<method>``; returns all records, old and new.

    ``stop_after`` processes at most that many tasks in this call; ``hook`` hears of the stream's
    resumed records, its start and each new record. See :func:`tokenworth_agent.experiment.run_experiment`.
    """
    spec = StreamSpec(env_name, method, seed, budget, tuple(sorted((hparams or {}).items())))
    result = run_experiment([spec], backbone, out_dir, tasks={env_name: tasks},
                            harness=harness, hooks=lambda _name, _spec: hook,
                            environments={method: env} if env is not None else None, stop_after=stop_after,
                            names=[method], checkpoint_every=checkpoint_every, durable_every_s=durable_every_s)
    return result.records[method]


def write_run_config(out_dir: str | Path, config: dict[str, Any], *, overwrite: bool = False) -> None:
    """Record the run's settings; refuse to mix two different runs in one directory.

    A thin wrapper over :func:`tokenworth_agent.storage.runfolder.prepare` for callers that run every method.
    """
    out = Path(out_dir)
    with runfolder.locked(*runfolder.folder_lock(out), wait_s=runfolder.FOLDER_LOCK_WAIT_S):
        runfolder.prepare(out, config, METHOD_NAMES if overwrite else (), METHOD_NAMES, overwrite=overwrite)
