"""A run, typed: :class:`RunConfig` and its parts, the one definition of every run default.

``tokenworth run`` and ``tokenworth sweep`` parse their flags into a :class:`RunConfig` and call
:func:`tokenworth_agent.experiment.launch.launch`; ``tokenworth-bench agent`` does the same. Each part is a
frozen dataclass whose defaults are the CLI's defaults (the flags read them from here)::

    from tokenworth_agent.experiment import RunConfig, Streams, launch

    result = launch(RunConfig(Streams(envs=("db",), methods=("standard", "tokenworth"), seeds=(0, 1)),
                              data=DataConfig(limit=20), output=OutputConfig(out=Path("runs/demo"))))
    print(result.summary.table)

What the run is comes in one of two shapes: :class:`Streams` (``tokenworth run``: every env ×
seed × task order × grid point × method) or :class:`Sweep` (``tokenworth sweep``: one TokenWorth method over
configurations). The other parts say how it runs: the budget accounting, the task data and the
harness, the backbone (its OpenAI-server connection and its in-process engine), the schedule,
where the results go, and who runs the streams (the executor: this process, a Ray cluster or a
Slurm array; not part of the run's identity, so a run started here resumes on a cluster).

A value that cannot be right on its own (an unknown env, method or backbone, a seed listed
twice, a schedule that does not exist) is refused when the value is made, as a
:class:`ConfigError` naming the flag; what needs the file system or the machine (the data, the
``--out`` folder, the GPU) is checked by the plan (:mod:`tokenworth_agent.experiment.plan`), still before
anything is written.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Union

from tokenworth_agent.core.budget import ACCOUNTINGS, DEFAULT_ACCOUNTING, Budget
from tokenworth_agent.core.harness import DEFAULT_HARNESS
from tokenworth_agent.core.plugins import names
from tokenworth_agent.backbones.registry import BACKBONE_NAMES
from tokenworth_agent.experiment.engine import SCHEDULES
from tokenworth_agent.policies.registry import METHOD_NAMES, POLICIES
from tokenworth_agent.results.sequential import DEFAULT_EFFECT_PP, DEFAULT_MAX_ORDERS


DEFAULT_ENV = "db"  # the paper's main stream
EXECUTOR_NAMES = ("local", "ray", "slurm")  # tokenworth_agent.experiment.executor.EXECUTORS makes them
DEFAULT_SEED = 0


class ConfigError(ValueError):
    """A run setting that cannot be right; one line naming the flag."""


def _distinct(flag: str, values: tuple[Any, ...]) -> None:
    if not values:
        raise ConfigError(f"{flag}: name at least one")
    if len(set(values)) != len(values):
        raise ConfigError(f"{flag} lists a value twice: {','.join(map(str, values))}")


def _orders(orders: tuple[int, ...]) -> None:
    """Task orders: distinct non-negative integers (:func:`tokenworth_agent.experiment.orders.check_orders`)."""
    from tokenworth_agent.experiment.orders import OrderError, check_orders

    try:
        check_orders(orders)
    except OrderError as exc:
        raise ConfigError(str(exc)) from None


def _known(what: str, values: tuple[str, ...], known: tuple[str, ...]) -> None:
    unknown = [v for v in values if v not in known]
    if unknown:
        raise ConfigError(f"unknown {what} {', '.join(repr(u) for u in unknown)}; choose from {', '.join(known)}")


# ------------------------------------------------------------------------- what runs
@dataclasses.dataclass(frozen=True)
class UntilDecided:
    """``--until-decided``: task orders in rounds until every comparison with the baseline is decided
    (:mod:`tokenworth_agent.experiment.rounds`; the rule: :mod:`tokenworth_agent.results.sequential`)."""

    effect: float = DEFAULT_EFFECT_PP  # --effect PP: the smallest difference worth finding
    max_orders: int = DEFAULT_MAX_ORDERS  # --max-orders M: orders 0..M-1 at most
    baseline: str = "standard"  # what every other method of the run is compared with

    def __post_init__(self) -> None:
        from tokenworth_agent.results.sequential import check, first_look

        try:
            check(self.effect, self.max_orders)
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc)) from None
        if self.max_orders < first_look(self.max_orders):
            raise ConfigError(f"--max-orders {self.max_orders}: the rule decides nothing before "
                              f"{first_look(self.max_orders)} orders; ask for at least that many")


@dataclasses.dataclass(frozen=True)
class Streams:
    """``tokenworth run``: one stream per (env, seed, grid point, method), as one experiment."""

    envs: tuple[str, ...] = (DEFAULT_ENV,)
    methods: tuple[str, ...] = METHOD_NAMES  # the default run; POLICIES knows the opt-in ones too
    seeds: tuple[int, ...] = (DEFAULT_SEED,)
    grid: tuple[str, ...] = ()  # NAME=v1,v2,... items (tokenworth_agent.experiment.streams); the product is run
    # task orders (tokenworth_agent.experiment.orders): 0 is the benchmark's own; (0,) is a run without an order axis
    orders: tuple[int, ...] = (0,)
    until_decided: UntilDecided | None = None  # orders in rounds until decided; then ``orders`` is left at (0,)

    def __post_init__(self) -> None:
        _distinct("--env", self.envs)
        _known("environment", self.envs, names("benchmark", clashing=True))  # a clash: refused by the plan, naming both
        _distinct("--methods", self.methods)
        _known("method(s)", self.methods, POLICIES.names)
        _distinct("--seeds", self.seeds)
        _orders(self.orders)
        if self.until_decided is not None:
            self._check_until_decided(self.until_decided)

    def _check_until_decided(self, until: UntilDecided) -> None:
        if until.baseline not in self.methods:
            raise ConfigError(f"--until-decided compares every method with {until.baseline}, which is not in "
                              f"--methods ({','.join(self.methods)}); add it")
        if len(self.methods) < 2:
            raise ConfigError(f"--until-decided needs a method to compare with {until.baseline}; add one to --methods")
        if self.orders != (0,):
            raise ConfigError("--until-decided chooses the orders itself (0, 1, ... up to --max-orders); "
                              "leave out --orders")
        if self.grid:
            raise ConfigError("--until-decided decides each method against the baseline per env; it takes no --grid")

    @property
    def run_orders(self) -> tuple[int, ...]:
        """The orders the run may hold: ``orders``, or 0..max_orders-1 with ``until_decided``."""
        return tuple(range(self.until_decided.max_orders)) if self.until_decided is not None else self.orders


@dataclasses.dataclass(frozen=True)
class Sweep:
    """``tokenworth sweep``: TokenWorth (``plus``: TokenWorth+; ``method``: any method, its parameters swept as
    ``METHOD.NAME``) on one env and seed, one stream per configuration."""

    env: str = DEFAULT_ENV
    seed: int = DEFAULT_SEED
    grid: tuple[str, ...] = ()  # NAME=v1,v2,... items; none: the preset alone
    table_a3: bool = False  # the spec §9 one-at-a-time sensitivity grid instead of ``grid``
    plus: bool = False
    method: str | None = None  # None: tokenworth, or tokenworth+ with ``plus``
    orders: tuple[int, ...] = (0,)  # task orders, as Streams.orders; each configuration runs once per order

    def __post_init__(self) -> None:
        _known("environment", (self.env,), names("benchmark", clashing=True))
        _orders(self.orders)
        if self.table_a3 and self.grid:
            raise ConfigError("use either --table-a3 or --grid, not both")
        if self.method is not None:
            _known("method", (self.method,), POLICIES.names)
            if self.plus and self.method != "tokenworth+":
                raise ConfigError(f"--plus sweeps tokenworth+; use either --plus or --method {self.method}")
            if self.table_a3 and self.method not in ("tokenworth", "tokenworth+"):
                raise ConfigError(f"--table-a3 is TokenWorth's sensitivity grid; sweep {self.method} with --grid "
                                  f"{self.method}.NAME=v1,v2")

    @property
    def stream_method(self) -> str:
        """The method every stream of the sweep runs."""
        return self.method or ("tokenworth+" if self.plus else "tokenworth")


# ------------------------------------------------------------------------- how it runs
@dataclasses.dataclass(frozen=True)
class BudgetConfig:
    """The budget C of every env is its Table A1 preset (:meth:`tokenworth_agent.core.budget.Budget.for_env`: B_max from
    the controller's preset table, the rest from the benchmark's own limits); only how O_max is spent
    is chosen per run."""

    accounting: str = DEFAULT_ACCOUNTING

    def __post_init__(self) -> None:
        if self.accounting not in ACCOUNTINGS:
            raise ConfigError(f"--budget-accounting {self.accounting!r}: choose {' or '.join(ACCOUNTINGS)}")

    def budget(self, env: str) -> Budget:
        return Budget.for_env(env, self.accounting)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the tasks come from: the data root (:mod:`tokenworth_agent.tasks.base`) and a shortened stream."""

    data_dir: Path | None = None  # None: $TOKENWORTH_DATA_DIR, else ~/.cache/tokenworth
    limit: int | None = None  # only the first N tasks of each stream

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit must be at least 1, got {self.limit}")


