"""``make_policy(name, env, budget, seed)``: the memory-policy registry.

Each entry is a :class:`~tokenworth_agent.policies.base.MemoryPolicy` subclass, registered as an entry point of
the group ``tokenworth.methods`` (the built-ins in agent/pyproject.toml, a plugin in its own distribution's) and
imported lazily (so "standard" never imports JAX). :data:`METHOD_NAMES` is the default run, in its order.

A method's hyperparameters are its class's ``parameters`` (:func:`method_parameters`): each one a keyword of its
constructor with the same default, checked when a run plans it, so a declaration that cannot work is one line
before anything runs.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.core.parameters import Parameter, check_declared
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


def method_owner(method: str) -> str:
    """``method 'recency' (hp-recency 0.3.1)``: how an error line names a method (a method registered in-process:
    its name alone)."""
    from tokenworth_agent.core.plugins import describe

    try:
        plugin = describe("method", method)
    except ValueError:
        return f"method {method!r}"
    return f"method {method!r} ({plugin.distribution} {plugin.version})"


def method_parameters(method: str) -> tuple[Parameter, ...]:
    """The hyperparameters ``method`` declares (its class's ``parameters``), checked: each a :class:`Parameter` of
    a distinct Python name, each a keyword its constructor takes, with the constructor's default where it names one.
    A declaration that cannot work is one ``ValueError`` line naming the method and its distribution."""
    return _checked_parameters(method, POLICIES.factory(method))


@functools.lru_cache(maxsize=None)
def _checked_parameters(method: str, cls: Any) -> tuple[Parameter, ...]:
    owner = method_owner(method)
    declared = check_declared(getattr(cls, "parameters", ()), owner, defaults=True)
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # a builtin or C-level constructor: nothing to compare
        return declared
    keywords = {name: p for name, p in signature.parameters.items()
                if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    for parameter in declared:
        keyword = keywords.get(parameter.name)
        if keyword is None and not takes_any:
            raise ValueError(f"{owner} declares the parameter {parameter.name!r}, which its constructor "
                             f"{cls.__qualname__}.__init__ does not take; add it as a keyword argument")
        if keyword is not None and keyword.default is not inspect.Parameter.empty and \
                keyword.default != parameter.default:
            raise ValueError(f"{owner} declares {parameter.name} with default {parameter.default!r}, its constructor "
                             f"with {keyword.default!r}; make them equal (the default run passes no value)")
    return declared


def describe_parameters(method: str) -> str:
    """``k (int, default 2), ...`` or ``no parameters``: the tail of a grid error about ``method``."""
    declared = method_parameters(method)
    if not declared:
        return f"{method} declares no parameters"
    return f"{method} declares: " + ", ".join(p.describe() for p in declared)
