"""``make_environment(name, budget, kg_endpoint=..., harness=...)``: the environment registry.

Every factory takes the run's :class:`~tokenworth_agent.core.budget.Budget` (its round limit J_max becomes the
environment's), the KG endpoint (ignored by the others) and the run's
:class:`~tokenworth_agent.core.harness.HarnessOptions`: the instruction text from ``--instructions DIR``
(``DIR/<env>.txt``, read now), for KG the reply parser and LAB's vocabulary files, for BigCodeBench
the evaluation venv and the verdict file.
Imports are lazy: asking for "db" never imports the OS sandbox or the SPARQL client. KG needs
an endpoint; without one its factory raises ``KGEndpointRequired``.
"""

from __future__ import annotations

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.envs.base import Environment
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.core.registry import Registry


def _db(budget: Budget, *, kg_endpoint: str | None = None, harness: HarnessOptions = DEFAULT_HARNESS) -> Environment:
    from tokenworth_agent.envs.db import DBEnvironment

    return DBEnvironment(max_rounds=budget.max_rounds, instructions=harness.instruction_text("db"))


def _os(budget: Budget, *, kg_endpoint: str | None = None, harness: HarnessOptions = DEFAULT_HARNESS) -> Environment:
    from tokenworth_agent.envs.os_env import OSEnvironment

    return OSEnvironment(max_rounds=budget.max_rounds, instructions=harness.instruction_text("os"))


def _kg(budget: Budget, *, kg_endpoint: str | None = None, harness: HarnessOptions = DEFAULT_HARNESS) -> Environment:
    from tokenworth_agent.envs.kg import make_kg_environment

    return make_kg_environment(kg_endpoint, max_rounds=budget.max_rounds, parser=harness.kg_parser,
                               vocabulary=harness.kg_vocabulary(), instructions=harness.instruction_text("kg"))


def _bigcodebench(budget: Budget, *, kg_endpoint: str | None = None,
                  harness: HarnessOptions = DEFAULT_HARNESS) -> Environment:
    from tokenworth_agent.core.bigcodebench_venv import open_venv
    from tokenworth_agent.envs.bigcodebench import BigCodeBenchEnvironment
    from tokenworth_agent.envs.bigcodebench_judge import BigCodeBenchJudge, JudgeSettings
    from tokenworth_agent.envs.bigcodebench_verdicts import shared_cache

    judge = BigCodeBenchJudge(open_venv(harness.bcb_venv), JudgeSettings(time_limit=harness.bcb_time_limit),
                              cache=shared_cache(harness.bcb_verdicts))
    return BigCodeBenchEnvironment(judge, max_rounds=budget.max_rounds,
                                   instructions=harness.instruction_text("bigcodebench"))


def _alfworld(budget: Budget, *, kg_endpoint: str | None = None,
              harness: HarnessOptions = DEFAULT_HARNESS) -> Environment:
    from tokenworth_agent.envs.alfworld import ALFWorldEnvironment

    return ALFWorldEnvironment(max_rounds=budget.max_rounds, instructions=harness.instruction_text("alfworld"))


ENVIRONMENTS: Registry[Environment] = Registry("environment", {"db": _db, "os": _os, "kg": _kg,
                                                               "bigcodebench": _bigcodebench, "alfworld": _alfworld})
ENV_NAMES = ENVIRONMENTS.names
# Each environment's own instruction text (user turn 0), read without starting the environment (``tokenworth show``).
INSTRUCTIONS: Registry[str] = Registry("environment", {
    "db": "tokenworth_agent.envs.db:INSTRUCTIONS",
    "os": "tokenworth_agent.envs.os_env:INSTRUCTIONS",
    "kg": "tokenworth_agent.envs.kg:INSTRUCTIONS",
    "bigcodebench": "tokenworth_agent.envs.bigcodebench:INSTRUCTIONS",
    "alfworld": "tokenworth_agent.envs.alfworld:INSTRUCTIONS",
})


def make_environment(env: str, budget: Budget, *, kg_endpoint: str | None = None,
                     harness: HarnessOptions = DEFAULT_HARNESS) -> Environment:
    """The environment by name, with its round limit set to the budget's J_max and the run's
    harness options applied."""
    return ENVIRONMENTS.make(env, budget, kg_endpoint=kg_endpoint, harness=harness)
