"""scripts/gpu-smoke.sh and bench/tokenworth_bench/gpu_smoke.py where there is no GPU: the CPU path runs and
archives its numbers; the GPU path refuses in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_script_runs_on_cpu_and_leaves_one_archive(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(["bash", "scripts/gpu-smoke.sh", "--cpu", "--tiny", "--configs", "4", "--tasks", "12"],
                          cwd=REPO, capture_output=True, text=True, timeout=400,
                          env={**os.environ, "OUT": str(out), "PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout + done.stderr
    assert [p.name for p in out.iterdir()] == ["gpu_smoke.tgz"]
    with tarfile.open(out / "gpu_smoke.tgz") as archive:
        names = {Path(n).name for n in archive.getnames()}
        result = json.load(archive.extractfile("./gpu_smoke.json"))
    assert {"gpu_smoke.json", "gpu_smoke.md", "log.txt"} <= names
    assert result["ok"] is True and result["sweep"]["configs"] == 4 and result["sweep"]["config_tasks_per_s"] > 0
    assert result["controller"]["tasks"] == 12


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine: the real check applies")
def test_without_a_gpu_it_refuses_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tokenworth_bench.gpu_smoke", "--out", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: nvidia-smi reports no GPU")
