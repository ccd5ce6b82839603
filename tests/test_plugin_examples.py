"""The two example plugins of examples/plugins/, installed non-editable from their own folders, run where a
built-in runs: the example method against tokenworth and rag on DB, the example benchmark with the paper's
methods, a sweep, a kill -9 and resume, and a two-node Ray run with both (docs/plugins.md).

`make test` runs this file in the harness wheel's venv (scripts/wheels.sh harness), where both examples are
installed with pip from their folders and TOKENWORTH_PLUGIN_EXAMPLES=required: there a missing example fails.
Elsewhere (the main suite's .venv, which does not install them) it is skipped.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLES = ("tokenworth-example-method", "tokenworth-example-benchmark")


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


if not all(_installed(n) for n in EXAMPLES):
    if os.environ.get("TOKENWORTH_PLUGIN_EXAMPLES") == "required":
        raise RuntimeError(f"TOKENWORTH_PLUGIN_EXAMPLES=required but not installed: "
                           f"{[n for n in EXAMPLES if not _installed(n)]}")
    pytest.skip("the example plugins are installed in the wheel lane (scripts/wheels.sh harness)",
                allow_module_level=True)

from tokenworth_agent.results.record import comparable, read_records  # noqa: E402



def tokenworth(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run([sys.executable, "-m", "tokenworth_agent.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return done


def streams(out: Path) -> list[str]:
    return sorted(str(p.parent.relative_to(out)) for p in out.rglob("records.jsonl"))


def assert_same_records(got: Path, reference: Path) -> None:
    names = streams(reference)
    assert names and streams(got) == names
    for name in names:
        assert comparable(read_records(got / name / "records.jsonl")) == \
            comparable(read_records(reference / name / "records.jsonl")), name


def test_both_are_listed_with_their_distribution_and_version(tmp_path) -> None:
    rows = [line.split()[:5] for line in ok(tokenworth("plugins", cwd=tmp_path)).stdout.splitlines()]
    assert ["overlap", "method", "tokenworth-example-method", "0.1.0", "ok"] in rows
    assert ["arith", "benchmark", "tokenworth-example-benchmark", "0.1.0", "ok"] in rows
    assert all("site-packages" in str(metadata.distribution(n).locate_file("")) for n in EXAMPLES)  # not editable


def test_the_example_method_against_tokenworth_and_rag_on_db(tmp_path) -> None:
    ok(tokenworth("run", "--methods", "overlap,tokenworth,rag", "--limit", "40", "--out", "db", "--no-progress",
                  cwd=tmp_path))
    assert streams(tmp_path / "db") == ["overlap", "rag", "tokenworth"]
    table = (tmp_path / "db" / "summary.md").read_text()
    assert all(f"| {m} |" in table for m in ("overlap", "tokenworth", "rag"))
    records = read_records(tmp_path / "db" / "overlap" / "records.jsonl")
    assert len(records) == 40 and any(r.injected_memory_ids for r in records)  # it does inject memories
    shown = ok(tokenworth("show", "db", "--method", "overlap", "--task", "5", cwd=tmp_path)).stdout
    assert "overlap" in shown


def test_the_example_benchmark_with_the_papers_methods(tmp_path) -> None:
    help_text = ok(tokenworth("run", "--help", cwd=tmp_path)).stdout
    assert "Benchmark arith" in help_text and "--arith-strict" in help_text
    ok(tokenworth("run", "--env", "arith", "--out", "arith", "--no-progress", cwd=tmp_path))
    assert streams(tmp_path / "arith") == sorted(["standard", "rag", "memrl", "memp", "tokenworth"])
    records = read_records(tmp_path / "arith" / "tokenworth" / "records.jsonl")
    assert len(records) == 60 and {r.env for r in records} == {"arith"}
    assert 0 < sum(r.reward for r in records) < 60
    config = json.loads((tmp_path / "arith" / "config.json").read_text())
    assert config["harness"]["arith_strict"] is False  # its own option entered the identity
    ok(tokenworth("show", "arith", "--method", "tokenworth", "--task", "3", cwd=tmp_path))
    again = tokenworth("run", "--env", "arith", "--out", "arith", "--arith-strict", "--no-progress", cwd=tmp_path)
    assert again.returncode == 2 and "different settings" in again.stderr  # another identity is not resumed


def test_a_sweep_with_the_example_benchmark(tmp_path) -> None:
    ok(tokenworth("sweep", "--env", "arith", "--grid", "eta_max=0.05,0.1", "--limit", "20", "--out", "sweep",
                  "--no-progress", cwd=tmp_path))
    assert len(streams(tmp_path / "sweep")) == 2


def test_the_example_methods_parameter_is_listed_and_swept(tmp_path) -> None:
    """overlap declares min_overlap: `tokenworth plugins overlap` prints it, `--grid overlap.min_overlap=...` runs
    one overlap stream per value (rag once), each constructed with its value, and arith's own option is swept."""
    listed = ok(tokenworth("plugins", "overlap", cwd=tmp_path)).stdout.splitlines()
    assert listed[0].startswith("overlap: method of tokenworth-example-method 0.1.0")
    assert listed[2].split()[:3] == ["min_overlap", "float", "0.2"]
    ok(tokenworth("run", "--methods", "overlap,rag", "--grid", "overlap.min_overlap=0.05,0.9", "--limit", "30",
                  "--out", "grid", "--no-progress", cwd=tmp_path))
    assert streams(tmp_path / "grid") == ["overlap@overlap.min_overlap=0.05", "overlap@overlap.min_overlap=0.9", "rag"]
    low, high = (read_records(tmp_path / "grid" / f"overlap@overlap.min_overlap={v}" / "records.jsonl")
                 for v in ("0.05", "0.9"))
    assert low[0].stream["hparams"] == {"min_overlap": 0.05}
    injected = [sum(bool(r.injected_memory_ids) for r in records) for records in (low, high)]
    assert injected[0] > injected[1]  # a stricter overlap injects less: the constructor got the value
    ok(tokenworth("sweep", "--env", "arith", "--method", "overlap", "--grid", "arith_strict=true,false", "--limit",
                  "10", "--out", "strict", "--no-progress", cwd=tmp_path))
    assert streams(tmp_path / "strict") == ["overlap@arith_strict=False", "overlap@arith_strict=True"]


