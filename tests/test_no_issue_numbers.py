"""Code and docs say what they refer to, never an issue's number alone (which means nothing to a reader of the code,
and nothing at all outside this project's tracker); the CHANGELOG alone may name issues."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ISSUE = re.compile(r"issue #?[0-9]+", re.I)


def test_no_file_but_the_changelog_names_an_issue_number() -> None:
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("git is not installed")
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    found = []
    for name in listed.stdout.splitlines():
        path = REPO / name
        if name == "CHANGELOG.md" or not path.is_file() or path.suffix not in (".py", ".md", ".rst", ".toml", ".txt",
                                                                                ".sh", ".cfg", ".yaml", ".yml", ""):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in ISSUE.finditer(text)]
    assert found == [], "say what the issue was about instead:\n" + "\n".join(found)
