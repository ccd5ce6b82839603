"""The layering as a checked contract (docs/layout.md).

Every import statement counts, wherever it stands: at module level, inside a function, under
``if TYPE_CHECKING``; so do the registries' lazy ``"module:attribute"`` entries
(:class:`tokenworth_agent.core.registry.Registry`), which import their module on first use. A module may import
only modules of lower layers, or of its own layer (except across the independent standalone products),
and the import graph has no loop at all.

Decision: an AST test rather than import-linter. import-linter reads ``import`` statements only,
so it cannot see a registry entry, and it would be one more dependency for one table.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("tokenworth_agent", "tokenworth_jax", "tokenworth_bench")
# Where each package's folder stands (docs/layout.md): the library at the root, the harness under agent/,
# the benchmark programs under bench/.
HOMES = {"tokenworth_jax": Path("."), "tokenworth_agent": Path("agent"), "tokenworth_bench": Path("bench")}

# Top layer first: one package per layer (docs/layout.md). A module belongs to the first entry that is it
# or one of its packages; the package root ``agent`` (its __init__) matches only itself. Members of an
# INDEPENDENT layer may not import each other.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("cli", ("tokenworth_agent.cli",)),
    ("application", ("tokenworth_agent.experiment",)),
    ("tracking", ("tokenworth_agent.tracking",)),
    ("results", ("tokenworth_agent.results",)),
    # the public plugin interface: re-exports what a plugin needs from the layers below; no layer imports it
    ("plugin interface", ("tokenworth_agent.plugin",)),
    ("policies", ("tokenworth_agent.policies",)),
    # each benchmark's folder, and the interface they share; reached through entry points, imported by no layer
    ("benchmarks", ("tokenworth_agent.benchmarks",)),
    ("backbone registry", ("tokenworth_agent.backbones.registry",)),
    ("environments", ("tokenworth_agent.envs",)),
    ("simulator", ("tokenworth_agent.sim",)),
    ("backbones", ("tokenworth_agent.backbones",)),
    ("memory", ("tokenworth_agent.memory",)),
    ("tasks", ("tokenworth_agent.tasks",)),
    ("storage", ("tokenworth_agent.storage",)),
    ("core", ("tokenworth_agent.core", "tokenworth_agent")),
    ("standalone products", ("tokenworth_agent.sandbox", "tokenworth_agent.sqlite_mysql")),
]
# The controller library, top first: each part (bank, base scorer, residual, probes, worth cache)
# sits below the scorers and modes that use it, the controller composes a scorer and a mode it is
# given, and only the preset table (and the root's exports) names TokenWorth+ (tests below).
JAX_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("library root", ("tokenworth_jax",)),
    ("host wrappers", ("tokenworth_jax.host", "tokenworth_jax.checked", "tokenworth_jax.presets",
                       "tokenworth_jax.checkpoint", "tokenworth_jax.host_program")),
    ("controller", ("tokenworth_jax.controller",)),
    ("modes", ("tokenworth_jax.plus", "tokenworth_jax.modes")),
    ("scorers", ("tokenworth_jax.scorers",)),
    ("parts", ("tokenworth_jax.bank", "tokenworth_jax.base_scorer", "tokenworth_jax.residual", "tokenworth_jax.probes",
               "tokenworth_jax.worth_cache", "tokenworth_jax.lifecycle", "tokenworth_jax.schedule",
               "tokenworth_jax.scoring")),
    ("primitives", ("tokenworth_jax.config", "tokenworth_jax.features", "tokenworth_jax.krr", "tokenworth_jax.kernels",
                    "tokenworth_jax.agop", "tokenworth_jax.ring", "tokenworth_jax.pytree", "tokenworth_jax.batching",
                    "tokenworth_jax.featurize", "tokenworth_jax.bookkeeping", "tokenworth_jax.inputs",
                    "tokenworth_jax.protocol", "tokenworth_jax._version", "tokenworth_jax._doc")),
    ("independent reference", ("tokenworth_jax.reference_numpy",)),
]
TABLES = {"tokenworth_agent": LAYERS, "tokenworth_jax": JAX_LAYERS}
INDEPENDENT = frozenset({"standalone products"})
REGISTRY_ENTRY = re.compile(r"^((?:tokenworth_agent|tokenworth_jax|tokenworth_bench)(?:\.\w+)+):\w+$")

Edge = tuple[str, int, str]  # (imported module, line, how: "import", "local import", "registry entry")


# ------------------------------------------------------------------------- reading the imports
def module_files(root: Path = REPO) -> dict[str, Path]:
    """Every module of the three packages, by dotted name."""
    modules = {}
    for package in PACKAGES:
        home = root / HOMES[package]
        for path in sorted((home / package).rglob("*.py")):
            parts = list(path.relative_to(home).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` denotes: itself, else its nearest enclosing module of the tree (None: external)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _nested(tree: ast.Module) -> set[int]:
    """Ids of the import nodes that stand inside a function or class body."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner.update(id(child) for child in ast.walk(node) if isinstance(child, (ast.Import, ast.ImportFrom)))
    return inner


