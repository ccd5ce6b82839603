"""The flags every command line shares, declared once: ``tokenworth run`` and ``sweep`` take them
(through ``tokenworth_agent.cli.with_experiment_flags``), and ``tokenworth-bench agent`` builds its
argparse options from the same declaration, so the two never drift.

:class:`ExperimentFlags` is a run's settings as flat flags (each one's default is the typed run's,
:class:`~tokenworth_agent.experiment.config.RunConfig`); :meth:`ExperimentFlags.config` turns them
into the ``RunConfig`` that :func:`~tokenworth_agent.experiment.launch.launch` takes. A command line
parses, calls ``launch``, and prints; what a failure means to its user is
:mod:`tokenworth_agent.experiment.failures`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Mapping, Optional, Sequence

import typer

from tokenworth_agent.experiment.config import (BackboneConfig, BudgetConfig, ConfigError, ConnectionConfig, DataConfig,
                                     EngineConfig, ExecutorConfig, HarnessConfig, OutputConfig, RunConfig, SlurmConfig,
                                     Streams, Sweep)

# --help panels. Each option's name fits in 80 columns: flags are single (`--no-progress`, not
# `--progress/--no-progress`, whose second name would take a column of its own) and no help text
# or shown default holds a word much longer than an option name (tests/test_cli_help.py).
EXPERIMENT = "Experiment"
SWEEP = "Sweep"
BUDGET = "Budget"
HARNESS = "Data and harness"
BACKBONE = "Backbone: sim (no flags), vllm or openai"
OPENAI = "OpenAI-compatible server (--backbone openai)"
VLLM = "In-process vLLM and the GPU split (--backbone vllm)"
OUTPUT = "Output"
EXECUTOR = "Executor: local, ray or slurm (docs/distributed.md)"
UNTIL = "Task orders until decided (docs/running.md)"
PANELS = (SWEEP, EXPERIMENT, UNTIL, BUDGET, HARNESS, BACKBONE, OPENAI, VLLM, OUTPUT, EXECUTOR)


def _option(panel: str, help: str, *names: str, **extra: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=panel, **extra)


DEFAULT = RunConfig()  # every flag's default is the typed run's (agent/tokenworth_agent/experiment/config.py)


@dataclasses.dataclass(frozen=True)
class ExperimentFlags:
    """The options `run` and `sweep` share, declared once (:func:`with_experiment_flags` adds them to both).

    ``bench agent`` has its own argparse parser (it passes its arguments through) with the same names."""

    budget_accounting: Annotated[str, _option(
        BUDGET, "How O_max is spent: per-call (each model call may write O_max tokens) or per-task.")] = \
        DEFAULT.budget.accounting
    limit: Annotated[Optional[int], _option(EXPERIMENT, "Only the first N tasks of each stream.", min=1)] = None
    schedule: Annotated[str, _option(
        EXPERIMENT, "lockstep: every stream's pending request in one batched model call per tick; continuous "
                    "(openai backbone): every request in flight on its own, a stream moves on as soon as its reply "
                    "is back; sequential: streams one after another, one conversation per call.")] = \
        DEFAULT.schedule
    data_dir: Annotated[Optional[Path], _option(
        HARNESS, "Data root: a folder per benchmark (lifelongagentbench/, ...); a benchmark's own folder works "
                 "too.", show_default="$TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth")] = None
    memory_from: Annotated[str, _option(
        HARNESS, "Which successes write a memory: completed (reward 1 and ended by its own answer or finish, "
                 "LAB's rule) or reward (reward 1 alone).")] = \
        DEFAULT.harness.memory_from
    memory_format: Annotated[str, _option(
        HARNESS, "How a memory is injected: compact (copyable actions), transcript (LAB's raw replies and "
                 "observations) or abstract (compact with OS names replaced by placeholders).")] = \
        DEFAULT.harness.memory_format
    instructions: Annotated[Optional[Path], _option(
        HARNESS, "Folder of <env>.txt texts replacing the instructions (turn 0).")] = None
    backbone: Annotated[str, _option(BACKBONE, "sim (simulated, the default), vllm (in process) or openai.")] = \
        DEFAULT.backbone.name
    model: Annotated[Optional[str], _option(BACKBONE, "Model name (vllm, openai): what the server serves, or a "
                                                      "Hugging Face id or local folder for vllm.")] = None
    base_url: Annotated[Optional[list[str]], _option(
        OPENAI, "Server URL, e.g. http://HOST:8000/v1; repeat it (or separate with commas) for replicas: "
                "requests spread over them and fail over.")] = None
    timeout: Annotated[Optional[float], _option(OPENAI, "Read timeout per request, seconds.",
                                                show_default="600")] = None
    retry_for: Annotated[Optional[float], _option(
        OPENAI, "While no request gets through, keep retrying this long, seconds; one window for the whole "
                "experiment, then it stops (rerun to resume).", show_default="300")] = None
    max_retries: Annotated[Optional[int], _option(
        OPENAI, "At most this many retries per request.", show_default="no limit; --retry-for bounds them",
        min=0)] = None
    concurrency: Annotated[Optional[int], _option(
        OPENAI, "At most this many requests in flight.", show_default="all of a batch at once", min=1)] = None
    extra_body: Annotated[Optional[str], _option(
        OPENAI, 'JSON object added to every request, e.g. \'{"top_k": -1}\'.')] = None
    jax_mem_fraction: Annotated[Optional[float], _option(
        VLLM, "Share of the GPU for JAX, any backbone.", show_default="what the controller needs, with headroom")] \
        = None
    gpu_memory_utilization: Annotated[Optional[float], _option(
        VLLM, "Share of the GPU's total memory for the engine.", show_default="the card's limit minus JAX's share")] \
        = None
    max_model_len: Annotated[Optional[int], _option(VLLM, "Context length.", show_default="the model's", min=1)] = None
    tensor_parallel_size: Annotated[Optional[int], _option(VLLM, "GPUs per engine.", show_default="1", min=1)] = None
    dtype: Annotated[Optional[str], _option(VLLM, "Weights' dtype: auto, bfloat16, float16, float32.")] = None
    enforce_eager: Annotated[bool, _option(VLLM, "No CUDA graphs (less memory, slower decoding).",
                                           "--enforce-eager")] = False
    no_prefix_caching: Annotated[bool, _option(VLLM, "Do not reuse the KV cache of shared prompt prefixes.",
                                               "--no-prefix-caching")] = False
    batch_invariant: Annotated[bool, _option(
        VLLM, "VLLM_BATCH_INVARIANT=1: greedy replies independent of batching (slower).", "--batch-invariant")] = False
    engine_arg: Annotated[Optional[list[str]], _option(
        VLLM, "Any other EngineArgs field, KEY=VALUE (repeatable), e.g. max_num_seqs=64.")] = None
    allow_untested_vllm: Annotated[bool, _option(
        VLLM, "Start even when the installed vLLM is outside the tested releases.", "--allow-untested-vllm")] = False
    overwrite: Annotated[bool, _option(
        OUTPUT, "Redo: delete this command's results in --out (a run's named streams, a whole sweep; only in a "
                "run folder) and start over. Without it the same command resumes.", "--overwrite")] = False
    no_progress: Annotated[bool, _option(
        OUTPUT, "No progress (bars on a terminal, else a line per tenth).",
        "--no-progress")] = False
    track: Annotated[Optional[list[str]], _option(
        OUTPUT, "Log streams live: mlflow or tensorboard.")] = None
    executor: Annotated[str, _option(
        EXECUTOR, "Who runs the streams: local (this process), ray (a Ray cluster) or slurm (a job "
                  "array).")] = DEFAULT.executor.name
    ray_address: Annotated[Optional[str], _option(
        EXECUTOR, "The Ray head, HOST:PORT; run on a node of that cluster.",
        show_default="$RAY_ADDRESS, else a new cluster here")] = None
    workers: Annotated[Optional[int], _option(
        EXECUTOR, "Ray actors (one per GPU for vllm, else per CPU) or Slurm array tasks.",
        show_default="ray: all; slurm: one per 16 streams", min=1)] = None
    streams_per_worker: Annotated[Optional[int], _option(
        EXECUTOR, "Most streams a worker keeps live at once.",
        show_default="a fair share of all", min=1)] = None
    slurm_partition: Annotated[Optional[str], _option(EXECUTOR, "Slurm partition.",
                                                      show_default="the cluster's default")] = None
    slurm_time: Annotated[int, _option(
        EXECUTOR, "Minutes per array task (then requeued; it resumes).", min=1)] = \
        DEFAULT.executor.slurm.time_min
    slurm_gpus: Annotated[Optional[int], _option(EXECUTOR, "GPUs per array task.",
                                                 show_default="vllm: its GPUs, else 0", min=0)] = None
    slurm_option: Annotated[Optional[list[str]], _option(
        EXECUTOR, "Other sbatch options, KEY=VALUE (repeatable).")] = None
    slurm_cluster: Annotated[str, _option(
        EXECUTOR, "slurm, or local (the array as processes here).")] = \
        DEFAULT.executor.slurm.cluster
    # the benchmarks' own flags the command line took (benchmark_flags), by name; not a flag itself
    benchmark_options: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False,
                                                             metadata={"flag": False})

    def config(self, what: Streams | Sweep, *, out: Path | None = None,
               summary_dir: Path | None = None) -> RunConfig:
        """The typed run of these flags (a bad value: :class:`~tokenworth_agent.experiment.config.ConfigError`)."""
        return RunConfig(
            what=what, budget=BudgetConfig(self.budget_accounting), schedule=self.schedule,
            data=DataConfig(data_dir=self.data_dir, limit=self.limit),
            harness=HarnessConfig(memory_from=self.memory_from, memory_format=self.memory_format,
                                  instructions=self.instructions, options=dict(self.benchmark_options)),
            backbone=BackboneConfig(
                name=self.backbone, model=self.model,
                connection=ConnectionConfig(base_url=tuple(self.base_url or ()), timeout=self.timeout,
                                            retry_for=self.retry_for, max_retries=self.max_retries,
                                            concurrency=self.concurrency, extra_body=self.extra_body),
                engine=EngineConfig(jax_mem_fraction=self.jax_mem_fraction,
                                    gpu_memory_utilization=self.gpu_memory_utilization,
                                    max_model_len=self.max_model_len, tensor_parallel_size=self.tensor_parallel_size,
                                    dtype=self.dtype, enforce_eager=self.enforce_eager,
                                    prefix_caching=not self.no_prefix_caching, batch_invariant=self.batch_invariant,
                                    engine_arg=tuple(self.engine_arg or ()),
                                    allow_untested_vllm=self.allow_untested_vllm)),
            output=OutputConfig(out=out, summary_dir=summary_dir, overwrite=self.overwrite,
                                progress=not self.no_progress, track=tuple(self.track or ())),
            executor=ExecutorConfig(
                name=self.executor.strip().lower(), workers=self.workers, streams_per_worker=self.streams_per_worker,
                ray_address=self.ray_address,
                slurm=SlurmConfig(partition=self.slurm_partition, time_min=self.slurm_time,
                                  gpus_per_task=self.slurm_gpus, options=tuple(self.slurm_option or ()),
                                  cluster=self.slurm_cluster.strip().lower())))


def flag_fields() -> list[dataclasses.Field[Any]]:
    """The fields of :class:`ExperimentFlags` that are flags (all but ``benchmark_options``)."""
    return [f for f in dataclasses.fields(ExperimentFlags) if f.metadata.get("flag", True)]


def benchmark_panel(name: str) -> str:
    """The --help section of one benchmark's own flags."""
    return f"Benchmark {name} (--env {name})"


