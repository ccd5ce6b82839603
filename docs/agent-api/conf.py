"""Sphinx configuration of the harness's plugin interface reference (``make agent-docs``;
tests/test_agent_api_docs.py builds it in ``make test``, warnings as errors).

What a plugin implements and receives: the :class:`~tokenworth_agent.benchmarks.base.Benchmark` value,
the memory-method base class, the backbone interface, and the types they pass around. Built from the
harness's own docstrings (autodoc; napoleon reads the Google-style sections), in ``.venv``.
"""

from __future__ import annotations

import tokenworth_agent
from tokenworth_jax import __version__

project = "tokenworth-agent plugin interface"
author = "The tokenworth-jax developers"
copyright = "the tokenworth-jax developers"  # noqa: A001 - Sphinx's name
release = version = __version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# names in signatures that are aliases or forward references: shown as written
autodoc_type_aliases = {"Options": "tokenworth_agent.benchmarks.base.Options"}
nitpicky = False
assert tokenworth_agent  # the harness is importable here (.venv)
