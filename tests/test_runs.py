"""Reading run folders (tokenworth_agent.results.runs): streams with their identity, and load_run's table."""

from __future__ import annotations

import json

import pytest

from tests.runfolders import config, write_run, write_stream


def test_load_run_has_one_row_per_record_with_the_documented_columns(tmp_path) -> None:
    from tokenworth_agent.results import load_run
    from tokenworth_agent.results.runs import COLUMNS

    run = write_run(tmp_path / "run", {"standard": [1, 0, 1], "rag": [0, 0, 1]})
    frame = load_run(run)
    assert tuple(frame.columns) == COLUMNS and len(frame) == 6
    assert list(frame["method"].unique()) == ["standard", "rag"]  # the registry's order, not the folders'
    standard = frame[frame["method"] == "standard"]
    assert standard["reward"].tolist() == [1, 0, 1] and standard["index"].tolist() == [0, 1, 2]
    assert standard["task_id"].tolist() == ["db-0", "db-1", "db-2"]
    assert set(frame["env"]) == {"db"} and set(frame["seed"]) == {0} and set(frame["point"]) == {""}
    assert frame["finished"].all() and frame["skills"].iloc[0] == ["select"]
    assert str(frame["reward"].dtype) == "int64" and str(frame["output_tokens"].dtype) == "int64"


def test_streams_read_identity_from_records_names_and_config(tmp_path) -> None:
    from tokenworth_agent.results.runs import streams

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config(seed=[0, 1], grid=["o_max=64,128"])))
    write_stream(run, "seed1/rag@o_max=64", [1, 0], seed=1, budget={"max_output_tokens": 64})
    write_stream(run, "seed0/rag@o_max=128", [1], seed=0)
    write_stream(run, "seed0/rag@o_max=64", [0, 0, 1], finished=False)
    found = {s.name: s for s in streams(run)}
    assert list(found) == ["seed0/rag@o_max=64", "seed0/rag@o_max=128", "seed1/rag@o_max=64"]  # numeric order
    one = found["seed1/rag@o_max=64"]
    assert (one.env, one.method, one.seed, one.point, one.point_label) == ("db", "rag", 1, (("o_max", 64),), "o_max=64")
    assert one.budget == {"max_output_tokens": 64} and one.arm == "rag" and one.budget_point == (("o_max", 64),)
    assert not found["seed0/rag@o_max=64"].finished and found["seed0/rag@o_max=128"].finished
    assert [s.name for s in streams(run, finished_only=True)] == ["seed0/rag@o_max=128", "seed1/rag@o_max=64"]
    assert "seed" not in one.conditions()["backbone_options"] and one.conditions()["data_source"] == {
        "sha256": "abc", "source": "hf://x"}


def test_a_sweep_point_is_an_arm_of_its_own(tmp_path) -> None:
    from tokenworth_agent.results.runs import streams

    run = write_run(tmp_path / "run", {})
    write_stream(run, "tokenworth", [1, 0])
    write_stream(run, "tokenworth@eta_max=0.1", [1, 1], hparams={"eta_max": 0.1})
    arms = [s.arm for s in streams(run)]
    assert arms == ["tokenworth", "tokenworth@eta_max=0.1"]


def test_a_partial_stream_keeps_its_complete_records_and_drops_a_torn_last_line(tmp_path) -> None:
    from tokenworth_agent.results.runs import RunError, streams

    run = write_run(tmp_path / "run", {"standard": [1, 0, 1]})
    path = run / "standard" / "records.jsonl"
    path.write_text(path.read_text() + '{"method": "standard", "ind')  # killed mid-write
    assert [r.reward for r in streams(run)[0].records] == [1, 0, 1]
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "not json\n" + lines[1])
    with pytest.raises(RunError, match=r"records.jsonl:2 is not valid JSON"):
        streams(run)


def test_a_folder_that_is_no_run_is_refused_in_one_line(tmp_path) -> None:
    from tokenworth_agent.results.runs import RunError, streams

    with pytest.raises(RunError, match="is not a folder"):
        streams(tmp_path / "missing")
    with pytest.raises(RunError, match="no config.json"):
        streams(tmp_path)
    run = write_run(tmp_path / "run", {"standard": [1]})
    with pytest.raises(RunError, match="has no stream rag; it has: standard"):
        streams(run, names=["rag"])


def test_task_orders_are_read_from_records_and_folder_names(tmp_path) -> None:
    from tokenworth_agent.results import load_run
    from tokenworth_agent.results.runs import parse_name, streams

    assert parse_name("db/seed1/order2/rag@o_max=64") == ("db", 1, "rag", (("o_max", 64),), 2)
    assert parse_name("order10/standard") == (None, None, "standard", (), 10)
    assert parse_name("seed0/standard")[4] is None  # no order folder: the benchmark's own order
    run = write_run(tmp_path / "run", {})
    for k in (0, 2, 10):
        write_stream(run, f"order{k}/standard", [1, 0], order=k)
    write_stream(run, "order1/standard", [0, 0])  # an older record without "order": the folder says
    found = streams(run)
    assert [(s.name, s.order) for s in found] == [("order0/standard", 0), ("order1/standard", 1),
                                                  ("order2/standard", 2), ("order10/standard", 10)]
    frame = load_run(run)
    assert frame["order"].tolist() == [0, 0, 1, 1, 2, 2, 10, 10] and str(frame["order"].dtype) == "int64"
    plain = load_run(write_run(tmp_path / "one", {"standard": [1]}))
    assert plain["order"].tolist() == [0]  # a run of one order: every row order 0
