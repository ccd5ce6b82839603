"""``make_environment(name, budget, kg_endpoint=...)``: the environment registry.

Every factory takes the run's :class:`~agent.budget.Budget` (its round limit J_max becomes the
environment's) and the KG endpoint (ignored by DB and OS). Imports are lazy: asking for "db"
never imports the OS sandbox or the SPARQL client. KG needs an endpoint; without one its
factory raises ``KGEndpointRequired``.
"""

from __future__ import annotations

from typing import Any

from agent.envs.base import Environment
from agent.registry import Registry


def _db(budget: Any, *, kg_endpoint: str | None = None) -> Environment:
    from agent.envs.db import DBEnvironment

    return DBEnvironment(max_rounds=budget.max_rounds)


def _os(budget: Any, *, kg_endpoint: str | None = None) -> Environment:
    from agent.envs.os_env import OSEnvironment

    return OSEnvironment(max_rounds=budget.max_rounds)


def _kg(budget: Any, *, kg_endpoint: str | None = None) -> Environment:
    from agent.envs.kg import make_kg_environment

    return make_kg_environment(kg_endpoint, max_rounds=budget.max_rounds)


ENVIRONMENTS: Registry[Environment] = Registry("environment", {"db": _db, "os": _os, "kg": _kg})
ENV_NAMES = ENVIRONMENTS.names


def make_environment(env: str, budget: Any, *, kg_endpoint: str | None = None, harness: Any = None) -> Environment:
    """The environment by name, with its round limit set to the budget's J_max.

    ``harness`` (:class:`agent.harness.HarnessOptions`) carries the run's fidelity options.
    """
    return ENVIRONMENTS.make(env, budget, kg_endpoint=kg_endpoint)