def module_imports(module: str, source: str, modules: dict[str, Path], is_package: bool) -> set[Edge]:
    """What ``module`` imports of the tree: every import statement, and every registry entry."""
    tree = ast.parse(source)
    inner = _nested(tree)
    package = module if is_package else module.rpartition(".")[0]
    edges: set[Edge] = set()

    def add(name: str, node: ast.AST, how: str) -> None:
        target = _resolve(name, modules)
        if target is not None and target != module:
            edges.add((target, node.lineno, how))  # type: ignore[attr-defined]

    for node in ast.walk(tree):
        how = "local import" if id(node) in inner else "import"
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, how)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:  # `from pkg import sub` imports the submodule
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base, node, how)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = REGISTRY_ENTRY.match(node.value)
            if match:
                add(match.group(1), node, "registry entry")
    return edges


def import_graph(root: Path = REPO) -> dict[str, set[Edge]]:
    modules = module_files(root)
    return {name: module_imports(name, path.read_text(encoding="utf-8"), modules, path.name == "__init__.py")
            for name, path in modules.items()}


# ------------------------------------------------------------------------- the rules
def _table(module: str) -> list[tuple[str, tuple[str, ...]]]:
    return TABLES.get(module.split(".")[0], [])


def layer_of(module: str) -> int | None:
    root = module.split(".")[0]
    for rank, (_, members) in enumerate(_table(module)):
        for member in members:
            if module == member or (member != root and module.startswith(member + ".")):
                return rank
    return None


def _member(module: str, rank: int) -> str:
    return next(m for m in _table(module)[rank][1] if module == m or module.startswith(m + "."))


def violations(graph: dict[str, set[Edge]]) -> list[str]:
    """Every import that breaks the layering, as one readable line each (empty: the contract holds)."""
    found = []
    for module, edges in sorted(graph.items()):
        root = module.split(".")[0]
        if root == "tokenworth_jax":
            found += [f"{module} -> {t} (line {line}): tokenworth_jax imports nothing of the harness or benches"
                      for t, line, _ in sorted(edges) if t.split(".")[0] in ("tokenworth_agent", "tokenworth_bench")]
        if root not in TABLES:
            continue
        layers = TABLES[root]
        rank = layer_of(module)
        if rank is None:
            found.append(f"{module}: in no layer; place it in tests/test_layers.py LAYERS and docs/layout.md")
            continue
        for target, line, how in sorted(edges):
            if root == "tokenworth_agent" and target.split(".")[0] == "tokenworth_bench":
                found.append(f"{module} -> {target} ({how}, line {line}): agent never imports bench")
            if target.split(".")[0] != root:
                continue
            other = layer_of(target)
            if other is None:
                continue  # reported as unplaced on its own
            name = layers[rank][0]
            if other < rank:
                found.append(f"{module} -> {target} ({how}, line {line}): {name} may not import "
                             f"{layers[other][0]}, a higher layer")
            elif other == rank and name in INDEPENDENT and _member(module, rank) != _member(target, rank):
                found.append(f"{module} -> {target} ({how}, line {line}): the {name} are independent of each other")
    return found


