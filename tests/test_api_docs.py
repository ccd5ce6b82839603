"""The library's API reference (docs/api): every public name documented, field by field; the pages build
with Sphinx with warnings as errors; every example on them and the README's controller example run as
doctests; the executed notebooks are rendered with their figures; every link of the long description
into the hosted docs names a page that builds; and nothing on them points into ../shared/ (a user of
the package has no such folder).

The build runs in the docs venv (``make docs-setup``: the library and its ``docs`` extra alone, which
the venv check below holds it to), as ``make docs`` and Read the Docs build it; make test names it in
TOKENWORTH_DOCS_PYTHON. The build test runs both Sphinx builders (about 30-60 s on two cores): it is
marked ``slow``."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tokenworth_jax as tw
from tokenworth_jax import modes, protocol, scorers
from tokenworth_jax.controller import Clock

REPO = Path(__file__).resolve().parents[1]
API = REPO / "docs" / "api"
PAGES = sorted(API.glob("*.rst"))
DIRECTIVE = re.compile(r"^\.\. (?:autoclass|autofunction|autodata|autoexception|automodule|automethod|py:data)::"
                       r"\s*(\S+)", re.M)

# NamedTuples the pages document besides those in tw.__all__: what a mode or a scorer is given and returns.
EXTRA_NAMEDTUPLES = (modes.Candidates, modes.Choice, modes.Feedback, scorers.ProbeScores, scorers.CandidateScores,
                     Clock, protocol.Progress)


def _generated(obj: object) -> bool:
    """No docstring, or only the one Python writes for a NamedTuple: ``Name(field, ...)``."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    name = getattr(obj, "__name__", "")
    return not doc or re.fullmatch(rf"{re.escape(name)}\(.*\)", doc, re.S) is not None


def _undocumented(names: list[str]) -> list[str]:
    """Which of ``tw``'s ``names`` (and their fields) lack a real docstring."""
    bad = []
    for name in names:
        obj = getattr(tw, name)
        if name != "__version__" and _generated(obj):
            bad.append(name)
        bad += _field_problems(obj, name)
    return bad


def _field_problems(obj: object, name: str) -> list[str]:
    bad = []
    if isinstance(obj, type) and hasattr(obj, "_fields"):
        for field in obj._fields:
            doc = getattr(obj, field).__doc__ or ""
            if not doc.strip() or doc.startswith("Alias for field number"):
                bad.append(f"{name}.{field}")
    if isinstance(obj, type) and dataclasses.is_dataclass(obj):  # a dataclass lists its fields in its docstring
        for field in dataclasses.fields(obj):
            if not re.search(rf"^\s+{field.name}: \S", obj.__doc__ or "", re.M):
                bad.append(f"{name}.{field.name}")
    return bad


def test_every_public_name_and_field_has_a_docstring() -> None:
    assert _undocumented(list(tw.__all__)) == []
    assert [p for cls in EXTRA_NAMEDTUPLES for p in _field_problems(cls, cls.__name__)] == []


def test_the_docstring_check_fails_on_a_generated_docstring() -> None:
    from typing import NamedTuple

    class Bare(NamedTuple):
        a: int

    setattr(tw, "_Bare", Bare)
    try:
        assert _undocumented(["_Bare"]) == ["_Bare", "_Bare.a"]
        Bare.__doc__ = "Something real."
        Bare.a.__doc__ = "What a is."
        assert _undocumented(["_Bare"]) == []
    finally:
        delattr(tw, "_Bare")


def test_every_public_name_is_on_a_page() -> None:
    documented = {m for page in PAGES for m in DIRECTIVE.findall(page.read_text())}
    missing = []
    for name in tw.__all__:
        full = f"tokenworth_jax.{name}"
        if full not in documented and not any(d.startswith(full + ".") for d in documented):
            missing.append(name)
    assert missing == []


def test_pages_hold_no_code_but_doctests() -> None:
    """A literal block (``::``, ``code-block``) would be an example that nothing runs. The one exception:
    a whole program from examples/ shown with ``literalinclude``, which a test of the suite runs."""
    tests = "".join(t.read_text() for t in Path(__file__).parent.glob("test_*.py"))
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            included = re.match(r"\s*\.\. literalinclude:: \.\./\.\./examples/(\w+\.py)$", line)
            if included:
                assert f'"examples" / "{included.group(1)}"' in tests, f"{page.name}:{number}: no test runs {included.group(1)}"
            elif line.strip().startswith(".. "):
                assert not re.match(r"\s*\.\. (code-block|code|sourcecode|literalinclude)::", line), (page.name, number)
            else:
                assert not line.rstrip().endswith("::"), f"{page.name}:{number} starts a literal block"


