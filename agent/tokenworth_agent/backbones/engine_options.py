"""In-process vLLM engine options from the command line, checked before anything loads.

Flags: ``--gpu-memory-utilization``, ``--max-model-len``, ``--tensor-parallel-size``, ``--dtype``,
``--enforce-eager``, ``--prefix-caching/--no-prefix-caching`` (on by default: every prompt of an
environment starts with the same instructions, so their KV blocks are computed once),
``--batch-invariant`` (vLLM's ``VLLM_BATCH_INVARIANT=1``; without it the variable is removed, so
a value exported in the shell cannot change replies behind the run's record),
``--allow-untested-vllm`` (start on a vLLM outside the tested range) and ``--engine-arg KEY=VALUE``
(repeatable) for any other ``vllm.EngineArgs`` field. VALUE is read as JSON when it parses
(``4``, ``0.5``, ``true``, ``{"k": 1}``), else as a string.

Every name is checked against vLLM's own ``LLM``/``EngineArgs`` keywords: the installed package's
when vLLM imports, else the pinned release's (:mod:`tokenworth_agent.backbones.vllm_api`). A misspelt name is
refused in one line with the closest valid names.

Decision (run identity): what changes the replies (dtype, context length, eager mode, batch
invariance, tensor parallelism, any ``--engine-arg``) is part of the run's identity; the memory
share (``--gpu-memory-utilization``) is a resource, kept with the connection settings, so a resume
on a larger GPU with another split continues the same run; so is ``--allow-untested-vllm``.

Order: :func:`engine_for_run` checks the installed vLLM's version (read from its files, not
imported) and sets the GPU split before anything imports vllm or torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any, Iterable, Mapping

# Set by the backbone itself; an --engine-arg may not override them.
OWNED_BY_BACKBONE = {"model": "--model", "seed": "--seed", "generation_config": "(always 'vllm': greedy decoding "
                                                                                 "must not take the model's defaults)"}
DTYPES = ("auto", "bfloat16", "float16", "half", "float", "float32")


class EngineOptionError(ValueError):
    """A bad engine option; the message is one line naming the flag."""


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """The engine settings of one run (None: vLLM's own default, or the co-location plan's)."""

    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    dtype: str | None = None
    enforce_eager: bool | None = None
    enable_prefix_caching: bool = True
    batch_invariant: bool = False
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    allow_untested_vllm: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Backbone keyword arguments (unset ones left out); ``extra`` is ``engine_options``."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "extra" and v is not None}
        if self.extra:
            out["engine_options"] = dict(self.extra)
        return out

    def identity(self) -> dict[str, Any]:
        """What is part of the run's identity (everything but the memory share and the version waiver)."""
        return {k: v for k, v in self.as_dict().items() if k not in ("gpu_memory_utilization", "allow_untested_vllm")}

    def given(self) -> list[str]:
        """The flags set away from their defaults (for refusing them on other backbones)."""
        flags = {"gpu_memory_utilization": "--gpu-memory-utilization", "max_model_len": "--max-model-len",
                 "tensor_parallel_size": "--tensor-parallel-size", "dtype": "--dtype",
                 "enforce_eager": "--enforce-eager"}
        out = [flag for name, flag in flags.items() if getattr(self, name) is not None]
        if not self.enable_prefix_caching:
            out.append("--no-prefix-caching")
        if self.batch_invariant:
            out.append("--batch-invariant")
        if self.allow_untested_vllm:
            out.append("--allow-untested-vllm")
        if self.extra:
            out.append("--engine-arg")
        return out