@dataclasses.dataclass(frozen=True)
class HarnessConfig:
    """The harness flags (:class:`tokenworth_agent.core.harness.HarnessOptions` once their files are read and checked):
    the ones every benchmark shares, and the benchmarks' own (``options``: flag name without dashes -> value,
    as each benchmark declares them; :class:`tokenworth_agent.benchmarks.base.BenchmarkOption`)."""

    memory_from: str = DEFAULT_HARNESS.memory_from
    memory_format: str = DEFAULT_HARNESS.memory_format
    instructions: Path | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    def flags(self) -> dict[str, Any]:
        """As :func:`tokenworth_agent.core.harness.harness_from_cli` takes them (a value not given is left out)."""
        shared = {"memory_from": self.memory_from, "memory_format": self.memory_format,
                  "instructions": self.instructions}
        return {k: v for k, v in {**shared, **self.options}.items() if v is not None}


@dataclasses.dataclass(frozen=True)
class ConnectionConfig:
    """An OpenAI-compatible server (``--backbone openai``); None: the backbone's own default
    (agent/tokenworth_agent/backbones/options.py). Not part of a run's identity: moving the server resumes the run."""

    base_url: tuple[str, ...] = ()  # replicas: requests spread over them and fail over
    timeout: float | None = None
    retry_for: float | None = None
    max_retries: int | None = None
    concurrency: int | None = None
    extra_body: str | None = None  # a JSON object added to every request

    def options(self) -> dict[str, Any]:
        """As :func:`tokenworth_agent.backbones.options.split_options` takes them."""
        return dict(base_url=",".join(self.base_url) if self.base_url else None, timeout=self.timeout,
                    retry_for=self.retry_for, max_retries=self.max_retries, concurrency=self.concurrency,
                    extra_body=self.extra_body)


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """The in-process vLLM engine and the GPU split (``--backbone vllm``; ``jax_mem_fraction``: any backbone)."""

    jax_mem_fraction: float | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    dtype: str | None = None
    enforce_eager: bool = False
    prefix_caching: bool = True
    batch_invariant: bool = False
    engine_arg: tuple[str, ...] = ()  # any other EngineArgs field, KEY=VALUE
    allow_untested_vllm: bool = False

    def flags(self) -> dict[str, Any]:
        """As :func:`tokenworth_agent.backbones.engine_options.engine_for_run` takes them (``enforce_eager`` None: vLLM's
        default)."""
        return dict(jax_mem_fraction=self.jax_mem_fraction, gpu_memory_utilization=self.gpu_memory_utilization,
                    max_model_len=self.max_model_len, tensor_parallel_size=self.tensor_parallel_size,
                    dtype=self.dtype, enforce_eager=True if self.enforce_eager else None,
                    prefix_caching=self.prefix_caching, batch_invariant=self.batch_invariant,
                    engine_arg=list(self.engine_arg) or None, allow_untested_vllm=self.allow_untested_vllm)


