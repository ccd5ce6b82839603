"""``make_policy(name, env, budget, seed)``: the memory-policy registry.

Each entry is a :class:`~tokenworth_agent.policies.base.MemoryPolicy` subclass, registered as an entry point of
the group ``tokenworth.methods`` (the built-ins in agent/pyproject.toml, a plugin in its own distribution's) and
imported lazily (so "standard" never imports JAX). :data:`METHOD_NAMES` is the default run, in its order.
"""

from __future__ import annotations

from typing import Any

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.policies.base import MemoryPolicy
from tokenworth_agent.core.registry import Registry

# Every installed method: the built-ins of agent/pyproject.toml's `tokenworth.methods` entry points, then plugins.
# The default run: the paper's Table 1 methods without auxiliary calls. The others are opt-in (`--methods`):
# tokenworth+ (docs/tokenworth-plus.md), the paper's baselines that spend auxiliary calls (mem0, memskill,
# reflexion, evosc, evoskill; docs/methods.md), and any installed plugin (after them, by name).
METHOD_NAMES: tuple[str, ...] = ("standard", "rag", "memrl", "memp", "tokenworth")
POLICIES: Registry[MemoryPolicy] = Registry.from_plugins(
    "method", order=(*METHOD_NAMES, "tokenworth+", "mem0", "memskill", "reflexion", "evosc", "evoskill"))


def make_policy(method: str, env: str, budget: Budget, seed: int, *, harness: HarnessOptions = DEFAULT_HARNESS,
                **overrides: Any) -> MemoryPolicy:
    """A fresh policy by name (one of :data:`POLICIES`), built with the run's harness options.

    ``overrides`` are the method's own settings (TokenWorth: ``HParams`` fields from a grid).
    """
    return POLICIES.make(method, env, budget, seed, harness=harness, **overrides)
