"""The README's controller example runs as written."""

import contextlib
import io
import os
import re

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too


def test_readme_controller_example_runs():
    text = open(os.path.join(REPO, "README.md")).read()
    code = re.search(r"## The controller API.*?```python\n(.*?)```", text, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().strip() == "ADMITTED_ROOM"
