"""``make_environment(name, budget, harness=...)``: a benchmark's environment, by name.

The environment comes from the benchmark (:attr:`~tokenworth_agent.benchmarks.base.Benchmark.make_environment`),
found through :mod:`tokenworth_agent.core.plugins`: it gets the run's
:class:`~tokenworth_agent.core.budget.Budget` (its round limit J_max becomes the environment's), its own options
from the run's :class:`~tokenworth_agent.core.harness.HarnessOptions`, and the instruction text of
``--instructions DIR`` (``DIR/<env>.txt``, read now). Nothing here names a benchmark.
"""

from __future__ import annotations

from typing import Any

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.core.plugins import benchmark, names
from tokenworth_agent.envs.base import Environment


def env_names() -> tuple[str, ...]:
    """Every installed benchmark's name, the built-ins first."""
    return names("benchmark")


def instructions(env: str) -> str:
    """``env``'s own instruction text (user turn 0), read without starting the environment (``tokenworth show``)."""
    return benchmark(env).instructions


def make_environment(env: str, budget: Budget, *, harness: HarnessOptions = DEFAULT_HARNESS, **options: Any) -> Environment:
    """The environment by name, with its round limit set to the budget's J_max and the run's harness options
    applied. ``options`` are the benchmark's own, given directly (they override ``harness.options``)."""
    bench = benchmark(env)
    own = bench.option_values({**harness.options, **options})
    return bench.make_environment(budget, own, harness.instruction_text(env))


__all__ = ["env_names", "instructions", "make_environment"]
