"""Broken plugins cost nothing to anyone who does not ask for them, and each misuse is one line (docs/plugins.md,
"What the harness checks").

Two distributions of tests/plugins/, built as wheels and installed non-editable (``pip install --target``) into
folders of their own that each command's ``PYTHONPATH`` puts first, as a user's site-packages would hold them:
``tokenworth-test-broken`` registers one entry per misuse (a benchmark that is a namespace, a dict, has wrong
fields, ``--grid``'s limit names, no preset, another name, a failing import; a method reusing ``rag``, failing to
import, misnamed; a backbone failing to import) beside one valid benchmark, ``words``; ``tokenworth-test-shadow-db``
registers a valid benchmark as ``db`` (a plugin never takes a built-in's place: the built-in is used). Nothing is installed into the test's own environment, so no other test
sees them. Every entry logs its import (``$TOKENWORTH_TEST_IMPORT_LOG``): a command that does not ask for a
plugin must not import it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine  # builds the broken plugins' wheels and installs them (make test-quick leaves it out)

PLUGINS = Path(__file__).resolve().parent / "plugins"
BROKEN, SHADOW = "tokenworth-test-broken", "tokenworth-test-shadow-db"
RELEASE = "tokenworth-test-broken 0.3.1"
# each broken benchmark entry, and the words its one line must hold
BROKEN_BENCHMARKS = {
    "namespace": "is a SimpleNamespace, not a tokenworth_agent.plugin.Benchmark value",
    "mapping": "is a dict, not a tokenworth_agent.plugin.Benchmark value",
    "badfields": "tasks must be a task source with `benchmark` (a DataFolder) and `load(data_dir, folders)`, got str",
    "gridlimits": "write max_output_tokens for o_max, max_rounds for j_max, max_memories for k_max",
    "nopreset": "controller_preset is not set, and 'nopreset' is no controller preset: set controller_preset",
    "alias": "names itself 'realname': the name must be the one it is registered under",
    "unimportable": "failed to import: ModuleNotFoundError: No module named 'tokenworth_test_no_such_dependency'",
}


def _pip(*args: object) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *map(str, args)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def sites(tmp_path_factory) -> dict[str, Path]:
    """name -> the folder the distribution is installed in (its wheel, built from tests/plugins/<name>)."""
    root = tmp_path_factory.mktemp("plugin-sites")
    # built as pip builds a user's install; with the environment's own setuptools and wheel where it has both (an
    # isolated build environment costs seconds more each)
    own = all(importlib.util.find_spec(name) is not None for name in ("setuptools", "wheel"))
    isolation = ["--no-build-isolation"] if own else []
    # from copies, so the build (build/, *.egg-info) never writes into the checkout
    sources = [shutil.copytree(PLUGINS / name, root / "src" / name) for name in (BROKEN, SHADOW)]
    _pip("wheel", "-q", "--no-deps", *isolation, "-w", root / "wheels", *sources)
    found = {}
    for name in (BROKEN, SHADOW):
        [wheel] = (root / "wheels").glob(name.replace("-", "_") + "-*.whl")
        _pip("install", "-q", "--no-deps", "--target", root / name, wheel)
        found[name] = root / name
    return found


def tokenworth(*args: str, sites: list[Path], cwd: Path, data_dir: str, log: Path | None = None
               ) -> subprocess.CompletedProcess:
    path = [*map(str, sites), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "TOKENWORTH_DATA_DIR": data_dir,
           "TOKENWORTH_TEST_IMPORT_LOG": str(log or ""), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "tokenworth_agent.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def imported(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_tokenworth_plugins_lists_each_broken_plugin_with_its_reason(sites, tmp_path, data_dir) -> None:
    done = tokenworth("plugins", sites=[sites[SHADOW], sites[BROKEN]], cwd=tmp_path, data_dir=data_dir)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
    header, *lines = done.stdout.splitlines()
    assert header.split() == ["NAME", "KIND", "DISTRIBUTION", "VERSION", "STATUS", "DETAIL"]
    rows = {}
    for line in lines:
        name, kind, distribution, version, status, *detail = re.split(r"\s{2,}", line.strip(), maxsplit=5)
        rows[(name, kind, distribution)] = (version, status, detail[0] if detail else "")
    for name, reason in BROKEN_BENCHMARKS.items():
        version, status, detail = rows[(name, "benchmark", BROKEN)]
        assert (version, status) == ("0.3.1", "broken") and reason in detail, (name, detail)
    for name, kind, reason in (("unimportable_method", "method", "failed to import: ModuleNotFoundError"),
                               ("misnamed_method", "method", "names itself 'something_else'"),
                               ("unimportable_backbone", "backbone", "failed to import: ModuleNotFoundError")):
        assert rows[(name, kind, BROKEN)][1:] == ("broken", rows[(name, kind, BROKEN)][2]) and \
            reason in rows[(name, kind, BROKEN)][2], name
    # a built-in's name a plugin registers: the built-in's row is ok, the plugin's says it is refused and why
    assert rows[("rag", "method", "tokenworth-agent")][1] == "ok" and rows[("db", "benchmark", "tokenworth-agent")][1] == "ok"
    for key in (("rag", "method", BROKEN), ("db", "benchmark", SHADOW)):
        assert rows[key][1] == "clash" and rows[key][2].startswith(f"reuses the name of the built-in {key[1]} of "
                                                                   "tokenworth-agent "), rows[key]
    # the valid plugin beside them, and every built-in, are listed as usable (a benchmark with its description)
    assert rows[("words", "benchmark", BROKEN)][1:] == ("ok", "Three questions answered with one word")
    builtins = {key: row for key, row in rows.items() if key[2] == "tokenworth-agent"}
    assert len(builtins) >= 19 and all(row[1] == "ok" for row in builtins.values())


def test_help_lists_the_benchmarks_without_trusting_them(sites, tmp_path, data_dir) -> None:
    """--help of `tokenworth`, `run` and `sweep` works, shows the valid plugin's own flags, and names each refused
    benchmark in one warning line, printed once (each warning was printed twice on every command)."""
    for command in ([], ["run"], ["sweep"]):
        done = tokenworth(*command, "--help", sites=[sites[BROKEN]], cwd=tmp_path, data_dir=data_dir)
        assert done.returncode == 0, done.stderr[-3000:]
        warnings = done.stderr.splitlines()
        assert all(w.startswith("warning: benchmark ") and RELEASE in w for w in warnings), warnings
        preset_checked = {"nopreset"}  # the preset is checked when asked for: --help needs only the options
        for name, reason in BROKEN_BENCHMARKS.items():
            named = [w for w in warnings if w.startswith(f"warning: benchmark {name!r}")]
            assert len(named) == (name not in preset_checked), (command, name, warnings)
            assert all(reason in w for w in named)
        if command:
            assert "Benchmark words (--env words)" in done.stdout and "--words-strict" in done.stdout
            assert "--kg-parser" in done.stdout  # the built-ins' own flags stay
            # --env offers the valid plugin, none of the refused ones; --methods none of the refused methods
            offered = " ".join(done.stdout.split())
            # the built-ins, then the plugins that pass every check, words among them (the wheel lane also has the
            # example plugins installed: arith is offered there too)
            assert re.search(r"Task stream(\(s\))?: alfworld, bigcodebench, db, kg, os, ([a-z_]+, )*words[,.]", offered), offered
            assert not any(f"{name}," in offered or f"{name}." in offered for name in BROKEN_BENCHMARKS)
            if command == ["run"]:
                assert "unimportable_method" not in offered and "misnamed_method" not in offered


def test_runs_that_do_not_ask_for_a_broken_plugin_never_import_it(sites, tmp_path, data_dir) -> None:
    log = tmp_path / "imported.txt"
    run = ["run", "--methods", "standard", "--limit", "2", "--no-progress"]
    for args in ([*run, "--out", "db"], ["show", "db", "--task", "1"], ["kg", "--help"]):
        done = tokenworth(*args, sites=[sites[BROKEN]], cwd=tmp_path, data_dir=data_dir, log=log)
        assert done.returncode == 0, (args, done.stderr[-3000:])
        assert "warning" not in done.stderr and "error" not in done.stderr, (args, done.stderr)
        assert imported(log) == [], args
    # the valid plugin beside them runs, with its own flag; only then is its distribution imported
    done = tokenworth("run", "--env", "words", "--methods", "standard", "--limit", "3", "--words-strict",
                      "--no-progress", "--out", "words", sites=[sites[BROKEN]], cwd=tmp_path, data_dir=data_dir, log=log)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warning" not in done.stderr and imported(log) == ["tokenworth_test_broken"]
    assert (tmp_path / "words" / "standard" / "records.jsonl").read_text().count("\n") == 3


@pytest.mark.parametrize("args, expected", [
    *[(["run", "--env", name, "--methods", "standard"], reason) for name, reason in BROKEN_BENCHMARKS.items()],
    (["sweep", "--env", "gridlimits"], BROKEN_BENCHMARKS["gridlimits"]),
    (["data", "fetch", "--env", "badfields"], BROKEN_BENCHMARKS["badfields"]),
    (["alias", "serve"], BROKEN_BENCHMARKS["alias"]),  # a benchmark's own commands
    (["run", "--env", "words", "--methods", "unimportable_method"], "failed to import: ModuleNotFoundError"),
    (["run", "--env", "words", "--methods", "misnamed_method"], "set its class attribute `name` to 'misnamed_method'"),
    (["run", "--env", "words", "--backbone", "unimportable_backbone", "--methods", "standard"],
     "failed to import: ModuleNotFoundError"),
], ids=lambda x: "-".join(x) if isinstance(x, list) else None)
def test_each_misuse_is_one_error_line_naming_the_distribution(sites, tmp_path, data_dir, args, expected) -> None:
    done = tokenworth(*args, "--limit", "1", "--out", "out", sites=[sites[BROKEN]], cwd=tmp_path, data_dir=data_dir) \
        if args[0] in ("run", "sweep") else tokenworth(*args, sites=[sites[BROKEN]], cwd=tmp_path, data_dir=data_dir)
    [line] = done.stderr.splitlines()
    assert done.returncode == 2 and line.startswith("error: ") and RELEASE in line and expected in line, done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_a_builtin_name_a_plugin_reuses_stays_the_builtins(sites, tmp_path, data_dir) -> None:
    """`db` and `rag` registered by plugins: the default run's `--env db` and `rag` are the built-ins and run (a
    plugin made `--env db` unusable, a bare `tokenworth run` included); the plugins' entries are never imported;
    every other command and benchmark keeps working."""
    both = [sites[SHADOW], sites[BROKEN]]
    log = tmp_path / "imported.txt"
    done = tokenworth("run", "--methods", "standard,rag", "--limit", "1", "--out", "db", "--no-progress", sites=both,
                      cwd=tmp_path, data_dir=data_dir, log=log)
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr[-3000:]
    assert (tmp_path / "db" / "rag" / "records.jsonl").read_text().count("\n") == 1 and imported(log) == []
    for args in (["--help"], ["run", "--help"], ["run", "--env", "words", "--methods", "standard,rag", "--limit", "2",
                                                 "--no-progress", "--out", "words"]):
        done = tokenworth(*args, sites=both, cwd=tmp_path, data_dir=data_dir)
        assert done.returncode == 0, (args, done.stderr[-3000:])
