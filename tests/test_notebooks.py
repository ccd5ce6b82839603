"""Execute each notebook (jupytext percent .py) at its small size, check its key outputs, and check that
the executed copy the API docs render (docs/api/notebooks/*.ipynb, committed) is current.

Each notebook ends by printing ``KEY_OUTPUTS {json}``; the test parses it and checks the
values are the ones the notebook promises (shapes, ranges, counts), so a notebook that runs
but computes nothing fails. The executed notebook is written to .test-logs/notebooks/; the committed
copy must have the same cells and every figure the fresh run drew (scripts/notebooks.py), else the test
fails with the command that refreshes it.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("jupytext")
pytest.importorskip("nbclient")
import nbformat  # noqa: E402  (after the skips: nbclient brings it)

from tests.conftest import DATA_DIR  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXECUTED = REPO / ".test-logs" / "notebooks"

needs_data = pytest.mark.skipif(not (Path(DATA_DIR) / "db_bench").exists(),
                                reason=f"DB task data not found under {DATA_DIR}")


def _renderer():
    spec = importlib.util.spec_from_file_location("tokenworth_render_notebooks", REPO / "scripts" / "notebooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = _renderer()


def execute(name: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("TOKENWORTH_DATA_DIR", DATA_DIR)
    script = render.SOURCES / name
    nb = render.execute(script)
    render.write(nb, EXECUTED / f"{script.stem}.ipynb")
    texts = [o.get("text", "") for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
             if o.get("output_type") == "stream"]
    key = [line for t in texts for line in t.splitlines() if line.startswith("KEY_OUTPUTS ")]
    assert key, f"{name} printed no KEY_OUTPUTS line"
    stale = render.staleness(nb, render.rendered_path(script))
    assert stale is None, f"{stale}: refresh the rendered notebooks with `{render.REFRESH}`"
    return dict(json.loads(key[-1][len("KEY_OUTPUTS "):]), _images=sum(render.figures(nb)))


@needs_data
def test_quickstart(monkeypatch):
    out = execute("01_quickstart.py", monkeypatch)
    assert out["n_tasks"] == 240 and out["n_agop"] >= 1  # the metric panel shows an AGOP update
    assert 0.0 < out["success_rate"] < 1.0
    assert 0 < out["bank_valid"] <= 64
    assert len(out["w"]) == 4 and len(out["metric_tail"]) == 5
    assert out["selected_id"] >= 0  # the bank is non-empty, so something is selected
    assert out["_images"] >= 1


@needs_data
@pytest.mark.slow(reason="notebook 02 executed whole: a 22-configuration sweep (67 s in the gate's last run)")
def test_sensitivity_sweep(monkeypatch):
    # This notebook's cost is running its one compiled sweep (22 configurations x 500 tasks), not compiling it: under
    # the gate's --xla_backend_optimization_level=0 (cheap compiles, slow code) its kernel spent ~30 CPU-s, ~21 at
    # XLA's default level. So its kernel alone runs at the default level (the gate's other XLA flags kept); what the
    # notebook computes and the assertions below are the same.
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_backend_optimization_level")]
    monkeypatch.setenv("XLA_FLAGS", " ".join(flags))
    out = execute("02_sensitivity_sweep.py", monkeypatch)
    assert out["n_configs"] == 22 and len(out["sr"]) == 22
    assert all(0.0 <= x <= 100.0 for x in out["sr"])
    assert len(set(round(x, 6) for x in out["sr"])) > 1  # the hyperparameters change something
    assert out["_images"] >= 1


@needs_data
def test_geometry_over_time(monkeypatch):
    out = execute("03_geometry_over_time.py", monkeypatch)
    assert out["n_agop"] >= 1  # AGOP acted within the short stream
    assert out["metric_block_mean"][0] != pytest.approx(1.0) or out["metric_block_mean"][-1] != pytest.approx(1.0)
    assert out["eta"] == sorted(out["eta"])  # the ramp only grows
    assert sum(v for k, v in out["admissions"].items() if k != "NOT_OFFERED") > 0
    assert max(out["bank_sizes"]) == out["capacity"] and out["evictions"] > 0  # the bank fills and evicts
    assert out["_images"] >= 2


@needs_data
def test_comparing_methods(monkeypatch):
    monkeypatch.delenv("TOKENWORTH_NOTEBOOK_RUN", raising=False)
    out = execute("04_comparing_methods.py", monkeypatch)
    assert out["rows"] == 3 * 2 * 120 and out["methods"] == ["memp", "rag", "standard"] and out["seeds"] == [0, 1]
    assert all(0.0 <= v <= 100.0 for v in out["sr"].values())
    # two seeds of the same tasks: the clustered interval is wider than the one that ignores it
    assert all(out["ci_width"][m] > out["naive_width"][m] for m in out["methods"])
    assert out["compared"] == ["rag", "memp"] and out["tests"] == ["cluster-t"]
    assert all(out["covers"]) and all(0 < m < 30 for m in out["mde"])
    # the forest plot over task orders, from the committed five-order comparison
    assert out["orders_methods"] == ["rag", "memrl", "memp", "tokenworth", "tokenworth+"]
    assert all(out["orders_mean_of_orders"])  # the difference over orders is the mean of the orders'
    assert out["_images"] >= 2


def test_every_script_has_a_rendered_copy_and_the_docs_list_it():
    scripts = render.scripts()
    assert [s.name for s in scripts] == ["01_quickstart.py", "02_sensitivity_sweep.py", "03_geometry_over_time.py",
                                         "04_comparing_methods.py"]
    page = (REPO / "docs" / "api" / "notebooks.rst").read_text()
    for script in scripts:
        assert render.rendered_path(script).exists(), f"{script.name}: run `{render.REFRESH}`"
        assert f"   notebooks/{script.stem}\n" in page, f"docs/api/notebooks.rst does not list {script.stem}"


def test_the_staleness_check_fails_on_an_edited_script_a_lost_figure_or_an_error(tmp_path):
    """Against the committed copy of 03 itself (two figures), with no kernel: each change is named."""
    path = render.rendered_path(render.SOURCES / "03_geometry_over_time.py")
    fresh = nbformat.read(path, as_version=4)
    assert render.staleness(fresh, path) is None

    edited = copy.deepcopy(fresh)
    edited.cells[2].source += "\n# one more line"
    assert render.staleness(edited, path) == f"{path.name}'s cells differ from its script's (cell 2)"

    lost = copy.deepcopy(fresh)
    figure_cell = next(n for n, f in enumerate(render.figures(fresh)) if f)
    for out in lost.cells[figure_cell].outputs:
        out.get("data", {}).pop("image/png", None)
    render.write(lost, tmp_path / path.name)
    assert render.staleness(fresh, tmp_path / path.name) == f"{path.name} lacks the figure of cell {figure_cell}"

    broken = copy.deepcopy(fresh)
    broken.cells[figure_cell].outputs.append(nbformat.v4.new_output("error", ename="ValueError", evalue="x", traceback=[]))
    render.write(broken, tmp_path / path.name)
    assert render.staleness(fresh, tmp_path / path.name) == f"{path.name} holds an error in cell {figure_cell}"

    assert render.staleness(fresh, tmp_path / "absent.ipynb") == "absent.ipynb is missing"
