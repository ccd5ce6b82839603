"""The research notebooks, executed, as the API docs render them (docs/notebooks.md).

The sources are the jupytext "percent" scripts ``notebooks/0*.py``. This module executes one (with
the ``python3`` kernel of the interpreter that runs it, which needs the harness for 02 and 03),
and writes or checks its executed copy under ``docs/api/notebooks/``, outputs and figures included.
Those copies are committed: Read the Docs renders them as they are (myst-nb, execution off), since
neither the harness nor the task data is there. ``tests/test_notebooks.py`` executes every script
in ``make test`` and fails, naming the command below, when a committed copy's cells differ from its
script's or it lacks a figure the script draws.

    python scripts/notebooks.py [NAME.py ...]      (make notebooks) executes and writes the copies

Figures are PNG at 72 dpi (``matplotlibrc`` beside the copies, read through MATPLOTLIBRC), so the
three copies weigh about 350 kB, their four figures included; cell ids are numbered and execution metadata dropped, so a
refresh changes the outputs and nothing else.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "notebooks"
RENDERED = REPO / "docs" / "api" / "notebooks"
REFRESH = "make notebooks"


def scripts() -> list[Path]:
    return sorted(SOURCES.glob("0*.py"))


def rendered_path(script: Path) -> Path:
    return RENDERED / f"{script.stem}.ipynb"


def _kernel_name() -> str:
    """``python3`` from this interpreter's ipykernel; the kernelspec is installed into the venv if missing."""
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" not in KernelSpecManager().find_kernel_specs():
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix"], check=True,
                       capture_output=True)
    return "python3"


@contextmanager
def _kernel_environment() -> Iterator[None]:
    """The default size (no TOKENWORTH_NOTEBOOK_FULL), the kernel's inline backend (no MPLBACKEND, which
    would draw nothing into the notebook), and the small-figure matplotlibrc; restored after."""
    saved = {k: os.environ.get(k) for k in ("TOKENWORTH_NOTEBOOK_FULL", "MPLBACKEND", "MATPLOTLIBRC")}
    os.environ.pop("TOKENWORTH_NOTEBOOK_FULL", None)
    os.environ.pop("MPLBACKEND", None)
    os.environ["MATPLOTLIBRC"] = str(RENDERED / "matplotlibrc")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def execute(script: Path, timeout: int = 600):  # -> nbformat.NotebookNode
    """The script as a notebook, executed from the repository's root, in the form that is committed."""
    import jupytext
    import nbclient

    nb = jupytext.read(script)
    with _kernel_environment():
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name=_kernel_name(),
                                resources={"metadata": {"path": str(REPO)}}).execute()
    for number, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{number}"  # stable ids: a refresh diffs by its outputs only
        cell["metadata"].pop("execution", None)
    nb.metadata.pop("jupytext", None)  # the pairing lives in notebooks/*.py, not in the rendered copy
    return nb


def _cells(nb) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source) for cell in nb.cells]


def figures(nb) -> list[int]:
    return [sum("image/png" in out.get("data", {}) for out in cell.get("outputs", [])) for cell in nb.cells]


def errors(nb) -> list[int]:
    return [n for n, cell in enumerate(nb.cells) if any(o.get("output_type") == "error" for o in cell.get("outputs", []))]


def staleness(executed, committed_path: Path) -> str | None:
    """Why the committed copy does not show ``executed`` (a fresh execution of its script), or None.

    Outputs are not compared (timings and last digits may differ between machines); the cells'
    sources are, and every cell must hold at least the figures the fresh run drew, and no error.
    """
    import nbformat

    name = committed_path.name
    if not committed_path.exists():
        return f"{name} is missing"
    committed = nbformat.read(committed_path, as_version=4)
    if _cells(committed) != _cells(executed):
        changed = [n for n, (a, b) in enumerate(zip(_cells(committed), _cells(executed))) if a != b]
        where = f"cell {changed[0]}" if changed else f"{len(committed.cells)} cells, the script has {len(executed.cells)}"
        return f"{name}'s cells differ from its script's ({where})"
    short = [n for n, (have, want) in enumerate(zip(figures(committed), figures(executed))) if have < want]
    if short:
        return f"{name} lacks the figure of cell {short[0]}"
    if errors(committed):
        return f"{name} holds an error in cell {errors(committed)[0]}"
    return None


def write(nb, path: Path) -> None:
    import nbformat

    nbformat.validate(nb)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def main(argv: list[str]) -> int:
    chosen = [SOURCES / a for a in argv] if argv else scripts()
    unknown = [str(p) for p in chosen if not p.is_file()]
    if unknown:
        print(f"scripts/notebooks.py: no such notebook script: {', '.join(unknown)}", file=sys.stderr)
        return 2
    for script in chosen:
        nb = execute(script)  # a cell that raises stops here (nbclient's CellExecutionError)
        write(nb, rendered_path(script))
        print(f"{rendered_path(script).relative_to(REPO)}: {rendered_path(script).stat().st_size // 1024} kB, "
              f"{sum(figures(nb))} figure(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
