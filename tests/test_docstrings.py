"""Every function the API reference documents has Google-style ``Args:`` and ``Returns:`` sections (the pages
document every argument and what comes back).

The functions are those the pages show with ``.. autofunction::`` (docs/api/*.rst): the pure API (``tw.init`` ...
``tw.run_batched``, ``tw.worth``), ``tw.checked``'s twins, the presets and ``stack_hparams``, the parts' makers,
the featurisers, ``tw.save`` / ``tw.load`` and the batching helpers; every function ``tw`` and ``tw.checked``
export is among them. ``Args:`` names each parameter of the signature (``*operands``, ``**overrides`` with their
stars, as napoleon reads them) and nothing else; a function without parameters needs only ``Returns:``.

The library lanes (scripts/wheels.sh) run these against the installed wheel from a copy of tests/ without docs/:
there the functions ``tw`` and ``tw.checked`` export are checked, and the test that needs the pages is skipped.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

import tokenworth_jax as tw

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too

API = Path(__file__).resolve().parents[1] / "docs" / "api"
AUTOFUNCTION = re.compile(r"^\.\. autofunction::\s*(\S+)", re.M)
SECTION = re.compile(r"^(\w[\w ]*):\s*$")  # a Google-style section header (Args:, Returns:, Raises:, ...)
ENTRY = re.compile(r"^ {4}(\*{0,2}\w+)(?: \([^)]*\))?:(?: |$)")  # one entry of a section, at its first indent


def _targets() -> list[str]:
    """The pages' autofunction targets (none where docs/ is absent: the library lanes)."""
    return sorted({t for page in API.glob("*.rst") for t in AUTOFUNCTION.findall(page.read_text())})


AUTOCLASS = re.compile(r"^\.\. autoclass::\s*(\S+)\n((?: {3,}\S.*\n)*)", re.M)  # the directive and its options
MEMBERS = re.compile(r":members:(.*(?:\n {4,}[^:\s].*)*)")  # the option, with its continuation lines


def _methods() -> list[str]:
    """The methods the pages document (``.. autoclass::`` with ``:members:``: those it lists, else every public
    method the class defines, as autodoc takes them), as ``module.Class.method``; properties and fields are
    attributes, not checked here. None where docs/ is absent."""
    out = []
    for page in sorted(API.glob("*.rst")):
        for target, options in AUTOCLASS.findall(page.read_text()):
            found = MEMBERS.search(options)
            if not found:
                continue
            cls = _resolve_class(target)
            names = [n.strip() for n in found.group(1).replace("\n", " ").split(",") if n.strip()]
            for name in names or [n for n in vars(cls) if not n.startswith("_")]:
                raw = inspect.getattr_static(cls, name)
                if inspect.isfunction(raw) or isinstance(raw, (classmethod, staticmethod)):
                    out.append(f"{target}.{name}")
    return out


def _resolve_class(target: str):
    """The class autodoc documents for ``module.Class``: the longest importable module prefix, then attributes
    (``tokenworth_jax.controller.InitFn`` is in the module ``tokenworth_jax.controller``)."""
    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(target)


def _exported() -> set[str]:
    """Every function ``tw`` and ``tw.checked`` export, as a page names it."""
    out = {f"tokenworth_jax.{n}" for n in tw.__all__ if inspect.isfunction(getattr(tw, n))}
    return out | {f"tokenworth_jax.checked.{n}" for n in tw.checked.__all__}


def _resolve(target: str):
    """The object autodoc documents for ``tokenworth_jax.a.b``: attribute by attribute from the package (so
    ``tokenworth_jax.controller`` is the function, as on the page)."""
    obj = tw
    for name in target.split(".")[1:]:
        obj = getattr(obj, name)
    return obj


def _sections(doc: str) -> dict[str, list[str]]:
    """``{header: body lines}`` of a (dedented) docstring's Google-style sections."""
    out: dict[str, list[str]] = {}
    current = None
    for line in doc.splitlines():
        match = SECTION.match(line)
        if match and not line.startswith(" "):
            current = match.group(1)
            out[current] = []
        elif current is not None and (line.startswith(" ") or not line.strip()):
            out[current].append(line)
        else:
            current = None
    return out


def problems(name: str, fn) -> list[str]:
    """What ``fn``'s docstring lacks: an Args section naming exactly its parameters, a Returns section."""
    sections = _sections(inspect.getdoc(fn) or "")
    params = []
    for p in inspect.signature(fn).parameters.values():
        stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}.get(p.kind, "")
        params.append(stars + p.name)
    if params[:1] == ["self"]:  # a method read from its class: the instance is not an argument
        params = params[1:]
    out = []
    if params:
        if "Args" not in sections:
            out.append(f"{name}: no Args section")
        else:
            named = [m.group(1) for line in sections["Args"] if (m := ENTRY.match(line))]
            if named != params:
                out.append(f"{name}: Args names {named}, the signature {params}")
    if not any(line.strip() for line in sections.get("Returns", [])):
        out.append(f"{name}: no Returns section")
    return out


def test_every_documented_function_has_args_and_returns() -> None:
    targets = sorted(set(_targets()) | _exported())
    assert len(targets) >= (40 if API.is_dir() else 25)
    assert "tokenworth_jax.run_batched" in targets and "tokenworth_jax.checked.observe" in targets
    found = [p for t in targets for p in problems(t, _resolve(t))]
    assert found == [], "\n".join(found)


def test_every_documented_method_has_args_and_returns() -> None:
    """The methods of the classes the pages document (the host Controller's, Schema's, the as_dict methods, the
    Protocols' ``__call__``: whose docstring was Python's "Call self as a function."), as the functions."""
    if not API.is_dir():
        pytest.skip("docs/api is not in this copy (a library lane): the pages are checked in the main suite")
    methods = _methods()
    assert {"tokenworth_jax.Controller.from_preset", "tokenworth_jax.Schema.make",
            "tokenworth_jax.HostDecision.as_dict", "tokenworth_jax.controller.InitFn.__call__"} <= set(methods)
    assert len(methods) >= 30, methods
    found = [p for m in methods for p in problems(m, getattr(_resolve_class(m.rsplit(".", 1)[0]), m.rsplit(".", 1)[1]))]
    assert found == [], "\n".join(found)


def test_every_exported_function_is_documented_as_a_function() -> None:
    if not API.is_dir():
        pytest.skip("docs/api is not in this copy (a library lane): the pages are checked in the main suite")
    exported = _exported()
    assert len(exported) > 20 and sorted(exported - set(_targets())) == []


def test_the_check_finds_a_missing_or_stale_section() -> None:
    def bare(a, b=1, *rest, **kw):
        """Does something."""

    def stale(a, b):
        """Does something.

        Args:
            a: the first.
            c (int): a parameter it no longer has.

        Returns:
            Nothing useful.
        """

    def good(a, *rest, **kw):
        """Does something.

        Args:
            a (int): the first; its description
                runs on.
            *rest: the others.
            **kw: by name.

        Returns:
            The sum.

        Raises:
            ValueError: never.
        """

    def none():
        """Does something.

        Returns:
            A constant.
        """

    assert problems("bare", bare) == ["bare: no Args section", "bare: no Returns section"]
    assert problems("stale", stale) == ["stale: Args names ['a', 'c'], the signature ['a', 'b']"]
    assert problems("good", good) == [] and problems("none", none) == []
