"""vLLM in process: one ``vllm.LLM`` engine, batched ``LLM.chat`` calls.

vLLM is the optional extra ``[vllm]`` (``[gpu]`` adds the CUDA build of JAX) and is imported only
when the engine is built.

**Lazy engine.** Constructing a :class:`VLLMBackbone` checks its options (names against vLLM's
own ``EngineArgs``, the extra being installed) and loads nothing. The engine is built by
:meth:`VLLMBackbone.open`, or by the first :meth:`~VLLMBackbone.generate`, so a CLI can create
the backbone early, check the run folder, its locks and the config, and only then pay the
minutes of loading. :meth:`~VLLMBackbone.close` shuts the engine down.

**One engine per process.** Engines are kept in :data:`ENGINES` by their settings (the seed
excluded: decoding is greedy, so the engine's seed changes nothing). A second backbone with the
same settings (the next env or seed of a benchmark) reuses the loaded engine; one with other
settings first shuts the old one down, since two engines would not fit one GPU.
:func:`close_engines` shuts everything down explicitly.

**No orphaned engine.** vLLM 0.32's engine core is a spawned process that does not watch its
parent: after ``kill -9`` of the run it lives on (measured here: its worker too, a minute later),
and on a GPU it would keep its share of memory, so the resumed run's engine could not start.
Each engine built here gets a reaper (:func:`reap_on_exit`): a small process that waits for this
one to end, however it ends, and then SIGKILLs the processes the engine start created (checked
by PID and start time, so a reused PID is left alone).

**Sampling** is always explicit. When ``LLM.chat`` gets no sampling parameters, vLLM builds
them from the model's ``generation_config.json`` (Qwen2.5-Instruct ships temperature 0.7,
top_p 0.8, top_k 20, repetition_penalty 1.05), so each item gets its own ``SamplingParams``
with greedy decoding and neutral penalties, and vLLM is started with ``generation_config="vllm"``
so the model's file cannot change vLLM's own defaults either.

**Tested releases.** :data:`SUPPORTED` (:mod:`tokenworth_agent.backbones.vllm_api`). The engine refuses
another installed vLLM in one line when it starts, unless ``allow_untested_vllm``
(``--allow-untested-vllm``), which prints that line as a note and goes on.

**Tokens.** ``output_tokens = len(token_ids)``: every token the engine decoded, the
end-of-sequence token included (the rule all backbones share: docs/backbones.md, "Token rule").
``prompt_tokens`` and ``cached_tokens`` (prefix-cache hits) are reported for the records and
never counted in OutputTok.

Co-location with JAX on one GPU: :mod:`tokenworth_agent.backbones.colocation`.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
from typing import Any, Mapping, Sequence

from tokenworth_agent.backbones.base import BackboneError, Conversation, Generation, checked_caps
from tokenworth_agent.backbones.colocation import (  # noqa: F401 - re-exported: the old import path
    BATCH_INVARIANT_VAR,
    assert_jax_sees_gpu,
    batch_invariant_env,
    max_combined_fraction,
    plan_memory,
    set_environment,
    update_environment,
)
from tokenworth_agent.backbones.vllm_api import SUPPORTED, check_version  # noqa: F401 - SUPPORTED re-exported

INSTALL_HINT = "pip install 'tokenworth-agent[gpu]' (vLLM with a CUDA build of JAX; '[vllm]' for vLLM alone)"
# The engine options that have their own flag (agent/tokenworth_agent/backbones/engine_options.py).
FLAG_OPTIONS = ("gpu_memory_utilization", "max_model_len", "dtype", "tensor_parallel_size", "enforce_eager")

# The exact sampling every request uses: greedy, nothing the model's config can change.
GREEDY_SAMPLING: dict[str, Any] = {
    "n": 1,
    "temperature": 0.0,
    "top_p": 1.0,
    "top_k": -1,  # disabled (accepted by old and new vLLM versions)
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}


def passed_names() -> dict[str, set[str]]:
    """Every keyword name this backbone itself passes to vLLM, per part of its API
    (``engine_options`` pass through any other ``EngineArgs`` name, checked when given)."""
    return {"llm_init": {"model", "seed", "generation_config", "enable_prefix_caching", *FLAG_OPTIONS},
            "llm_chat": {"messages", "sampling_params", "use_tqdm"},
            "sampling_params": {*GREEDY_SAMPLING, "max_tokens", "stop"}}


def import_vllm() -> Any:
    """``import vllm`` with an install hint when the extra is missing."""
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"the 'vllm' backbone needs vLLM, which is an optional extra: {INSTALL_HINT}") from exc
    return vllm


def _require_vllm() -> None:
    """The cheap check at construction: the package is there (importing it takes seconds)."""
    if "vllm" in sys.modules:
        if sys.modules["vllm"] is None:
            raise ImportError(f"the 'vllm' backbone needs vLLM, which is an optional extra: {INSTALL_HINT}")
        return
    if importlib.util.find_spec("vllm") is None:
        raise ImportError(f"the 'vllm' backbone needs vLLM, which is an optional extra: {INSTALL_HINT}")


def _messages(conversation: Conversation) -> list[dict[str, str]]:
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in conversation]


# ----------------------------------------------------------------------------- the engine's processes
REAPER_ATTRIBUTE = "_tokenworth_reaper"
# Runs in its own session (a Ctrl-C to the run's process group must not stop it early). stdin is a
# pipe whose only writer is the run: EOF means the run is gone, after a normal exit or a kill -9.
_REAPER = r"""
import os, signal, sys
sys.stdin.buffer.read()
for pid, start in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[19] != start:
                continue
        os.kill(int(pid), signal.SIGKILL)
    except (OSError, IndexError, ValueError):
        continue
