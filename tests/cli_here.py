"""Run a ``python -m tokenworth_agent.cli ...`` command in this process, through the CLI's own app.

For the runs whose process boundary no test checks (a reference run, a resume after a real process was killed,
``track send``/``replay``, a run that only makes a folder to read back): a fresh interpreter pays ~5 CPU-seconds
of imports (jax, scipy, statsmodels, matplotlib) per run, here ~1 after the first. Every killed, signalled or
distributed run, and every run whose imports or start-up environment are checked, stays a real process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Mapping

REPO = Path(__file__).resolve().parents[1]


def run_here(cmd: list[str], env: Mapping[str, str], cwd: Path | str = REPO) -> Any:
    """``cmd`` (``[sys.executable, "-m", "tokenworth_agent.cli", ...]``, as a subprocess would be given it) in this
    process, through typer's ``CliRunner`` (``.stdout`` and ``.stderr`` as a subprocess gives them). The run sees
    ``env`` as its whole environment and ``cwd`` as its folder, as the subprocess would (children it starts
    inherit both); this process's are restored after. A variable a library reads once per process (``XLA_FLAGS``,
    when JAX's backend starts) keeps what it was at that first read: a run here is no place to test one. An
    exception the app raised is raised here; any exit status but 0 fails with the output's end."""
    from typer.testing import CliRunner

    from tokenworth_agent.cli import app

    assert list(cmd[:3]) == [sys.executable, "-m", "tokenworth_agent.cli"], cmd
    env = dict(env)  # a copy first: ``env`` may be os.environ itself, which is cleared below
    saved, here = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        done = CliRunner().invoke(app, list(cmd[3:]))
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    assert done.exit_code == 0, done.output[-3000:]
    return done
