"""BigCodeBench memories (compact): the task, then the solution as the evaluator read it.

The step is the sanitised solution the environment recorded (``action["code"]``: what the official
sanitiser kept of the reply) in a ``python`` block, the form the instruction asks for, so a model can
reuse it as written. The reply's prose and anything the sanitiser dropped stay out. The ``abstract``
format has nothing instance-specific to replace here and equals ``compact``.
"""

from __future__ import annotations

from typing import Sequence

from tokenworth_agent.memory.base import Step, Turn


def compact(question: str, turns: Sequence[Turn], *, abstract: bool = False) -> tuple[str, list[Step]]:
    """(the task line, the solution step); no step when no solution code was recorded."""
    codes = [str((t.action or {}).get("code") or "").strip() for t in turns]
    steps = [Step(f"```python\n{code}\n```", code=code) for code in codes if code]
    return f"Task: {question.strip()}", steps[-1:]


__all__ = ["compact"]
