"""Executors: who runs the streams of a planned run.

:func:`tokenworth_agent.experiment.launch.launch` is three steps: plan the streams and the run folder
(:mod:`tokenworth_agent.experiment.plan`), let an **executor** run them in groups (:class:`Shard`), then the
driver writes the summary. An executor decides where each group runs; every group runs the same
way, :func:`run_shard`: the lockstep engine (:func:`tokenworth_agent.experiment.engine.run_experiment`) over
that group's streams, each in its own folder of the one run folder, with its own lock, records and
checkpoint, so any process on any machine that sees the folder can run any group, and a group
killed anywhere resumes from its checkpoints exactly.

* :class:`LocalExecutor`: one group of every stream, in this process, with the backbone the
  driver made; batching spans every stream.
* ``ray`` and ``slurm`` (:mod:`tokenworth_agent.experiment.distributed`, imported only when asked for, so
  neither Ray nor submitit is ever imported by a local run): workers that each keep a batch of
  streams live and take the next pending one as one ends (the engine's ``source``).

A distributed executor implements the same :class:`Executor` protocol: ``check`` refuses before
anything is written (no cluster, too few GPUs); ``run`` deals the plan's streams to workers
(:func:`shards`, or a queue), and each worker builds its own backbone from the plan (applying the
GPU split of its own card first) and runs the engine. It sets ``in_process = False``: the driver
then releases the stream locks it took to prepare the folder before ``run``, and each worker takes
its streams' locks itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Protocol, Sequence

from tokenworth_agent.core.registry import Registry
from tokenworth_agent.experiment.config import EXECUTOR_NAMES, ExecutorConfig
from tokenworth_agent.experiment.engine import ExperimentResult, HookFactory, run_experiment
from tokenworth_agent.experiment.plan import Plan
from tokenworth_agent.experiment.streams import StreamSpec


@dataclasses.dataclass(frozen=True)
class Shard:
    """A group of one plan's streams that one worker runs with one engine (names: their folders)."""

    streams: tuple[StreamSpec, ...]
    names: tuple[str, ...]


def shards(plan: Plan, count: int) -> list[Shard]:
    """The plan's streams dealt round-robin into at most ``count`` non-empty groups, in plan order."""
    if count < 1:
        raise ValueError(f"need at least one shard, got {count}")
    groups = [Shard(plan.streams[i::count], plan.names[i::count]) for i in range(min(count, len(plan.streams)))]
    return [g for g in groups if g.streams]


def run_shard(plan: Plan, shard: Shard, backbone: Any, *, hooks: HookFactory | None = None,
              on_resume: Callable[[int, int], None] | None = None) -> ExperimentResult:
    """What a worker does, wherever it runs: the shard's streams of ``plan.out_dir`` through one engine."""
    return run_experiment(shard.streams, backbone, plan.out_dir, tasks=plan.tasks, schedule=plan.schedule,
                          harness=plan.harness, hooks=hooks, on_resume=on_resume,
                          names=shard.names, data_digests=plan.data_digests)


class Executor(Protocol):
    """Runs a prepared plan's streams (see the module docstring)."""

    name: str
    in_process: bool  # True: the streams run in the driver's process, under the locks it holds

    def check(self, plan: Plan) -> None:
        """Refuse, with a one-line LaunchError, what this executor cannot run; writes nothing."""

    def run(self, plan: Plan, *, hooks: HookFactory | None,
            on_resume: Callable[[int, int], None] | None) -> Sequence[ExperimentResult]:
        """Run every stream of ``plan`` (its folder is prepared); one result per shard."""


class LocalExecutor:
    """Today's engine over every stream, in this process, with the driver's backbone."""

    name = "local"
    in_process = True

    def check(self, plan: Plan) -> None:
        """Nothing to check: the plan already checked this machine (data, GPU, backbone)."""

    def run(self, plan: Plan, *, hooks: HookFactory | None = None,
            on_resume: Callable[[int, int], None] | None = None) -> list[ExperimentResult]:
        open_engine(plan.backbone)
        [shard] = shards(plan, 1)
        return [run_shard(plan, shard, plan.backbone, hooks=hooks, on_resume=on_resume)]


def open_engine(backbone: Any) -> None:
    """Load an in-process engine now (``VLLMBackbone.open``); other backbones have nothing to load.

    Called once the run folder is prepared, so a busy folder fails fast; and before the first
    task, so vLLM measures free memory before JAX's pool has grown (docs/backbones.md)."""
    opener = getattr(backbone, "open", None)
    if callable(opener):
        opener()


# name -> a factory taking the ExecutorConfig; the names are config.EXECUTOR_NAMES (checked by tests/test_distributed.py)
EXECUTORS: Registry[Executor] = Registry("executor", {
    "local": lambda config: LocalExecutor(),
    "ray": "tokenworth_agent.experiment.distributed.ray_executor:RayExecutor",
    "slurm": "tokenworth_agent.experiment.distributed.slurm:SlurmExecutor",
})
assert EXECUTORS.names == EXECUTOR_NAMES


def make_executor(config: ExecutorConfig) -> Executor:
    """The executor ``config`` names (a distributed one's module, and so Ray or submitit, is imported now)."""
    return EXECUTORS.make(config.name, config)


__all__ = ["Executor", "LocalExecutor", "Shard", "shards", "run_shard", "open_engine", "EXECUTORS", "make_executor"]
