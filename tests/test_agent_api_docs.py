"""The harness's plugin interface reference (docs/agent-api): builds with warnings as errors, and documents
what a plugin implements (`make agent-docs` builds the same)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_plugin_interface_reference_builds_without_a_warning(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(REPO / "docs" / "agent-api"), str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    pages = {name: (tmp_path / f"{name}.html").read_text() for name in ("benchmarks", "methods", "backbones", "plugins")}
    # what each kind of plugin implements and receives is on its page
    assert "tokenworth_agent.benchmarks.base.Benchmark" in pages["benchmarks"]
    for field in ("make_environment", "compact_memory", "sim_reply", "options", "setup_check"):
        assert field in pages["benchmarks"], field
    assert "tokenworth_agent.policies.base.MemoryPolicy" in pages["methods"] and "retrieve" in pages["methods"]
    assert "generate" in pages["backbones"] and "PluginError" in pages["plugins"]
    # the analysis API: load_run with its columns, the one estimator, the comparisons
    results = (tmp_path / "results.html").read_text()
    for name in ("tokenworth_agent.results.runs.load_run", "injected_memory_ids", "tokenworth_agent.results.estimate.rate",
                 "tokenworth_agent.results.estimate.paired", "tokenworth_agent.results.compare.compare_runs"):
        assert name in results, name
