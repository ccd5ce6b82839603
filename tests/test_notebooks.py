"""Execute each notebook (jupytext percent .py) at its small size and check its key outputs.

Each notebook ends by printing ``KEY_OUTPUTS {json}``; the test parses it and checks the
values are the ones the notebook promises (shapes, ranges, counts), so a notebook that runs
but computes nothing fails.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")

from tests.conftest import DATA_DIR  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"

pytestmark = pytest.mark.skipif(not (Path(DATA_DIR) / "db_bench").exists(),
                                reason=f"DB task data not found under {DATA_DIR}")


def _kernel_name() -> str:
    """``python3`` from this interpreter's ipykernel; install the kernelspec into the venv if missing."""
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" not in KernelSpecManager().find_kernel_specs():
        import subprocess

        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix"], check=True,
                       capture_output=True)
    return "python3"


def execute(name: str) -> dict:
    nb = jupytext.read(NOTEBOOKS / name)
    env_before = os.environ.get("TOKENWORTH_NOTEBOOK_FULL")
    os.environ.pop("TOKENWORTH_NOTEBOOK_FULL", None)
    backend_before = os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend must render the figures
    os.environ.setdefault("TOKENWORTH_DATA_DIR", DATA_DIR)
    try:
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name=_kernel_name(),
                                         resources={"metadata": {"path": str(REPO)}})
        client.execute()
    finally:
        if env_before is not None:
            os.environ["TOKENWORTH_NOTEBOOK_FULL"] = env_before
        if backend_before is not None:
            os.environ["MPLBACKEND"] = backend_before
    texts = [o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
             if o.get("output_type") == "stream"]
    images = sum(1 for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
                 if "image/png" in o.get("data", {}))
    key = [line for t in texts for line in t.splitlines() if line.startswith("KEY_OUTPUTS ")]
    assert key, f"{name} printed no KEY_OUTPUTS line"
    return dict(json.loads(key[-1][len("KEY_OUTPUTS "):]), _images=images)


def test_quickstart():
    out = execute("01_quickstart.py")
    assert out["n_tasks"] == 240 and out["n_agop"] >= 1  # the metric panel shows an AGOP update
    assert 0.0 < out["success_rate"] < 1.0
    assert 0 < out["bank_valid"] <= 64
    assert len(out["w"]) == 4 and len(out["metric_tail"]) == 5
    assert out["selected_id"] >= 0  # the bank is non-empty, so something is selected
    assert out["_images"] >= 1


def test_sensitivity_sweep():
    out = execute("02_sensitivity_sweep.py")
    assert out["n_configs"] == 22 and len(out["sr"]) == 22
    assert all(0.0 <= x <= 100.0 for x in out["sr"])
    assert len(set(round(x, 6) for x in out["sr"])) > 1  # the hyperparameters change something
    assert out["_images"] >= 1


def test_geometry_over_time():
    out = execute("03_geometry_over_time.py")
    assert out["n_agop"] >= 1  # AGOP acted within the short stream
    assert out["metric_block_mean"][0] != pytest.approx(1.0) or out["metric_block_mean"][-1] != pytest.approx(1.0)
    assert out["eta"] == sorted(out["eta"])  # the ramp only grows
    assert sum(v for k, v in out["admissions"].items() if k != "NOT_OFFERED") > 0
    assert max(out["bank_sizes"]) == out["capacity"] and out["evictions"] > 0  # the bank fills and evicts
    assert out["_images"] >= 2
