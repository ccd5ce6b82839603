"""Where the benchmark programs write their result files by default.

The committed results live in the checkout's ``bench/results/``, beside the package folder and outside
it, so that no wheel ships them. A program run from an editable install (or with ``PYTHONPATH``
pointing into the checkout) finds that folder from this file's place; an installed wheel has no
checkout, and then the default is ``bench/results`` under the current folder. ``--out`` always wins.
"""

from __future__ import annotations

from pathlib import Path

_HOME = Path(__file__).resolve().parents[1]  # bench/ in a checkout, site-packages in a wheel
# A checkout's bench/ holds this distribution's pyproject.toml; site-packages does not.
RESULTS = _HOME / "results" if (_HOME / "pyproject.toml").is_file() else Path("bench") / "results"
