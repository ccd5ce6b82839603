"""Backbone settings from the command line, split into what a run *is* and how it *connects*.

Decision (run identity): the model name and every sampling setting (``extra_body``) change what
the model writes, so they belong to the run's identity: a resume with other values is refused.
Where the server lives and how patiently it is called — ``base_url``, the API key, timeouts,
retry window, concurrency — change nothing in the records, so they are kept apart
(``config.json``'s ``connection`` entry, updated on every start and never compared). Moving the
server to another port, or fixing a wrong URL after a failed start, resumes the same run.
The API key is never written anywhere.
"""

from __future__ import annotations

import json
from typing import Any

# Defaults shared by `run`, `sweep` and `bench agent` (see OpenAIBackbone for what each does).
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_RETRY_FOR_S = 300.0
DEFAULT_CONCURRENCY = 8


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
                  concurrency: int | None = None, extra_body: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(identity options, connection options)``; ``make_backbone(name, **identity, **connection)``.

    Options a backbone does not take are refused with the flag's name (e.g. ``--base-url``
    with ``--backbone sim``), rather than silently ignored.
    """
    connection: dict[str, Any] = {}
    if backbone == "sim":
        given = {"--model": model, "--base-url": base_url, "--timeout": timeout, "--retry-for": retry_for,
                 "--max-retries": max_retries, "--concurrency": concurrency, "--extra-body": extra_body}
        stray = [flag for flag, value in given.items() if value is not None]
        if stray:
            raise ValueError(f"{', '.join(stray)} only apply to --backbone openai (or vllm for --model); "
                             "the simulated backbone takes none")
        return {"seed": seed}, connection
    identity: dict[str, Any] = {}
    if model:
        identity["model"] = model
    body = parse_extra_body(extra_body)
    if body:
        identity["extra_body"] = body
    if backbone == "openai":
        connection = {"base_url": base_url,
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
    return identity, connection
