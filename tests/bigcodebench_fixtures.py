"""What the BigCodeBench tests share: the evaluation venv, the fixed CI subset, small judges."""

from __future__ import annotations

import os
import sys

import pytest

from tokenworth_agent.benchmarks.bigcodebench.eval_venv import VENV_VARIABLE, EvalVenv, VenvError, open_venv
from tokenworth_agent.benchmarks.bigcodebench.judge import BigCodeBenchJudge, JudgeSettings
from tokenworth_agent.sandbox import sandbox_unavailable_reason
from tokenworth_agent.benchmarks.bigcodebench.tasks import BCBTask

# The first 25 tasks of the stream that need only the standard library, numpy and pandas, leaving out
# standard modules that reach outside or manage processes, and task 0 (its tests enumerate 10!
# permutations: a minute here). `make test` builds a venv with exactly these libraries (.venv-bcb-ci).
CI_IDS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 14, 22, 23, 24, 25, 27, 30, 33, 55, 60, 67, 70, 72, 84, 85)
REACHES_OUT = frozenset({"socket", "urllib", "http", "smtplib", "ftplib", "ssl", "subprocess", "multiprocessing",
                         "threading", "asyncio", "ctypes"})
SLOW = frozenset({0})


def ci_subset(tasks: list[BCBTask], n: int = len(CI_IDS)) -> list[BCBTask]:
    """The rule CI_IDS came from, in stream order."""
    allowed = (set(sys.stdlib_module_names) - REACHES_OUT) | {"numpy", "pandas"}
    return [t for t in tasks if t.number not in SLOW and set(t.libs) <= allowed][:n]


def eval_venv() -> EvalVenv:
    """The venv `make test` names ($TOKENWORTH_BCB_VENV; it must work), else the checkout's, else a skip."""
    reason = sandbox_unavailable_reason()
    if reason:
        pytest.skip(f"sandbox unavailable: {reason}")
    try:
        return open_venv()
    except VenvError as exc:
        if os.environ.get(VENV_VARIABLE):
            raise
        pytest.skip(str(exc))


def small_judge(venv: EvalVenv, **settings: float) -> BigCodeBenchJudge:
    """A judge with short limits, so a solution that hangs costs seconds (no verdict cache)."""
    values = dict(time_limit=10.0, wall_slack=25.0, memory_bytes=1 << 30, tmpfs_bytes=256 << 20, pids_max=128)
    return BigCodeBenchJudge(venv, JudgeSettings(**{**values, **settings}))