@dataclasses.dataclass(frozen=True)
class BackboneConfig:
    """Which model answers: the simulator (the default), in-process vLLM or an OpenAI-compatible server."""

    name: str = "sim"
    model: str | None = None  # what the server serves, or a Hugging Face id or local folder for vllm
    connection: ConnectionConfig = ConnectionConfig()
    engine: EngineConfig = EngineConfig()

    def __post_init__(self) -> None:
        if self.name not in BACKBONE_NAMES:
            raise ConfigError(f"--backbone {self.name!r}: choose {', '.join(BACKBONE_NAMES)}")
        if self.name in ("vllm", "openai") and not self.model:
            what = ("the model the server serves" if self.name == "openai"
                    else "a Hugging Face model id or a local folder")
            raise ConfigError(f"--backbone {self.name} needs --model: {what} (e.g. --model Qwen/Qwen2.5-14B-Instruct)")


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    """Where results go. ``out`` None: a folder under ``runs/`` named after the settings."""

    out: Path | None = None
    summary_dir: Path | None = None  # where summary.md/.json and the figures go (None: the run folder)
    overwrite: bool = False  # redo this command's streams (only in a run folder) instead of resuming them
    progress: bool = True  # bars on a terminal; elsewhere a line per stream at each tenth
    track: tuple[str, ...] = ()  # --track mlflow / tensorboard (agent/tokenworth_agent/tracking); not the run's identity

    def __post_init__(self) -> None:
        from tokenworth_agent.tracking import TrackError
        from tokenworth_agent.tracking.settings import parse_backends

        try:
            object.__setattr__(self, "track", parse_backends(self.track))
        except TrackError as exc:
            raise ConfigError(str(exc)) from None


