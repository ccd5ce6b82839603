"""Methods, benchmarks and backbones as entry-point plugins (tokenworth_agent.core.plugins, docs/plugins.md).

Fake distributions are written as ``*.dist-info`` folders on ``sys.path`` (what an installed wheel leaves),
so discovery runs exactly as for a real install: a name two distributions claim is refused naming both,
a plugin that fails to import is named with its distribution and the cause, and the built-ins keep working.
The example plugins of examples/plugins/ run end to end in the wheel lane (scripts/wheels.sh harness), and
broken ones built as real distributions in tests/test_plugin_isolation.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

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
    assert plugins.load("method", "standard").__name__ == "StandardPolicy"  # the others keep working


def test_a_plugin_cannot_take_a_builtins_place(site) -> None:
    """A plugin registering `rag` (a method) or `db` (a benchmark): the built-in keeps its name and works; the
    plugin's entry is the one refused, its row saying so, and --help's listing warns it once."""
    fake_distribution(site, "shadow-plugin", {"tokenworth.methods": {"rag": "json:loads"},
                                              "tokenworth.benchmarks": {"db": "json:loads"}}, version="0.4")
    assert Registry.from_plugins("method").factory("rag").__name__ == "RAGPolicy"
    assert plugins.benchmark("db").name == "db" and plugins.describe("benchmark", "db").builtin
    assert "db" in plugins.names("benchmark") and "rag" in plugins.names("method")
    rows = {(r["kind"], r["name"], r["distribution"]): r for r in plugins.listing()}
    for kind in ("method", "benchmark"):
        name = {"method": "rag", "benchmark": "db"}[kind]
        assert rows[(kind, name, "tokenworth-agent")]["status"] == "ok"
        row = rows[(kind, name, "shadow-plugin")]
        assert row["status"] == "clash" and row["detail"].startswith(f"reuses the name of the built-in {kind} of "
                                                                     "tokenworth-agent "), row
        assert "register it under another name in shadow-plugin, or uninstall shadow-plugin" in row["detail"]
    warnings: list[str] = []
    assert "db" in plugins.benchmarks(None, warn=warnings.append)
    assert warnings == [f"benchmark 'db' (json:loads) of shadow-plugin 0.4 {rows[('benchmark', 'db', 'shadow-plugin')]['detail']}"]


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
    assert row["status"] == "broken" and row["distribution"] == "broken-plugin"
    assert row["detail"].startswith("failed to import: ModuleNotFoundError")


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
    module.write_text(  # DB's parts will do: they are never used
        "import dataclasses\n"
        "from tokenworth_agent.benchmarks.db import BENCHMARK as DB\n"
        "BENCHMARK = dataclasses.replace(DB, name='silent', sim_reply=None, sim_p0_range=None, controller_preset='db')\n")
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


# ------------------------------------------------------------------------- a Benchmark checked as it is made
def _db() -> Any:
    return plugins.benchmark("db")


@pytest.mark.parametrize("changes, expected", [
    (dict(limits=dict(o_max=16, j_max=1, k_max=1, l_max=200)),
     "limits are keyed by the budget's field names, not --grid's short names: write max_output_tokens for o_max, "
     "max_rounds for j_max, max_memories for k_max, max_injected_chars for l_max"),
    (dict(limits=dict(max_output_tokens=16, max_rounds=1, max_memories=1, max_injected_chars=200, rounds=3)),
     "limits has no key 'rounds'; the limits are max_output_tokens, max_rounds, bank_capacity, max_memories, "
     "max_injected_chars, per_call_cap, aux_call_cap"),
    (dict(limits=dict(max_output_tokens=16, max_rounds=1)), "limits lacks max_memories, max_injected_chars"),
    (dict(limits=dict(max_output_tokens=16.5, max_rounds=1, max_memories=1, max_injected_chars=200)),
     "limits['max_output_tokens'] must be an integer, got float 16.5"),
    (dict(limits=dict(max_output_tokens=0, max_rounds=1, max_memories=1, max_injected_chars=200)),
     "limits: Budget.max_output_tokens must be >= 1, got 0"),
    (dict(tasks="str", make_environment="nope"),
     "tasks must be a task source with `benchmark` (a DataFolder) and `load(data_dir, folders)`, got str 'str'; "
     "make_environment must be a function called as make_environment(budget, options, instructions), got str 'nope'"),
    (dict(make_environment=lambda budget: None),
     "make_environment is called as make_environment(budget, options, instructions), but"),
    (dict(compact_memory=lambda question, turns: None),
     "compact_memory is called as compact_memory(question, turns, abstract=...)"),
    (dict(sim_reply=None), "sim_reply and sim_p0_range come together"),
    (dict(sim_p0_range=(0.9, 0.1)), "sim_p0_range must be (lo, hi) with 0 <= lo <= hi <= 1"),
    (dict(name="Units"), "name must be lower-case letters, digits, - and _ (what --env takes), got 'Units'"),
    (dict(instructions=None), "instructions must be the instruction text"),
    (dict(description=3), "description must be text"),
    (dict(controller_preset=""), "controller_preset must be a preset's name"),
])
def test_a_benchmark_is_checked_field_by_field_as_it_is_made(changes, expected) -> None:
    import dataclasses

    from tokenworth_agent.plugin import BenchmarkError

    with pytest.raises(BenchmarkError) as refused:
        dataclasses.replace(_db(), **changes)
    assert "\n" not in str(refused.value) and expected in str(refused.value), str(refused.value)


@pytest.mark.parametrize("option, expected", [
    (("x-y", str, "a"), "options: parameter name 'x-y' is not a Python name"),
    (("x", list, None), "options: parameter 'x' has type <class 'list'>; use one of str, int, float, bool, pathlib.Path"),
    (("x", int, "3"), "option 'x': its default '3' is not of its type, int"),
    (("x", bool, 0), "option 'x': its default 0 is not of its type, bool"),
])
def test_a_benchmarks_options_are_checked(option, expected) -> None:
    import dataclasses

    from tokenworth_agent.plugin import BenchmarkError, BenchmarkOption

    with pytest.raises(BenchmarkError, match=re.escape(expected)):
        dataclasses.replace(_db(), options=(BenchmarkOption(*option, help="h"),))


def test_a_preset_that_does_not_exist_is_one_line_naming_the_presets() -> None:
    import dataclasses

    from tokenworth_agent.plugin import BenchmarkError

    unset = dataclasses.replace(_db(), name="units")  # controller_preset left at its default: the name, no preset
    with pytest.raises(BenchmarkError, match=r"^benchmark 'units': controller_preset is not set, and 'units' is no "
                                             r"controller preset: set controller_preset to the library preset "
                                             r"TokenWorth runs with \(its hyperparameters and B_max\), one of "
                                             r"alfworld, bigcodebench, db, kg, os$"):
        unset.check_preset()
    with pytest.raises(BenchmarkError, match="controller_preset 'dbx' is no controller preset; use one of alfworld"):
        dataclasses.replace(unset, controller_preset="dbx").check_preset()
    dataclasses.replace(unset, controller_preset="kg").check_preset()  # a preset that exists


def test_an_entry_that_is_not_what_its_kind_must_be_is_refused_at_load(site) -> None:
    (site / "shapes_plugin.py").write_text("import types\nNAMESPACE = types.SimpleNamespace(name='ns')\n"
                                           "MAPPING = {'name': 'mapping'}\n"
                                           "def function(env, budget, seed=0, **kw):\n    return None\n")
    fake_distribution(site, "shapes-plugin", {"tokenworth.benchmarks": {"ns": "shapes_plugin:NAMESPACE",
                                                                        "mapping": "shapes_plugin:MAPPING"},
                                              "tokenworth.methods": {"function": "shapes_plugin:function"}})
    for kind, name, shown in (("benchmark", "ns", "a SimpleNamespace"), ("benchmark", "mapping", "a dict"),
                              ("method", "function", "a function")):
        with pytest.raises(plugins.PluginError) as refused:
            plugins.load(kind, name)
        assert str(refused.value).startswith(f"{kind} {name!r} (shapes_plugin:") and "shapes-plugin 1.0 is " + shown \
            in str(refused.value), str(refused.value)
    assert plugins.benchmark("db").name == "db" and plugins.load("method", "rag").name == "rag"


# ------------------------------------------------------------------------- the one public module
def _tokenworth_imports(path: Path) -> list[tuple[str, list[str]]]:
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tokenworth_agent":
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names if alias.name.split(".")[0] == "tokenworth_agent"]
    return found


def test_the_example_plugins_import_only_the_public_module() -> None:
    import tokenworth_agent.plugin as public

    repo = Path(__file__).resolve().parents[1]
    files = sorted([*(repo / "examples" / "plugins").rglob("*.py"), *(repo / "tests" / "plugins").rglob("*.py")])
    assert len(files) >= 10
    for path in files:
        for module, imported in _tokenworth_imports(path):
            assert module == "tokenworth_agent.plugin", f"{path.relative_to(repo)} imports {module}"
            assert set(imported) <= set(public.__all__), (path, set(imported) - set(public.__all__))


def test_the_public_module_exports_every_name_a_plugin_needs() -> None:
    """Each name exists, and what a plugin writer reaches for is there (the names the example plugins and the
    built-in benchmarks pass around)."""
    import tokenworth_agent.plugin as public

    assert len(public.__all__) == len(set(public.__all__))
    for name in public.__all__:
        assert hasattr(public, name), name
    assert {"Benchmark", "BenchmarkOption", "TaskSource", "Task", "DataFolder", "DataError", "Environment",
            "StepResult", "Judgement", "Turn", "Step", "Budget", "Episode", "SimParams", "MemoryPolicy",
            "StoreBackedPolicy", "MemoryStore", "Memory", "Outcome", "Backbone", "Generation", "Conversation",
            "PluginError"} <= set(public.__all__)
    assert "compatib" in public.__doc__ and "minor release" in public.__doc__ and "major release" in public.__doc__


def test_a_method_parameter_default_of_the_wrong_type_is_refused_at_load(site) -> None:
    """A default that is not of its declared type is checked when the method is loaded, as a benchmark option's is:
    `tokenworth plugins` lists it broken with its one line, and asking for it is that line (it failed mid-run)."""
    (site / "typo_policy.py").write_text(
        "from tokenworth_agent.plugin import Parameter, StoreBackedPolicy\n\n\n"
        "class TypoPolicy(StoreBackedPolicy):\n    name = 'typo'\n"
        "    parameters = (Parameter('k', int, 'three', 'memories retrieved'),)\n\n"
        "    def __init__(self, env, budget, seed=0, *, k='three', **kwargs):\n"
        "        super().__init__(env, budget, seed, **kwargs)\n")
    fake_distribution(site, "typo-plugin", {"tokenworth.methods": {"typo": "typo_policy:TypoPolicy"}}, version="0.2")
    with pytest.raises(plugins.PluginError) as refused:
        Registry.from_plugins("method").factory("typo")
    line = str(refused.value)
    assert "\n" not in line and line.startswith("method 'typo' (typo_policy:TypoPolicy) of typo-plugin 0.2 ")
    assert "parameter 'k': its default 'three' is not of its type, int; fix it in typo-plugin" in line, line
    [row] = [r for r in plugins.listing() if r["name"] == "typo"]
    assert row["status"] == "broken" and "its default 'three' is not of its type, int" in row["detail"]
    assert plugins.load("method", "memrl").name == "memrl"  # the built-ins' declarations pass the same check


def test_help_offers_only_the_benchmarks_and_methods_that_can_be_used(site, monkeypatch) -> None:
    """`--env` and `--methods` in `run --help` (and `sweep`, `data fetch`) list the usable plugins, never one that is
    refused when asked for (broken, or a name two plugins claim); `tokenworth plugins` still lists each with its line."""
    import typer
    from click.testing import CliRunner as ClickRunner

    from tokenworth_agent.cli import app
    from tokenworth_agent.policies import registry

    (site / "offered_plugin.py").write_text("from tokenworth_agent.policies.rag import RAGPolicy\n\n\n"
                                            "class Fine(RAGPolicy):\n    name = 'finemethod'\n")
    fake_distribution(site, "offered-plugin", {
        "tokenworth.methods": {"finemethod": "offered_plugin:Fine", "brokenmethod": "no_such_module_here:X",
                               "twinmethod": "offered_plugin:Fine"},
        "tokenworth.benchmarks": {"brokenbench": "no_such_module_here:BENCHMARK"}})
    fake_distribution(site, "twin-plugin", {"tokenworth.methods": {"twinmethod": "offered_plugin:Fine"}})
    plugins.refresh()
    monkeypatch.setattr(registry, "POLICIES", Registry.from_plugins("method", order=registry.METHOD_NAMES))
    command = typer.main.get_command(app)
    for args in (["run", "--help"], ["sweep", "--help"], ["data", "fetch", "--help"]):
        assert ClickRunner().invoke(command, args).exit_code == 0, args
    helps = {(c, p.name): p.help for c in ("run", "sweep") for p in command.commands[c].params}
    helps["fetch", "env"] = next(p.help for p in command.commands["data"].commands["fetch"].params if p.name == "env")
    for key in (("run", "env"), ("sweep", "env"), ("fetch", "env")):
        assert "db" in helps[key] and "brokenbench" not in helps[key], helps[key]
    methods = helps["run", "methods"]
    assert "standard, rag, memrl" in methods and "finemethod" in methods, methods
    assert "brokenmethod" not in methods and "twinmethod" not in methods, methods
    statuses = {r["name"]: r["status"] for r in plugins.listing() if r["distribution"] == "offered-plugin"}
    assert statuses == {"finemethod": "ok", "brokenmethod": "broken", "twinmethod": "clash", "brokenbench": "broken"}


def test_the_docs_listing_is_in_the_order_tokenworth_plugins_prints() -> None:
    """docs/plugins.md's `tokenworth plugins` example: its rows come in the listing's order (by kind, each kind's
    built-ins by name, then its plugins by name), and its built-in rows in the order the listing gives them."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()
    block = docs.split("$ tokenworth plugins\n", 1)[1].split("```", 1)[0].splitlines()
    rows = [line.split()[:3] for line in block[1:] if line.strip() != "..."]
    kinds = list(plugins.GROUPS)
    key = [(kinds.index(kind), distribution != plugins.HOME, name) for name, kind, distribution in rows]
    assert len(rows) >= 10 and key == sorted(key), rows
    listed = [(r["name"], r["kind"]) for r in plugins.listing() if r["distribution"] == plugins.HOME]
    shown = [(name, kind) for name, kind, distribution in rows if distribution == plugins.HOME]
    assert [row for row in listed if row in shown] == shown and set(shown) <= set(listed)
