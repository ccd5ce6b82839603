"""Each benchmark is one folder and one object; the rest of the harness names none of them (docs/plugins.md).

Read from the source (AST), so it holds for code paths no run takes:

* every built-in benchmark is a folder of ``tokenworth_agent/benchmarks/`` registered by one entry point of
  agent/pyproject.toml, whose ``BENCHMARK`` is a :class:`Benchmark` of that name;
* no module outside a benchmark's folder imports from it (the entry point is the one way in);
* the core, the engine, the CLI and every other shared package hold no branch or option of one benchmark:
  no comparison with a benchmark's name, no name of a benchmark's own options (``kg_``, ``bcb_``, ...).
  LifelongAgentBench's loader (``tasks/lab.py``) is shared by DB, OS and KG, and keyed by them.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from tokenworth_agent.benchmarks.base import Benchmark
from tokenworth_agent.core import plugins

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "agent" / "tokenworth_agent"
FOLDERS = PACKAGE / "benchmarks"
ENTRY_POINTS = tomllib.loads((REPO / "agent" / "pyproject.toml").read_text())["project"]["entry-points"]
BUILTINS = ENTRY_POINTS["tokenworth.benchmarks"]  # name -> "tokenworth_agent.benchmarks.<folder>:BENCHMARK"
SHARED_KEYED_BY_BENCHMARK = {PACKAGE / "tasks" / "lab.py"}
OWN_PREFIXES = ("kg_", "bcb_", "bigcodebench_", "alfworld_", "os_env_", "db_bench")


def folder_of(value: str) -> str:
    return value.split(":")[0].split(".")[2]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, package: Path = PACKAGE) -> list[tuple[int, str]]:
    """Every module a file imports (absolute, relative resolved) and every "module:attribute" string it holds."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path, package).split(".")
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_package else here[:-1]
                base = base[:len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("tokenworth_agent."):
            found.append((node.lineno, node.value.split(":")[0]))
    return found


def sources(package: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def test_each_builtin_benchmark_is_one_folder_and_one_registered_object() -> None:
    assert set(BUILTINS) == {"db", "os", "kg", "bigcodebench", "alfworld"}
    folders = {p.name for p in FOLDERS.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == {folder_of(v) for v in BUILTINS.values()}, "a folder without its entry point, or the reverse"
    for name, value in BUILTINS.items():
        assert value == f"tokenworth_agent.benchmarks.{folder_of(value)}:BENCHMARK"
        bench = plugins.benchmark(name)
        assert isinstance(bench, Benchmark) and bench.name == name
        assert plugins.describe("benchmark", name).distribution == "tokenworth-agent"


def import_offences(package: Path = PACKAGE) -> list[str]:
    folders = {folder_of(v) for v in BUILTINS.values()}
    home = package / "benchmarks"
    offences = []
    for path in sources(package):
        mine = path.relative_to(home).parts[0] if home in path.parents else None
        for line, module in imported(path, package):
            parts = module.split(".")
            if parts[:2] == ["tokenworth_agent", "benchmarks"] and len(parts) > 2 and parts[2] in folders \
                    and parts[2] != mine:
                offences.append(f"{path.relative_to(package.parent)}:{line} imports {module}")
    return offences


def name_offences(package: Path = PACKAGE) -> list[str]:
    names = set(BUILTINS)
    home = package / "benchmarks"
    offences = []
    for path in sources(package):
        if home in path.parents or path in SHARED_KEYED_BY_BENCHMARK:
            continue
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(package.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                    for value in values:
                        if isinstance(value, ast.Constant) and value.value in names:
                            offences.append(f"{where}:{node.lineno} compares with the benchmark name {value.value!r}")
            elif isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                if len(names & set(keys)) > 1:
                    offences.append(f"{where}:{node.lineno} holds a table keyed by benchmark names {sorted(keys)}")
            elif isinstance(node, (ast.Name, ast.Attribute, ast.arg, ast.keyword, ast.FunctionDef)):
                name = getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "arg", None) \
                    or getattr(node, "name", None)
                if name and name.startswith(OWN_PREFIXES):
                    offences.append(f"{where}:{node.lineno} names {name}, a benchmark's own")
    return offences


def test_no_module_outside_a_benchmark_folder_imports_from_it() -> None:
    offences = import_offences()
    assert not offences, "\n".join(offences)


def test_the_shared_code_holds_no_branch_or_option_of_one_benchmark() -> None:
    offences = name_offences()
    assert not offences, "\n".join(offences)


@pytest.mark.parametrize("offence, scan", [('if env == "kg":\n    pass\n', name_offences),
                                           ('SETS = {"db": 1, "os": 2}\n', name_offences),
                                           ("def f(kg_parser=None):\n    pass\n", name_offences),
                                           ("from tokenworth_agent.benchmarks.kg.env import KGEnvironment\n",
                                            import_offences),
                                           ('ENTRY = "tokenworth_agent.benchmarks.db.env:DBEnvironment"\n',
                                            import_offences)])
def test_the_scans_see_an_offence(tmp_path, offence, scan) -> None:
    """Each scan fails on a shared module that names a benchmark in one of the ways it looks for."""
    package = tmp_path / "tokenworth_agent"
    (package / "core").mkdir(parents=True)
    (package / "core" / "planted.py").write_text(offence)
    assert scan(package) and all("planted.py:1 " in line for line in scan(package))
