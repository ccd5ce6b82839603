"""One GPU shared by the JAX controller and an in-process vLLM engine: two processes.

``tokenworth run --backbone vllm`` runs JAX in the CLI process and vLLM's engine core (V1) in a
second process that vLLM spawns; each has its own CUDA context. The split (docs/backbones.md,
"Co-location", has the arithmetic and a worked table for 24, 48, 80 and 141 GiB cards):

- **JAX** never preallocates (``XLA_PYTHON_CLIENT_PREALLOCATE=false``) and its allocator is
  capped at a share ``j`` of the card's total memory with ``XLA_CLIENT_MEM_FRACTION``. The
  deprecated twin ``XLA_PYTHON_CLIENT_MEM_FRACTION`` is removed: jaxlib's
  ``generate_pjrt_gpu_plugin_options`` refuses the two together, and JAX then silently runs on
  the CPU. The default ``j`` is what the controller needs, sized from its ``Spec``: the state's
  bytes (``jax.eval_shape`` of ``tokenworth_jax.init``, in a CPU-only subprocess, so this
  process's JAX is not started early) times :data:`PEAK_PER_STATE_BYTE` (measured), times the
  number of controller streams, times :data:`HEADROOM`, plus :data:`FLOOR_BYTES` for XLA's own
  workspaces, rounded up to 0.01.
- **vLLM** gets ``gpu_memory_utilization = u``. What lies inside and outside ``u``, read from
  vLLM 0.32's ``v1/worker/gpu_worker.py`` (``init_device``, ``determine_available_memory``,
  ``compile_or_warm_up_model``) and ``utils/mem_utils.py`` (``memory_profiling``):

  - ``init_device`` sets the device and runs ``init_worker_distributed_environment`` (NCCL's
    communicators, "allocated before we measure available memory"), and only then takes the
    memory snapshot. ``requested_memory = ceil(total x u)``, and the engine refuses to start when
    the snapshot's *free* memory is below it. So the engine core's CUDA context and NCCL lie
    **outside** ``u``.
  - Inside ``u``: the weights; everything the device-wide free memory drops by from the snapshot
    to the end of the profiling run (cuBLAS and attention workspaces, other non-torch memory);
    the activation peak of that run, which includes a sampler pass over ``max_num_tokens``
    (the sampler's later warm-up at ``max_num_seqs`` reuses that headroom); CUDA graphs, whose
    memory ``profile_cudagraph_memory`` estimates and subtracts from the KV cache
    (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, on by default since 0.21; captured after the
    KV cache is sized, so any excess over the estimate spills outside); and the KV cache.
  - Outside ``u`` as well: the CLI process's own CUDA context (JAX's; torch makes none there), and
    the error of vLLM's profiling (the source keeps a 150 MiB "redundancy buffer" because
    "profiling may slightly underestimate", plus the CUDA-graph estimate's error).

- ``j + u <= max_combined_fraction(T)``: the rest, :func:`outside_bytes`, holds what neither pool
  counts: :data:`PROCESSES` CUDA contexts of :data:`CONTEXT_BYTES`, :data:`NCCL_BYTES` with
  tensor parallelism, :data:`PROFILE_ERROR_BYTES`, and :data:`FRAGMENTATION_SHARE` of the card
  (freed blocks kept by torch's caching allocator and XLA's BFC allocator). The fixed parts
  weigh more on a small card, so the combined share is 0.88 on 24 GiB and 0.96 on 141 GiB.
  These sizes are not measured here (no GPU); they are the budget ``scripts/gpu-smoke.sh``
  checks on a lent GPU.

Order: :func:`apply_colocation` runs first, before anything imports vllm or torch or starts
JAX's backend (the CLI calls it before building the backbone; the backbone builds its engine
lazily, after the run-folder checks). XLA reads these variables once, when its GPU backend
starts. A split that cannot work (shares above the card's limit, a model whose weights, or
weights plus one full-length sequence's KV cache, exceed vLLM's share, a JAX share below what
the controller needs) is refused with one :class:`ColocationError` line before anything loads.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, MutableMapping

GiB = float(1 << 30)
# Peak device bytes of a compiled controller run per byte of its state: arguments (1.0) +
# outputs (1.0) + temporaries (2.4), from XLA's memory_analysis() of tw.run_batched (vmap, DB
# preset) at 1, 16 and 256 configurations (1.2 MB, 19.5 MB, 313 MB of state; CPU compile).
PEAK_PER_STATE_BYTE = 4.5
HEADROOM = 2.0  # GPU kernels block differently from the CPU compile; windows and banks fill over a run
FLOOR_BYTES = 512 << 20  # cuBLAS/cuDNN workspaces and autotuning scratch inside XLA's pool
FALLBACK_JAX_FRACTION = 0.05  # only when the GPU's size cannot be read (no nvidia-smi)

# What lies outside both pools (see the module docstring), per card.
PROCESSES = 2  # the CLI process (JAX) and vLLM's engine core (torch): one CUDA context each
CONTEXT_BYTES = 1 << 30  # a CUDA context with the kernel images its libraries load lazily
NCCL_BYTES = 512 << 20  # per GPU with --tensor-parallel-size > 1: communicators and all-reduce buffers
PROFILE_ERROR_BYTES = 256 << 20  # vLLM's 150 MiB "redundancy buffer" and the CUDA-graph estimate's error
FRAGMENTATION_SHARE = 0.02  # freed blocks the two allocators keep, a share of the card
FALLBACK_TOTAL_BYTES = 24 << 30  # the split when the card's size is unknown: the smallest card in the table
CARDS_GIB = (24, 48, 80, 141)  # the worked table of docs/backbones.md

JAX_FRACTION_VAR = "XLA_CLIENT_MEM_FRACTION"
DEPRECATED_FRACTION_VAR = "XLA_PYTHON_CLIENT_MEM_FRACTION"  # jaxlib refuses it beside JAX_FRACTION_VAR
PREALLOCATE_VAR = "XLA_PYTHON_CLIENT_PREALLOCATE"
BATCH_INVARIANT_VAR = "VLLM_BATCH_INVARIANT"


class ColocationError(ValueError):
    """A GPU memory split that cannot work; the message is one line naming the flags."""


def outside_bytes(total_bytes: int, tensor_parallel_size: int = 1) -> dict[str, int]:
    """What neither JAX's pool nor vLLM's ``gpu_memory_utilization`` holds, on a card of ``total_bytes``."""
    parts = {"CUDA contexts": PROCESSES * CONTEXT_BYTES, "vLLM profiling error": PROFILE_ERROR_BYTES,
             "fragmentation": int(FRAGMENTATION_SHARE * total_bytes)}
    if tensor_parallel_size > 1:
        parts["NCCL"] = NCCL_BYTES
    return parts


def max_combined_fraction(total_bytes: int | None, tensor_parallel_size: int = 1) -> float:
    """The largest ``j + u`` a card of ``total_bytes`` holds (unknown size: :data:`FALLBACK_TOTAL_BYTES`)."""
    total = total_bytes or FALLBACK_TOTAL_BYTES
    return _round_down(1.0 - sum(outside_bytes(total, tensor_parallel_size).values()) / total)


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """The split applied to this process: shares of the GPU's total memory."""

    jax_fraction: float
    gpu_memory_utilization: float | None  # None: no in-process vLLM
    total_bytes: int | None = None
    jax_needed_bytes: int | None = None
    model_bytes: int | None = None
    batch_invariant: bool = False

    def env(self) -> dict[str, str | None]:
        """The variables to set; None: remove it (the deprecated fraction, a shell's batch invariance)."""
        env: dict[str, str | None] = {PREALLOCATE_VAR: "false", JAX_FRACTION_VAR: f"{self.jax_fraction:.4g}",
                                      DEPRECATED_FRACTION_VAR: None}
        if self.gpu_memory_utilization is not None:
            # A forked engine worker would inherit an initialised CUDA context and fail.
            env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
            env.update(batch_invariant_env(self.batch_invariant))
        return env

    def describe(self) -> str:
        def part(share: float) -> str:
            return f"{share:.2f}" + (f" ({share * self.total_bytes / GiB:.1f} GiB)" if self.total_bytes else "")

        text = f"GPU split: JAX {part(self.jax_fraction)}"
        if self.gpu_memory_utilization is not None:
            text += f", vLLM {part(self.gpu_memory_utilization)}"
        if self.total_bytes:
            text += f" of {self.total_bytes / GiB:.1f} GiB"
            if self.gpu_memory_utilization is not None:
                rest = 1.0 - self.jax_fraction - self.gpu_memory_utilization
                text += f", {rest * self.total_bytes / GiB:.1f} GiB outside both (CUDA contexts, fragmentation)"
        return text