@dataclasses.dataclass(frozen=True)
class BenchmarkFlag:
    """One benchmark option as a flag: its name, type, default and the typer option (its panel the benchmark's)."""

    name: str
    type: Any  # the Python type the flag parses to (Optional[...] where its default is None)
    default: Any
    option: Any  # typer.Option(...)
    benchmark: str


def benchmark_flags(benchmarks: Mapping[str, Any], *, taken: Sequence[str] = (), warn: Any = None
                    ) -> list[BenchmarkFlag]:
    """The options of ``benchmarks`` (name -> Benchmark, e.g. :func:`tokenworth_agent.core.plugins.benchmarks`) as
    flags, each in its benchmark's section of --help.

    A flag means one thing: an option whose flag another of them declares first, or that is one of ``taken`` (the
    command's own flags), is a ConfigError naming both; with ``warn`` (listing every plugin, ``--help``) that
    benchmark's flags are left out instead, its one line given to ``warn`` once."""
    from tokenworth_agent.core.plugins import warn_once

    flags: dict[str, BenchmarkFlag] = {}
    for name, bench in benchmarks.items():
        own: dict[str, BenchmarkFlag] = {}
        try:
            for option in bench.options:
                if option.flag in taken:
                    raise ConfigError(f"benchmark {name!r} declares the option {option.flag}, which is a flag of the "
                                      "command itself; rename the option")
                if option.name in flags:
                    raise ConfigError(f"the benchmarks {flags[option.name].benchmark} and {name} both declare the "
                                      f"option {option.flag}; rename one of them")
                kind = option.type if option.default is not None else Optional[option.type]
                extra: dict[str, Any] = {} if option.show_default is None else {"show_default": option.show_default}
                names = (option.flag,) if option.type is bool else ()  # a single flag, as the shared ones are
                own[option.name] = BenchmarkFlag(option.name, kind, option.default,
                                                 _option(benchmark_panel(name), option.help, *names, **extra), name)
        except ConfigError as exc:
            if warn is None:
                raise
            warn_once(warn, f"{exc}: its flags are left out")
            continue
        flags.update(own)
    return list(flags.values())


def parse_list(flag: str, text: str) -> tuple[str, ...]:
    """``a,b,c`` as (a, b, c), trimmed and lower-cased; the config checks the values."""
    items = tuple(x.strip().lower() for x in text.split(",") if x.strip())
    if not items:
        raise ConfigError(f"{flag} {text!r}: name at least one")
    return items