def parse_engine_args(items: Iterable[str] | None) -> dict[str, Any]:
    """``["max_num_seqs=64", "kv_cache_dtype=fp8"]`` -> ``{"max_num_seqs": 64, "kv_cache_dtype": "fp8"}``."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise EngineOptionError(f"--engine-arg {item!r}: expected KEY=VALUE, e.g. --engine-arg max_num_seqs=64")
        if key in out:
            raise EngineOptionError(f"--engine-arg {key} is given twice")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def check_names(names: Iterable[str], accepted: set[str], version: str) -> None:
    """Refuse names ``vllm.LLM`` would not take, with the closest valid ones."""
    unknown = [n for n in names if n not in accepted]
    if unknown:
        hints = {n: difflib.get_close_matches(n, sorted(accepted), n=3) for n in unknown}
        said = "; ".join(f"{n!r}" + (f" (did you mean {', '.join(h)}?)" if h else "") for n, h in hints.items())
        raise EngineOptionError(f"--engine-arg: vLLM {version} has no engine option {said}")


def engine_options_from_flags(*, gpu_memory_utilization: float | None = None, max_model_len: int | None = None,
                              tensor_parallel_size: int | None = None, dtype: str | None = None,
                              enforce_eager: bool | None = None, prefix_caching: bool = True,
                              batch_invariant: bool = False, engine_arg: Iterable[str] | None = None,
                              allow_untested_vllm: bool = False, api: Mapping[str, Any] | None = None,
                              check_api: bool = True) -> EngineOptions:
    """Parse and check the engine flags (``api``: :func:`tokenworth_agent.backbones.vllm_api.supported_api` by
    default; ``check_api=False`` skips the names' check, where vLLM is not the backbone)."""
    from tokenworth_agent.backbones.vllm_api import llm_keywords, supported_api

    if gpu_memory_utilization is not None and not 0.0 < gpu_memory_utilization < 1.0:
        raise EngineOptionError(f"--gpu-memory-utilization must be in (0, 1), got {gpu_memory_utilization:g}")
    for flag, value in (("--max-model-len", max_model_len), ("--tensor-parallel-size", tensor_parallel_size)):
        if value is not None and value < 1:
            raise EngineOptionError(f"{flag} must be at least 1, got {value}")
    if dtype is not None and dtype not in DTYPES:
        raise EngineOptionError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    extra = parse_engine_args(engine_arg)
    explicit = {"gpu_memory_utilization": "--gpu-memory-utilization", "max_model_len": "--max-model-len",
                "tensor_parallel_size": "--tensor-parallel-size", "dtype": "--dtype",
                "enforce_eager": "--enforce-eager", "enable_prefix_caching": "--prefix-caching/--no-prefix-caching",
                **OWNED_BY_BACKBONE}
    for key in extra:
        if key in explicit:
            raise EngineOptionError(f"--engine-arg {key}=...: use {explicit[key]} instead")
    if check_api:
        api = api or supported_api()
        check_names(extra, llm_keywords(api), str(api.get("version", "?")))
    return EngineOptions(gpu_memory_utilization, max_model_len, tensor_parallel_size, dtype, enforce_eager,
                         prefix_caching, batch_invariant, extra, bool(allow_untested_vllm))


def with_plan(engine: EngineOptions, plan: Any) -> EngineOptions:
    """The options with the co-location plan's vLLM share filled in (a given share is kept)."""
    share = getattr(plan, "gpu_memory_utilization", None)
    if plan is None or share is None or engine.gpu_memory_utilization is not None:
        return engine
    return dataclasses.replace(engine, gpu_memory_utilization=share)


def engine_for_run(backbone: str, flags: Mapping[str, Any] | None, *, model: str | None = None, env: str = "db",
                   controller_streams: int = 1, split: bool = True) -> tuple[EngineOptions | None, Any]:
    """The CLI's hook: parse the engine flags, refuse them on other backbones, and apply the GPU
    split (:func:`tokenworth_agent.backbones.colocation.apply_colocation`) before JAX starts.

    ``flags`` holds the raw values of ``--jax-mem-fraction`` and the engine flags (the names of
    :func:`engine_options_from_flags`' parameters). Returns ``(engine options or None, plan or
    None)``; raises a one-line ``ValueError`` for anything wrong, before anything loads.
    ``split=False`` (a driver whose workers run the engine elsewhere): the flags are checked, but
    neither the installed vLLM nor this machine's GPU is looked at; each worker calls this again.
    """
    from tokenworth_agent.backbones.colocation import apply_colocation
    from tokenworth_agent.backbones.vllm_api import check_version, installed_version

    raw = dict(flags or {})
    jax_mem_fraction = raw.pop("jax_mem_fraction", None)
    if backbone == "vllm":
        engine = engine_options_from_flags(**raw)
        if split:
            check_version(installed_version(), engine.allow_untested_vllm)  # the note, if any, comes at engine start
    else:
        engine = engine_options_from_flags(**raw, check_api=False)  # only "was a flag given" matters
        stray = [flag for flag in engine.given() if flag != "--gpu-memory-utilization"]
        if stray:
            raise EngineOptionError(f"{', '.join(stray)} only apply to --backbone vllm")
    if not split:
        return (engine if backbone == "vllm" else None), None
    plan = apply_colocation(backbone, engine.as_dict(), jax_mem_fraction=jax_mem_fraction, model=model, env=env,
                            controller_streams=controller_streams)
    return (with_plan(engine, plan) if backbone == "vllm" else None), plan
