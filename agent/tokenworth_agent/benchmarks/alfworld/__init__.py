"""ALFWorld (the paper's App. C): household text games, judged by the game's own goal check.

The engine (TextWorld with ALFWorld's PDDL) runs in worker processes under its own venv (docs/alfworld.md);
its packages and versions enter the run's identity (``alfworld_engine``), and a run without the venv is
refused at plan time.
"""

from __future__ import annotations

from typing import Any, Mapping

from tokenworth_agent.benchmarks.alfworld.data import data_source, fetch
from tokenworth_agent.benchmarks.alfworld.data import downloads as _downloads
from tokenworth_agent.benchmarks.alfworld.env import INSTRUCTIONS
from tokenworth_agent.benchmarks.alfworld.memory import compact
from tokenworth_agent.benchmarks.alfworld.replies import P0_RANGE, reply
from tokenworth_agent.benchmarks.alfworld.tasks import SOURCE
from tokenworth_agent.benchmarks.base import Benchmark
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.core.harness import HarnessError


def engine(options: Mapping[str, Any] | None = None) -> dict[str, str]:
    """ALFWorld's engine packages and versions (part of a run's identity); HarnessError without its venv."""
    from tokenworth_agent.benchmarks.alfworld.engine_venv import EngineVenvError, open_venv

    try:
        return open_venv().identity()
    except EngineVenvError as exc:
        raise HarnessError(str(exc)) from None


def _environment(budget: Budget, options: Any, instructions: str | None) -> Any:
    from tokenworth_agent.benchmarks.alfworld.env import ALFWorldEnvironment

    return ALFWorldEnvironment(max_rounds=budget.max_rounds, instructions=instructions)


def _phase(task: Any) -> str:
    """--orders shuffles within train, valid_seen and valid_unseen, which stay in that order."""
    return task.split


BENCHMARK = Benchmark(
    name="alfworld", tasks=SOURCE, instructions=INSTRUCTIONS, make_environment=_environment, compact_memory=compact,
    # App. C: 50 environment steps, 128 tokens per action call (and per repair call), auxiliary calls 512 each
    # (docs/alfworld.md). Accounted per call: App. C states per-call limits, and a shared 128 would end a failed
    # episode after ~15 commands. B_max = 128 (the controller's alfworld preset).
    limits=dict(max_output_tokens=128, max_rounds=50, max_memories=1, max_injected_chars=4200, per_call_cap=128,
                aux_call_cap=512),
    sim_reply=reply, sim_p0_range=P0_RANGE,
    setup_check=engine, identity=lambda options: {"alfworld_engine": engine()},
    downloads=_downloads, fetch=fetch, data_source=data_source,
    phase=_phase,
    description="ALFWorld (App. C): household text games (574 episodes)")
