"""vLLM in process: one ``vllm.LLM`` engine, batched ``LLM.chat`` calls.

vLLM is the optional extra ``[vllm]`` and is imported only when a backbone is built.

Sampling is always explicit. When ``LLM.chat`` gets no sampling parameters, vLLM builds
them from the model's ``generation_config.json`` (Qwen2.5-Instruct ships temperature 0.7,
top_p 0.8, top_k 20, repetition_penalty 1.05), so each item gets its own
``SamplingParams`` with greedy decoding and neutral penalties, and vLLM is started with
``generation_config="vllm"`` so the model's file cannot change vLLM's own defaults either.

Co-location with JAX on one GPU: both frameworks pre-allocate by default. Call
:func:`configure_colocation` before ``jax`` is imported (first thing in the entry point),
then build the engine with the same ``gpu_memory_utilization``; :func:`assert_jax_sees_gpu`
checks at start-up that JAX really runs on the GPU.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Sequence

from agent.backbones.base import BackboneError, Conversation, Generation, checked_caps

INSTALL_HINT = "pip install 'tokenworth-jax[vllm]'"
# Headroom for the CUDA context, NCCL and allocator fragmentation outside both pools.
MAX_COMBINED_FRACTION = 0.95

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


def import_vllm() -> Any:
    """``import vllm`` with an install hint when the extra is missing."""
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"the 'vllm' backbone needs vLLM, which is an optional extra: {INSTALL_HINT}") from exc
    return vllm


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value}")


def configure_colocation(jax_mem_fraction: float, vllm_gpu_memory_utilization: float) -> None:
    """Split one GPU between JAX and vLLM. Call before ``import jax``.

    Sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (JAX grows its pool on demand instead of
    grabbing 75% of the GPU), caps it with ``XLA_CLIENT_MEM_FRACTION`` and the older
    ``XLA_PYTHON_CLIENT_MEM_FRACTION``, and sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn``
    (a forked worker would inherit an initialised CUDA context and fail).

    Raises ``ValueError`` when the two fractions do not fit together (sum above
    ``MAX_COMBINED_FRACTION``), and ``RuntimeError`` when ``jax`` is already imported
    with other settings, because XLA reads them only once, when its backend starts.
    """
    _check_fraction("jax_mem_fraction", jax_mem_fraction)
    _check_fraction("vllm_gpu_memory_utilization", vllm_gpu_memory_utilization)
    total = jax_mem_fraction + vllm_gpu_memory_utilization
    if total > MAX_COMBINED_FRACTION:
        raise ValueError(
            f"jax_mem_fraction ({jax_mem_fraction}) + vllm_gpu_memory_utilization ({vllm_gpu_memory_utilization}) "
            f"= {total:.3f} exceeds {MAX_COMBINED_FRACTION}; lower one of them"
        )
    wanted = {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_CLIENT_MEM_FRACTION": f"{jax_mem_fraction:.4g}",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{jax_mem_fraction:.4g}",
    }
    if "jax" in sys.modules:
        differing = {k: os.environ.get(k) for k, v in wanted.items() if os.environ.get(k) != v}
        if differing:
            raise RuntimeError(
                "configure_colocation must run before jax is imported: jax is already loaded with "
                f"{differing} instead of {wanted}. Call it first thing in the entry point, or export "
                "these variables in the shell."
            )
    os.environ.update(wanted)
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"


def assert_jax_sees_gpu() -> None:
    """Fail loudly when JAX would silently fall back to the CPU."""
    import jax

    try:
        gpus = jax.devices("gpu")
    except RuntimeError as exc:
        raise RuntimeError(
            f"JAX sees no GPU ({exc}); install the CUDA build of jaxlib (pip install 'jax[cuda12]') "
            "or run without co-location"
        ) from exc
    if not gpus:
        raise RuntimeError("JAX sees no GPU; install the CUDA build of jaxlib (pip install 'jax[cuda12]')")


def _messages(conversation: Conversation) -> list[dict[str, str]]:
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in conversation]


class VLLMBackbone:
    """Batched greedy chat completions from an in-process ``vllm.LLM``."""

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        gpu_memory_utilization: float = 0.80,
        max_model_len: int | None = None,
        dtype: str = "auto",
        seed: int = 0,
        tensor_parallel_size: int = 1,
        enforce_eager: bool = False,
        engine_options: Mapping[str, Any] | None = None,
        llm: Any = None,
    ) -> None:
        """Build the engine. ``engine_options`` go to ``vllm.LLM`` verbatim; ``llm`` injects
        an existing engine (sharing one across backbones, or tests)."""
        _check_fraction("gpu_memory_utilization", gpu_memory_utilization)
        self._vllm = import_vllm()
        self.model = model
        if llm is None:
            options: dict[str, Any] = {
                "model": model,
                "gpu_memory_utilization": gpu_memory_utilization,
                "dtype": dtype,
                "seed": seed,
                "tensor_parallel_size": tensor_parallel_size,
                "enforce_eager": enforce_eager,
                "generation_config": "vllm",
            }
            if max_model_len is not None:
                options["max_model_len"] = max_model_len
            options.update(engine_options or {})
            llm = self._vllm.LLM(**options)
        self.llm = llm

    def sampling_params(self, max_tokens: int, stop: Sequence[str] | None) -> Any:
        if int(max_tokens) < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        return self._vllm.SamplingParams(**GREEDY_SAMPLING, max_tokens=int(max_tokens), stop=list(stop or []))

    def generate(
        self,
        conversations: Sequence[Conversation],
        max_tokens: Sequence[int],
        stop: Sequence[str] | None = None,
        *,
        meta: Sequence[Mapping[str, Any]] | None = None,  # ignored: a real model sees only text
    ) -> list[Generation]:
        caps = checked_caps(conversations, max_tokens)
        if not conversations:
            return []
        params = [self.sampling_params(cap, stop) for cap in caps]
        outputs = self.llm.chat([_messages(c) for c in conversations], params, use_tqdm=False)
        if len(outputs) != len(conversations):
            raise BackboneError(f"vLLM returned {len(outputs)} outputs for {len(conversations)} conversations")
        return [_generation(output) for output in outputs]


def _generation(request_output: Any) -> Generation:
    if not request_output.outputs:
        raise BackboneError(f"vLLM request {getattr(request_output, 'request_id', '?')} returned no completion")
    completion = request_output.outputs[0]
    return Generation(
        text=completion.text,
        output_tokens=len(completion.token_ids),
        finish_reason=str(completion.finish_reason or "stop"),
    )
