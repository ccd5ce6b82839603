"""One registry pattern for policies, environments and backbones."""

import subprocess
import sys

import pytest

from tokenworth_agent.backbones.registry import BACKBONES, make_backbone
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.envs.registry import env_names, make_environment
from tokenworth_agent.policies.registry import METHOD_NAMES, POLICIES, make_policy
from tokenworth_agent.core.registry import Registry


def test_all_three_kinds_come_from_the_installed_plugins() -> None:
    assert all(isinstance(r, Registry) for r in (POLICIES, BACKBONES))
    assert METHOD_NAMES == ("standard", "rag", "memrl", "memp", "tokenworth") == POLICIES.names[:5]
    # built-in benchmarks by name (entry points carry no order), then any plugin
    assert env_names()[:5] == ("alfworld", "bigcodebench", "db", "kg", "os") and BACKBONES.names == ("sim", "vllm", "openai")
    for maker, kind, first in ((lambda n: make_policy(n, "db", Budget.for_env("db"), 0), "method", "standard"),
                               (lambda n: make_environment(n, Budget.for_env("db")), "benchmark", "alfworld"),
                               (make_backbone, "backbone", "sim")):
        with pytest.raises(ValueError, match=f"unknown {kind} 'nope'; expected one of {first}"):
            maker("nope")


def test_entries_are_lazy_and_registration_is_checked() -> None:
    registry: Registry[object] = Registry("thing", {"od": "collections:OrderedDict"})
    assert registry.make("od", a=1) == {"a": 1}
    with pytest.raises(ValueError, match="twice"):
        registry.register("od", dict)
    with pytest.raises(ValueError, match="module:attribute"):
        registry.register("bad", "collections.OrderedDict")
    code = "import sys; from tokenworth_agent.policies.registry import make_policy; print('jax' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr  # naming the registry imports no policy
