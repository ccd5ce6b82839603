"""The library's types: mypy passes on tokenworth_jax (pyproject.toml's [tool.mypy]), and a user's code is
checked through it: a wrong argument type in a call made through ``tw.controller(...)`` is reported, and
``tw.init`` / the controller's ``init`` / ``tw.checked.select`` / ``tw.load`` return what they say. Both runs
share one mypy cache in a temporary folder (about 10-20 s cold on two cores) and the same settings, so the
second reads the package and jax's stubs from it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A user's script. The one deliberate error is on the line marked WRONG; the others must type-check.
USER_CODE = '''\
from typing import assert_type

import jax
import jax.numpy as jnp
import tokenworth_jax as tw

spec, hp = tw.preset("db")
state = tw.init(spec, hp)
reveal_type(state)
fns = tw.controller(spec.scorer, spec.mode)
reveal_type(fns.init(spec, hp))
state, sel = fns.select(state, jnp.zeros((spec.dim,)), hp, spec)
assert_type(sel, tw.Selection)
state = fns.observe(state, "yes", hp, spec)  # WRONG: a reward is an array or a number
state, dec = fns.offer(state, jnp.zeros((spec.dim,)), 3, hp, spec)
assert_type(dec, tw.Decision)
checked_state, checked_sel = tw.checked.select(state, jnp.zeros((spec.dim,)), hp, spec)
assert_type(checked_sel, tw.Selection)
ctl = tw.Controller(spec, hp)
assert_type(ctl.select("a question"), tw.HostSelection)
tw.save("state.npz", state, spec, hp)
loaded = tw.load("state.npz")
assert_type(loaded, tw.Checkpoint)
assert_type(loaded.state, tw.State)
assert_type(loaded.hp, tw.HParams)
'''


def mypy(*args: str, cache: Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--no-color-output",
                           "--no-error-summary", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def test_the_package_passes_mypy(cache: Path) -> None:
    result = mypy(cache=cache)  # the files and settings of pyproject.toml's [tool.mypy]
    assert result.returncode == 0, result.stdout + result.stderr


def user_report(tmp_path: Path, cache: Path) -> tuple[list[str], list[str]]:
    """mypy's (errors, revealed types) for USER_CODE."""
    script = tmp_path / "user_code.py"
    script.write_text(USER_CODE)
    # The package's settings as the test above, so this run reads what that one cached (a different
    # follow_imports made mypy check the package and jax's stubs again: this test took 11.7 s, now 0.5).
    # The package's own errors are the test above's: only the script's lines are read here.
    result = mypy(str(script), cache=cache)
    lines = [x for x in result.stdout.splitlines() if x.startswith(str(script))]
    return [x for x in lines if "error:" in x], [x for x in lines if "Revealed type" in x]


def test_a_wrong_argument_through_the_controller_is_a_type_error(tmp_path: Path, cache: Path) -> None:
    errors, revealed = user_report(tmp_path, cache)
    wrong = USER_CODE.splitlines().index(next(x for x in USER_CODE.splitlines() if "# WRONG" in x)) + 1
    assert len(errors) == 1, errors
    assert re.search(rf"user_code\.py:{wrong}: error: Argument 2 to \"__call__\" of \"ObserveFn\" has incompatible "
                     r"type \"str\"", errors[0]), errors
    # tw.init(spec, hp) and the controller's init are State (a NamedTuple: mypy shows its fields, then its class)
    assert len(revealed) == 2 and all(x.endswith('fallback=tokenworth_jax.controller.State]"') for x in revealed), \
        revealed

