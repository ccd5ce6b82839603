"""BigCodeBench's evaluation venv: where it is, what it holds, how a sandbox sees it.

The evaluation libraries live in a venv of their own (``make bcb-setup`` → ``.venv-bcb``;
docs/bigcodebench.md): they pin numpy 1.x, the project's JAX needs numpy 2, and the judge runs them
in their own interpreter inside the sandbox anyway, as upstream runs them in its own Docker image.

Which venv, first match wins: the ``--bcb-venv`` flag, ``$TOKENWORTH_BCB_VENV``, the checkout's
``.venv-bcb``. :func:`open_venv` reads it (nothing is run): its interpreter, the host directories a
sandbox must show read-only (the venv, and the base interpreter it was made from unless that sits
under ``/usr``, which every sandbox shows copy-on-write anyway), the evaluator's version and a
fingerprint of every installed distribution, which is part of a run's identity: a run judged with
other libraries (the CI set, TensorFlow added) is a different run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

VENV_VARIABLE = "TOKENWORTH_BCB_VENV"
DEFAULT_VENV = Path(__file__).resolve().parents[4] / ".venv-bcb"  # where `make bcb-setup` builds it
EVALUATOR = "bigcodebench"
HOW_TO_BUILD = ("build it with `make bcb-setup` (the full library set; `make bcb-ci-setup` builds the small "
                "CI set into .venv-bcb-ci), or name one with --bcb-venv or $TOKENWORTH_BCB_VENV")


class VenvError(ValueError):
    """No usable evaluation venv where one was named; the message says how to build one."""


@dataclasses.dataclass(frozen=True)
class EvalVenv:
    root: Path  # canonical path of the venv
    python: Path  # its interpreter
    binds: tuple[str, ...]  # host directories a sandbox shows read-only for it
    evaluator: str  # the installed bigcodebench version
    fingerprint: str  # sha256 (16 hex) of the installed distributions' names and versions

    def identity(self) -> dict[str, str]:
        return {"evaluator": f"{EVALUATOR}=={self.evaluator}", "libraries": self.fingerprint}


def resolve_venv(given: str | os.PathLike[str] | None = None) -> Path:
    """The venv named by the argument, else ``$TOKENWORTH_BCB_VENV``, else the checkout's ``.venv-bcb`` (unchecked)."""
    if given is not None:
        return Path(given).expanduser()
    named = os.environ.get(VENV_VARIABLE)
    return Path(named).expanduser() if named else DEFAULT_VENV


def _distributions(root: Path) -> list[str]:
    return sorted(p.name.removesuffix(".dist-info") for p in root.glob("lib/python*/site-packages/*.dist-info"))


def open_venv(given: str | os.PathLike[str] | None = None) -> EvalVenv:
    """Read the evaluation venv (see the module docstring); VenvError says what is missing and how to build it."""
    root = resolve_venv(given)
    where = f"the BigCodeBench evaluation venv {root}"
    config = root / "pyvenv.cfg"
    if not config.is_file() or not (root / "bin" / "python").exists():
        raise VenvError(f"{where} does not exist or is incomplete (no pyvenv.cfg or bin/python); {HOW_TO_BUILD}")
    root = root.resolve()
    home = None
    for line in config.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            home = Path(value.strip()).resolve()
    if home is None:
        raise VenvError(f"{config} names no base interpreter ('home = ...'); {HOW_TO_BUILD}")
    base = home.parent if home.name == "bin" else home
    distributions = _distributions(root)
    evaluator = [d.partition("-")[2] for d in distributions if d.partition("-")[0].lower() == EVALUATOR]
    if not evaluator:
        raise VenvError(f"{where} lacks the evaluator ({EVALUATOR} is not installed in it); {HOW_TO_BUILD}")
    binds = (str(root),) + (() if base == Path("/usr") or Path("/usr") in base.parents else (str(base),))
    fingerprint = hashlib.sha256("\n".join(distributions).encode()).hexdigest()[:16]
    return EvalVenv(root=root, python=root / "bin" / "python", binds=binds, evaluator=evaluator[0],
                    fingerprint=fingerprint)


__all__ = ["EvalVenv", "VenvError", "VENV_VARIABLE", "DEFAULT_VENV", "HOW_TO_BUILD", "resolve_venv", "open_venv"]
