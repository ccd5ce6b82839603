"""BigCodeBench's task stream: v0.1.4 rebuilt from the first release, the Hard list, the order, bad files."""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path

import pytest

from tokenworth_agent.benchmarks.bigcodebench.tasks import BCBTask
from tokenworth_agent.tasks import DataError, load_tasks
from tokenworth_agent.benchmarks.bigcodebench.tasks import EXPECTED_HARD, EXPECTED_TASKS, FILE, hard_numbers, read_rows, stream
from tokenworth_agent.benchmarks.bigcodebench.patches import EDITS, ReleaseError, changed_tasks, to_release


@pytest.fixture(scope="module")
def tasks(data_dir) -> list[BCBTask]:
    return load_tasks("bigcodebench", data_dir)  # LAB's folder stands for the data root


@pytest.fixture(scope="module")
def raw(data_dir) -> dict[str, dict]:
    """The file as shipped (v0.1.0_hf), by task id."""
    folder = Path(data_dir).parent / "bigcodebench"
    return {row["task_id"]: row for row in read_rows(folder / FILE)}


def by_number(tasks: list[BCBTask], n: int) -> BCBTask:
    return next(t for t in tasks if t.number == n)


def test_the_stream_is_the_non_hard_tasks_then_the_hard_ones_each_ascending(tasks):
    assert len(tasks) == EXPECTED_TASKS and [t.sample_index for t in tasks] == list(range(EXPECTED_TASKS))
    hard = [t.number for t in tasks if t.hard]
    easy = [t.number for t in tasks if not t.hard]
    assert len(hard) == EXPECTED_HARD and hard == sorted(hard) and easy == sorted(easy)
    assert [t.hard for t in tasks] == [False] * (EXPECTED_TASKS - EXPECTED_HARD) + [True] * EXPECTED_HARD
    assert sorted(t.number for t in tasks) == list(range(EXPECTED_TASKS))
    assert all(t.env == "bigcodebench" and t.skill_list == t.libs and t.query_text == t.instruct_prompt for t in tasks)


def test_every_hard_task_meets_upstreams_computable_filters(tasks):
    """bigcode-project/bigcodebench analysis/bcb_subset.py keeps a task for Hard only with more than two
    libraries and a reference solution longer than 426 characters; few tasks meet both, so a wrong list shows."""
    numbers = set(hard_numbers())
    assert len(numbers) == EXPECTED_HARD and numbers <= set(range(EXPECTED_TASKS))
    meets = {t.number for t in tasks if len(t.libs) > 2 and len(t.canonical_solution) > 426}
    assert numbers <= meets
    assert len(meets) < 3 * EXPECTED_HARD  # the filters are selective (382 tasks meet them)


def test_v014_changes_exactly_the_tasks_upstream_patched(tasks, raw):
    assert changed_tasks() == (16, 37, 178, 211, 215, 241, 267, 760, 1005, 1006)
    changed = {t.number for t in tasks
               if any(getattr(t, f) != raw[t.task_id][f] for f in ("instruct_prompt", "code_prompt", "test",
                                                                    "canonical_solution", "complete_prompt"))}
    assert changed == set(changed_tasks())


def test_v014_edits_read_as_upstreams_scripts_say(tasks, raw):
    t = {n: by_number(tasks, n) for n in changed_tasks()}
    assert "test_valid_zip_url" in raw["BigCodeBench/1006"]["test"]
    assert "test_non_zip_content" in t[1006].test and "test_valid_zip_url" not in t[1006].test  # no download
    assert all("from datetime import datetime" not in getattr(t[760], f) for f in ("instruct_prompt", "code_prompt"))
    assert all("urllib.request" not in getattr(t[178], f) and "from urllib import request" not in getattr(t[178], f)
               for f in ("instruct_prompt", "code_prompt", "canonical_solution", "test", "complete_prompt"))
    assert "No logs found to backup." not in t[16].canonical_solution + t[16].test
    assert t[37].instruct_prompt.startswith("import pandas as pd\n") and t[37].code_prompt.startswith("import pandas")
    assert "'Original vs. Normalized Data'" in t[241].instruct_prompt
    assert "'FFT of the signal'" in t[267].instruct_prompt
    assert "sample-5.zip" in t[1005].test and "sample-2.zip" not in t[1005].test
    assert "status_code = 200" in t[211].test
    assert "mock_response.json = lambda: json.loads(MOCK_TEXT)" in t[215].test and "Thif" not in t[215].instruct_prompt
    for n in (211, 215, 1006):  # the edited tests still parse
        ast.parse(t[n].test)


def test_an_edit_that_matches_nothing_is_refused(raw):
    rows = [dict(r) for r in raw.values()]
    fixed = next(r for r in rows if r["task_id"] == "BigCodeBench/215")
    fixed["instruct_prompt"] = fixed["instruct_prompt"].replace("Thif function", "This function")
    fixed["complete_prompt"] = fixed["complete_prompt"].replace("Thif function", "This function")
    fixed["doc_struct"] = fixed["doc_struct"].replace("Thif function", "This function")
    with pytest.raises(ReleaseError, match="BigCodeBench/215.*not BigCodeBench v0.1.0_hf"):
        to_release(rows)
    assert to_release(rows, "v0.1.2")  # the edits before v0.1.4 still match
    with pytest.raises(ReleaseError, match="unknown BigCodeBench release"):
        to_release(rows, "v9")
    assert {e.release for e in EDITS} == {"v0.1.1", "v0.1.2", "v0.1.3", "v0.1.4"}


def _write(folder: Path, rows: list[dict], raw_text: str | None = None) -> Path:
    (folder / "bigcodebench").mkdir(parents=True)
    path = folder / "bigcodebench" / FILE
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(raw_text if raw_text is not None else "".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_bad_data_is_a_clear_error(raw, tmp_path):
    rows = list(raw.values())
    with pytest.raises(DataError, match=f"no BigCodeBench task data at .*{FILE}.*--data-dir"):
        load_tasks("bigcodebench", tmp_path / "nowhere")
    with pytest.raises(DataError, match="holds 1139 tasks, but BigCodeBench has 1140"):
        load_tasks("bigcodebench", _write(tmp_path / "short", rows[:-1]))
    with pytest.raises(DataError, match="line 2 is not JSON"):
        load_tasks("bigcodebench", _write(tmp_path / "garbled", [], json.dumps(rows[0]) + "\n{not json\n"))
    truncated = tmp_path / "truncated" / "bigcodebench"
    truncated.mkdir(parents=True)
    whole = gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode())
    (truncated / FILE).write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match="not a readable gzip file"):
        load_tasks("bigcodebench", tmp_path / "truncated")


@pytest.mark.parametrize("field, value, message", [
    ("libs", "numpy", "column 'libs' is not a Python literal"),
    ("libs", "[1, 2]", "column 'libs' must be a list of library names"),
    ("test", None, "column 'test' holds a NoneType, expected text"),
    ("entry_point", "", "column 'entry_point' is '', expected text"),
    ("task_id", "BigCodeBench/x", "column 'task_id' is 'BigCodeBench/x'"),
])
def test_a_corrupt_record_names_its_row_and_field(raw, tmp_path, field, value, message):
    rows = [dict(r) for r in raw.values()]
    rows[3][field] = value
    with pytest.raises(DataError, match=message):
        stream(rows, tmp_path / FILE, hard_numbers())
    del rows[3][field]
    with pytest.raises(DataError, match=f"row 3, column '{field}' is missing"):
        stream(rows, tmp_path / FILE, hard_numbers())