def batch_invariant_env(on: bool) -> dict[str, str | None]:
    """vLLM's batch invariance exactly as the run records it: set with ``--batch-invariant``,
    removed otherwise (a value exported in the shell would change replies behind the run's back)."""
    return {BATCH_INVARIANT_VAR: "1" if on else None}


# ----------------------------------------------------------------------------- sizes
def gpu_total_bytes() -> int | None:
    """Total memory of the first visible GPU from ``nvidia-smi`` (no CUDA library is loaded here)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    query = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
    if visible:
        query.append(f"--id={visible}")
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True).stdout
        return int(float(out.splitlines()[0].strip())) << 20  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


_STATE_BYTES_SCRIPT = """
import json, sys, jax, numpy as np
from tokenworth_jax import init, preset
env, overrides = sys.argv[1], json.loads(sys.argv[2])
spec, hp = preset(env, spec_overrides=overrides)
state = jax.eval_shape(lambda h: init(spec, h), hp)
print(int(sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(state))))
"""


def controller_state_bytes(env: str = "db", **spec_overrides: int) -> int:
    """Bytes of one controller state for ``preset(env)``'s Spec, computed on the CPU in a subprocess."""
    from tokenworth_agent.core.plugins import benchmark

    preset_name = benchmark(env).preset  # the library preset the benchmark's TokenWorth runs with
    done = subprocess.run([sys.executable, "-c", _STATE_BYTES_SCRIPT, preset_name, json.dumps(spec_overrides)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=Path(__file__).resolve().parents[3])
    if done.returncode != 0:
        raise RuntimeError(f"could not size the controller's state: {done.stderr.strip().splitlines()[-1:]}")
    return int(done.stdout.strip())


def controller_needed_bytes(state_bytes: int, streams: int = 1) -> int:
    """Device memory the controller needs with headroom (see the module docstring)."""
    if streams < 1:
        raise ValueError(f"controller streams must be at least 1, got {streams}")
    return int(FLOOR_BYTES + HEADROOM * PEAK_PER_STATE_BYTE * state_bytes * streams)


_BYTES_PER_PARAM = {"bfloat16": 2, "float16": 2, "half": 2, "float": 4, "float32": 4}


def served_width(dtype: str = "auto") -> int:
    """Bytes per weight and KV element vLLM serves at: ``auto`` is 16-bit, since vLLM 0.32 keeps a
    bf16/fp16 checkpoint's dtype and downcasts a float32 one (``config/model.py``, ``_resolve_auto_dtype``)."""
    return _BYTES_PER_PARAM.get(dtype, 2)


def local_model_dir(model: str) -> Path | None:
    """A model's files on this machine: a folder given as the model, else the newest snapshot in
    the Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``)."""
    path = Path(model)
    if path.is_dir():
        return path
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub")
    snapshots = hub / ("models--" + model.replace("/", "--")) / "snapshots"
    found = sorted(snapshots.glob("*"), key=lambda p: p.stat().st_mtime) if snapshots.is_dir() else []
    return found[-1] if found else None


def model_config(model: str) -> dict[str, Any] | None:
    """The text model's part of the local copy's ``config.json`` (a multimodal config's ``text_config``)."""
    path = local_model_dir(model)
    config_file = path / "config.json" if path is not None else None
    if config_file is None or not config_file.is_file():
        return None
    try:
        config = json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    text = config.get("text_config") or config
    return {**{k: v for k, v in config.items() if k != "text_config"}, **text} if isinstance(text, dict) else None


def checkpoint_dtype(config: Mapping[str, Any] | None) -> str | None:
    """The checkpoint's dtype: transformers 5 writes ``dtype``, earlier releases ``torch_dtype``."""
    if not config:
        return None
    value = config.get("dtype") or config.get("torch_dtype")
    return str(value) if value else None


def model_weight_bytes(model: str, dtype: str = "auto") -> int | None:
    """Weights' size as served: the checkpoint files of the local copy, scaled from the checkpoint's
    dtype to the served one (a float32 checkpoint served at ``auto`` takes half its files), else the
    parameter count in the name ("Qwen2.5-14B-Instruct": 14e9) times the dtype's bytes. None when
    neither tells."""
    path = local_model_dir(model)
    if path is not None:
        files = [f for pattern in ("*.safetensors", "*.bin", "*.pt") for f in path.glob(pattern)]
        size = sum(f.stat().st_size for f in files)  # cache entries are links to blobs: stat follows them
        if size:
            config = model_config(model)
            stored = _BYTES_PER_PARAM.get(checkpoint_dtype(config) or "")
            if stored and not (config or {}).get("quantization_config"):
                return size * served_width(dtype) // stored
            return size
    if re.search(r"(?i)awq|gptq|int4|int8|fp8|gguf|bnb|4bit|8bit", model) or dtype not in (*_BYTES_PER_PARAM, "auto"):
        return None  # quantised or unusual: the name does not give the size
    match = re.search(r"(?i)(?<![\d.])(\d+(?:\.\d+)?)b(?![a-z])", model.rsplit("/", 1)[-1])
    return int(float(match.group(1)) * 1e9 * served_width(dtype)) if match else None


def kv_cache_bytes(model: str, max_model_len: int | None = None, dtype: str = "auto") -> int | None:
    """KV cache of one sequence of ``max_model_len`` tokens (default: the model's
    ``max_position_embeddings``), from the local copy's ``config.json``; None without one.

    vLLM refuses to start when its KV cache cannot hold one such sequence."""
    text = model_config(model)
    if text is None:
        return None
    try:
        heads = int(text["num_attention_heads"])
        kv_heads = int(text.get("num_key_value_heads") or heads)
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
        tokens = int(max_model_len or text["max_position_embeddings"])
        layers = int(text["num_hidden_layers"])
    except (KeyError, ValueError, TypeError):
        return None
    return 2 * layers * kv_heads * head_dim * served_width(dtype) * tokens  # keys and values


# ----------------------------------------------------------------------------- the plan
def _round_up(x: float) -> float:
    return math.ceil(x * 100 - 1e-9) / 100


def _round_down(x: float) -> float:
    return math.floor(x * 100 + 1e-9) / 100


def plan_memory(*, jax_fraction: float | None = None, gpu_memory_utilization: float | None = None,
                with_vllm: bool = True, total_bytes: int | None = None, jax_needed_bytes: int | None = None,
                model_bytes: int | None = None, kv_bytes: int | None = None, tensor_parallel_size: int = 1,
                batch_invariant: bool = False) -> MemoryPlan:
    """Choose and check the split. Pure: every size is an argument (see :func:`apply_colocation`)."""
    if jax_fraction is None:
        if total_bytes and jax_needed_bytes:
            jax_fraction = max(0.01, _round_up(jax_needed_bytes / total_bytes))
        else:
            jax_fraction = FALLBACK_JAX_FRACTION
    _share("--jax-mem-fraction", jax_fraction)
    if total_bytes and jax_needed_bytes and jax_fraction * total_bytes < jax_needed_bytes:
        raise ColocationError(
            f"--jax-mem-fraction {jax_fraction:g} gives JAX {jax_fraction * total_bytes / GiB:.2f} GiB of the "
            f"{total_bytes / GiB:.1f} GiB GPU, but the controller needs {jax_needed_bytes / GiB:.2f} GiB; "
            f"pass --jax-mem-fraction {_round_up(jax_needed_bytes / total_bytes):g} or more")
    if not with_vllm:
        if gpu_memory_utilization is not None:
            raise ColocationError("--gpu-memory-utilization only applies to --backbone vllm")
        return MemoryPlan(jax_fraction, None, total_bytes, jax_needed_bytes)
    limit = max_combined_fraction(total_bytes, tensor_parallel_size)
    if gpu_memory_utilization is None:
        gpu_memory_utilization = _round_down(limit - jax_fraction)
        if gpu_memory_utilization <= 0:
            raise ColocationError(
                f"--jax-mem-fraction {jax_fraction:g} leaves vLLM nothing: this GPU holds at most "
                f"{limit:.2f} for both; lower --jax-mem-fraction")
    _share("--gpu-memory-utilization", gpu_memory_utilization)
    combined = jax_fraction + gpu_memory_utilization
    if combined > limit + 1e-9:
        card = total_bytes or FALLBACK_TOTAL_BYTES
        outside = outside_bytes(card, tensor_parallel_size)
        parts = ", ".join(f"{name} {size / GiB:.2f}" for name, size in outside.items())
        raise ColocationError(
            f"--jax-mem-fraction {jax_fraction:g} + --gpu-memory-utilization {gpu_memory_utilization:g} = "
            f"{combined:.2f} of the {'' if total_bytes else 'assumed '}{card / GiB:.0f} GiB GPU, above {limit:.2f}: "
            f"{sum(outside.values()) / GiB:.2f} GiB must stay outside both ({parts} GiB); lower one of them")
    if total_bytes and model_bytes:
        per_gpu = model_bytes / tensor_parallel_size
        share = gpu_memory_utilization * total_bytes
        if per_gpu >= share:
            raise ColocationError(
                f"the model's weights need {per_gpu / GiB:.1f} GiB per GPU, more than vLLM's share "
                f"(--gpu-memory-utilization {gpu_memory_utilization:g} x {total_bytes / GiB:.1f} GiB = "
                f"{share / GiB:.1f} GiB), before any KV cache; use a smaller model, more --tensor-parallel-size, "
                "or a larger share")
        kv_per_gpu = (kv_bytes or 0) / tensor_parallel_size
        if kv_bytes and per_gpu + kv_per_gpu >= share:
            raise ColocationError(
                f"vLLM's share ({share / GiB:.1f} GiB) holds the weights ({per_gpu / GiB:.1f} GiB per GPU) but not "
                f"the KV cache of one full-length sequence ({kv_per_gpu / GiB:.1f} GiB), so vLLM would refuse to "
                "start; lower --max-model-len or raise --gpu-memory-utilization")
    return MemoryPlan(jax_fraction, gpu_memory_utilization, total_bytes, jax_needed_bytes, model_bytes,
                      batch_invariant)


def _share(flag: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ColocationError(f"{flag} must be a share of the GPU in (0, 1), got {value:g}")


# ----------------------------------------------------------------------------- the worked table
QWEN14B_BF16_BYTES = 28 * 10**9  # Qwen2.5-14B-Instruct as the CLI sizes it from the name: 14e9 x 2 bytes
QWEN14B_KV_BYTES_PER_TOKEN = 2 * 48 * 8 * 128 * 2  # keys and values: 48 layers, 8 KV heads of 128, bf16


def split_table(state_bytes: int, *, model_bytes: int = QWEN14B_BF16_BYTES,
                kv_bytes: int = QWEN14B_KV_BYTES_PER_TOKEN * 8192) -> list[dict[str, Any]]:
    """The default split on each card of :data:`CARDS_GIB` for one DB controller stream beside a
    model of ``model_bytes`` with ``kv_bytes`` of KV cache for one sequence (docs/backbones.md)."""
    rows = []
    for gib in CARDS_GIB:
        total = gib << 30
        outside = outside_bytes(total)
        row: dict[str, Any] = {"card_gib": gib, "outside_gib": sum(outside.values()) / GiB,
                               "parts_gib": {name: size / GiB for name, size in outside.items()},
                               "max_combined": max_combined_fraction(total)}
        try:
            plan = plan_memory(total_bytes=total, jax_needed_bytes=controller_needed_bytes(state_bytes),
                               model_bytes=model_bytes, kv_bytes=kv_bytes)
        except ColocationError as exc:
            plan = plan_memory(total_bytes=total, jax_needed_bytes=controller_needed_bytes(state_bytes))
            row["refused"] = str(exc)
        assert plan.gpu_memory_utilization is not None
        row.update(j=plan.jax_fraction, u=plan.gpu_memory_utilization, jax_gib=plan.jax_fraction * gib,
                   vllm_gib=plan.gpu_memory_utilization * gib,
                   left_gib=plan.gpu_memory_utilization * gib - (model_bytes + kv_bytes) / GiB)
        rows.append(row)
    return rows


def split_table_markdown(rows: list[dict[str, Any]]) -> str:
    """:func:`split_table` as the Markdown table docs/backbones.md shows (its test compares the two)."""
    lines = ["| card | outside both pools | max j + u | JAX j | vLLM u | u − weights − 8k KV |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        left = "refused: weights > u" if "refused" in r else f"{r['left_gib']:.1f} GiB"
        parts = " + ".join(f"{size:.2f} {name}" for name, size in r["parts_gib"].items())
        lines.append(f"| {r['card_gib']} GiB | {r['outside_gib']:.2f} GiB ({parts}) | {r['max_combined']:.2f} | "
                     f"{r['j']:.2f} ({r['jax_gib']:.2f} GiB) | {r['u']:.2f} ({r['vllm_gib']:.1f} GiB) | {left} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- applying it
def jax_backend_started() -> bool:
    """Whether JAX's backends exist in this process (XLA has then read its variables)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # another JAX layout: assume the worst
        return True


def set_environment(plan: MemoryPlan, environ: MutableMapping[str, str] | None = None) -> None:
    """Write ``plan``'s variables; refuse when JAX already started with other values."""
    environ = os.environ if environ is None else environ
    wanted = plan.env()
    if environ is os.environ and jax_backend_started():
        xla = {k: v for k, v in wanted.items() if k.startswith("XLA_")}
        differing = {k: environ.get(k) for k, v in xla.items() if environ.get(k) != v}
        if differing:
            raise RuntimeError(
                f"the GPU split must be set before JAX starts its backend, but JAX already runs with {differing}; "
                f"set it first thing in the entry point, or export {xla} in the shell")
    update_environment(wanted, environ)


def update_environment(values: Mapping[str, str | None], environ: MutableMapping[str, str] | None = None) -> None:
    """Set each variable, removing those whose value is None."""
    environ = os.environ if environ is None else environ
    for key, value in values.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value


def apply_colocation(backbone: str, engine: Mapping[str, Any] | None = None, *, jax_mem_fraction: float | None = None,
                     model: str | None = None, env: str = "db", controller_streams: int = 1,
                     spec_overrides: Mapping[str, int] | None = None, total_bytes: int | None = None, state_bytes: int | None = None) -> MemoryPlan | None:
    """The CLI's one call: plan, check and set the split for this run. Before anything starts JAX.

    ``backbone`` "vllm" shares the GPU with an in-process engine; other backbones get a JAX cap
    only when ``jax_mem_fraction`` is given (e.g. beside a ``vllm serve`` on the same GPU), and
    otherwise nothing changes (returns None). ``engine`` is the ``EngineOptions.as_dict()`` of
    the run; its ``gpu_memory_utilization`` is filled in from the plan by the caller
    (:func:`tokenworth_agent.backbones.engine_options.with_plan`). Sizes are read when not given.
    """
    engine = dict(engine or {})
    in_process = backbone == "vllm"
    if not in_process and jax_mem_fraction is None:
        if engine.get("gpu_memory_utilization") is not None:
            raise ColocationError("--gpu-memory-utilization only applies to --backbone vllm")
        return None
    total = total_bytes if total_bytes is not None else gpu_total_bytes()
    needed = None
    if total:
        state = state_bytes if state_bytes is not None else controller_state_bytes(env, **dict(spec_overrides or {}))
        needed = controller_needed_bytes(state, controller_streams)
    dtype = str(engine.get("dtype") or "auto")
    weights = model_weight_bytes(model, dtype) if (in_process and model) else None
    kv = kv_cache_bytes(model, engine.get("max_model_len"), dtype) if (in_process and model and weights) else None
    def plan(jax_fraction: float | None) -> MemoryPlan:
        return plan_memory(jax_fraction=jax_fraction, gpu_memory_utilization=engine.get("gpu_memory_utilization"),
                           with_vllm=in_process, total_bytes=total, jax_needed_bytes=needed, model_bytes=weights,
                           kv_bytes=kv,
                           tensor_parallel_size=int(engine.get("tensor_parallel_size") or 1),
                           batch_invariant=bool(engine.get("batch_invariant")))

    chosen = plan(jax_mem_fraction)
    current = _current_jax_fraction()
    if jax_mem_fraction is None and current is not None and current >= chosen.jax_fraction and jax_backend_started():
        # A later run in the same process (the benchmark's next env or seed): JAX keeps the share
        # it started with, which covers this run, and vLLM's default share follows from it.
        chosen = plan(current)
    set_environment(chosen)
    return chosen


def _current_jax_fraction() -> float | None:
    try:
        return float(os.environ[JAX_FRACTION_VAR]) if os.environ.get(PREALLOCATE_VAR) == "false" else None
    except (KeyError, ValueError):
        return None


def assert_jax_sees_gpu() -> None:
    """Fail loudly when JAX would silently run on the CPU, naming the likely cause."""
    import jax

    try:
        gpus = jax.devices("gpu")
    except RuntimeError as exc:
        gpus, cause = [], str(exc)
    else:
        cause = "no GPU device"
    if gpus:
        return
    both = os.environ.get(DEPRECATED_FRACTION_VAR) and os.environ.get(JAX_FRACTION_VAR)
    if both:
        hint = (f"{DEPRECATED_FRACTION_VAR} and {JAX_FRACTION_VAR} are both set and jaxlib refuses the pair; "
                f"unset {DEPRECATED_FRACTION_VAR}")
    elif _cuda_plugin_installed():
        hint = ("the CUDA plugin is installed but did not start (see the plugin error above: driver too old for "
                "the plugin's CUDA, or no GPU visible in CUDA_VISIBLE_DEVICES)")
    else:
        hint = "no CUDA build of jaxlib is installed: pip install 'tokenworth-agent[gpu]'"
    raise RuntimeError(f"JAX sees no GPU ({cause}): {hint}")


def _cuda_plugin_installed() -> bool:
    import importlib.util

    for name in ("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13", "jax_cuda12_plugin", "jax_cuda13_plugin"):
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except ImportError:  # the parent package is absent
            continue
    return False