def test_kill_9_and_resume_with_both(tmp_path) -> None:
    args = ["run", "--env", "arith,db", "--methods", "overlap,tokenworth", "--limit", "40", "--no-progress"]
    ok(tokenworth(*args, "--out", "reference", cwd=tmp_path))
    env = {**os.environ}
    proc = subprocess.Popen([sys.executable, "-m", "tokenworth_agent.cli", *args, "--out", "killed"], cwd=tmp_path,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    try:
        while True:
            done = sum(p.read_bytes().count(b"\n") for p in (tmp_path / "killed").rglob("records.jsonl"))
            if done >= 30:
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert done < 160  # killed part-way
    ok(tokenworth(*args, "--out", "killed", cwd=tmp_path))
    assert_same_records(tmp_path / "killed", tmp_path / "reference")


def test_a_two_node_ray_run_with_both(tmp_path) -> None:
    pytest.importorskip("ray")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.ray_nodes import RayNodes

    args = ["run", "--env", "arith,db", "--methods", "overlap,tokenworth,rag", "--seeds", "0,1", "--limit", "8",
            "--no-progress"]
    nodes = RayNodes(cpus=(1, 1))
    try:
        ok(tokenworth(*args, "--out", "local", cwd=tmp_path))
        nodes.ready()
        ok(tokenworth(*args, "--out", "ray", "--executor", "ray", "--ray-address", nodes.address, cwd=tmp_path))
    finally:
        nodes.close()
    assert_same_records(tmp_path / "ray", tmp_path / "local")
    ran_on = {json.loads(p.read_text())["node_id"] for p in (tmp_path / "ray").rglob("node.json")}
    assert ran_on == set(nodes.node_ids[:2])  # both nodes ran streams
