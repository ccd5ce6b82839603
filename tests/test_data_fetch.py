"""`tokenworth data fetch` against loopback servers standing in for the hub and the release hosts.

The servers (127.0.0.1 only) serve files built from the shared data: the real download code runs,
with the checksum refusal (a corrupted file), the resume (half a file, then a Range request),
idempotence (no request when the verified file is there) and the offline one-liner (a closed port).
BigCodeBench's two on-disk forms (the shipped first release, the hub's v0.1.4 split) are compared.
"""

from __future__ import annotations

import dataclasses
import hashlib
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tokenworth_agent.cli import app
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.benchmarks.bigcodebench.tasks import (FILE, HARD_SPLIT_FILE, SPLIT_FILE, hard_numbers, load_release_split,
                                                 read_rows)
from tokenworth_agent.benchmarks.bigcodebench.patches import EVERY_FIELD, to_release
import tokenworth_agent.benchmarks.bigcodebench.data as bcb_data
import tokenworth_agent.benchmarks.kg.data as kg_data
from tokenworth_agent.benchmarks.alfworld.data import ALFWORLD_URL_VARIABLE
from tokenworth_agent.benchmarks.bigcodebench.data import BCB_HARD_REVISION, BCB_HUB_FILE, BCB_REVISION
from tokenworth_agent.benchmarks.kg.data import ONTOLOGY_SHA256, ONTOLOGY_URL_VARIABLE
from tokenworth_agent.tasks.download import downloads, tasks_digest
from tokenworth_agent.tasks.lab import LAB_SHA256
from tests.loopback_files import LoopbackFiles, serving

runner = CliRunner()
LAB_DB = "/datasets/csyq/LifelongAgentBench/resolve/main/db_bench/train-00000-of-00001.parquet"
LAB_KG = "/datasets/csyq/LifelongAgentBench/resolve/main/knowledge_graph/train-00000-of-00001.parquet"
BCB_PATH = f"/datasets/bigcode/bigcodebench/resolve/{BCB_REVISION}/{BCB_HUB_FILE}"
BCB_HARD_PATH = f"/datasets/bigcode/bigcodebench-hard/resolve/{BCB_HARD_REVISION}/{BCB_HUB_FILE}"


@pytest.fixture
def server():
    with serving() as srv:
        yield srv


