"""ALFWorld's engine venv: where it is and what it holds.

ALFWorld's text engine needs an old, tightly pinned set (textworld 1.7.0 pins tatsu 5.8.3;
fast-downward-textworld and jericho are built from source), so it lives in a venv of its own
(``make alfworld-setup`` → ``.venv-alfworld``; docs/alfworld.md), and the engine runs in worker
processes under that venv's interpreter (:mod:`tokenworth_agent.benchmarks.alfworld.engine`), never in the run's
process. Which venv, first match wins: ``$TOKENWORTH_ALFWORLD_VENV``, the checkout's
``.venv-alfworld``. The engine's package versions are part of an ALFWorld run's identity.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

VENV_VARIABLE = "TOKENWORTH_ALFWORLD_VENV"
DEFAULT_VENV = Path(__file__).resolve().parents[4] / ".venv-alfworld"  # where `make alfworld-setup` builds it
ENGINE_PACKAGES = ("alfworld", "textworld", "fast_downward_textworld", "tatsu")
HOW_TO_BUILD = ("build it with `make alfworld-setup` (builds fast-downward once into ~/.cache/tokenworth/wheels), "
                "or name one with $TOKENWORTH_ALFWORLD_VENV")


class EngineVenvError(ValueError):
    """No usable engine venv; the message says how to build one."""


@dataclasses.dataclass(frozen=True)
class EngineVenv:
    root: Path
    python: Path
    versions: dict[str, str]  # the engine packages' versions

    def identity(self) -> dict[str, str]:
        return dict(self.versions)


def resolve_venv() -> Path:
    named = os.environ.get(VENV_VARIABLE)
    return Path(named).expanduser() if named else DEFAULT_VENV


def open_venv() -> EngineVenv:
    """Read the engine venv (nothing is run); EngineVenvError says what is missing and how to build it."""
    root = resolve_venv()
    python = root / "bin" / "python"
    if not (root / "pyvenv.cfg").is_file() or not python.exists():
        raise EngineVenvError(f"ALFWorld's engine venv {root} does not exist or is incomplete; {HOW_TO_BUILD}")
    found = {}
    for info in root.glob("lib/python*/site-packages/*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        found[name.lower()] = version
    missing = [p for p in ENGINE_PACKAGES if p not in found]
    if missing:
        raise EngineVenvError(f"ALFWorld's engine venv {root} lacks {', '.join(missing)}; {HOW_TO_BUILD}")
    return EngineVenv(root.resolve(), python, {p: found[p] for p in ENGINE_PACKAGES})


__all__ = ["EngineVenv", "EngineVenvError", "VENV_VARIABLE", "DEFAULT_VENV", "HOW_TO_BUILD", "open_venv",
           "resolve_venv"]
