"""Run-level harness options: what every benchmark shares, and each benchmark's own options.

One frozen value, :class:`HarnessOptions`, is threaded to every environment
(:func:`tokenworth_agent.envs.registry.make_environment`) and every policy
(:func:`tokenworth_agent.policies.registry.make_policy`), and its :meth:`~HarnessOptions.identity` is
part of each stream's identity, so a run made with other options never resumes into this one.

The options every benchmark shares (``tokenworth run``/``sweep`` flags of the same names; docs/running.md):

* ``memory_from`` — which successes write a memory. ``"completed"`` (default, LAB's rule for
  previous-sample memories): reward 1 *and* the episode ended by its own answer/finish action.
  ``"reward"``: reward 1 alone (a DB write task that passed on the table hash after an invalid
  reply or the round limit also counts).
* ``memory_format`` — how a memory is written (:mod:`tokenworth_agent.memory`). ``"compact"`` (default):
  the actions exactly as the model must write them, short observations. ``"transcript"``: the
  raw question, replies and observations, as LAB's previous-sample utilisation shows them.
  ``"abstract"``: compact, with names a benchmark knows to be instance-specific replaced by
  placeholders (OS: users, groups, home paths, PIDs; the paper's App. B.4 reading).
* ``instructions`` — a folder holding ``<env>.txt``: that text replaces the environment's
  instructions (user turn 0); the memory block and the task go where they always go.

A benchmark's own options (:class:`~tokenworth_agent.benchmarks.base.BenchmarkOption`: KG's reply parser,
ontology and endpoint, BigCodeBench's venv, verdict file and time limit, ...) ride in ``options``, one
flat mapping of option name to value; the benchmark declares them, checks them, and says what of
them enters the identity. This module names no benchmark: it reaches each through
:func:`tokenworth_agent.core.plugins.benchmark`.

Files named by the options are read when the run is planned, and their sha256 is part of
:meth:`HarnessOptions.identity`; a missing or unreadable file is a :class:`HarnessError` with a
one-line message.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from tokenworth_agent.core import parameters

MEMORY_FROM = ("completed", "reward")  # which successes write a memory
MEMORY_FORMATS = ("compact", "transcript", "abstract")  # how a memory is rendered for injection


# Defined beside Parameter, whose values it refuses (that module imports nothing of the harness); the same
# class, named here as it always was.
HarnessError = parameters.HarnessError


@dataclasses.dataclass(frozen=True)
class HarnessOptions:
    """The run's harness options, one frozen value every environment and method is given (the module docstring
    says what each means).

    Attributes:
        memory_from: which successes write a memory: ``completed`` (reward 1 and ended by its own answer or
            finish action) or ``reward`` (reward 1 alone).
        memory_format: how a memory is written: ``compact``, ``transcript`` or ``abstract``.
        instructions: a folder of ``<env>.txt`` texts replacing the instructions, or None.
        options: every benchmark option of the run, by name (a benchmark's own are also read as attributes:
            ``harness.kg_parser``).
    """

    memory_from: str = "completed"
    memory_format: str = "compact"
    instructions: str | None = None  # a folder holding <env>.txt instruction texts
    # every benchmark's own options, by name (each benchmark reads the ones it declares; defaults when absent)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for field, allowed in (("memory_from", MEMORY_FROM), ("memory_format", MEMORY_FORMATS)):
            if getattr(self, field) not in allowed:
                flag = "--" + field.replace("_", "-")
                raise HarnessError(f"{flag} must be one of {', '.join(allowed)}, got {getattr(self, field)!r}")

    def __getattr__(self, name: str) -> Any:
        # a benchmark's option read as an attribute (harness.kg_parser), for the benchmarks' own code
        options = self.__dict__.get("options", {})
        if name in options:
            return options[name]
        if not name.startswith("_"):  # a built-in's option at its default (a run's options hold its benchmarks' all)
            from tokenworth_agent.core.plugins import benchmarks

            for bench in benchmarks().values():
                for option in bench.options:
                    if option.name == name:
                        return option.default
        raise AttributeError(f"{type(self).__name__!s} has no option {name!r}")

    def with_options(self, overrides: Mapping[str, Any]) -> "HarnessOptions":
        """These options with some benchmark options replaced (a grid's values for one stream)."""
        return dataclasses.replace(self, options={**self.options, **overrides}) if overrides else self

    # ------------------------------------------------------------------ files the options name
    def instructions_path(self, env: str) -> Path | None:
        """``DIR/<env>.txt`` of ``--instructions DIR``, or None."""
        return None if self.instructions is None else Path(self.instructions) / f"{env}.txt"

    def instruction_text(self, env: str) -> str | None:
        """The text of ``DIR/<env>.txt``, or ``None`` when the environment's own text is used."""
        path = self.instructions_path(env)
        if path is None:
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise HarnessError(f"--instructions {self.instructions}: no {env}.txt there (one file per "
                               f"environment, named <env>.txt)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise HarnessError(f"--instructions: cannot read {path}: {exc}") from None
        if not text.strip():
            raise HarnessError(f"--instructions: {path} is empty")
        return text

    def benchmark_options(self, env: str) -> dict[str, Any]:
        """``env``'s own options, each one not given at its default."""
        from tokenworth_agent.core.plugins import benchmark

        return benchmark(env).option_values(self.options)

    def validate(self, env: str) -> None:
        """Read every file the options name for ``env`` now, and check what ``env`` needs installed, so a bad
        path or a missing set-up fails before any task runs."""
        from tokenworth_agent.core.plugins import benchmark

        self.instruction_text(env)
        check = benchmark(env).setup_check
        if check is not None:
            check(self.benchmark_options(env))

    def identity(self, env: str) -> dict[str, Any]:
        """What of these options changes ``env``'s results (JSON-ready).

        File contents enter by their sha256, so editing an instruction file or a vocabulary
        makes a different run even under the same path.
        """
        from tokenworth_agent.core.plugins import benchmark

        identity: dict[str, Any] = {"memory_from": self.memory_from, "memory_format": self.memory_format}
        text = self.instruction_text(env)
        identity["instructions_sha256"] = None if text is None else _sha256(text.encode("utf-8"))
        bench = benchmark(env)
        options = self.benchmark_options(env)
        identity.update({o.name: options[o.name] for o in bench.options if o.identity})
        if bench.identity is not None:
            identity.update(bench.identity(options))
        return identity


DEFAULT_HARNESS = HarnessOptions()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def harness_from_cli(env: str | Sequence[str], *, memory_from: str = DEFAULT_HARNESS.memory_from,
                     memory_format: str = DEFAULT_HARNESS.memory_format,
                     instructions: str | Path | None = None, data_dir: Any = None, resolve: bool = False,
                     **options: Any) -> HarnessOptions:
    """The run's :class:`HarnessOptions` from the CLI flags, every named file checked for ``env`` (one
    benchmark's name, or all of a run's).

    ``options`` are the benchmarks' own (by name); each benchmark's are converted and checked by the
    benchmark itself, and with ``resolve`` (a run's plan) completed first from the data under ``data_dir`` and
    the environment (e.g. KG's ontology folder and endpoint). Raises :class:`HarnessError` (one line,
    naming the flag) on any bad value, including an option neither a benchmark of the run nor a built-in declares
    (a plugin benchmark the run does not ask for is never imported), and
    :class:`~tokenworth_agent.core.plugins.PluginError` for a benchmark that is refused.
    """
    from tokenworth_agent.core.plugins import benchmark, benchmarks

    envs = [env] if isinstance(env, str) else list(env)
    for name in envs:  # each asked for is loaded and checked first: a refused plugin is its own line
        benchmark(name)
    declared = {o.name: o for b in benchmarks(envs).values() for o in b.options}
    unknown = [name for name in options if name not in declared]
    if unknown:
        raise HarnessError(f"no benchmark of this run ({', '.join(envs)}) nor any built-in has the option "
                           f"{unknown[0]!r}")
    values = {name: declared[name].convert(value) for name, value in options.items()}
    for name in envs:
        bench = benchmark(name)
        own = bench.option_values(values)
        if bench.resolve_options is not None:
            own = dict(bench.resolve_options(own, data_dir, resolve))
        values.update(own)
    harness = HarnessOptions(memory_from=memory_from.strip().lower(), memory_format=memory_format.strip().lower(),
                             instructions=None if instructions is None else str(instructions), options=values)
    if harness.instructions is not None and not Path(harness.instructions).is_dir():
        raise HarnessError(f"--instructions {harness.instructions}: not a folder (it must hold <env>.txt files)")
    for name in envs:
        harness.validate(name)
    return harness


__all__ = ["HarnessOptions", "HarnessError", "DEFAULT_HARNESS", "MEMORY_FROM", "MEMORY_FORMATS", "harness_from_cli"]
