"""``make_policy(name, env, budget, seed)``: the memory-policy registry.

Each entry is a :class:`~agent.policies.base.MemoryPolicy` subclass, imported lazily (so
"standard" never imports JAX). :data:`METHOD_NAMES` is the order ``tokenworth run`` uses.
"""

from __future__ import annotations

from typing import Any

from agent.core.budget import Budget
from agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from agent.policies.base import MemoryPolicy
from agent.core.registry import Registry

POLICIES: Registry[MemoryPolicy] = Registry("method", {
    "standard": "agent.policies.standard:StandardPolicy",
    "rag": "agent.policies.rag:RAGPolicy",
    "memrl": "agent.policies.memrl:MemRLPolicy",
    "memp": "agent.policies.memp:MemPPolicy",
    "tokenworth": "agent.policies.tokenworth:TokenWorthPolicy",
})
METHOD_NAMES = POLICIES.names  # the default run
# Opt-in methods: known to `tokenworth run --methods`, not part of the default run.
POLICIES.register("tokenworth+", "agent.policies.tokenworth_plus:TokenWorthPlusPolicy")  # docs/tokenworth-plus.md
# Experimental: the learned ranker of issue 24 on a FIFO bank (docs/ranking-research.md).
# The paper's other Table 1 baselines, which spend auxiliary model calls (docs/methods.md).
POLICIES.register("mem0", "agent.policies.mem0:Mem0Policy")
POLICIES.register("memskill", "agent.policies.memskill:MemSkillPolicy")
POLICIES.register("reflexion", "agent.policies.reflexion:ReflexionPolicy")
POLICIES.register("evosc", "agent.policies.evosc:EvoSCPolicy")
POLICIES.register("evoskill", "agent.policies.evoskill:EvoSkillPolicy")


def make_policy(method: str, env: str, budget: Budget, seed: int, *, harness: HarnessOptions = DEFAULT_HARNESS,
                **overrides: Any) -> MemoryPolicy:
    """A fresh policy by name (one of :data:`POLICIES`), built with the run's harness options.

    ``overrides`` are the method's own settings (TokenWorth: ``HParams`` fields from a grid).
    """
    return POLICIES.make(method, env, budget, seed, harness=harness, **overrides)
