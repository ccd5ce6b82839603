"""LifelongAgentBench's DB stream: a question over one MySQL table (run on SQLite), judged on the rows or the table's hash."""

from __future__ import annotations

from typing import Any

from tokenworth_agent.benchmarks.base import Benchmark
from tokenworth_agent.benchmarks.db.env import INSTRUCTIONS
from tokenworth_agent.benchmarks.db.memory import compact
from tokenworth_agent.benchmarks.db.replies import reply
from tokenworth_agent.benchmarks.db.tasks import SOURCE
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks.lab import lab_data_source, lab_downloads


def _environment(budget: Budget, options: Any, instructions: str | None) -> Any:
    from tokenworth_agent.benchmarks.db.env import DBEnvironment

    return DBEnvironment(max_rounds=budget.max_rounds, instructions=instructions)


BENCHMARK = Benchmark(
    name="db", tasks=SOURCE, instructions=INSTRUCTIONS, make_environment=_environment, compact_memory=compact,
    limits=dict(max_output_tokens=128, max_rounds=3, max_memories=1, max_injected_chars=900),  # Table A1
    sim_reply=reply, sim_p0_range=(0.25, 0.90),
    downloads=lambda data_dir, folders: lab_downloads("db", data_dir, folders),
    data_source=lambda data_dir, folders: lab_data_source("db", data_dir, folders),
    description="LifelongAgentBench DB: SQL over one MySQL table (500 tasks)")
