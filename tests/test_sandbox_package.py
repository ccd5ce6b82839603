"""The sandbox package ships its set-up script and PID-1 program as package data."""

from __future__ import annotations

import fnmatch
import tomllib
from importlib import resources
from pathlib import Path

import pytest

import tokenworth_agent.sandbox as sandbox_pkg

REPO = Path(__file__).resolve().parent.parent


def test_data_files_are_declared_for_installed_packages():
    """Every non-Python file of the harness's packages must be listed in agent/pyproject.toml's
    package-data, or its wheel (a non-editable install) would lack it (vllm_api.json once was)."""
    for root, package in ((REPO / "agent", "tokenworth_agent"), (REPO / "bench", "tokenworth_bench")):
        declared = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
        if package == "tokenworth_agent":
            assert "holder.py" in declared["tokenworth_agent.sandbox"]  # run as a program inside the sandbox
        for path in (root / package).rglob("*"):
            rel = path.relative_to(root)
            if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in rel.parts:
                continue
            owner = ".".join(rel.parts[:-1])
            assert any(fnmatch.fnmatch(path.name, pat) for pat in declared.get(owner, [])), \
                f"{rel} is not declared as package data of {owner}"


def test_resources_are_readable_through_importlib():
    files = resources.files("tokenworth_agent.sandbox")
    assert "\nset -eu\n" in files.joinpath("setup.sh").read_text()
    holder = files.joinpath("holder.py").read_text()
    compile(holder, "holder.py", "exec")  # valid Python for the sandbox's python3
    assert 'if __name__ == "__main__":' in holder  # importing it must not run PID 1's loop


def test_seccomp_policy_compiles_and_missing_libseccomp_is_a_clear_error(monkeypatch):
    import sys

    from tokenworth_agent.sandbox import SandboxError, seccomp

    program = seccomp.compile_filter()
    assert program and len(program) % 8 == 0  # struct sock_filter[], 8 bytes each
    assert {"add_key", "keyctl", "unshare", "mount", "kexec_load", "bpf", "perf_event_open", "ptrace"} <= seccomp.denied_names()
    seccomp.compile_filter.cache_clear()
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # as if the package were missing
    try:
        assert "libseccomp2" in seccomp.unavailable_reason()
        with pytest.raises(SandboxError, match="pyseccomp"):
            seccomp.compile_filter()
    finally:
        seccomp.compile_filter.cache_clear()
