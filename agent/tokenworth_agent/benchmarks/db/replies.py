"""DB replies: the gold SQL then the rows it returned as the answer, or a plausible wrong query."""

from __future__ import annotations

import re

from tokenworth_agent.backbones.base import Conversation
from tokenworth_agent.sim.model import Episode, SimParams
from tokenworth_agent.sim.replies.base import last_observation
from tokenworth_agent.benchmarks.db.tasks import DBTask


def _observed_rows(observation: str) -> str:
    """The row list inside a DB observation (``[(1, 'x'), …]``), else the text itself."""
    text = observation.strip()
    start, end = text.find("["), text.rfind("]")
    if start != -1 and end > start:
        return text[start : end + 1]
    return text.splitlines()[0] if text else "[]"


# Ordered, first-match perturbations that keep a query plausible but change its meaning.
_SQL_PERTURBATIONS = (
    (r"\bDESC\b", "ASC"),
    (r"\bASC\b", "DESC"),
    (r"\bMAX\(", "MIN("),
    (r"\bMIN\(", "MAX("),
    (r" >= ", " < "),
    (r" <= ", " > "),
    (r" > ", " < "),
    (r" < ", " > "),
)


def _quoted(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name}`"


def wrong_sql(task: DBTask, attempt: int) -> str:
    """A plausible wrong query: the gold SQL perturbed once, then unrelated lookups."""
    candidates: list[str] = []
    for pattern, replacement in _SQL_PERTURBATIONS:
        perturbed = re.sub(pattern, replacement, task.answer_sql, count=1, flags=re.IGNORECASE)
        if perturbed != task.answer_sql:
            candidates.append(perturbed)
            break
    table = _quoted(task.table.name)
    candidates += [f"SELECT * FROM {table} LIMIT 1;", f"SELECT COUNT(*) FROM {table};"]
    return candidates[min(attempt, len(candidates) - 1)]


def _sql_operation(sql: str) -> str:
    return f"Action: Operation\n```sql\n{sql.strip()}\n```"


def reply(task: DBTask, episode: Episode, round_index: int, conversation: Conversation, params: SimParams) -> str:
    operations = 1 if episode.success or not episode.harmful else 1 + params.harmful_extra_rounds
    if round_index < operations:
        sql = task.answer_sql if episode.success else wrong_sql(task, round_index)
        return _sql_operation(sql)
    rows = _observed_rows(last_observation(conversation))
    return f"Action: Answer\nFinal Answer: {rows}"


__all__ = ["reply", "wrong_sql"]
