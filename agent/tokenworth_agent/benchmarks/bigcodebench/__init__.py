"""BigCodeBench (the paper's App. C): one Python solution per task, judged by the task's unit tests in a sandbox.

The judge runs the tests inside the OS sandbox under BigCodeBench's own evaluation venv (docs/bigcodebench.md).
Its options: ``--bcb-venv`` (the venv; its evaluator version and library fingerprint enter the run's identity
as ``bcb_evaluator``, its path does not), ``--bcb-verdicts`` (a file of verdicts reused across streams and runs)
and ``--bcb-time-limit`` (the evaluator's limit per task, seconds; part of the identity).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from tokenworth_agent.benchmarks.base import Benchmark, BenchmarkOption
from tokenworth_agent.benchmarks.bigcodebench.data import data_source, downloads, fetch
from tokenworth_agent.benchmarks.bigcodebench.env import INSTRUCTIONS
from tokenworth_agent.benchmarks.bigcodebench.judge import BCB_TIME_LIMIT
from tokenworth_agent.benchmarks.bigcodebench.memory import compact
from tokenworth_agent.benchmarks.bigcodebench.replies import reply
from tokenworth_agent.benchmarks.bigcodebench.tasks import SOURCE
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.harness import HarnessError

OPTIONS = (
    BenchmarkOption("bcb_venv", Path, None, "BigCodeBench: the evaluation venv the judge runs (make bcb-setup builds it).",
                    show_default="$TOKENWORTH_BCB_VENV, else .venv-bcb of the checkout"),
    BenchmarkOption("bcb_verdicts", Path, None, "BigCodeBench: a file of verdicts; a reply judged before for the same "
                                                "task is not judged again.", show_default="kept in memory for the run"),
    BenchmarkOption("bcb_time_limit", float, BCB_TIME_LIMIT,
                    "BigCodeBench: the evaluator's limit for one task's tests, seconds.", identity=True),
)


def evaluator(options: Mapping[str, Any]) -> dict[str, str]:
    """The evaluator's identity (version, library fingerprint); HarnessError without a venv."""
    from tokenworth_agent.benchmarks.bigcodebench.eval_venv import VenvError, open_venv

    try:
        return open_venv(options.get("bcb_venv")).identity()
    except VenvError as exc:
        raise HarnessError(str(exc)) from None


def setup_check(options: Mapping[str, Any]) -> None:
    limit = options.get("bcb_time_limit", BCB_TIME_LIMIT)
    if not 0 < limit < float("inf"):
        raise HarnessError(f"--bcb-time-limit must be a positive number of seconds, got {limit}")
    verdicts = options.get("bcb_verdicts")
    if verdicts is not None and Path(verdicts).is_dir():
        raise HarnessError(f"--bcb-verdicts {verdicts}: a folder; name the file the verdicts go in")
    evaluator(options)


def identity(options: Mapping[str, Any]) -> dict[str, Any]:
    return {"bcb_evaluator": evaluator(options)}


def _environment(budget: Budget, options: Mapping[str, Any], instructions: str | None) -> Any:
    from tokenworth_agent.benchmarks.bigcodebench.env import BigCodeBenchEnvironment
    from tokenworth_agent.benchmarks.bigcodebench.eval_venv import open_venv
    from tokenworth_agent.benchmarks.bigcodebench.judge import BigCodeBenchJudge, JudgeSettings
    from tokenworth_agent.benchmarks.bigcodebench.verdicts import shared_cache

    judge = BigCodeBenchJudge(open_venv(options.get("bcb_venv")),
                              JudgeSettings(time_limit=options.get("bcb_time_limit", BCB_TIME_LIMIT)),
                              cache=shared_cache(options.get("bcb_verdicts")))
    return BigCodeBenchEnvironment(judge, max_rounds=budget.max_rounds, instructions=instructions)


def _phase(task: Any) -> str:
    """--orders shuffles within the Full-minus-Hard tasks, then within the Hard ones, which stay last."""
    return "hard" if task.hard else "full"


BENCHMARK = Benchmark(
    name="bigcodebench", tasks=SOURCE, instructions=INSTRUCTIONS, make_environment=_environment,
    compact_memory=compact,
    # App. C: one solution of up to 1280 tokens; auxiliary calls 512 each (docs/bigcodebench.md)
    limits=dict(max_output_tokens=1280, max_rounds=1, max_memories=1, max_injected_chars=4096, per_call_cap=1280,
                aux_call_cap=512),
    # mean p0 about 0.41 (2.76 libraries a task), so that without memory about 40% pass end to end (the paper's
    # local anchor: TokenWorth 43.1); measured in docs/bigcodebench.md, "The simulated backbone"
    sim_reply=reply, sim_p0_range=(0.10, 0.78),
    options=OPTIONS, setup_check=setup_check, identity=identity,
    downloads=downloads, fetch=fetch, data_source=data_source,
    phase=_phase,
    description="BigCodeBench (App. C): Python solutions judged by unit tests (1,140 tasks)")
