"""LifelongAgentBench's OS stream: Bash in a sandboxed Linux, judged by the task's check script. Registered as ``os``
(the folder is ``os_env`` so that it never reads as the standard library's ``os``)."""

from __future__ import annotations

from typing import Any

from tokenworth_agent.benchmarks.base import Benchmark
from tokenworth_agent.benchmarks.os_env.env import INSTRUCTIONS
from tokenworth_agent.benchmarks.os_env.memory import compact
from tokenworth_agent.benchmarks.os_env.replies import reply
from tokenworth_agent.benchmarks.os_env.tasks import SOURCE
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks.lab import lab_data_source, lab_downloads


def _environment(budget: Budget, options: Any, instructions: str | None) -> Any:
    from tokenworth_agent.benchmarks.os_env.env import OSEnvironment

    return OSEnvironment(max_rounds=budget.max_rounds, instructions=instructions)


BENCHMARK = Benchmark(
    name="os", tasks=SOURCE, instructions=INSTRUCTIONS, make_environment=_environment, compact_memory=compact,
    limits=dict(max_output_tokens=512, max_rounds=5, max_memories=1, max_injected_chars=800),  # Table A1
    sim_reply=reply, sim_p0_range=(0.40, 0.95),
    downloads=lambda data_dir, folders: lab_downloads("os", data_dir, folders),
    data_source=lambda data_dir, folders: lab_data_source("os", data_dir, folders),
    description="LifelongAgentBench OS: Bash in a sandboxed Linux (500 tasks)")