def _conf() -> object:
    spec = importlib.util.spec_from_file_location("tokenworth_api_conf", API / "conf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_quickstart_shows_the_readme_example() -> None:
    code = _conf().readme_example()  # type: ignore[attr-defined]
    assert "tw.init(spec, hp)" in code and "print(tw.Admission(int(dec.code)).name)" in code
    assert ".. readme-example::" in (API / "quickstart.rst").read_text()


def _shared_references(texts: dict[str, str]) -> list[str]:
    return [name for name, text in texts.items() if re.search(r"(\.\./)+shared/|\bshared/data\b", text)]


def test_pages_do_not_point_into_shared() -> None:
    sources = {p.name: p.read_text() for p in [*PAGES, API / "conf.py"]}
    sources["README example"] = _conf().readme_example()  # type: ignore[attr-defined]
    assert _shared_references(sources) == []
    assert _shared_references({"page": "the spec (../shared/docs/spec.md)"}) == ["page"]  # the check can fail


def docs_python() -> str:
    """The docs venv's interpreter: TOKENWORTH_DOCS_PYTHON (make test), else .venv-docs (make docs-setup)."""
    named = os.environ.get("TOKENWORTH_DOCS_PYTHON")
    path = Path(named) if named else REPO / ".venv-docs" / "bin" / "python"
    if not path.exists():
        if named:
            pytest.fail(f"TOKENWORTH_DOCS_PYTHON={named} does not exist: `make docs-setup` builds it")
        pytest.skip("no docs venv (.venv-docs): `make docs-setup` builds it")
    return str(path)


# Run by a venv's interpreter: the distributions it holds beyond its seed (pip; setuptools on Python 3.11)
# and the requirement closure of tokenworth-jax[docs] (markers evaluated with the extras asked for), as JSON.
_BEYOND_DOCS_EXTRA = """
import importlib.metadata as md, json
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canon
need, todo = {}, [("tokenworth-jax", {"docs"})]
while todo:
    name, extras = todo.pop()
    if canon(name) in need and extras <= need[canon(name)]:
        continue
    need[canon(name)] = need.get(canon(name), set()) | extras
    for line in md.distribution(name).requires or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in need[canon(name)] or {""}):
            todo.append((req.name, set(req.extras)))
held = {canon(d.metadata["Name"]) for d in md.distributions()} - {"pip", "setuptools"}  # what venv seeds
print(json.dumps(sorted(held - set(need))))
"""


def beyond_docs_extra(python: str) -> list[str]:
    done = subprocess.run([python, "-c", _BEYOND_DOCS_EXTRA], cwd="/", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_docs_venv_holds_the_library_and_its_docs_extra_alone() -> None:
    assert beyond_docs_extra(docs_python()) == []
    assert "tokenworth-agent" in beyond_docs_extra(sys.executable)  # the check can fail: the suite's venv has the harness


def _sphinx(builder: str, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([docs_python(), "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder, str(API),
                             str(out / builder)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _missing_targets(html: Path, links: list[str], base: str) -> list[str]:
    """The links under ``base`` whose page, or anchor on it, the built HTML lacks."""
    missing = []
    for link in links:
        page, _, anchor = link[len(base):].partition("#")
        path = html / (page or "index.html")
        if not path.is_file() or (anchor and not re.search(rf'\bid="{re.escape(anchor)}"', path.read_text())):
            missing.append(link)
    return missing


@pytest.mark.engine  # the docs venv
@pytest.mark.slow(reason="Sphinx builds the whole API reference (html) and runs every example on it (doctest)")
def test_api_reference_builds_without_warnings_and_its_doctests_pass(tmp_path: Path) -> None:
    from tests.test_long_description import DOCS_URL, docs_links

    html, doctest = _sphinx("html", tmp_path), _sphinx("doctest", tmp_path)  # side by side: two cores
    html_log, doctest_log = html.communicate(timeout=600)[0], doctest.communicate(timeout=600)[0]
    assert html.returncode == 0, html_log
    report = (tmp_path / "doctest" / "output.txt").read_text()
    assert doctest.returncode == 0, doctest_log + report
    assert re.search(r"^\s+0 failures in tests$", report, re.M), report
    root = tmp_path / "html"
    built = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*.html")}
    assert set(built) >= {f"{p.stem}.html" for p in PAGES}
    assert _shared_references(built) == []
    # The notebooks with their figures: each rendered page shows as many images as its executed copy holds.
    notebooks = sorted((API / "notebooks").glob("*.ipynb"))
    assert len(notebooks) == 4, notebooks
    for notebook in notebooks:
        cells = json.loads(notebook.read_text())["cells"]
        figures = sum("image/png" in out.get("data", {}) for cell in cells for out in cell.get("outputs", []))
        shown = built[f"notebooks/{notebook.stem}.html"].count("<img ")
        assert figures >= 1 and shown == figures, (notebook.name, figures, shown)
    assert all((root / "_images" / Path(src).name).is_file()
               for page in built.values() for src in re.findall(r'<img [^>]*src="([^"]+)"', page) if "_images/" in src)
    assert _missing_targets(root, docs_links(), DOCS_URL) == []
    assert _missing_targets(root, [DOCS_URL + "nowhere.html", DOCS_URL + "host.html#nowhere"], DOCS_URL) == [
        DOCS_URL + "nowhere.html", DOCS_URL + "host.html#nowhere"]  # the check can fail
