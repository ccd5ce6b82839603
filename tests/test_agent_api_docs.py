"""The harness's plugin interface reference (docs/agent-api): builds with warnings as errors, documents what a
plugin implements, and every public name of ``tokenworth_agent.plugin`` (`make agent-docs` builds the same)."""

from __future__ import annotations

import dataclasses
import html
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("agent-api")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(REPO / "docs" / "agent-api"), str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {path.stem: path.read_text() for path in out.glob("*.html")}


def test_the_plugin_interface_reference_builds_and_says_what_each_part_receives(pages) -> None:
    assert "tokenworth_agent.plugin.Benchmark" in pages["benchmarks"]
    for field in ("make_environment", "compact_memory", "sim_reply", "options", "setup_check"):
        assert field in pages["benchmarks"], field
    assert "tokenworth_agent.plugin.MemoryPolicy" in pages["methods"] and "retrieve" in pages["methods"]
    assert "generate" in pages["backbones"] and "PluginError" in pages["plugins"]
    # what a writer needed the source for: the limit keys, the presets, the data folders, the simulator's contract,
    # a method's constructor keywords, StepResult's statuses, and the promise of what a release may change
    text = {name: " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).replace("\u2019", "'").split())
            for name, page in pages.items()}
    for words in ("max_output_tokens (O_max), max_rounds (J_max), max_memories (K_max) and max_injected_chars (L_max) "
                  "are required", "aux_call_cap", "db, os, kg (Table A1), bigcodebench, alfworld",
                  "a plugin names one, else it is refused when loaded", "benchmark_dir(self.benchmark, data_dir, folders)",
                  "episode.success is the simulator's decision", "counts the model calls from 0",
                  "must make the environment's judge pass", "round_limit", "budget_exhausted", "invalid_action"):
        assert words in text["benchmarks"], words
    assert "cls(env, budget, seed, harness=harness, **parameters)" in text["methods"]
    assert "A minor release" in text["index"] and "A major release" in text["index"]
    # the analysis API: load_run with its columns, the one estimator, the comparisons
    results = pages["results"]
    for name in ("tokenworth_agent.results.runs.load_run", "injected_memory_ids", "tokenworth_agent.results.estimate.rate",
                 "tokenworth_agent.results.estimate.paired", "tokenworth_agent.results.compare.compare_runs"):
        assert name in results, name


def test_every_public_name_of_the_plugin_module_is_documented(pages) -> None:
    """Each name of ``tokenworth_agent.plugin.__all__`` is on a page under its public path; each method, property
    and dataclass field of its classes too, and each method has a docstring (undocumented ones render nothing)."""
    import tokenworth_agent.plugin as public

    anchors = {a for html in pages.values() for a in re.findall(r'id="(tokenworth_agent\.plugin\.[^"]+)"', html)}
    missing = []
    for name in public.__all__:
        found = getattr(public, name)
        missing += [name] if f"tokenworth_agent.plugin.{name}" not in anchors else []
        if not (inspect.isclass(found) and found.__module__.startswith("tokenworth_agent")) or found.__name__ != name:
            continue  # an alias's members are documented under the class's own name
        methods = {member: value for member, value in vars(found).items() if not member.startswith("_")
                   and (inspect.isfunction(value) or isinstance(value, (property, classmethod, staticmethod)))}
        fields = [f.name for f in dataclasses.fields(found)] if dataclasses.is_dataclass(found) else []
        missing += [f"{name}.{m}" for m in [*methods, *fields] if f"tokenworth_agent.plugin.{name}.{m}" not in anchors]
        for member, value in methods.items():
            function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            missing += [f"{name}.{member} (no docstring)"] if not (function.__doc__ or "").strip() else []
    assert missing == [], f"undocumented in docs/agent-api: {missing}"
