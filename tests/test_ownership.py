"""Each part of the controller owns its state: only the module that defines a NamedTuple state type
builds it or replaces its fields (the controller composes ``State`` from what the parts return).

Checked on the source, with the AST: every ``X(...)`` construction and ``x._replace(field=...)``
in ``tokenworth_jax`` must name fields of a type defined in the same module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tokenworth_jax"
# the state types of the parts (and the controller's own), by the module that owns them
OWNED = {
    "bank.py": {"Bank"},
    "base_scorer.py": {"BaseScorer"},
    "residual.py": {"Residual"},
    "worth_cache.py": {"WorthCache", "Geometry"},
    "plus/mode.py": {"PlusState", "PlusPending"},
    "plus/actions.py": {"ActionModel"},
    "controller.py": {"State", "OpenTask", "Clock"},
    "protocol.py": {"Progress"},
    "krr.py": {"Predictor"},
    "ring.py": {"Ring"},
}


def _namedtuples(tree: ast.Module) -> dict[str, set[str]]:
    """``{class name: field names}`` of the NamedTuples a module defines."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", getattr(b, "attr", "")) == "NamedTuple"
                                                  for b in node.bases):
            out[node.name] = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)}
    return out


def _trees() -> dict[str, ast.Module]:
    return {str(p.relative_to(PACKAGE)): ast.parse(p.read_text()) for p in PACKAGE.rglob("*.py")
            if p.name != "reference_numpy.py"}


STATE_FIELDS = {}
for module, tree in _trees().items():
    for name, fields in _namedtuples(tree).items():
        if any(name in owned for owned in OWNED.values()):
            STATE_FIELDS[name] = (module, fields)


def test_the_ownership_table_names_real_types():
    assert set(STATE_FIELDS) == set().union(*OWNED.values())
    for module, names in OWNED.items():
        for name in names:
            assert STATE_FIELDS[name][0] == module, name


@pytest.mark.parametrize("module", sorted(_trees()))
def test_no_module_builds_or_writes_another_parts_state(module):
    tree = _trees()[module]
    own_fields = set().union(*(STATE_FIELDS[n][1] for n in OWNED.get(module, ())), set())
    foreign = {n for n, (m, _) in STATE_FIELDS.items() if m != module}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in foreign:
            pytest.fail(f"{module}:{node.lineno} builds {func.id}, which {STATE_FIELDS[func.id][0]} owns")
        if isinstance(func, ast.Attribute) and func.attr == "_replace":
            names = {k.arg for k in node.keywords if k.arg}
            # a _replace of a field no owned type has is a write into another part's state
            strays = names - own_fields
            state_like = strays & set().union(*(f for _, f in STATE_FIELDS.values()))
            # Spec and the host's own tuples are not state; only state fields count
            spec_fields = {"capacity", "scorer", "mode", "dim", "dtype", "worth_chunk"}
            assert not (state_like - spec_fields), (
                f"{module}:{node.lineno} replaces {sorted(state_like)} of a state it does not own")
