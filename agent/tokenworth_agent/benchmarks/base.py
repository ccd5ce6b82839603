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
* ``phase(task) -> label``: the phase a task belongs to, for ``--orders``: each run of consecutive tasks with one
  label stays in place and is shuffled within (:mod:`tokenworth_agent.experiment.orders`); without it the whole
  stream is permuted.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
from typing import Any, Callable, Mapping, Protocol, Sequence

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.parameters import Parameter, check_declared, default_problems
from tokenworth_agent.envs.base import Environment
from tokenworth_agent.tasks.base import DataFolder, Task

Options = Mapping[str, Any]


class TaskSource(Protocol):
    """A benchmark's tasks: where they are under the data root, and how they are read (the data-folder contract).

    The data root holds one folder per benchmark (``lifelongagentbench/``, ``bigcodebench/``, ...); it is
    ``--data-dir``, else ``$TOKENWORTH_DATA_DIR``, else ``~/.cache/tokenworth``. A user may also name a
    benchmark's own folder instead of the root; the harness tells such a folder by the :class:`DataFolder` of the
    benchmarks it knows. A source never resolves any of this itself: its folder is
    ``benchmark_dir(self.benchmark, data_dir, folders)`` (:func:`tokenworth_agent.tasks.base.benchmark_dir`).
    Task data is read at run time, never shipped in a repository; tasks that ship in the plugin's own package
    (the example benchmark) ignore both arguments.
    """

    @property
    def benchmark(self) -> DataFolder:
        """The benchmark's folder under the data root, and the entries that tell it when it is named directly."""

    def load(self, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder]) -> list[Task]:
        """The tasks in stream order (``sample_index`` 0..N-1; the run takes the first ``--limit``).

        Args:
            data_dir: what the user named (``--data-dir``), or None; pass it on to ``benchmark_dir``.
            benchmarks: ``folders``, the :class:`DataFolder` of every benchmark the run knows (the built-ins' and
                the run's own); pass them on to ``benchmark_dir``, which tells by them a folder named directly.

        Raises:
            DataError: a missing or unreadable file, in one line saying where it was looked for and how to get
                it.
        """


# One option of a benchmark: the flag ``--<name with dashes>`` of ``tokenworth run`` and ``sweep``, shown in the
# benchmark's own ``--help`` section. The type is the one every plugin parameter has (a method's hyperparameters
# too): :class:`tokenworth_agent.core.parameters.Parameter`; ``BenchmarkOption`` is its older name and stays.
BenchmarkOption = Parameter


