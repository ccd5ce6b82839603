"""The releases that made a stream are part of its identity (agent/tokenworth_agent/experiment/releases.py).

The issue's scenario with a stand-in plugin (tests/plugin_fixtures.py): a run of hp-recency 0.3.1 (k = 2) is
killed with SIGKILL, hp-recency 0.3.2 (k = 1) is installed, and the same command is refused in one line naming
both releases, every record kept; ``--overwrite --methods recency`` starts that stream anew under 0.3.2 while the
other stream resumes. The checkpoint refuses it too where config.json cannot (a worker on a machine with another
install), and a folder made before releases were recorded resumes once and records them.
"""

from __future__ import annotations

import json
import os

import pytest

from tokenworth_agent.results.record import comparable, read_records
from tokenworth_agent.storage.checkpoint import load_checkpoint, save_checkpoint
from tests.killing import kill_at
from tests.plugin_fixtures import command, errors, install_recency, tokenworth

RUN = ("run", "--methods", "recency,rag", "--limit", "40", "--out", "run", "--no-progress")


@pytest.fixture
def site(tmp_path):
    folder = tmp_path / "site"
    folder.mkdir()
    install_recency(folder, "0.3.1", k=2)
    return folder


def _killed(site, tmp_path, data_dir, at: int = 12) -> None:
    """The run of RUN, killed by SIGKILL once recency's checkpoint covers ``at`` tasks."""
    os.environ["TOKENWORTH_DATA_DIR"] = data_dir  # kill_at's child inherits it
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        kill_at(command(site, *RUN), tmp_path / "run" / "recency" / "checkpoint.pkl", [at])
    finally:
        os.chdir(old)


def test_a_plugin_upgraded_between_kill_9_and_resume_is_refused_and_the_stream_starts_anew(site, tmp_path,
                                                                                           data_dir) -> None:
    _killed(site, tmp_path, data_dir)
    run = tmp_path / "run"
    kept = {m: (run / m / "records.jsonl").read_bytes() for m in ("recency", "rag")}
    assert 12 <= kept["recency"].count(b"\n") < 40
    install_recency(site, "0.3.2", k=1)

    resumed = tokenworth(site, *RUN, cwd=tmp_path, data_dir=data_dir)
    assert resumed.returncode == 2 and len(errors(resumed)) == 1, resumed.stderr[-2000:]
    line = errors(resumed)[0]
    assert "run/recency was made with hp-recency 0.3.1 (method recency)" in line and "hp-recency 0.3.2" in line
    assert "reinstall hp-recency==0.3.1" in line and "--overwrite --methods recency" in line
    assert {m: (run / m / "records.jsonl").read_bytes() for m in kept} == kept  # nothing lost, nothing mixed
    assert json.loads((run / "config.json").read_text())["releases"]["recency"]["method"] == "hp-recency 0.3.1"

    anew = tokenworth(site, "run", "--methods", "recency", "--overwrite", "--limit", "40", "--out", "run",
                      "--no-progress", cwd=tmp_path, data_dir=data_dir)
    assert anew.returncode == 0, anew.stderr[-2000:]
    records = read_records(run / "recency" / "records.jsonl")
    assert len(records) == 40 and {r.decision["k"] for r in records} == {1}  # all of it under 0.3.2
    releases = json.loads((run / "config.json").read_text())["releases"]
    assert releases["recency"]["method"] == "hp-recency 0.3.2" and releases["rag"]["method"].startswith(
        "tokenworth-agent ")  # the other stream's entry is kept
    assert load_checkpoint(run / "recency" / "checkpoint.pkl")["identity"]["releases"]["method"] == "hp-recency 0.3.2"
    assert (run / "rag" / "records.jsonl").read_bytes() == kept["rag"]  # not finished, not touched


def test_the_checkpoint_names_the_release_where_the_config_does_not(site, tmp_path, data_dir, monkeypatch) -> None:
    """config.json without the entry: the plan reads the stream's checkpoint and refuses before writing anything;
    and where the stream runs (a worker on a machine with another install), the checkpoint refuses it itself."""
    _killed(site, tmp_path, data_dir)
    config_path = tmp_path / "run" / "config.json"
    config = json.loads(config_path.read_text())
    del config["releases"]
    config_path.write_text(json.dumps(config))
    install_recency(site, "0.3.2", k=1)
    resumed = tokenworth(site, *RUN, cwd=tmp_path, data_dir=data_dir)
    assert resumed.returncode == 2 and len(errors(resumed)) == 1, resumed.stderr[-2000:]
    line = errors(resumed)[0]
    assert "hp-recency 0.3.1 (method recency)" in line and "hp-recency 0.3.2" in line and "--overwrite" in line
    assert json.loads(config_path.read_text()) == config  # refused before anything was written

    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.experiment import releases
    from tokenworth_agent.experiment.engine import run_experiment
    from tokenworth_agent.experiment.streams import StreamSpec
    from tokenworth_agent.sim.backbone import SimBackbone
    from tokenworth_agent.storage.checkpoint import CheckpointError
    from tokenworth_agent.tasks import load_tasks

    made = releases.stream_releases("rag", "db", "sim")
    monkeypatch.setattr(releases, "stream_releases", lambda *a: {**made, "benchmark": "tokenworth-agent 9.9"})
    with pytest.raises(CheckpointError) as refused:
        run_experiment([StreamSpec("db", "rag", 0, Budget.for_env("db"))], SimBackbone(), tmp_path / "run",
                       tasks={"db": load_tasks("db", data_dir, limit=40)})
    line = str(refused.value)
    assert "\n" not in line and f"was made with {made['benchmark']} (benchmark db)" in line
    assert "this run has tokenworth-agent 9.9" in line and "--overwrite --methods rag" in line


def test_a_folder_made_before_releases_were_recorded_resumes_once_and_then_records_them(site, tmp_path,
                                                                                        data_dir) -> None:
    reference = tokenworth(site, *RUN[:-3], "--out", "reference", "--no-progress", cwd=tmp_path, data_dir=data_dir)
    assert reference.returncode == 0, reference.stderr[-2000:]
    _killed(site, tmp_path, data_dir)
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    del config["releases"]  # as an earlier version wrote it
    (run / "config.json").write_text(json.dumps(config))
    for name in ("recency", "rag"):
        for path in (run / name).glob("checkpoint*.pkl"):
            state = load_checkpoint(path)
            del state["identity"]["releases"]
            save_checkpoint(path, state)
    resumed = tokenworth(site, *RUN, cwd=tmp_path, data_dir=data_dir)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for name in ("recency", "rag"):
        assert comparable(read_records(run / name / "records.jsonl")) == comparable(
            read_records(tmp_path / "reference" / name / "records.jsonl")), name
    assert json.loads((run / "config.json").read_text())["releases"]["recency"]["method"] == "hp-recency 0.3.1"
    assert load_checkpoint(run / "recency" / "checkpoint.pkl")["identity"]["releases"]["method"] == "hp-recency 0.3.1"