def cycles(graph: dict[str, set[Edge]]) -> list[list[str]]:
    """The import loops (strongly connected components of more than one module), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in {t for t, _, _ in graph.get(node, ())}:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


# ------------------------------------------------------------------------- the contract
@pytest.fixture(scope="module")
def graph() -> dict[str, set[Edge]]:
    return import_graph()


def test_the_layering_holds(graph) -> None:
    assert violations(graph) == []


def test_no_package_has_an_import_loop(graph) -> None:
    assert cycles(graph) == []


def test_every_harness_and_library_module_has_a_layer(graph) -> None:
    assert [m for m in graph if m.split(".")[0] in TABLES and layer_of(m) is None] == []


def test_the_reader_sees_local_imports_and_registry_entries(graph) -> None:
    """The edges the contract relies on are read: a function-local import and a lazy registry entry."""
    assert any(t == "tokenworth_agent.experiment.sweep" and how == "local import" for t, _, how in graph["tokenworth_agent.experiment.plan"])
    assert ("tokenworth_agent.experiment.distributed.ray_executor", "registry entry") in {
        (t, how) for t, _, how in graph["tokenworth_agent.experiment.executor"]}
    assert any(t == "tokenworth_agent.benchmarks.db.env" and how == "local import" for t, _, how in graph["tokenworth_agent.benchmarks.db"])


def test_the_rules_catch_what_they_forbid() -> None:
    """Hand-made graphs: each breach is reported, and a loop behind a local import is a loop."""
    modules = {m: Path(m) for m in ("tokenworth_agent.sim.aux", "tokenworth_agent.sim.backbone", "tokenworth_agent.policies.aux_text",
                                    "tokenworth_agent.experiment.runner", "tokenworth_agent.experiment.sweep", "tokenworth_agent.newthing", "tokenworth_bench.x",
                                    "tokenworth_jax.y", "tokenworth_agent.tasks", "tokenworth_agent.sandbox.box", "tokenworth_agent.sqlite_mysql")}
    upward = module_imports("tokenworth_agent.sim.aux", "from tokenworth_agent.policies import aux_text\n", modules, False)
    local_loop = module_imports("tokenworth_agent.sim.aux", "def f():\n    from tokenworth_agent.sim.backbone import g\n", modules, False)
    back = module_imports("tokenworth_agent.sim.backbone", "from . import aux\n", modules, False)
    registry = module_imports("tokenworth_agent.tasks", 'X = {"a": "tokenworth_agent.experiment.runner:Thing"}\n', modules, False)
    graph = {"tokenworth_agent.sim.aux": upward | local_loop, "tokenworth_agent.sim.backbone": back, "tokenworth_agent.tasks": registry,
             "tokenworth_agent.sandbox.box": module_imports("tokenworth_agent.sandbox.box", "import tokenworth_agent.sqlite_mysql\n", modules, False),
             "tokenworth_agent.newthing": set(),
             "tokenworth_jax.y": module_imports("tokenworth_jax.y", "import tokenworth_agent.tasks\n", modules, False),
             "tokenworth_agent.experiment.sweep": module_imports("tokenworth_agent.experiment.sweep", "import tokenworth_bench.x\n", modules, False)}
    found = "\n".join(violations(graph))
    assert "tokenworth_agent.sim.aux -> tokenworth_agent.policies.aux_text (import, line 1): simulator may not import policies" in found
    assert "tokenworth_agent.tasks -> tokenworth_agent.experiment.runner (registry entry, line 1): tasks may not import application" in found
    assert ("tokenworth_agent.sandbox.box -> tokenworth_agent.sqlite_mysql (import, line 1): the standalone products are independent"
            in found)
    assert "agent.newthing: in no layer" in found
    assert "tokenworth_jax.y -> tokenworth_agent.tasks (line 1): tokenworth_jax imports nothing" in found
    assert "tokenworth_agent.experiment.sweep -> tokenworth_bench.x (import, line 1): agent never imports bench" in found
    lib = {m: Path(m) for m in ("tokenworth_jax.bank", "tokenworth_jax.controller")}
    upward_lib = {"tokenworth_jax.bank": module_imports("tokenworth_jax.bank", "from .controller import State\n",
                                                        lib, False)}
    assert ("tokenworth_jax.bank -> tokenworth_jax.controller (import, line 1): parts may not import controller, "
            "a higher layer") in violations(upward_lib)
    assert ("tokenworth_agent.sim.backbone", 2, "local import") in local_loop
    assert cycles(graph) == [["tokenworth_agent.sim.aux", "tokenworth_agent.sim.backbone"]]


# ------------------------------------------------------------------------- the core knows no extension
# Only these modules may import tokenworth_jax.plus: the preset table (which names TokenWorth+ as a
# method) and the root (its public exports). Everything else sees TokenWorth+ as a Mode value.
NAMES_EXTENSIONS = frozenset({"tokenworth_jax", "tokenworth_jax.presets"})


def extension_imports(graph: dict[str, set[Edge]]) -> list[str]:
    """Every core module that imports the TokenWorth+ package, as a readable line."""
    return [f"{module} -> {target} (line {line}): only {sorted(NAMES_EXTENSIONS)} may name TokenWorth+"
            for module, edges in sorted(graph.items())
            if module.startswith("tokenworth_jax") and not module.startswith("tokenworth_jax.plus")
            and module not in NAMES_EXTENSIONS
            for target, line, _ in sorted(edges) if target.startswith("tokenworth_jax.plus")]


def test_no_core_module_imports_the_extension(graph) -> None:
    assert extension_imports(graph) == []


def test_no_core_module_mentions_the_extension() -> None:
    """Beyond imports: no core source names TokenWorth+, its fields or its inputs (comments included)."""
    words = re.compile(r"TokenWorth\+|tokenworth\+|\.plus\b|\bplus[=_(]|PlusHParams|PlusState|PlusShapes|"
                       r"word_dim|action_dim|word_vectors|action_vectors|ranking-research")
    root = REPO / "tokenworth_jax"
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(REPO)
        name = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        if name.startswith("tokenworth_jax.plus") or name in NAMES_EXTENSIONS or name.endswith("reference_numpy"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if words.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert found == []


def test_the_extension_rules_catch_what_they_forbid() -> None:
    modules = {m: Path(m) for m in ("tokenworth_jax.controller", "tokenworth_jax.plus.mode", "tokenworth_jax.presets")}
    graph = {"tokenworth_jax.controller": module_imports("tokenworth_jax.controller",
                                                         "from .plus.mode import PlusState\n", modules, False),
             "tokenworth_jax.presets": module_imports("tokenworth_jax.presets", "from .plus.mode import plus\n",
                                                     modules, False)}
    assert extension_imports(graph) == ["tokenworth_jax.controller -> tokenworth_jax.plus.mode (line 1): only "
                                        "['tokenworth_jax', 'tokenworth_jax.presets'] may name TokenWorth+"]
