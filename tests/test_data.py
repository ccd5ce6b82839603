"""The task-data loader: typed records in stream order, and clear errors for missing/corrupt data."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenworth_agent.tasks.lab import LAB
from tokenworth_agent.tasks import DataFolder, data_folder
from tokenworth_agent.tasks.base import benchmark_dir

from tokenworth_agent.tasks.lab import ENV_SUBDIR, EXPECTED_ROWS, PARQUET_NAME
from tokenworth_agent.tasks import DataError, load_tasks, resolve_data_root
from tokenworth_agent.benchmarks.db.tasks import DBTask
from tokenworth_agent.benchmarks.kg.tasks import KGTask
from tokenworth_agent.benchmarks.os_env.tasks import OSTask


@pytest.mark.parametrize("env,cls", [("db", DBTask), ("os", OSTask), ("kg", KGTask)])
def test_loads_every_stream_in_order_with_skills(data_dir, env, cls):
    tasks = load_tasks(env, data_dir)
    assert len(tasks) == EXPECTED_ROWS[env]
    assert [t.sample_index for t in tasks] == list(range(len(tasks)))
    assert all(isinstance(t, cls) and t.skill_list and isinstance(t.skill_list, tuple) for t in tasks)


def test_db_records_are_decoded(data_dir):
    tasks = load_tasks("db", data_dir)
    assert sum(t.is_write for t in tasks) == 150
    first_select = next(t for t in tasks if not t.is_write)
    assert isinstance(first_select.answer_direct, list) and isinstance(first_select.answer_direct[0], tuple)
    assert {c.type for t in tasks for c in t.table.columns} <= {"INT", "TEXT"}


def test_data_root_resolution_order(monkeypatch, tmp_path):
    monkeypatch.setenv("TOKENWORTH_DATA_DIR", str(tmp_path / "env"))
    assert resolve_data_root(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_data_root(None) == tmp_path / "env"
    monkeypatch.delenv("TOKENWORTH_DATA_DIR")
    assert resolve_data_root(None).name == "tokenworth"
    assert data_folder("db", None) == resolve_data_root(None) / "lifelongagentbench"


def test_the_data_root_or_a_benchmark_folder_named_directly(data_dir, tmp_path):
    """--data-dir names the root holding one folder per benchmark; LAB's own folder, named as before
    the root existed, still works, and stands for its parent when another benchmark is asked for."""
    lab = Path(data_dir)
    root = tmp_path / "data"
    root.mkdir()
    (root / "lifelongagentbench").symlink_to(lab, target_is_directory=True)
    assert data_folder("db", root) == root / "lifelongagentbench"
    assert data_folder("db", lab) == lab
    assert [t.task_id for t in load_tasks("db", root, limit=3)] == [t.task_id for t in load_tasks("db", lab, limit=3)]
    named = DataFolder("bigcodebench")
    assert benchmark_dir(named, lab, [LAB]) == lab.parent / "bigcodebench"
    assert benchmark_dir(named, root / "bigcodebench", [LAB]) == root / "bigcodebench"
    assert benchmark_dir(named, root, [LAB]) == root / "bigcodebench"


def test_missing_data_says_how_to_get_it(tmp_path):
    with pytest.raises(DataError, match="tokenworth data fetch"):
        load_tasks("db", tmp_path)


def _copy_env(data_dir: str, tmp_path: Path, env: str) -> Path:
    target = tmp_path / ENV_SUBDIR[env]
    target.mkdir(parents=True)
    shutil.copy(Path(data_dir) / ENV_SUBDIR[env] / PARQUET_NAME, target / PARQUET_NAME)
    return target / PARQUET_NAME


def test_truncated_file_is_reported_as_corrupt(data_dir, tmp_path):
    path = _copy_env(data_dir, tmp_path, "os")
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(DataError, match="not a readable parquet file"):
        load_tasks("os", tmp_path)


def test_garbled_literal_names_row_and_column(data_dir, tmp_path):
    path = _copy_env(data_dir, tmp_path, "kg")
    table = pq.read_table(path)
    answers = table.column("answer_list").to_pylist()
    answers[3] = "['m.0abc'"  # unterminated literal
    table = table.set_column(table.schema.get_field_index("answer_list"), "answer_list", pa.array(answers))
    pq.write_table(table, path)
    with pytest.raises(DataError, match=r"row 3, column 'answer_list'"):
        load_tasks("kg", tmp_path)


def test_missing_column_is_reported(data_dir, tmp_path):
    path = _copy_env(data_dir, tmp_path, "db")
    pq.write_table(pq.read_table(path).drop(["answer_info"]), path)
    with pytest.raises(DataError, match="answer_info"):
        load_tasks("db", tmp_path)


def test_unknown_environment():
    with pytest.raises(ValueError, match="unknown environment"):
        load_tasks("web")  # type: ignore[arg-type]


def _rewrite(path: Path, column: str, index: int, value) -> None:
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[index] = value
    field = table.schema.field(column)
    table = table.set_column(table.schema.get_field_index(column), field, pa.array(values, type=field.type))
    pq.write_table(table, path)


def test_empty_file_is_refused_not_zero_tasks(data_dir, tmp_path):
    path = _copy_env(data_dir, tmp_path, "db")
    pq.write_table(pq.read_table(path).slice(0, 0), path)
    with pytest.raises(DataError, match="holds 0 tasks.*has 500"):
        load_tasks("db", tmp_path)


def test_truncated_stream_is_refused(data_dir, tmp_path):
    path = _copy_env(data_dir, tmp_path, "os")
    pq.write_table(pq.read_table(path).slice(0, 20), path)
    with pytest.raises(DataError, match="holds 20 tasks"):
        load_tasks("os", tmp_path)


@pytest.mark.parametrize("env,column", [("db", "instruction"), ("os", "instruction"), ("kg", "question")])
def test_null_text_is_refused_not_the_string_none(data_dir, tmp_path, env, column):
    path = _copy_env(data_dir, tmp_path, env)
    _rewrite(path, column, 7, None)
    with pytest.raises(DataError, match=rf"row 7, column '{column}' is null"):
        load_tasks(env, tmp_path)


@pytest.mark.parametrize("env,column,value", [
    ("db", "answer_info", "['not', 'a', 'dict']"),
    ("db", "table_info", "{'name': 't'}"),
    ("os", "evaluation_info", "[1, 2]"),
    ("kg", "entity_dict", "['m.0abc']"),
    ("kg", "skill_list", "{'a': 1}"),
])
def test_wrongly_shaped_literal_names_row_and_column(data_dir, tmp_path, env, column, value):
    path = _copy_env(data_dir, tmp_path, env)
    _rewrite(path, column, 4, value)
    with pytest.raises(DataError, match=rf"row 4, column '{column}'"):
        load_tasks(env, tmp_path)
