"""A stand-in for ``vllm`` in tests: no GPU, no weights, and no keyword the real one lacks.

``LLM``, ``LLM.chat`` and ``SamplingParams`` accept exactly the keyword names of :data:`API`:
the real vLLM's in ``.venv-vllm`` when that environment exists (``make test`` builds it), else
the pinned release's (``agent/tokenworth_agent/backbones/vllm_api.json``), so a misspelt argument fails here as
it would on a GPU. ``__version__`` is that API's version, so the backbone's version check passes.

Replies: item i of a batch has ``3 + i`` text tokens, then the EOS token when it fits the cap
(finish "stop"), else it is cut at the cap (finish "length"), as vLLM's ``token_ids`` are.

Put ``tests/fake_vllm`` first on ``PYTHONPATH`` to use it in a subprocess. There, with
``FAKE_VLLM_REPORT=FILE``, building an ``LLM`` writes to FILE what the engine would start under:
the XLA/vLLM variables (now, and when ``vllm`` was imported), the keyword arguments, and jaxlib's own
``generate_pjrt_gpu_plugin_options()`` result (or its error) for that environment; with
``FAKE_VLLM_EVENTS=FILE``, every engine start and shutdown appends a line to FILE.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from tokenworth_agent.backbones.vllm_api import llm_keywords, pinned_api, venv_api

FAKE = True
VLLM_VENV = Path(__file__).resolve().parents[3] / ".venv-vllm"
API: dict[str, Any] = venv_api(VLLM_VENV) or pinned_api()
API_SOURCE = "venv" if API is not pinned_api() else "pinned"
__version__ = str(API["version"])
# The split must be set before vllm (and so torch) is imported: what the environment held then.
ENV_AT_IMPORT = {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "VLLM_"))}
EOS = 151645  # Qwen2.5's <|im_end|>
instances: list["LLM"] = []


def _refuse_unknown(where: str, given: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r} (fake vllm {API['version']})")


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        _refuse_unknown("SamplingParams", kwargs, set(API["sampling_params"]))
        self.kwargs = kwargs


@dataclasses.dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: Any
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclasses.dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    num_cached_tokens: int | None = None


class _EngineCore:
    def __init__(self) -> None:
        self.shut_down = 0

    def shutdown(self) -> None:
        self.shut_down += 1
        _event("shutdown")


class _LLMEngine:
    def __init__(self) -> None:
        self.engine_core = _EngineCore()


class LLM:
    def __init__(self, model: str, **kwargs: Any) -> None:
        _refuse_unknown("LLM.__init__", kwargs, llm_keywords(API) - {"model"})
        self.init_kwargs = {"model": model, **kwargs}
        self.chat_calls: list[tuple] = []
        self.llm_engine = _LLMEngine()
        instances.append(self)
        _event("start")
        report = os.environ.get("FAKE_VLLM_REPORT")
        if report:
            with open(report, "w") as handle:
                json.dump(_start_report(self.init_kwargs), handle)

    def chat(self, messages: Any, sampling_params: Any = None, use_tqdm: Any = True, **kwargs: Any) -> list[RequestOutput]:
        _refuse_unknown("LLM.chat", kwargs, set(API["llm_chat"]) - {"messages", "sampling_params", "use_tqdm"})
        self.chat_calls.append((messages, sampling_params, use_tqdm, kwargs))
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(messages)
        outputs = []
        for i, (conversation, p) in enumerate(zip(messages, params)):
            cap, words = p.kwargs["max_tokens"], 3 + i
            if words + 1 <= cap:
                ids, reason = list(range(words)) + [EOS], "stop"
            else:
                ids, reason = list(range(cap)), "length"
            text = f"reply to {conversation[-1]['content']}"
            outputs.append(RequestOutput(str(i), list(range(10 + i)), [CompletionOutput(0, text, ids, None, None, reason)],
                                         num_cached_tokens=4))
        return outputs


def _event(name: str) -> None:
    events = os.environ.get("FAKE_VLLM_EVENTS")
    if events:
        with open(events, "a") as handle:
            handle.write(name + "\n")


def _start_report(kwargs: dict[str, Any]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "VLLM_"))}
    try:
        from jaxlib import xla_client

        options: Any = dict(xla_client.generate_pjrt_gpu_plugin_options())
        error = None
    except Exception as exc:  # noqa: BLE001 - the report says what jaxlib said
        options, error = None, f"{type(exc).__name__}: {exc}"
    return {"env": env, "env_at_import": ENV_AT_IMPORT, "kwargs": kwargs, "plugin_options": options,
            "plugin_error": error}
