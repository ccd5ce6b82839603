"""Sphinx configuration of tokenworth_jax's API reference (``make docs``; tests/test_api_docs.py builds it too).

The reference is made from the library's own docstrings (autodoc, Google-style sections read by
napoleon); every code example on these pages is a doctest, run by ``sphinx-build -b doctest``. The
README's controller example is shown on the quickstart page straight from README.md (the
``readme-example`` directive below), so that page and the README cannot drift apart.

It builds from the library alone: ``make docs`` runs it in ``.venv-docs`` (the library, editable, and
its ``docs`` extra, nothing of the harness), Read the Docs with ``pip install .[docs]``
(.readthedocs.yaml). The research notebooks are rendered from their executed, committed copies
beside this file (``notebooks/*.ipynb``; myst-nb, execution off): ``make test`` executes the
jupytext scripts they come from (the repository's ``notebooks/0*.py``), with the harness, and checks
those copies are current (scripts/notebooks.py, docs/notebooks.md).
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.ext.doctest import TestcodeDirective

import tokenworth_jax

ROOT = Path(__file__).resolve().parents[2]

project = "tokenworth-jax"
author = "The tokenworth-jax developers"
copyright = "the tokenworth-jax developers"  # noqa: A001 - Sphinx's name
release = version = tokenworth_jax.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.doctest", "myst_nb"]
exclude_patterns = ["_build"]
# The committed notebooks are shown as executed by `make notebooks`: the docs never run them (02 and 03
# need the harness and the task data, which neither this build nor Read the Docs has).
nb_execution_mode = "off"
nb_merge_streams = True  # one output block per cell, not one per print()
html_theme = "alabaster"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# Long unions read better by their names.
autodoc_type_aliases = {"ArrayLike": "jax.typing.ArrayLike", "DTypeLike": "jax.typing.DTypeLike",
                        "RewardFn": "tokenworth_jax.controller.RewardFn", "Strategy": "tokenworth_jax.Strategy"}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # a dataclass's "Attributes:" section as field entries of its class

doctest_global_setup = """
import functools
import jax
import jax.numpy as jnp
import numpy as np
import tokenworth_jax as tw
"""


def readme_example() -> str:
    """The ```python block under "## The controller API" in README.md."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"^## The controller API\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    if found is None:
        raise RuntimeError("README.md has no ```python block under '## The controller API'")
    return found.group(1)


class ReadmeExample(TestcodeDirective):
    """``.. readme-example::``: the README's controller example, shown and run as a ``testcode`` block."""

    has_content = False

    def run(self):  # type: ignore[no-untyped-def]
        self.content = StringList(readme_example().splitlines(), source=str(ROOT / "README.md"))
        self.name = "testcode"  # sphinx.ext.doctest runs the node by this name
        return super().run()


def _alias_names(app: Sphinx, what: str, name: str, obj: object, options: object, signature: str | None,
                 return_annotation: str | None) -> tuple[str | None, str | None]:
    """An alias inside a union (``ArrayLike | Query``) by its name, not by the repr of Sphinx's placeholder."""

    def named(text: str | None) -> str | None:
        return re.sub(r"TypeAliasForwardRef\('([^']+)'\)", r"\1", text) if text else text

    return named(signature), named(return_annotation)


def setup(app: Sphinx) -> dict[str, bool]:
    app.add_directive("readme-example", ReadmeExample)
    app.connect("autodoc-process-signature", _alias_names)
    return {"parallel_read_safe": True}
