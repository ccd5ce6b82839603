"""Backbone settings from the command line, split into what a run *is* and how it *connects*.

Decision (run identity): the model name and every sampling setting (``extra_body``) change what
the model writes, so they belong to the run's identity: a resume with other values is refused.
Where the server lives and how patiently it is called — ``base_url``, the API key, timeouts,
retry window, concurrency — change nothing in the records, so they are kept apart
(``config.json``'s ``connection`` entry, updated on every start and never compared). Moving the
server to another port, or fixing a wrong URL after a failed start, resumes the same run.
The API key is never written anywhere.

In-process vLLM: the engine options that change replies join the identity; the GPU memory share
is a resource and joins the connection, as does ``--allow-untested-vllm`` (see
:mod:`tokenworth_agent.backbones.engine_options`).

The seed is handed to the openai and vllm backbones with the connection options: ``config.json``
records it at its top level, where it is part of the identity already.

``--base-url`` takes one URL or several separated by commas (replicas; see OpenAIBackbone).
"""

from __future__ import annotations

import json
from typing import Any

# Defaults shared by `run`, `sweep` and `bench agent` (see OpenAIBackbone for what each does).
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_RETRY_FOR_S = 300.0
# The sim's token rule (agent/tokenworth_agent/sim/backbone.py), in its identity: runs counted before the rule
# (text only) are refused on resume instead of mixing two counts in one folder.
SIM_EOS_TOKENS = 1
DEFAULT_CONCURRENCY = None  # every request of a generate call in flight at once; --concurrency caps it


def parse_base_urls(text: str | None) -> str | list[str] | None:
    """``"http://a/v1,http://b/v1"`` -> a list of replicas; one URL stays a string."""
    if text is None:
        return None
    urls = [u.strip() for u in str(text).split(",") if u.strip()]
    if not urls:
        raise ValueError(f"--base-url {text!r} names no URL")
    if len(set(urls)) != len(urls):
        raise ValueError(f"--base-url lists a URL twice: {text}")
    return urls[0] if len(urls) == 1 else urls


def parse_extra_body(text: str | None) -> dict[str, Any]:
    """``--extra-body`` JSON → dict; a clear error for anything that is not a JSON object."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--extra-body is not valid JSON ({exc.msg} at character {exc.pos}): {text!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"--extra-body must be a JSON object such as '{{\"top_k\": -1}}', got {text!r}")
    return value


def split_options(backbone: str, seed: int, *, model: str | None = None, base_url: str | None = None,
                  timeout: float | None = None, retry_for: float | None = None, max_retries: int | None = None,
                  concurrency: int | None = None, extra_body: str | None = None,
                  engine: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(identity options, connection options)``; ``make_backbone(name, **identity, **connection)``.

    Options a backbone does not take are refused with the flag's name (e.g. ``--base-url``
    with ``--backbone sim``), rather than silently ignored. ``engine`` is the run's
    :class:`~tokenworth_agent.backbones.engine_options.EngineOptions` (``--backbone vllm`` only).
    """
    if engine is not None and backbone != "vllm":
        raise ValueError(f"{', '.join(engine.given()) or 'engine options'} only apply to --backbone vllm")
    connection: dict[str, Any] = {}
    if backbone == "sim":
        given = {"--model": model, "--base-url": base_url, "--timeout": timeout, "--retry-for": retry_for,
                 "--max-retries": max_retries, "--concurrency": concurrency, "--extra-body": extra_body}
        stray = [flag for flag, value in given.items() if value is not None]
        if stray:
            raise ValueError(f"{', '.join(stray)} only apply to --backbone openai (or vllm for --model); "
                             "the simulated backbone takes none")
        return {"seed": seed, "eos_tokens": SIM_EOS_TOKENS}, connection
    identity: dict[str, Any] = {}
    if model:
        identity["model"] = model
    body = parse_extra_body(extra_body)
    if body:
        identity["extra_body"] = body
    if backbone == "openai":
        connection = {"base_url": parse_base_urls(base_url), "seed": seed,
                      "timeout": DEFAULT_TIMEOUT_S if timeout is None else timeout,
                      "retry_for": DEFAULT_RETRY_FOR_S if retry_for is None else retry_for,
                      "max_retries": max_retries,
                      "concurrency": DEFAULT_CONCURRENCY if concurrency is None else concurrency}
        connection = {k: v for k, v in connection.items() if v is not None}
    else:
        stray = [flag for flag, value in {"--base-url": base_url, "--timeout": timeout, "--retry-for": retry_for,
                                          "--max-retries": max_retries, "--concurrency": concurrency}.items()
                 if value is not None]
        if stray:
            raise ValueError(f"{', '.join(stray)} only apply to --backbone openai")
        if body:
            raise ValueError("--extra-body only applies to --backbone openai")
        connection = {"seed": seed}
        if engine is not None:
            identity.update(engine.identity())
            if engine.gpu_memory_utilization is not None:
                connection["gpu_memory_utilization"] = engine.gpu_memory_utilization
            if engine.allow_untested_vllm:
                connection["allow_untested_vllm"] = True
    return identity, connection