@dataclasses.dataclass(frozen=True)
class SlurmConfig:
    """The Slurm array of ``--executor slurm`` (submitit): one array task per worker, requeued on preemption."""

    partition: str | None = None
    time_min: int = 24 * 60  # per array task; a task that runs out is requeued and resumes
    gpus_per_task: int | None = None  # None: the engine's tensor parallelism with --backbone vllm, else 0
    options: tuple[str, ...] = ()  # KEY=VALUE, any other sbatch option (account=..., mem=64G, constraint=a100)
    cluster: str = "slurm"  # "local": the array as processes on this machine (submitit's local executor)

    def __post_init__(self) -> None:
        if self.cluster not in ("slurm", "local"):
            raise ConfigError(f"--slurm-cluster {self.cluster!r}: choose slurm or local")
        if self.time_min < 1:
            raise ConfigError(f"--slurm-time must be at least 1 minute, got {self.time_min}")
        if self.gpus_per_task is not None and self.gpus_per_task < 0:
            raise ConfigError(f"--slurm-gpus must be >= 0, got {self.gpus_per_task}")
        self.sbatch_options()

    def sbatch_options(self) -> dict[str, str]:
        """``--slurm-option`` items as sbatch options (``account=abc`` is ``#SBATCH --account=abc``)."""
        parsed: dict[str, str] = {}
        for item in self.options:
            key, sep, value = item.partition("=")
            key = key.strip().lstrip("-").replace("-", "_")
            if not sep or not key or not value.strip():
                raise ConfigError(f"--slurm-option {item!r}: expected KEY=VALUE, e.g. account=my_project")
            if key in parsed:
                raise ConfigError(f"--slurm-option names {key} twice")
            parsed[key] = value.strip()
        return parsed


@dataclasses.dataclass(frozen=True)
class ExecutorConfig:
    """Who runs the streams: ``local`` (this process), ``ray`` (one worker per GPU, or per CPU, of the
    cluster at ``ray_address``) or ``slurm`` (a job array). Not part of the run's identity."""

    name: str = "local"
    workers: int | None = None  # ray: workers (default one per GPU, or per CPU); slurm: array tasks
    streams_per_worker: int | None = None  # live streams a worker batches at most (default: its fair share)
    ray_address: str | None = None  # None: $RAY_ADDRESS, else Ray starts a cluster on this machine
    slurm: SlurmConfig = SlurmConfig()

    def __post_init__(self) -> None:
        _known("executor", (self.name,), EXECUTOR_NAMES)
        if self.ray_address is not None and self.name != "ray":
            raise ConfigError("--ray-address only applies to --executor ray")
        if self.slurm != SlurmConfig() and self.name != "slurm":
            raise ConfigError("the --slurm-* options only apply to --executor slurm")
        for flag, value in (("--workers", self.workers), ("--streams-per-worker", self.streams_per_worker)):
            if value is not None and self.name == "local":
                raise ConfigError(f"{flag} applies to --executor ray or slurm; the local executor runs every "
                                  "stream in one batch")
            if value is not None and value < 1:
                raise ConfigError(f"{flag} must be at least 1, got {value}")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything one ``tokenworth run`` or ``sweep`` needs; :func:`tokenworth_agent.experiment.launch.launch` runs it."""

    what: Union[Streams, Sweep] = Streams()
    budget: BudgetConfig = BudgetConfig()
    data: DataConfig = DataConfig()
    harness: HarnessConfig = HarnessConfig()
    backbone: BackboneConfig = BackboneConfig()
    schedule: str = "lockstep"
    output: OutputConfig = OutputConfig()
    executor: ExecutorConfig = ExecutorConfig()

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"--schedule {self.schedule!r}: choose {' or '.join(SCHEDULES)}")
        if self.schedule == "sequential" and self.executor.name != "local":
            raise ConfigError("--schedule sequential runs one stream at a time in one process; use it with "
                              "--executor local")

    @property
    def envs(self) -> tuple[str, ...]:
        return self.what.envs if isinstance(self.what, Streams) else (self.what.env,)

    @property
    def seed(self) -> int:
        """The backbone's seed: the first of the run's seeds."""
        return self.what.seeds[0] if isinstance(self.what, Streams) else self.what.seed


__all__ = ["RunConfig", "Streams", "UntilDecided", "Sweep", "BudgetConfig", "DataConfig", "HarnessConfig", "ConnectionConfig",
           "EngineConfig", "BackboneConfig", "OutputConfig", "ExecutorConfig", "SlurmConfig", "ConfigError",
           "EXECUTOR_NAMES"]
