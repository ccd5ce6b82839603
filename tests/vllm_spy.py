"""``python tests/vllm_spy.py ARGS...``: the ``tokenworth`` CLI with the real vLLM, watched.

Appends JSON lines to ``$TOKENWORTH_VLLM_SPY``:

- ``{"event": "import", "module": "vllm" | "torch", "env": {...}}`` at the first import of each,
  with the XLA/vLLM variables the process held at that moment (the GPU split must already be set);
- ``{"event": "chat", "engine": ..., "items": [...]}`` for every ``vllm.LLM.chat`` call, with
  what the engine itself returned for each request: ``len(token_ids)``, whether the last token
  is the tokenizer's EOS, the text, the finish reason, the prompt and cached token counts, and what it
  was asked: the conversation and the request's ``max_tokens``.

Nothing is changed: the real ``LLM.chat`` runs and its outputs are returned as they are.
vLLM spawns its engine core, which re-runs this file as ``__mp_main__``; the guard below keeps
that child from starting a second CLI.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from typing import Any

WATCHED = ("vllm", "torch")


def _log(entry: dict[str, Any]) -> None:
    with open(os.environ["TOKENWORTH_VLLM_SPY"], "a") as handle:
        handle.write(json.dumps(entry) + "\n")


def _split_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "VLLM_"))}


def _wrap_chat() -> None:
    from vllm.entrypoints.llm import LLM

    real = LLM.chat

    def chat(self: Any, messages: Any, *args: Any, **kwargs: Any) -> Any:
        outputs = real(self, messages, *args, **kwargs)
        eos = self.get_tokenizer().eos_token_id
        params = args[0] if args else kwargs.get("sampling_params")
        params = params if isinstance(params, (list, tuple)) else [params] * len(outputs)
        items = []
        for output, conversation, param in zip(outputs, messages, params):
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            items.append({"tokens": len(ids), "ends_on_eos": bool(ids) and ids[-1] == eos, "text": completion.text,
                          "finish": completion.finish_reason, "prompt_tokens": len(output.prompt_token_ids),
                          "cached_tokens": output.num_cached_tokens, "messages": conversation,
                          "max_tokens": getattr(param, "max_tokens", None)})
        _log({"event": "chat", "engine": f"{type(self).__module__}.{type(self).__name__}", "items": items})
        return outputs

    LLM.chat = chat


class _Watch(importlib.abc.MetaPathFinder):
    """Logs the environment when ``vllm`` or ``torch`` is executed (a mere ``find_spec``, which the
    project uses to look for vLLM without importing it, logs nothing), and wraps ``LLM.chat``."""

    def __init__(self) -> None:
        self.logged: set[str] = set()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in WATCHED or name in self.logged:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            if name not in self.logged:
                self.logged.add(name)
                _log({"event": "import", "module": name, "env": _split_env()})
            load(module)
            if name == "vllm":
                _wrap_chat()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if __name__ == "__main__":
    sys.meta_path.insert(0, _Watch())
    from tokenworth_agent.cli import app

    sys.argv = ["tokenworth", *sys.argv[1:]]
    app()
