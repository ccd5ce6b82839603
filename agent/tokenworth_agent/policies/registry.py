"""``make_policy(name, env, budget, seed)``: the memory-policy registry.

Each entry is a :class:`~tokenworth_agent.policies.base.MemoryPolicy` subclass, imported lazily (so
"standard" never imports JAX). :data:`METHOD_NAMES` is the order ``tokenworth run`` uses.
"""

from __future__ import annotations

from typing import Any

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.policies.base import MemoryPolicy
from tokenworth_agent.core.registry import Registry

POLICIES: Registry[MemoryPolicy] = Registry("method", {
    "standard": "tokenworth_agent.policies.standard:StandardPolicy",
    "rag": "tokenworth_agent.policies.rag:RAGPolicy",
    "memrl": "tokenworth_agent.policies.memrl:MemRLPolicy",
    "memp": "tokenworth_agent.policies.memp:MemPPolicy",
    "tokenworth": "tokenworth_agent.policies.tokenworth:TokenWorthPolicy",
})
METHOD_NAMES = POLICIES.names  # the default run
# Opt-in methods: known to `tokenworth run --methods`, not part of the default run.
POLICIES.register("tokenworth+", "tokenworth_agent.policies.tokenworth_plus:TokenWorthPlusPolicy")  # docs/tokenworth-plus.md
# Experimental: the learned ranker of issue 24 on a FIFO bank (docs/ranking-research.md).
# The paper's other Table 1 baselines, which spend auxiliary model calls (docs/methods.md).
POLICIES.register("mem0", "tokenworth_agent.policies.mem0:Mem0Policy")
POLICIES.register("memskill", "tokenworth_agent.policies.memskill:MemSkillPolicy")
POLICIES.register("reflexion", "tokenworth_agent.policies.reflexion:ReflexionPolicy")
POLICIES.register("evosc", "tokenworth_agent.policies.evosc:EvoSCPolicy")
POLICIES.register("evoskill", "tokenworth_agent.policies.evoskill:EvoSkillPolicy")


def make_policy(method: str, env: str, budget: Budget, seed: int, *, harness: HarnessOptions = DEFAULT_HARNESS,
                **overrides: Any) -> MemoryPolicy:
    """A fresh policy by name (one of :data:`POLICIES`), built with the run's harness options.

    ``overrides`` are the method's own settings (TokenWorth: ``HParams`` fields from a grid).
    """
    return POLICIES.make(method, env, budget, seed, harness=harness, **overrides)
