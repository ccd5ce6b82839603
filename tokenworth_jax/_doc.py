"""Per-field documentation of the library's NamedTuples.

A ``NamedTuple`` field is a class-level descriptor whose docstring Python fills with
"Alias for field number i". :func:`fields` replaces each with what the field means (its shape,
dtype and sentinel values), so ``help(tw.Selection)``, ``tw.Selection.chosen.__doc__`` and the API
reference (Sphinx autodoc) show it. It refuses a class whose fields and documentation differ, so
a field added later cannot go undocumented silently (``tests/test_api_docs.py`` checks every
public one).
"""

from __future__ import annotations

from typing import Any


def fields(cls: Any, **docs: str) -> None:
    """Set the docstring of every field of the NamedTuple ``cls``; each field must be given, and only fields."""
    names = tuple(getattr(cls, "_fields", ()))
    missing = [n for n in names if n not in docs]
    unknown = [n for n in docs if n not in names]
    if missing or unknown:
        raise TypeError(f"{cls.__name__}: fields without documentation {missing}, documentation of unknown fields "
                        f"{unknown}")
    for name, text in docs.items():
        getattr(cls, name).__doc__ = text
