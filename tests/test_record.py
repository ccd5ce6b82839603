"""The per-task record: its schema, what loads, what is refused (and how to convert it), and that a
converted run folder still resumes exactly."""

from __future__ import annotations

import json

import pytest

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.experiment.runner import run_stream, write_run_config
from tokenworth_agent.results import record as record_module
from tokenworth_agent.results.record import SCHEMA_VERSION, RecordError, TaskRecord, comparable, read_records
from tokenworth_agent.storage.checkpoint import load_checkpoint, records_reach, save_checkpoint
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks, task_record

DB = Budget.for_env("db")
OLDER = ("trajectory", "judge", "task_prompt", "injection_text", "accounting", "aux_calls")  # fields added late


def test_a_record_round_trips_and_carries_its_schema() -> None:
    record = task_record(3, 1, decision={"admission": {"v_max_bank": float("-inf")}})
    data = json.loads(json.dumps(record.to_json()))
    assert data["schema"] == SCHEMA_VERSION == 2 and "stream" not in data
    assert TaskRecord.from_json(data) == record


def test_a_record_of_the_previous_release_loads_as_it_is() -> None:
    """Schema 1 is this release's fields without the schema key."""
    data = task_record(0, 1, stream={"env": "db"}).to_json()
    del data["schema"]
    loaded = TaskRecord.from_json(data)
    assert loaded.schema == SCHEMA_VERSION and loaded.comparable() == comparable([data])[0]


def test_older_newer_and_foreign_records_are_refused_with_the_way_out() -> None:
    data = task_record(0, 1).to_json()
    older = {k: v for k, v in data.items() if k not in OLDER + ("schema",)}
    with pytest.raises(RecordError, match=r"older release \(it lacks .*trajectory.*`python -m tokenworth_agent.results.record "
                                          r"upgrade RUN`"):
        TaskRecord.from_json(older, "r.jsonl: record 1")
    with pytest.raises(RecordError, match="schema 3, newer than this release's 2"):
        TaskRecord.from_json({**data, "schema": 3})
    with pytest.raises(RecordError, match="fields no task record has .*colour"):
        TaskRecord.from_json({**data, "colour": "blue"})
    with pytest.raises(RecordError, match="not a JSON object"):
        TaskRecord.from_json([1, 2])  # type: ignore[arg-type]


def _as_older_release(folder) -> None:
    """Rewrite a stream folder as an older release left it: records without the late fields, its
    checkpoint pointing at the end of that file."""
    path = folder / "records.jsonl"
    lines = [json.dumps({k: v for k, v in json.loads(line).items() if k not in OLDER + ("schema",)}, sort_keys=True)
             + "\n" for line in path.read_text().splitlines()]
    path.write_text("".join(lines))
    state = load_checkpoint(folder / "checkpoint.pkl")
    save_checkpoint(folder / "checkpoint.pkl", {**{k: v for k, v in state.items() if k != "version"},
                                                "jsonl_offset": path.stat().st_size})


def test_the_converter_upgrades_a_run_folder_that_then_resumes_exactly(tmp_path, capsys) -> None:
    tasks = make_tasks(6)
    reference = run_stream("memp", "db", tasks, FakeBackbone(), DB, 0, tmp_path / "ref", env=FakeDBEnv())
    out = tmp_path / "run"
    write_run_config(out, {"env": "db", "backbone": "fake", "seed": 0})
    run_stream("memp", "db", tasks, FakeBackbone(), DB, 0, out, env=FakeDBEnv(), stop_after=3)
    _as_older_release(out / "memp")
    with pytest.raises(RecordError, match="upgrade RUN"):
        read_records(out / "memp" / "records.jsonl")

    assert record_module.main(["upgrade", str(out)]) == 0
    assert "memp: 3 records at schema 2" in capsys.readouterr().out
    upgraded = read_records(out / "memp" / "records.jsonl")
    assert [r.index for r in upgraded] == [0, 1, 2] and all(r.trajectory is None and r.aux_calls == [] for r in upgraded)
    state = load_checkpoint(out / "memp" / "checkpoint.pkl")
    assert records_reach(out / "memp" / "records.jsonl", state["jsonl_offset"], state["next_index"])

    resumed = run_stream("memp", "db", tasks, FakeBackbone(), DB, 0, out, env=FakeDBEnv())
    assert comparable(resumed[3:]) == comparable(reference[3:])  # the policy's state survived the conversion
    assert [r.reward for r in resumed] == [r.reward for r in reference]
    assert record_module.main(["upgrade", str(tmp_path / "nothing")]) == 2
