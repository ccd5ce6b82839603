"""``make_backbone(name, **options)``: the one place that maps a backbone name to a class.

- ``"sim"``: :class:`~tokenworth_agent.sim.SimBackbone` (options: ``params`` — a
  :class:`~tokenworth_agent.sim.SimParams` —, ``seed``). The default where no GPU or model is present.
- ``"vllm"``: :class:`~tokenworth_agent.backbones.vllm_backbone.VLLMBackbone` (needs the ``[vllm]`` extra;
  options: ``model``, ``gpu_memory_utilization``, ``max_model_len``, …).
- ``"openai"``: :class:`~tokenworth_agent.backbones.openai_backbone.OpenAIBackbone` (options: ``model``,
  ``base_url``, ``api_key``, ``concurrency``, ``timeout``, ``retry_for``, …).

Entries live in :data:`BACKBONES`, an :class:`tokenworth_agent.core.registry.Registry` (the same pattern as
policies and environments). Imports are lazy, so asking for "sim" never imports vLLM or the OpenAI client.
This is the one module that names both the real backbones and the simulator (``tokenworth_agent.sim``, its own
package): it stands above both in the layering (docs/layout.md).
"""

from __future__ import annotations

from typing import Any

from tokenworth_agent.backbones.base import Backbone
from tokenworth_agent.core.registry import Registry

# Every installed backbone: the built-ins of agent/pyproject.toml's `tokenworth.backbones` entry points, then plugins.
BACKBONES: Registry[Backbone] = Registry.from_plugins("backbone", order=("sim", "vllm", "openai"))
BACKBONE_NAMES = BACKBONES.names


def make_backbone(name: str, **options: Any) -> Backbone:
    """Build a backbone by name. Unknown names and options raise a clear error."""
    factory = BACKBONES.factory(name)
    if name in ("vllm", "openai") and "model" not in options:
        raise ValueError(f"the {name!r} backbone needs a model name: make_backbone({name!r}, model=...)")
    try:
        return factory(**options)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise ValueError(f"backbone {name!r}: {exc}") from exc
        raise