@pytest.fixture
def hub(server, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    return server


@pytest.fixture(scope="module")
def shared(data_dir) -> Path:
    return Path(data_dir).parent  # the data root (LAB's folder stands for it)


def fetch(root: Path, env: str):
    return runner.invoke(app, ["data", "fetch", "--env", env, "--data-dir", str(root)])


def asked(server: LoopbackFiles) -> list[tuple[str, str | None]]:
    """The requests the server saw, as (path, Range header)."""
    return [(r.path, r.range) for r in server.log]


def errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------ LAB: download, idempotence, refusal, resume
def test_fetch_downloads_verifies_and_a_second_fetch_downloads_nothing(hub, shared, tmp_path) -> None:
    body = (shared / "lifelongagentbench/db_bench/train-00000-of-00001.parquet").read_bytes()
    hub.files[LAB_DB] = body
    first = fetch(tmp_path, "db")
    assert first.exit_code == 0, first.output
    target = tmp_path / "lifelongagentbench/db_bench/train-00000-of-00001.parquet"
    assert target.read_bytes() == body and not list(tmp_path.rglob("*.part"))
    assert asked(hub) == [(LAB_DB, None)] and "downloaded and verified" in first.output
    second = fetch(tmp_path, "db")
    assert second.exit_code == 0, second.output
    assert len(hub.log) == 1 and "already there, verified" in second.output  # no request at all
    assert len(load_tasks("db", tmp_path)) == 500


def test_a_corrupted_download_is_refused_and_nothing_is_kept(hub, shared, tmp_path) -> None:
    body = bytearray((shared / "lifelongagentbench/db_bench/train-00000-of-00001.parquet").read_bytes())
    body[len(body) // 2] ^= 0xFF
    hub.files[LAB_DB] = bytes(body)
    result = fetch(tmp_path, "db")
    assert result.exit_code == 2
    [line] = errors(result.output)
    assert "failed its check" in line and "nothing was kept" in line
    assert not (tmp_path / "lifelongagentbench/db_bench/train-00000-of-00001.parquet").exists()
    assert not list(tmp_path.rglob("*.part"))


def test_an_interrupted_download_resumes_with_a_range_request(hub, shared, tmp_path) -> None:
    body = (shared / "lifelongagentbench/db_bench/train-00000-of-00001.parquet").read_bytes()
    half = len(body) // 2
    hub.files[LAB_DB] = body
    hub.cut[LAB_DB] = half
    broken = fetch(tmp_path, "db")
    assert broken.exit_code == 2 and "broke off" in errors(broken.output)[0]
    target = tmp_path / "lifelongagentbench/db_bench/train-00000-of-00001.parquet"
    part = target.with_name(target.name + ".part")
    assert not target.exists() and part.stat().st_size == half
    resumed = fetch(tmp_path, "db")
    assert resumed.exit_code == 0, resumed.output
    assert asked(hub) == [(LAB_DB, None), (LAB_DB, f"bytes={half}-")]
    assert target.read_bytes() == body and not part.exists()


def test_the_range_survives_the_hub_s_redirect(hub, shared, tmp_path) -> None:
    body = (shared / "lifelongagentbench/db_bench/train-00000-of-00001.parquet").read_bytes()
    hub.redirect[LAB_DB] = "/cdn/db.parquet"
    hub.files["/cdn/db.parquet"] = body
    hub.cut["/cdn/db.parquet"] = 4096
    assert fetch(tmp_path, "db").exit_code == 2
    result = fetch(tmp_path, "db")
    assert result.exit_code == 0, result.output
    assert asked(hub) == [(LAB_DB, None), ("/cdn/db.parquet", None), (LAB_DB, "bytes=4096-"),
                       ("/cdn/db.parquet", "bytes=4096-")]
    assert (tmp_path / "lifelongagentbench/db_bench/train-00000-of-00001.parquet").read_bytes() == body


def test_a_server_that_ignores_the_range_restarts_the_file(hub, shared, tmp_path) -> None:
    body = (shared / "lifelongagentbench/db_bench/train-00000-of-00001.parquet").read_bytes()
    hub.files[LAB_DB] = body
    hub.ranges = False
    target = tmp_path / "lifelongagentbench/db_bench/train-00000-of-00001.parquet"
    target.parent.mkdir(parents=True)
    target.with_name(target.name + ".part").write_bytes(body[:1000])
    result = fetch(tmp_path, "db")
    assert result.exit_code == 0, result.output
    assert asked(hub) == [(LAB_DB, "bytes=1000-")] and target.read_bytes() == body


def test_without_a_network_it_fails_in_one_line_naming_what_to_get_and_where(monkeypatch, tmp_path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    result = fetch(tmp_path, "db")
    assert result.exit_code == 2
    assert result.output.count("error:") == 1
    [line] = errors(result.output)
    target = tmp_path / "lifelongagentbench/db_bench/train-00000-of-00001.parquet"
    assert f"http://127.0.0.1:{port}{LAB_DB}" in line and "by hand" in line and str(target) in line
    assert not list(tmp_path.rglob("*.parquet*"))


def test_a_file_already_there_that_is_not_the_release_is_not_overwritten(hub, tmp_path) -> None:
    target = tmp_path / "lifelongagentbench/db_bench/train-00000-of-00001.parquet"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not the dataset")
    result = fetch(tmp_path, "db")
    assert result.exit_code == 2 and "move it away" in errors(result.output)[0]
    assert target.read_bytes() == b"not the dataset" and asked(hub) == []


def test_kg_fetches_the_parquet_and_the_ontology(hub, shared, tmp_path, monkeypatch) -> None:
    lab = shared / "lifelongagentbench"
    hub.files[LAB_KG] = (lab / "knowledge_graph/train-00000-of-00001.parquet").read_bytes()
    for name in ONTOLOGY_SHA256:
        hub.files[f"/onto/{name}"] = (lab / "knowledge_graph/ontology" / name).read_bytes()
    monkeypatch.setenv(ONTOLOGY_URL_VARIABLE, f"{hub.url}/onto")
    result = fetch(tmp_path, "kg")
    assert result.exit_code == 0, result.output
    for name, digest in ONTOLOGY_SHA256.items():
        assert sha((tmp_path / "lifelongagentbench/knowledge_graph/ontology" / name).read_bytes()) == digest
    assert len(hub.log) == 3


@pytest.mark.parametrize("failure", ["unreachable", "fb_roles corrupted"])
def test_a_kg_fetch_without_its_ontology_says_which_part_is_missing_and_the_run_refuses(
        failure, hub, shared, tmp_path, monkeypatch) -> None:
    lab = shared / "lifelongagentbench"
    hub.files[LAB_KG] = (lab / "knowledge_graph/train-00000-of-00001.parquet").read_bytes()
    if failure == "unreachable":
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            monkeypatch.setenv(ONTOLOGY_URL_VARIABLE, f"http://127.0.0.1:{probe.getsockname()[1]}/onto")
    else:
        for name in ONTOLOGY_SHA256:
            hub.files[f"/onto/{name}"] = (lab / "knowledge_graph/ontology" / name).read_bytes()
        hub.files["/onto/fb_roles"] = hub.files["/onto/fb_roles"][:-1] + b"x"
        monkeypatch.setenv(ONTOLOGY_URL_VARIABLE, f"{hub.url}/onto")
    result = fetch(tmp_path, "kg")
    assert result.exit_code == 2, result.output
    [line] = errors(result.output)
    assert "kg is incomplete: in place kg (tasks)" in line and "missing" in line and "ontology fb_roles" in line
    assert "--kg-vocab none" in line
    run = runner.invoke(app, ["run", "--env", "kg", "--methods", "standard", "--limit", "1", "--data-dir",
                              str(tmp_path), "--kg-endpoint", "http://127.0.0.1:9/sparql", "--out",
                              str(tmp_path / "run"), "--no-progress"])
    assert run.exit_code == 2, run.output
    [refused] = errors(run.output)
    assert "data fetch --env kg" in refused and "--kg-vocab none" in refused


# ------------------------------------------------------------------ BigCodeBench: two forms, one stream
def hub_split(rows: list[dict]) -> bytes:
    """Rows written as the hub's parquet of a split: the nine text columns, in file order."""
    table = pa.table({name: pa.array([r[name] for r in rows], pa.string()) for name in EVERY_FIELD})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


@pytest.fixture(scope="module")
def v014_rows(shared) -> list[dict]:
    return to_release(read_rows(shared / "bigcodebench" / FILE))  # the project's edits on the shipped release


def test_the_v014_split_and_the_first_release_give_the_same_stream(shared, v014_rows, tmp_path) -> None:
    (tmp_path / "bigcodebench").mkdir()
    (tmp_path / "bigcodebench" / SPLIT_FILE).write_bytes(hub_split(v014_rows))
    from_split = load_tasks("bigcodebench", tmp_path)
    from_first = load_tasks("bigcodebench", shared)
    assert len(from_split) == 1140 and [t.task_id for t in from_split] == [t.task_id for t in from_first]
    assert [dataclasses.asdict(t) for t in from_split] == [dataclasses.asdict(t) for t in from_first]
    assert [t.test for t in from_split] == [t.test for t in from_first]
    # the split is read as it is: the first release written in that form is not v0.1.4
    (tmp_path / "bigcodebench" / SPLIT_FILE).write_bytes(hub_split(read_rows(shared / "bigcodebench" / FILE)))
    assert tasks_digest(load_tasks("bigcodebench", tmp_path)) != tasks_digest(from_first)


def serve_split(hub, monkeypatch, body: bytes) -> None:
    """``body`` served as the full split, standing in for the published file: its digest is the one recorded."""
    hub.files[BCB_PATH] = body
    monkeypatch.setattr(bcb_data, "BCB_SPLIT_SHA256", sha(body))


def test_bigcodebench_files_are_pinned_to_their_commits_and_the_published_digest(tmp_path) -> None:
    full, hard = downloads("bigcodebench", tmp_path, [])
    assert full.url.endswith(f"/datasets/bigcode/bigcodebench/resolve/b74c0d0bf70d2c0bc459be537895cca163007f1a/"
                             "data/v0.1.4-00000-of-00001.parquet")
    assert full.sha256 == "d9a4965821c9507ebdfb551c288656b2d5fe553234f5183044333ca8a4018267"
    assert full.check is not None  # and its content
    assert "/resolve/298d2cc7b96612e15e47313c3603ee124cee0c1f/" in hard.url and hard.check is not None
    assert "/resolve/main/" not in full.url + hard.url
    assert "/raw/578c5e9f706fc2dd96188ca6c8cf9095ca0c6528/" in kg_data.DEFAULT_ONTOLOGY_URL


def test_one_changed_byte_in_the_footer_metadata_is_refused(hub, v014_rows, tmp_path, monkeypatch) -> None:
    body = hub_split(v014_rows)
    serve_split(hub, monkeypatch, body)
    at = body.rindex(b"parquet-cpp-arrow")  # the writer's name in the footer: no task reads it
    changed = body[:at] + b"P" + body[at + 1:]
    hub.files[BCB_PATH] = changed
    probe = tmp_path / "probe.parquet"
    probe.write_bytes(changed)
    assert tasks_digest(load_release_split(probe)) == bcb_data.BCB_TASKS_SHA256  # its tasks read the same
    result = fetch(tmp_path, "bigcodebench")
    assert result.exit_code == 2, result.output
    [line] = errors(result.output)
    assert "failed its check" in line and "sha256" in line and "verified" not in result.output


def test_bigcodebench_fetch_stores_the_v014_split_and_checks_it_by_content(hub, shared, v014_rows, tmp_path,
                                                                           monkeypatch) -> None:
    serve_split(hub, monkeypatch, hub_split(v014_rows))
    hard = set(hard_numbers())
    hub.files[BCB_HARD_PATH] = hub_split([r for r in v014_rows if int(r["task_id"].split("/")[1]) in hard])
    result = fetch(tmp_path, "bigcodebench")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "bigcodebench"
    assert (folder / SPLIT_FILE).read_bytes() == hub.files[BCB_PATH] and (folder / HARD_SPLIT_FILE).is_file()
    assert tasks_digest(load_tasks("bigcodebench", tmp_path)) == tasks_digest(load_tasks("bigcodebench", shared))
    again = fetch(tmp_path, "bigcodebench")
    assert again.exit_code == 0 and len(hub.log) == 2


def test_a_bigcodebench_split_with_other_tasks_is_refused(hub, shared, v014_rows, tmp_path, monkeypatch) -> None:
    rows = [dict(r) for r in v014_rows]
    rows[5]["test"] += "\n# edited"
    serve_split(hub, monkeypatch, hub_split(rows))  # even with a matching digest, the content check stays
    result = fetch(tmp_path, "bigcodebench")
    assert result.exit_code == 2 and "failed its check" in errors(result.output)[0]
    assert not list((tmp_path / "bigcodebench").iterdir())


def test_a_hard_split_with_other_ids_is_refused(hub, v014_rows, tmp_path, monkeypatch) -> None:
    serve_split(hub, monkeypatch, hub_split(v014_rows))
    hub.files[BCB_HARD_PATH] = hub_split(v014_rows[:148])
    result = fetch(tmp_path, "bigcodebench")
    assert result.exit_code == 2 and "Hard ids" in errors(result.output)[0]
    assert not (tmp_path / "bigcodebench" / HARD_SPLIT_FILE).exists()


def test_the_shipped_first_release_needs_no_download(hub, shared, tmp_path) -> None:
    (tmp_path / "bigcodebench").mkdir()
    (tmp_path / "bigcodebench" / FILE).symlink_to(shared / "bigcodebench" / FILE)
    result = fetch(tmp_path, "bigcodebench")
    assert result.exit_code == 0, result.output
    assert asked(hub) == [] and "nothing to download" in result.output


def test_unknown_envs_are_refused(tmp_path) -> None:
    result = fetch(tmp_path, "db,nope")
    assert result.exit_code == 2 and "nope" in errors(result.output)[0]


# ------------------------------------------------------------------ ALFWorld
# Fetching ALFWorld's release zip (download, resume, refusals, offline): tests/test_alfworld_fetch.py.
def test_alfworld_archive_already_there_needs_no_url(shared, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(ALFWORLD_URL_VARIABLE, raising=False)
    (tmp_path / "alfworld").mkdir()
    (tmp_path / "alfworld/json_2.1.1.tar.xz").symlink_to(shared / "alfworld/json_2.1.1.tar.xz")
    result = fetch(tmp_path, "alfworld")
    assert result.exit_code == 0, result.output
    assert "already there, verified" in result.output


# ------------------------------------------------------------------ the run keeps where its data came from
def test_the_run_config_keeps_the_data_source_and_an_older_folder_still_resumes(data_dir, tmp_path) -> None:
    import json

    out = tmp_path / "run"
    args = ["run", "--methods", "standard", "--limit", "2", "--data-dir", data_dir, "--out", str(out), "--no-progress"]
    assert runner.invoke(app, args).exit_code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["data_source"] == {"db": {
        "source": "hf://datasets/csyq/LifelongAgentBench@main/db_bench/train-00000-of-00001.parquet",
        "sha256": LAB_SHA256["db"]}}
    del config["data_source"]  # a folder made before the entry existed
    (out / "config.json").write_text(json.dumps(config))
    resumed = runner.invoke(app, args)  # the same command: resumes (nothing left to do)
    assert resumed.exit_code == 0, resumed.output
    assert "data_source" in json.loads((out / "config.json").read_text())  # and it is kept from now on
    config = json.loads((out / "config.json").read_text())
    config["data_source"]["db"]["sha256"] = "0" * 64  # other data: a different run
    (out / "config.json").write_text(json.dumps(config))
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "data_source" in errors(refused.output)[0], refused.output