class BenchmarkError(ValueError):
    """A :class:`Benchmark` value that cannot be used, with every problem found, each naming the field and what to
    write instead (one line). Raised when the value is made and again when the harness loads it."""

    def __init__(self, name: Any, problems: Sequence[str]) -> None:
        self.name, self.problems = name, tuple(problems)
        super().__init__(f"benchmark {name!r}: {'; '.join(self.problems)}")


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """Everything the harness needs of one benchmark: one frozen value, registered under the entry-point group
    ``tokenworth.benchmarks`` (the module docstring says what each callable receives).

    The value is checked when it is made and when the harness loads it (:meth:`problems`, :meth:`check_preset`):
    each field's type, each callable's arguments, the ``limits`` keys and the preset. A wrong one is one
    :class:`BenchmarkError` line naming the field and what to write; ``tokenworth plugins`` lists such a plugin as
    broken, and every other benchmark keeps working.

    Attributes:
        name: the registry name, lower-case letters, digits, ``-`` and ``_``: ``--env NAME``, the records'
            ``env``, the run folder's name. It must be the name the entry point registers.
        tasks: the task source: ``benchmark``, its :class:`~tokenworth_agent.tasks.base.DataFolder`, and
            ``load(data_dir, folders) -> list[Task]`` in stream order (:class:`TaskSource`: the data-folder
            contract); optionally ``run_files(data_dir, folders) -> {file name: text}``, files the run folder keeps
            (a resumed run whose data gives other text is refused).
        instructions: its own instruction text (user turn 0), shown by ``tokenworth show`` and replaced by
            ``--instructions DIR/<name>.txt``.
        make_environment: ``(budget, options, instructions) -> Environment``: ``budget`` the run's
            :class:`~tokenworth_agent.core.budget.Budget` (``budget.max_rounds`` is J_max), ``options`` this benchmark's
            own options as the run resolved them (``{name: value}`` for each of :attr:`options`), ``instructions``
            the ``--instructions`` text or ``None`` (use your own).
        compact_memory: ``(question, turns, *, abstract) -> (head, [Step, ...])``: the memory a solved task writes
            in the ``compact`` format, the actions exactly as the model must write them (``abstract``: with
            instance-specific names replaced by placeholders).
        limits: the budget C, keyed by :class:`~tokenworth_agent.core.budget.Budget`'s field names (not the
            ``--grid`` short names): ``max_output_tokens`` (O_max), ``max_rounds`` (J_max), ``max_memories``
            (K_max) and ``max_injected_chars`` (L_max) are required; ``bank_capacity`` (B_max; default: the
            controller preset's), ``per_call_cap`` (default 512) and ``aux_call_cap`` (default: ``per_call_cap``)
            may be given. Integers, O_max, J_max, B_max and the caps at least 1, K_max and L_max at least 0.
        controller_preset: the library preset TokenWorth runs with (its hyperparameters and B_max), one of
            ``tokenworth_jax.presets.NAMES``: ``db``, ``os``, ``kg`` (Table A1), ``bigcodebench``, ``alfworld``
            (App. C). ``None`` (the default) means the preset named like the benchmark, which only a built-in
            has: a plugin names one, else it is refused when loaded (one line listing the presets).
        sim_reply: the simulated backbone's reply, ``(task, episode, round, conversation, params) -> str``
            (:class:`~tokenworth_agent.sim.model.Episode`: ``episode.success`` is the simulator's decision for this
            task; ``round`` counts the model calls from 0 (a repair call included); ``conversation`` the chat so
            far, the last user turn holding the latest observation; ``params`` the
            :class:`~tokenworth_agent.sim.model.SimParams`). On a success
            the replies, round after round, must make the environment's judge pass within J_max rounds, and on a
            failure they must not: the simulated success rates are ``episode.success`` exactly. Round 0's reply
            gets a ``Thought:`` line put before it. ``None``: ``--backbone sim`` refuses the benchmark (one line).
        sim_p0_range: ``(lo, hi)``, ``0 <= lo <= hi <= 1``: the simulator's range of a task's base success
            probability; given with ``sim_reply``, never alone.
        options: its own :class:`BenchmarkOption` values: flags of ``tokenworth run`` and ``sweep`` in a
            ``--help`` section of their own.
        resolve_options: ``(options, data_dir, from_data) -> options``: the values as the run uses them, with
            ``from_data`` (a run's plan) the defaults found in the data.
        setup_check: ``(options) -> None``: what must be installed or reachable; raises
            :class:`~tokenworth_agent.core.harness.HarnessError` (one line).
        identity: ``(options) -> dict``: what else enters each stream's identity (a file's digest, an
            evaluator's version).
        downloads: ``(data_dir, folders) -> [Download, ...]``: the files ``tokenworth data fetch`` fetches, each
            checked.
        fetch: ``(data_dir, folders, say)``: ``tokenworth data fetch`` doing all of it itself (instead of
            ``downloads``).
        data_note: what a fetch that stopped part-way leaves the benchmark without, for its one line.
        data_source: ``(data_dir, folders) -> {key: text}``: the ``data_source`` entry of a run's ``config.json``.
        commands: ``() -> typer.Typer``: commands of its own, ``tokenworth <name> ...``.
        phase: ``(task) -> label`` (any hashable value): the phase of a task in the stream, for ``--orders``
            (:mod:`tokenworth_agent.experiment.orders`): order k > 0 keeps each run of consecutive tasks with one
            label in place and shuffles the tasks within it (BigCodeBench: Full, then Hard; ALFWorld: its three
            splits). ``None``: the whole stream is one phase.
        description: one line shown by ``tokenworth plugins``.
    """

    name: str
    tasks: TaskSource
    instructions: str
    make_environment: Callable[[Budget, Options, "str | None"], Environment]
    compact_memory: Callable[..., Any]
    limits: Mapping[str, int]
    controller_preset: str | None = None
    sim_reply: Callable[..., str] | None = None
    sim_p0_range: tuple[float, float] | None = None
    options: tuple[BenchmarkOption, ...] = ()
    resolve_options: Callable[[dict[str, Any], Any, bool], dict[str, Any]] | None = None
    setup_check: Callable[[Options], None] | None = None
    identity: Callable[[Options], Mapping[str, Any]] | None = None
    downloads: Callable[..., list[Any]] | None = None
    fetch: Callable[..., Any] | None = None
    data_note: str = ""
    data_source: Callable[[Any, Sequence[DataFolder]], Mapping[str, str]] | None = None
    commands: Callable[[], Any] | None = None
    description: str = ""
    phase: Callable[[Task], Any] | None = None

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise BenchmarkError(self.name, problems)

    @property
    def preset(self) -> str:
        """The controller preset TokenWorth runs with: :attr:`controller_preset`, else the benchmark's name."""
        return self.controller_preset or self.name

    def option_values(self, given: Options) -> dict[str, Any]:
        """This benchmark's options from the run's flat option mapping, each missing one at its default."""
        return {o.name: given.get(o.name, o.default) for o in self.options}

    def problems(self) -> list[str]:
        """Every way this value breaks the contract above, each one clause naming the field and what to write
        (empty: none). The preset is checked apart (:meth:`check_preset`: it reads the controller library)."""
        return _problems(self)

    def check_preset(self) -> None:
        """Refuse a :attr:`preset` the controller library does not have (one :class:`BenchmarkError` line)."""
        from tokenworth_jax.presets import NAMES

        if self.preset in NAMES:
            return
        choices = ", ".join(sorted(NAMES))
        if self.controller_preset is None:
            problem = (f"controller_preset is not set, and {self.name!r} is no controller preset: set "
                       f"controller_preset to the library preset TokenWorth runs with (its hyperparameters and B_max), "
                       f"one of {choices}")
        else:
            problem = f"controller_preset {self.controller_preset!r} is no controller preset; use one of {choices}"
        raise BenchmarkError(self.name, [problem])


