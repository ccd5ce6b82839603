"""What a benchmark provides: :class:`Benchmark`, one frozen value per benchmark, and its options.

Each benchmark is one folder (``tokenworth_agent/benchmarks/<name>/`` for the five built-ins, or a
package of another distribution) whose ``__init__`` exports one ``BENCHMARK``, registered under the
entry-point group ``tokenworth.benchmarks`` (:mod:`tokenworth_agent.core.plugins`). The harness reads a
benchmark only through this value: the engine, the CLI, the simulator, memory construction, the
budgets, ``tokenworth data fetch`` and ``tokenworth show`` name no benchmark (tests/test_benchmark_folders.py).

What each part receives:

* ``make_environment(budget, options, instructions)``: the run's :class:`~tokenworth_agent.core.budget.Budget`
  (its ``max_rounds`` is J_max), the benchmark's own options as the run resolved them (``{name: value}``
  for every :class:`BenchmarkOption` it declares), and the text of ``--instructions DIR/<name>.txt``
  (``None``: its own :attr:`Benchmark.instructions`). Returns an
  :class:`~tokenworth_agent.envs.base.Environment`.
* ``tasks``: a task source, ``load(data_dir, folders) -> list[Task]`` in stream order, with ``benchmark``
  (its :class:`~tokenworth_agent.tasks.base.DataFolder` under the data root) and optionally
  ``run_files(data_dir, folders) -> {name: text}`` (files the run folder keeps).
* ``compact_memory(question, turns, *, abstract) -> (head, steps)``: the memory a solved task writes in
  the ``compact`` format (:mod:`tokenworth_agent.memory`).
* ``sim_reply(task, episode, round, conversation, params) -> str``: the simulated backbone's reply
  (:mod:`tokenworth_agent.sim`), with ``sim_p0_range`` its difficulty; without them ``--backbone sim``
  refuses the benchmark in one line.
* ``resolve_options(options, data_dir, from_data) -> options``: the values as the run uses them (KG: ``none``
  for no ontology), and with ``from_data`` (a run's plan) the defaults that depend on the data under
  ``data_dir`` (KG's ontology folder); ``setup_check(options)``: what must be installed or reachable (a venv, an
  endpoint); ``identity(options) -> dict``: what else enters the run's identity (a file's digest, an
  evaluator's version). Each raises :class:`~tokenworth_agent.core.harness.HarnessError` (one line).
* ``fetch(data_dir, folders, say)`` and ``data_source(data_dir, folders)``: ``tokenworth data fetch`` and
  the ``data_source`` entry of a run's ``config.json``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping, Protocol, Sequence

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.parameters import Parameter
from tokenworth_agent.envs.base import Environment
from tokenworth_agent.tasks.base import DataFolder, Task

Options = Mapping[str, Any]


class TaskSource(Protocol):
    """A benchmark's tasks: where they are under the data root, and how they are read."""

    @property
    def benchmark(self) -> DataFolder: ...

    def load(self, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder]) -> list[Task]: ...


# One option of a benchmark: the flag ``--<name with dashes>`` of ``tokenworth run`` and ``sweep``, shown in the
# benchmark's own ``--help`` section. The type is the one every plugin parameter has (a method's hyperparameters
# too): :class:`tokenworth_agent.core.parameters.Parameter`; ``BenchmarkOption`` is its older name and stays.
BenchmarkOption = Parameter


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """Everything the harness needs of one benchmark (see the module docstring for what each part receives)."""

    name: str  # the registry name: --env NAME, the records' "env", the run folder's name
    tasks: TaskSource
    instructions: str  # its own instruction text (user turn 0), shown by `tokenworth show`
    make_environment: Callable[[Budget, Options, "str | None"], Environment]
    compact_memory: Callable[..., Any]
    # its budget C (Table A1 / App. C): Budget fields but env, accounting and, unless given, bank_capacity
    # (then the controller preset's B_max)
    limits: Mapping[str, int]
    controller_preset: str | None = None  # the library preset TokenWorth runs with (None: the one named `name`)
    sim_reply: Callable[..., str] | None = None
    sim_p0_range: tuple[float, float] | None = None  # the simulator's base success probability range
    options: tuple[BenchmarkOption, ...] = ()
    resolve_options: Callable[[dict[str, Any], Any, bool], dict[str, Any]] | None = None
    setup_check: Callable[[Options], None] | None = None
    identity: Callable[[Options], Mapping[str, Any]] | None = None
    # `tokenworth data fetch`: the files to fetch, each checked (tokenworth_agent.tasks.download.Download), then the
    # tasks are read once as a check; or `fetch(data_dir, folders, say)` doing all of it itself
    downloads: Callable[..., list[Any]] | None = None
    fetch: Callable[..., Any] | None = None
    data_note: str = ""  # what a fetch that stopped part-way leaves the benchmark without, for its one line
    data_source: Callable[[Any, Sequence[DataFolder]], Mapping[str, str]] | None = None
    commands: Callable[[], Any] | None = None  # a typer.Typer of its own commands: `tokenworth <name> ...`
    description: str = ""  # one line for `tokenworth plugins` and --env's help

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"a benchmark's name must be letters, digits, - and _, got {self.name!r}")
        if (self.sim_reply is None) != (self.sim_p0_range is None):
            raise ValueError(f"benchmark {self.name!r}: sim_reply and sim_p0_range come together")

    @property
    def preset(self) -> str:
        return self.controller_preset or self.name

    def option_values(self, given: Options) -> dict[str, Any]:
        """This benchmark's options from the run's flat option mapping, each missing one at its default."""
        return {o.name: given.get(o.name, o.default) for o in self.options}


__all__ = ["Benchmark", "BenchmarkOption", "Parameter", "TaskSource", "Options"]
