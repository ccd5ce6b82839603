"""DB tasks (LAB's ``db_bench``): a question over one MySQL table, judged on the rows or the table's hash."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tokenworth_agent.tasks.base import column, literal, strings, text
from tokenworth_agent.tasks.lab import LabSource


@dataclasses.dataclass(frozen=True)
class ColumnInfo:
    name: str
    type: str  # "INT" or "TEXT"


@dataclasses.dataclass(frozen=True)
class TableInfo:
    name: str
    columns: tuple[ColumnInfo, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclasses.dataclass(frozen=True)
class DBTask:
    sample_index: int
    instruction: str
    table: TableInfo
    answer_direct: Any  # gold rows for SELECT tasks (list of tuples), None for writes
    answer_md5: str | None  # table hash for write tasks, None for SELECT tasks
    answer_sql: str
    skill_list: tuple[str, ...]
    entry_hash: int
    env: str = "db"

    @property
    def is_write(self) -> bool:
        return self.answer_md5 is not None

    @property
    def task_id(self) -> str:
        return f"db-{self.sample_index}"

    @property
    def query_text(self) -> str:
        return self.instruction


def decode(row: dict[str, Any], path: Path) -> DBTask:
    i = int(row["sample_index"])
    answer = literal(row["answer_info"], "answer_info", i, path, dict)
    table = literal(row["table_info"], "table_info", i, path, dict)
    with column("answer_info", i, path):
        direct = answer.get("direct")
        if direct is not None:
            direct = [tuple(r) for r in direct]
        md5, sql = answer.get("md5"), str(answer.get("sql") or "")
    with column("table_info", i, path):
        info = TableInfo(
            name=str(table["name"]),
            columns=tuple(ColumnInfo(str(c["name"]), str(c["type"])) for c in table["column_info_list"]),
            rows=tuple(tuple(r) for r in table["row_list"]),
        )
    return DBTask(
        sample_index=i,
        instruction=text(row, "instruction", i, path),
        table=info,
        answer_direct=direct,
        answer_md5=md5,
        answer_sql=sql,
        skill_list=strings(row["skill_list"], "skill_list", i, path),
        entry_hash=int(row["sql_instruction_row_list_entry_hash"]),
    )


SOURCE = LabSource("db", decode)

__all__ = ["ColumnInfo", "TableInfo", "DBTask", "decode", "SOURCE"]