# ------------------------------------------------------------------------- the checks of a Benchmark value
# The limits a benchmark gives: Budget's fields but the env and the run's accounting. Required: those Budget has no
# default for, but B_max (the controller preset's unless given).
LIMIT_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Budget) if f.name not in ("env", "accounting"))
REQUIRED_LIMITS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Budget)
    if f.default is dataclasses.MISSING and f.name not in ("env", "bank_capacity"))
# What each callable field is called with: (positional arguments, keyword arguments); None: it may be None.
_CALLABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "make_environment": (("budget", "options", "instructions"), ()),
    "compact_memory": (("question", "turns"), ("abstract",)),
    "sim_reply": (("task", "episode", "round", "conversation", "params"), ()),
    "resolve_options": (("options", "data_dir", "from_data"), ()),
    "setup_check": (("options",), ()),
    "identity": (("options",), ()),
    "downloads": (("data_dir", "folders"), ()),
    "fetch": (("data_dir", "folders", "say"), ()),
    "data_source": (("data_dir", "folders"), ()),
    "commands": ((), ()),
    "phase": (("task",), ()),
}
_REQUIRED_CALLABLES = ("make_environment", "compact_memory")
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


def _shown(value: Any) -> str:
    """A value as an error line names it: its type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _call_problem(field: str, function: Any, positional: Sequence[str], keywords: Sequence[str] = ()) -> str | None:
    """Why ``function`` cannot be called as the harness calls ``field`` (None: it can)."""
    call = f"{field}({', '.join([*positional, *(f'{k}=...' for k in keywords)])})"
    if not callable(function):
        return f"{field} must be a function called as {call}, got {_shown(function)}"
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a readable signature: taken as it is
        return None
    try:
        signature.bind(*positional, **{k: None for k in keywords})
    except TypeError:
        return f"{field} is called as {call}, but {getattr(function, '__qualname__', _shown(function))} takes {signature}"
    return None


def _problems(bench: Benchmark) -> list[str]:
    found: list[str] = []
    if not isinstance(bench.name, str) or not _NAME.fullmatch(bench.name):
        found.append(f"name must be lower-case letters, digits, - and _ (what --env takes), got {bench.name!r}")
    found += _task_source_problems(bench.tasks)
    if not isinstance(bench.instructions, str) or not bench.instructions.strip():
        found.append(f"instructions must be the instruction text (user turn 0), got {_shown(bench.instructions)}")
    for field, (positional, keywords) in _CALLABLES.items():
        value = getattr(bench, field)
        if value is None and field not in _REQUIRED_CALLABLES:
            continue
        problem = _call_problem(field, value, positional, keywords)
        if problem is not None:
            found.append(problem)
    found += _limit_problems(bench.name, bench.limits)
    if bench.controller_preset is not None and (not isinstance(bench.controller_preset, str)
                                                or not bench.controller_preset):
        found.append(f"controller_preset must be a preset's name, got {_shown(bench.controller_preset)}")
    if (bench.sim_reply is None) != (bench.sim_p0_range is None):
        found.append("sim_reply and sim_p0_range come together: give both (the simulated backbone) or neither")
    elif bench.sim_p0_range is not None and not _probability_range(bench.sim_p0_range):
        found.append(f"sim_p0_range must be (lo, hi) with 0 <= lo <= hi <= 1, got {bench.sim_p0_range!r}")
    found += _option_problems(bench.options)
    for field in ("data_note", "description"):
        if not isinstance(getattr(bench, field), str):
            found.append(f"{field} must be text, got {_shown(getattr(bench, field))}")
    return found


def _task_source_problems(tasks: Any) -> list[str]:
    folder = getattr(tasks, "benchmark", None)
    if not isinstance(folder, DataFolder) or not callable(getattr(tasks, "load", None)):
        return [f"tasks must be a task source with `benchmark` (a DataFolder) and `load(data_dir, folders)`, "
                f"got {_shown(tasks)}"]
    problems = [_call_problem("tasks.load", tasks.load, ("data_dir", "folders"))]
    if hasattr(tasks, "run_files"):
        problems.append(_call_problem("tasks.run_files", tasks.run_files, ("data_dir", "folders")))
    return [p for p in problems if p is not None]


def _limit_problems(name: str, limits: Any) -> list[str]:
    from tokenworth_agent.core.budget import BUDGET_AXES

    if not isinstance(limits, Mapping):
        return [f"limits must be a dict of budget limits ({', '.join(REQUIRED_LIMITS)}, ...), got {_shown(limits)}"]
    found = []
    short = {key: BUDGET_AXES[str(key).lower()] for key in limits if str(key).lower() in BUDGET_AXES}
    if short:
        found.append("limits are keyed by the budget's field names, not --grid's short names: write "
                     + ", ".join(f"{field} for {key}" for key, field in short.items()))
    unknown = [repr(key) for key in limits if key not in LIMIT_KEYS and key not in short]
    if unknown:
        found.append(f"limits has no key {', '.join(unknown)}; the limits are {', '.join(LIMIT_KEYS)}")
    missing = [key for key in REQUIRED_LIMITS if key not in limits and key not in short.values()]
    if missing:
        found.append(f"limits lacks {', '.join(missing)}")
    for key, value in limits.items():
        if key in LIMIT_KEYS and not (isinstance(value, int) and not isinstance(value, bool)) and \
                not (key == "aux_call_cap" and value is None):
            found.append(f"limits[{key!r}] must be an integer, got {_shown(value)}")
    if not found:
        try:  # the ranges: Budget's own checks, one copy
            Budget(str(name), **{"bank_capacity": 1, **limits})
        except ValueError as exc:
            found.append(f"limits: {exc}")
    return found


def _probability_range(pair: Any) -> bool:
    try:
        lo, hi = pair
        return 0.0 <= float(lo) <= float(hi) <= 1.0
    except (TypeError, ValueError):
        return False


def _option_problems(options: Any) -> list[str]:
    try:  # the checks every declared parameter gets (a method's too): a tuple of Parameter, names, types
        declared = check_declared(options, "options")
    except ValueError as exc:
        return [str(exc)]
    return [f"option {option.name!r}: {problem}" for option in declared for problem in default_problems(option)]


__all__ = ["Benchmark", "BenchmarkError", "BenchmarkOption", "Parameter", "TaskSource", "Options", "LIMIT_KEYS",
           "REQUIRED_LIMITS"]
