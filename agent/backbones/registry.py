"""``make_backbone(name, **options)``: the one place that maps a backbone name to a class.

- ``"sim"``: :class:`~agent.backbones.sim.SimBackbone` (options: ``params`` — a
  :class:`~agent.backbones.sim.SimParams` —, ``seed``). The default where no GPU or model is present.
- ``"vllm"``: :class:`~agent.backbones.vllm_backbone.VLLMBackbone` (needs the ``[vllm]`` extra;
  options: ``model``, ``gpu_memory_utilization``, ``max_model_len``, …).
- ``"openai"``: :class:`~agent.backbones.openai_backbone.OpenAIBackbone` (options: ``model``,
  ``base_url``, ``api_key``, ``concurrency``, ``timeout``, ``retry_for``, …).

Imports are lazy, so asking for "sim" never imports vLLM or the OpenAI client.
"""

from __future__ import annotations

from typing import Any, Callable

from agent.backbones.base import Backbone

BACKBONE_NAMES = ("sim", "vllm", "openai")


def _sim(**options: Any) -> Backbone:
    from agent.backbones.sim import SimBackbone

    return SimBackbone(**options)


def _vllm(**options: Any) -> Backbone:
    from agent.backbones.vllm_backbone import VLLMBackbone

    return VLLMBackbone(**options)


def _openai(**options: Any) -> Backbone:
    from agent.backbones.openai_backbone import OpenAIBackbone

    return OpenAIBackbone(**options)


_FACTORIES: dict[str, Callable[..., Backbone]] = {"sim": _sim, "vllm": _vllm, "openai": _openai}


def make_backbone(name: str, **options: Any) -> Backbone:
    """Build a backbone by name. Unknown names and options raise a clear error."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown backbone {name!r}; expected one of {', '.join(BACKBONE_NAMES)}") from None
    if name in ("vllm", "openai") and "model" not in options:
        raise ValueError(f"the {name!r} backbone needs a model name: make_backbone({name!r}, model=...)")
    try:
        return factory(**options)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise ValueError(f"backbone {name!r}: {exc}") from exc
        raise
