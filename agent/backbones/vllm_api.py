"""The parts of vLLM's API this project calls: keyword names of ``LLM``, ``LLM.chat``,
``SamplingParams`` and ``EngineArgs``.

Two sources, one shape (a dict of sorted name lists):

- :func:`installed_api` reads them from the importable ``vllm`` package with ``inspect``;
- :func:`pinned_api` reads ``vllm_api.json`` next to this file, made from the source of the
  supported release (:data:`PINNED_VERSION`) by :func:`api_from_source`, which parses the files
  with ``ast`` and never imports vLLM (it needs CUDA and torch).

:func:`supported_api` is the installed one when vLLM imports, else the pinned one. Engine
options from the command line are checked against it, and the test fake of ``vllm`` refuses
any keyword outside it, so a misspelt argument fails here and not after minutes of loading.

Regenerate the pin from a downloaded wheel (nothing is imported)::

    pip download --no-deps vllm==0.11.2 -d /tmp/vllm-wheel
    python -m agent.backbones.vllm_api --wheel /tmp/vllm-wheel/vllm-0.11.2-*.whl --write

Compare the pin with an installed vLLM: ``python -m agent.backbones.vllm_api --check``.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import inspect
import json
import sys
import zipfile
from pathlib import Path
from typing import Any, Mapping

PINNED_FILE = Path(__file__).with_name("vllm_api.json")
PINNED_VERSION = "0.11.2"
# (key in the JSON, file inside the package, class, method or None for the class's own fields)
SOURCES = (
    ("llm_init", "vllm/entrypoints/llm.py", "LLM", "__init__"),
    ("llm_chat", "vllm/entrypoints/llm.py", "LLM", "chat"),
    ("sampling_params", "vllm/sampling_params.py", "SamplingParams", None),
    ("engine_args", "vllm/engine/arg_utils.py", "EngineArgs", None),
)
KEYS = tuple(key for key, *_ in SOURCES)


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise ValueError(f"class {name} not found")


def _keywords(function: ast.FunctionDef) -> list[str]:
    """Parameters a caller may pass by name (``self`` and ``*args``/``**kwargs`` excluded)."""
    args = function.args
    return sorted(a.arg for a in (*args.args, *args.kwonlyargs) if a.arg != "self")


def _fields(cls: ast.ClassDef) -> list[str]:
    """Annotated class attributes (dataclass / msgspec fields), ``ClassVar`` ones excluded."""
    names = []
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" in ast.unparse(node.annotation):
                continue
            names.append(node.target.id)
    return sorted(names)


def _from_tree(tree: ast.Module, cls_name: str, method: str | None) -> list[str]:
    cls = _class(tree, cls_name)
    if method is None:
        return _fields(cls)
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == method:
            return _keywords(node)
    raise ValueError(f"{cls_name}.{method} not found")


def api_from_source(read: Any, version: str) -> dict[str, Any]:
    """The API from source text; ``read(path_inside_package) -> str`` (a wheel or a folder)."""
    api: dict[str, Any] = {"version": version}
    trees: dict[str, ast.Module] = {}
    for key, path, cls_name, method in SOURCES:
        tree = trees.setdefault(path, ast.parse(read(path)))
        api[key] = _from_tree(tree, cls_name, method)
    return api


def api_from_wheel(wheel: Path) -> dict[str, Any]:
    version = wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as archive:
        api = api_from_source(lambda path: archive.read(path).decode(), version)
    api["produced_by"] = (f"python -m agent.backbones.vllm_api --wheel {wheel.name} --write "
                          "(ast over the wheel's source, vLLM never imported)")
    return api


def installed_api() -> dict[str, Any] | None:
    """The API of the importable vLLM, or None when it is not installed."""
    try:
        if importlib.util.find_spec("vllm") is None:
            return None
        import vllm
        from vllm.engine.arg_utils import EngineArgs
    except (ImportError, ValueError):  # absent, broken, or a stand-in module without a spec
        return None

    def keywords(function: Any) -> list[str]:
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return sorted(name for name, p in inspect.signature(function).parameters.items()
                      if p.kind in kinds and name != "self")

    import dataclasses

    sampling = getattr(vllm.SamplingParams, "__struct_fields__", None)
    return {"version": str(getattr(vllm, "__version__", "?")),
            "llm_init": keywords(vllm.LLM.__init__), "llm_chat": keywords(vllm.LLM.chat),
            "sampling_params": sorted(sampling) if sampling is not None else keywords(vllm.SamplingParams),
            "engine_args": sorted(f.name for f in dataclasses.fields(EngineArgs))}


@functools.lru_cache(maxsize=1)
def pinned_api() -> dict[str, Any]:
    return json.loads(PINNED_FILE.read_text())


def supported_api() -> Mapping[str, Any]:
    """The installed vLLM's API when it imports, else the pinned one."""
    return installed_api() or pinned_api()


def llm_keywords(api: Mapping[str, Any]) -> set[str]:
    """What ``vllm.LLM(...)`` accepts: its own parameters plus every ``EngineArgs`` field (via ``**kwargs``)."""
    return set(api["llm_init"]) | set(api["engine_args"])


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, dict[str, list[str]]]:
    """Per key: names only in ``a`` and only in ``b``."""
    out = {}
    for key in KEYS:
        only_a, only_b = sorted(set(a[key]) - set(b[key])), sorted(set(b[key]) - set(a[key]))
        if only_a or only_b:
            out[key] = {"only_" + str(a.get("version")): only_a, "only_" + str(b.get("version")): only_b}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="vLLM API names: regenerate the pin or compare it")
    parser.add_argument("--wheel", type=Path, help="a downloaded vllm wheel to read (ast only)")
    parser.add_argument("--write", action="store_true", help=f"write {PINNED_FILE.name}")
    parser.add_argument("--check", action="store_true", help="compare the pin with the installed vllm")
    args = parser.parse_args(argv)
    if args.wheel:
        api = api_from_wheel(args.wheel)
        if args.write:
            PINNED_FILE.write_text(json.dumps(api, indent=1) + "\n")
        else:
            print(json.dumps(differences(api, pinned_api()), indent=1))
    if args.check:
        installed = installed_api()
        if installed is None:
            print("vllm is not installed; nothing to compare", file=sys.stderr)
            return 2
        diff = differences(installed, pinned_api())
        print(json.dumps(diff, indent=1) if diff else f"vllm {installed['version']} matches the pin")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
