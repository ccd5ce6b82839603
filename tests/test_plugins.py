"""Methods, benchmarks and backbones as entry-point plugins (tokenworth_agent.core.plugins, docs/plugins.md).

Fake distributions are written as ``*.dist-info`` folders on ``sys.path`` (what an installed wheel leaves),
so discovery runs exactly as for a real install: a name two distributions claim is refused naming both,
a plugin that fails to import is named with its distribution and the cause, and the built-ins keep working.
The example plugins of examples/plugins/ run end to end in the wheel lane (scripts/wheels.sh plugins).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenworth_agent.core import plugins
from tokenworth_agent.core.registry import Registry


def fake_distribution(root: Path, name: str, groups: dict[str, dict[str, str]], version: str = "1.0") -> None:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n" for group, entries in groups.items()))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path for fake distributions; discovery is forgotten before and after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.refresh()
    yield tmp_path
    monkeypatch.undo()
    plugins.refresh()


def test_the_builtins_are_entry_points_of_the_harness() -> None:
    rows = plugins.listing()
    assert {(r["kind"], r["name"]) for r in rows if r["distribution"] == "tokenworth-agent"} >= {
        ("method", "standard"), ("method", "tokenworth+"), ("benchmark", "db"), ("benchmark", "alfworld"),
        ("backbone", "sim")}
    assert all(r["status"] == "ok" for r in rows if r["distribution"] == "tokenworth-agent")


def test_two_plugins_with_one_name_are_refused_naming_both(site) -> None:
    fake_distribution(site, "first-plugin", {"tokenworth.methods": {"mine": "json:dumps"}})
    fake_distribution(site, "second-plugin", {"tokenworth.methods": {"mine": "json:loads"}})
    fake_distribution(site, "shadow-plugin", {"tokenworth.methods": {"rag": "json:loads"}})
    with pytest.raises(plugins.PluginError) as refused:
        plugins.load("method", "mine")
    line = str(refused.value)
    assert "\n" not in line and "first-plugin" in line and "second-plugin" in line
    with pytest.raises(plugins.PluginError, match="tokenworth-agent .*shadow-plugin"):  # a built-in's name too
        Registry.from_plugins("method").factory("rag")
    assert plugins.load("method", "standard").__name__ == "StandardPolicy"  # the others keep working


def test_a_plugin_that_fails_to_import_is_one_line_and_the_builtins_keep_working(site) -> None:
    fake_distribution(site, "broken-plugin", {"tokenworth.benchmarks": {"broken": "no_such_module_here:BENCHMARK"}},
                      version="0.3")
    with pytest.raises(plugins.PluginError) as failed:
        plugins.benchmark("broken")
    line = str(failed.value)
    assert "\n" not in line and "'broken'" in line and "broken-plugin 0.3" in line and "ModuleNotFoundError" in line
    warnings: list[str] = []
    loaded = plugins.loadable("benchmark", warn=warnings.append)
    assert "db" in loaded and "broken" not in loaded and warnings == [line]
    assert plugins.benchmark("db").name == "db"
    [row] = [r for r in plugins.listing() if r["name"] == "broken"]
    assert row["status"].startswith("broken: ModuleNotFoundError") and row["distribution"] == "broken-plugin"


def test_tokenworth_plugins_lists_name_kind_distribution_version(site) -> None:
    fake_distribution(site, "listed-plugin", {"tokenworth.backbones": {"echo": "json:dumps"}}, version="2.5")
    code = ("import sys; from tokenworth_agent.cli import app; sys.argv = ['tokenworth', 'plugins']; app()")
    import subprocess

    env = {"PYTHONPATH": str(site)}
    import os

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["NAME", "KIND", "DISTRIBUTION", "VERSION"]
    assert any(line.split()[:5] == ["echo", "backbone", "listed-plugin", "2.5", "ok"] for line in lines)
    assert any(line.split()[:3] == ["kg", "benchmark", "tokenworth-agent"] for line in lines)


def test_a_benchmark_without_simulated_replies_refuses_the_sim_backbone(site, tmp_path) -> None:
    """--backbone sim with a benchmark that brings no replies: one error line, rc 2, nothing written."""
    module = site / "silent_bench.py"
    module.write_text(
        "from tokenworth_agent.benchmarks.base import Benchmark\n"
        "from tokenworth_agent.benchmarks.db.tasks import SOURCE\n"  # any task source will do: it is never read
        "BENCHMARK = Benchmark(name='silent', tasks=SOURCE, instructions='x', make_environment=None,\n"
        "                      compact_memory=None, limits=dict(max_output_tokens=8, max_rounds=1, max_memories=1,\n"
        "                      max_injected_chars=100, bank_capacity=8))\n")
    fake_distribution(site, "silent-plugin", {"tokenworth.benchmarks": {"silent": "silent_bench:BENCHMARK"}})
    from tokenworth_agent.cli import app

    result = CliRunner().invoke(app, ["run", "--env", "silent", "--methods", "standard", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "the silent benchmark brings no simulated replies" in result.output and not (tmp_path / "o").exists()


def test_a_plugin_method_runs_shows_and_is_tracked_like_a_builtin(site, tmp_path, data_dir) -> None:
    """A method from another distribution (here RAG under a name of its own): run, the summary table, `tokenworth
    show`, and --track tensorboard's event files for its stream; a class whose `name` is not its entry's is refused."""
    pytest.importorskip("tensorboard")
    (site / "mine_policy.py").write_text("from tokenworth_agent.policies.rag import RAGPolicy\n\n\n"
                                         "class MinePolicy(RAGPolicy):\n    name = 'mine'\n")
    fake_distribution(site, "mine-plugin", {"tokenworth.methods": {"mine": "mine_policy:MinePolicy",
                                                                   "misnamed": "tokenworth_agent.policies.rag:RAGPolicy"}})
    import os
    import subprocess

    def tokenworth(*args: str) -> subprocess.CompletedProcess:
        code = f"import sys; sys.path.insert(0, {str(site)!r}); from tokenworth_agent.cli import app; app()"
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600,
                              cwd=tmp_path, env={**os.environ, "TOKENWORTH_DATA_DIR": data_dir})

    done = tokenworth("run", "--methods", "mine,standard", "--limit", "4", "--out", "run", "--track", "tensorboard",
                      "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| mine |" in (tmp_path / "run" / "summary.md").read_text()
    assert list((tmp_path / "run" / "mine").rglob("events.out.tfevents.*")), "no TensorBoard events for the plugin"
    shown = tokenworth("show", "run", "--method", "mine", "--task", "1")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout.startswith("mine · task 1 (db-1)")  # its records carry its name
    misnamed = tokenworth("run", "--methods", "misnamed", "--limit", "2", "--out", "other", "--no-progress")
    assert misnamed.returncode == 2 and "error: method 'misnamed'" in misnamed.stderr, misnamed.stderr[-2000:]
