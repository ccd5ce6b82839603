"""The library's long description (the package index's page: pyproject.toml's ``readme``) is a page of
its own: every link and image in it is absolute and under one of the Project-URLs (the Documentation
URL is the one base of the hosted docs, docs/release.md "Publishing"), and its example runs and prints
what its ``# ->`` comments say. tests/test_api_docs.py checks each docs link names a page (and anchor)
the API reference builds; scripts/wheels.sh runs ``twine check --strict`` on the built distributions."""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
PAGE = REPO / PROJECT["readme"]
DOCS_URL = PROJECT["urls"]["Documentation"]
_HTML_TARGET = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']*)["']""", re.I)


def targets(text: str) -> list[str]:
    """Every link and image target of a Markdown text: inline and reference links, images, and the
    href/src of raw HTML."""
    found: list[str] = []
    for token in MarkdownIt("commonmark").parse(text):
        if token.type == "html_block":
            found += _HTML_TARGET.findall(token.content)
        for child in token.children or []:
            if child.type == "link_open":
                found.append(str(child.attrGet("href")))
            elif child.type == "image":
                found.append(str(child.attrGet("src")))
            elif child.type == "html_inline":
                found += _HTML_TARGET.findall(child.content)
    return found


def relative(text: str) -> list[str]:
    return [t for t in targets(text) if urlsplit(t).scheme != "https" or not urlsplit(t).netloc]


def docs_links() -> list[str]:
    """The page's links into the hosted API reference."""
    return [t for t in targets(PAGE.read_text()) if t.startswith(DOCS_URL)]


def test_the_long_description_is_the_library_page() -> None:
    assert PAGE == REPO / "docs" / "pypi-library.md"
    text = PAGE.read_text()
    assert text.startswith("# tokenworth-jax\n") and "pip install tokenworth-jax" in text
    assert "tokenworth_agent" not in text  # the harness is named only as the other distribution


def test_no_relative_link_or_image() -> None:
    assert targets(PAGE.read_text()), "the page links nothing: the check below would pass vacuously"
    assert relative(PAGE.read_text()) == []


def test_the_link_check_finds_relative_links_and_images() -> None:
    text = ("See [the docs](docs/api/index.rst), [ref][r] and ![a figure](docs/fig.png), "
            '<img src="fig.png">, [plain](http://example.org/) and [ok](https://example.org/x).\n\n'
            "[r]: ../README.md\n\n<p><a href='notes.md'>notes</a></p>\n")
    assert relative(text) == ["docs/api/index.rst", "../README.md", "docs/fig.png", "fig.png",
                              "http://example.org/", "notes.md"]


def test_every_link_is_under_a_project_url() -> None:
    bases = list(PROJECT["urls"].values())
    assert DOCS_URL.endswith("/") and docs_links()
    assert [t for t in targets(PAGE.read_text()) if not any(t.startswith(b) for b in bases)] == []


def test_the_example_prints_what_it_says() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.S | re.M)
    assert blocks
    for code in blocks:
        promised = [m.group(1) for m in re.finditer(r"^print\(.*?#\s*-> (.*)$", code, re.M)]
        assert promised, "the example promises no output"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(PAGE), "exec"), {})
        assert out.getvalue().splitlines() == promised
