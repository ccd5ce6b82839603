"""Stand-in plugins for the parameter and release tests: a method ``recency`` (one parameter ``k``) of the
distribution ``hp-recency``, a benchmark ``dbx`` (DB's tasks, one option ``dbx_level`` that enters the
identity) of ``dbx-plugin``, each written as an installed distribution (``*.dist-info``) in a folder on the path,
and the CLI run in a child process that sees that folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.test_plugins import fake_distribution

# the issue's `recency`: keeps successful trajectories, retrieves the k most recent; its decision log says k
RECENCY = '''
from tokenworth_agent.core.parameters import Parameter, at_least
from tokenworth_agent.policies.base import MemoryStore, StoreBackedPolicy

K = {k}


class RecencyPolicy(StoreBackedPolicy):
    name = "recency"
    parameters = (Parameter("k", int, K, "memories retrieved, the most recent first", check=at_least(1)),)

    def __init__(self, env, budget, seed=0, *, k=K, **kwargs):
        super().__init__(env, budget, seed, **kwargs)
        self.k = k
        self.store = MemoryStore()

    def retrieve(self, task):
        chosen = self.store.memories[::-1][: self.k]
        self.note(k=self.k, chosen_ids=[m.memory_id for m in chosen])
        return chosen

    def update(self, task, memories, outcome, trajectory):
        memory = self.candidate(task, outcome, trajectory)
        self.note(write=None if memory is None else self.write(memory, lambda: 0)[0])
'''

# DB's benchmark under another name, with an option that reaches its environment: the instruction text (turn 0)
# names the level, so each record's instructions_sha256 tells which level its environment ran with
DBX = '''
import dataclasses

from tokenworth_agent.benchmarks.db import BENCHMARK as DB
from tokenworth_agent.core.parameters import Parameter


def _environment(budget, options, instructions):
    return DB.make_environment(budget, {}, f"(level {options['dbx_level']}) " + (instructions or DB.instructions))


BENCHMARK = dataclasses.replace(DB, name="dbx", make_environment=_environment, controller_preset="db", options=(
    Parameter("dbx_level", float, 0.5, "dbx: a level its environment shows", identity=True),
    Parameter("dbx_note", str, None, "dbx: a note that leaves results alone")))
'''


def install_recency(site: Path, version: str = "0.3.1", k: int = 2) -> None:
    """hp-recency ``version`` (its default k = ``k``) in ``site``, replacing any other version there."""
    for old in site.glob("hp_recency-*.dist-info"):
        shutil.rmtree(old)
    (site / "recency_plugin.py").write_text(RECENCY.format(k=k))
    for cached in (site / "__pycache__").glob("recency_plugin*"):
        cached.unlink()
    fake_distribution(site, "hp-recency", {"tokenworth.methods": {"recency": "recency_plugin:RecencyPolicy"}},
                      version=version)


def install_dbx(site: Path) -> None:
    (site / "dbx_bench.py").write_text(DBX)
    fake_distribution(site, "dbx-plugin", {"tokenworth.benchmarks": {"dbx": "dbx_bench:BENCHMARK"}})


def command(site: Path, *args: str) -> list[str]:
    """The CLI in a child process that finds the distributions of ``site``."""
    code = f"import sys; sys.path.insert(0, {str(site)!r}); from tokenworth_agent.cli import app; app()"
    return [sys.executable, "-c", code, *args]


def tokenworth(site: Path, *args: str, cwd: Path, data_dir: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(command(site, *args), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "TOKENWORTH_DATA_DIR": data_dir})


def errors(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]