"""


def _process_table() -> dict[int, tuple[int, str]]:
    """``pid -> (parent pid, start time)`` from ``/proc`` (empty where there is none)."""
    table = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                table[int(entry)] = (int(fields[1]), fields[19])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    return table


def child_processes(pid: int | None = None) -> set[tuple[int, str]]:
    """Every live descendant of ``pid`` (default: this process), as ``(pid, start time)``."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, frontier = set(), [os.getpid() if pid is None else pid]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            found.add((child, table[child][1]))
            frontier.append(child)
    return found


def reap_on_exit(processes: set[tuple[int, str]]) -> subprocess.Popen | None:
    """Start the reaper of ``processes`` (see the module docstring); None when there are none."""
    if not processes:
        return None
    args = [str(x) for pid, start in sorted(processes) for x in (pid, start)]
    return subprocess.Popen([sys.executable, "-c", _REAPER, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


class _EnginePool:
    """At most one loaded engine per process, shared by backbones with the same settings."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.llm: Any = None
        self.builds = 0  # engines built in this process (for logs and tests)

    def acquire(self, key: tuple, build: Any) -> Any:
        if self.llm is not None and self.key != key:
            self.close()
        if self.llm is None:
            self.llm, self.key = build(), key
            self.builds += 1
        return self.llm

    def close(self) -> None:
        llm, self.llm, self.key = self.llm, None, None
        if llm is not None:
            shutdown_engine(llm)


ENGINES = _EnginePool()


def close_engines() -> None:
    """Shut down the process's engine (the benchmark calls this when it is done)."""
    ENGINES.close()


def shutdown_engine(llm: Any) -> None:
    """Stop a ``vllm.LLM``'s engine core (its worker process in V1) and free its GPU memory."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    shutdown = getattr(core, "shutdown", None)
    if callable(shutdown):
        shutdown()
    reaper = getattr(llm, REAPER_ATTRIBUTE, None)
    if reaper is not None:  # the engine ended normally: nothing left to reap
        reaper.kill()
        reaper.wait()
    del llm
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "cuda", None) is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


class VLLMBackbone:
    """Batched greedy chat completions from an in-process ``vllm.LLM``, built on first use."""

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        seed: int = 0,
        gpu_memory_utilization: float | None = None,
        max_model_len: int | None = None,
        dtype: str | None = None,
        tensor_parallel_size: int | None = None,
        enforce_eager: bool | None = None,
        enable_prefix_caching: bool = True,
        batch_invariant: bool = False,
        engine_options: Mapping[str, Any] | None = None,
        allow_untested_vllm: bool = False,
        llm: Any = None,
    ) -> None:
        """Check the options; load nothing. ``engine_options`` go to ``vllm.LLM`` verbatim (names
        checked against vLLM's); ``llm`` injects an existing engine (tests, or sharing by hand);
        ``allow_untested_vllm`` lets the engine start on a vLLM outside :data:`SUPPORTED`."""
        from tokenworth_agent.backbones.engine_options import check_names, engine_options_from_flags
        from tokenworth_agent.backbones.vllm_api import llm_keywords, supported_api

        # the flags' own checks (ranges, dtype); the pass-through names are checked below
        engine_options_from_flags(gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                                  tensor_parallel_size=tensor_parallel_size, dtype=dtype)
        if llm is None:
            _require_vllm()
        self.model = model
        self.seed = int(seed)
        self.batch_invariant = bool(batch_invariant)
        self.allow_untested_vllm = bool(allow_untested_vllm)
        options: dict[str, Any] = {"model": model, "generation_config": "vllm",
                                   "enable_prefix_caching": bool(enable_prefix_caching)}
        given = dict(zip(FLAG_OPTIONS, (gpu_memory_utilization, max_model_len, dtype, tensor_parallel_size,
                                        enforce_eager)))
        options.update({k: v for k, v in given.items() if v is not None})
        options.update(engine_options or {})
        api = supported_api()
        check_names(options, llm_keywords(api), str(api.get("version", "?")))
        self.engine_kwargs = options  # without the seed, which the pool's key leaves out
        self.llm = llm
        self._injected = llm is not None
        self._vllm: Any = None

    def open(self) -> "VLLMBackbone":
        """Build (or reuse) the engine now. Idempotent."""
        if self.llm is not None:
            if self._vllm is None:
                self._vllm = import_vllm()
            return self
        update_environment(batch_invariant_env(self.batch_invariant))  # read by vLLM when its engine starts
        self._vllm = import_vllm()
        note = check_version(getattr(self._vllm, "__version__", None), self.allow_untested_vllm)
        if note:
            print(f"note: {note}", file=sys.stderr)
        key = (tuple(sorted((k, repr(v)) for k, v in self.engine_kwargs.items())), self.batch_invariant)
        self.llm = ENGINES.acquire(key, self._build)
        return self

    def _build(self) -> Any:
        before = child_processes()
        llm = self._vllm.LLM(**self.engine_kwargs, seed=self.seed)
        setattr(llm, REAPER_ATTRIBUTE, reap_on_exit(child_processes() - before))
        return llm

    def close(self) -> None:
        """Drop this backbone's engine; the process's shared engine is shut down by :func:`close_engines`."""
        if self.llm is not None and self._injected:
            shutdown_engine(self.llm)
        self.llm = None

    def __enter__(self) -> "VLLMBackbone":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sampling_params(self, max_tokens: int, stop: Sequence[str] | None) -> Any:
        if int(max_tokens) < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        return self._vllm.SamplingParams(**GREEDY_SAMPLING, max_tokens=int(max_tokens), stop=list(stop or []))

    def generate(
        self,
        conversations: Sequence[Conversation],
        max_tokens: Sequence[int],
        stop: Sequence[str] | None = None,
    ) -> list[Generation]:
        caps = checked_caps(conversations, max_tokens)
        if not conversations:
            return []
        self.open()
        params = [self.sampling_params(cap, stop) for cap in caps]
        outputs = self.llm.chat([_messages(c) for c in conversations], params, use_tqdm=False)
        if len(outputs) != len(conversations):
            raise BackboneError(f"vLLM returned {len(outputs)} outputs for {len(conversations)} conversations")
        return [_generation(output) for output in outputs]


def _generation(request_output: Any) -> Generation:
    if not request_output.outputs:
        raise BackboneError(f"vLLM request {getattr(request_output, 'request_id', '?')} returned no completion")
    completion = request_output.outputs[0]
    prompt_ids = getattr(request_output, "prompt_token_ids", None)
    cached = getattr(request_output, "num_cached_tokens", None)
    return Generation(
        text=completion.text,
        output_tokens=len(completion.token_ids),  # the EOS token included when the reply ended on it
        finish_reason=str(completion.finish_reason or "stop"),
        prompt_tokens=len(prompt_ids) if prompt_ids is not None else None,
        cached_tokens=int(cached) if cached is not None else None,
    )
