"""The releases that made a stream are part of its identity (agent/tokenworth_agent/experiment/releases.py).

The issue's scenario with a stand-in plugin (tests/plugin_fixtures.py): a run of hp-recency 0.3.1 (k = 2) is
killed with SIGKILL, hp-recency 0.3.2 (k = 1) is installed, and the same command is refused in one line naming
both releases, every record kept; ``--overwrite --methods recency`` starts that stream anew under 0.3.2 while the
other stream resumes. The checkpoint refuses it too where config.json cannot (a worker on a machine with another
install), and a folder made before releases were recorded resumes once and records them.

The killed runs and the refused ones (their exit status and stderr line are the claim) are real CLI processes
that find the plugin's folder on their path; a run that must succeed (a reference, a resume, a stream started
anew) runs in this process through the CLI's own app (``cli_here``: tests/cli_here.py's ``run_here``, with
the folder put on this process's path and the plugins read again first), which saves a fresh interpreter's
imports (~5 CPU-seconds) per run.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tokenworth_agent.results.record import comparable, read_records
from tokenworth_agent.storage.checkpoint import load_checkpoint, save_checkpoint
from tests.killing import kill_at
from tests.plugin_fixtures import command, errors, install_recency, tokenworth
from tests.cli_here import run_here

RUN = ("run", "--methods", "recency,rag", "--limit", "40", "--out", "run", "--no-progress")


def run_in(folder) -> tuple[str, ...]:
    """RUN with ``folder`` (absolute) for its --out: RUN's folder where the command runs in this process."""
    return (*RUN[:-3], "--out", str(folder), "--no-progress")


@pytest.fixture
def site(tmp_path):
    folder = tmp_path / "site"
    folder.mkdir()
    install_recency(folder, "0.3.1", k=2)
    return folder


@pytest.fixture
def cli_here(site, monkeypatch):
    """``tokenworth(site, *args)`` for a run that must succeed, in this process (``run_here``: it asserts exit status
    0): ``site`` first on the path as ``command`` puts it for a child; before each run the plugin module, the import
    and metadata caches, the plugins found and the method registry are read again, so the run sees the release
    installed now, as a new process does; all of it is forgotten after the test."""
    import importlib

    from tokenworth_agent.core import plugins
    from tokenworth_agent.policies import registry

    monkeypatch.syspath_prepend(str(site))
    order = registry.POLICIES.names

    def run(*args: str, data_dir: str):
        sys.modules.pop("recency_plugin", None)
        importlib.invalidate_caches()
        plugins.refresh()
        monkeypatch.setattr(registry.POLICIES, "_entries", registry.Registry.from_plugins("method", order)._entries)
        return run_here([sys.executable, "-m", "tokenworth_agent.cli", *args], {**os.environ,
                                                                               "TOKENWORTH_DATA_DIR": data_dir})

    yield run
    monkeypatch.undo()
    sys.modules.pop("recency_plugin", None)
    plugins.refresh()


def _killed(site, tmp_path, data_dir, at: int = 12) -> None:
    """The run of RUN, killed by SIGKILL once recency's checkpoint covers ``at`` tasks."""
    os.environ["TOKENWORTH_DATA_DIR"] = data_dir  # kill_at's child inherits it
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        kill_at(command(site, *RUN), tmp_path / "run" / "recency" / "checkpoint.pkl", [at])
    finally:
        os.chdir(old)


def test_a_plugin_upgraded_between_kill_9_and_resume_is_refused_and_the_stream_starts_anew(site, tmp_path, data_dir,
                                                                                           cli_here) -> None:
    _killed(site, tmp_path, data_dir)
    run = tmp_path / "run"
    kept = {m: (run / m / "records.jsonl").read_bytes() for m in ("recency", "rag")}
    assert 12 <= kept["recency"].count(b"\n") < 40
    install_recency(site, "0.3.2", k=1)

    resumed = tokenworth(site, *RUN, cwd=tmp_path, data_dir=data_dir)
    assert resumed.returncode == 2 and len(errors(resumed)) == 1, resumed.stderr[-2000:]
    line = errors(resumed)[0]
    assert "run/recency was made with hp-recency 0.3.1 (method recency)" in line and "hp-recency 0.3.2" in line
    assert "reinstall the release it was made with (hp-recency 0.3.1)" in line and "--overwrite --methods recency" in line
    assert "==" not in line and "pip install" not in line  # a plugin may be on no index
    assert {m: (run / m / "records.jsonl").read_bytes() for m in kept} == kept  # nothing lost, nothing mixed
    assert json.loads((run / "config.json").read_text())["releases"]["recency"]["method"] == "hp-recency 0.3.1"

    cli_here("run", "--methods", "recency", "--overwrite", "--limit", "40", "--out", str(run), "--no-progress",
             data_dir=data_dir)  # asserts exit status 0
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


def test_a_folder_made_before_releases_were_recorded_resumes_once_and_then_records_them(site, tmp_path, data_dir,
                                                                                        cli_here) -> None:
    cli_here(*run_in(tmp_path / "reference"), data_dir=data_dir)  # asserts exit status 0
    _killed(site, tmp_path, data_dir)
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["parameters"] == {"recency": {"k": 2}}  # the values in use, without a grid; rag declares none
    del config["releases"], config["parameters"]  # as an earlier version wrote it
    (run / "config.json").write_text(json.dumps(config))
    for name in ("recency", "rag"):
        for path in (run / name).glob("checkpoint*.pkl"):
            state = load_checkpoint(path)
            del state["identity"]["releases"]
            state["identity"].pop("parameters", None)
            save_checkpoint(path, state)
    cli_here(*run_in(run), data_dir=data_dir)  # the resume; asserts exit status 0
    for name in ("recency", "rag"):
        assert comparable(read_records(run / name / "records.jsonl")) == comparable(
            read_records(tmp_path / "reference" / name / "records.jsonl")), name
    config = json.loads((run / "config.json").read_text())
    assert config["releases"]["recency"]["method"] == "hp-recency 0.3.1" and config["parameters"] == {"recency": {"k": 2}}
    identity = load_checkpoint(run / "recency" / "checkpoint.pkl")["identity"]
    assert identity["releases"]["method"] == "hp-recency 0.3.1" and identity["parameters"] == {"k": 2}


# ------------------------------------------------------------------------- the code under a version
@pytest.fixture
def here(tmp_path, monkeypatch):
    """hp-recency 0.3.1 in a folder on this process's path (its dist-info has no RECORD: the files themselves are
    its code, as for an editable install), the method registry made from it; forgotten before and after."""
    from tokenworth_agent.core import plugins
    from tokenworth_agent.policies import registry

    folder = tmp_path / "here"
    folder.mkdir()
    install_recency(folder, "0.3.1", k=2)
    # another test in this process may have imported a recency_plugin from its own folder: the digest would
    # then read that module's files (an import finds sys.modules first), not this folder's
    monkeypatch.delitem(sys.modules, "recency_plugin", raising=False)
    monkeypatch.syspath_prepend(str(folder))
    plugins.refresh()
    monkeypatch.setattr(registry, "POLICIES", registry.Registry.from_plugins("method"))
    yield folder
    monkeypatch.undo()
    plugins.refresh()


def _record(info, files: dict[str, str]) -> None:
    (info / "RECORD").write_text("".join(f"{path},sha256={value},10\n" for path, value in files.items()) +
                                 f"{info.name}/RECORD,,\n")


def test_a_plugins_code_is_digested_from_its_record_or_its_files(here) -> None:
    from tokenworth_agent.core import plugins
    from tokenworth_agent.experiment.releases import stream_releases

    [info] = here.glob("hp_recency-*.dist-info")
    plugin = plugins.describe("method", "recency")
    editable = plugins.files_digest(plugin)  # no RECORD: recency_plugin.py itself
    assert editable is not None and len(editable) == 16
    (here / "recency_plugin.py").write_text((here / "recency_plugin.py").read_text() + "# other code\n")
    plugins.refresh()
    assert plugins.files_digest(plugins.describe("method", "recency")) != editable

    _record(info, {"recency_plugin.py": "AAAA", f"{info.name}/METADATA": "BBBB"})
    plugins.refresh()
    recorded = plugins.files_digest(plugins.describe("method", "recency"))
    (info / "INSTALLER").write_text("pip\n")  # how it was installed is not its code
    _record(info, {"recency_plugin.py": "AAAA", f"{info.name}/METADATA": "BBBB", f"{info.name}/INSTALLER": "CCCC",
                   "__pycache__/recency_plugin.cpython-311.pyc": "DDDD"})
    plugins.refresh()
    assert plugins.files_digest(plugins.describe("method", "recency")) == recorded != editable
    _record(info, {"recency_plugin.py": "EEEE", f"{info.name}/METADATA": "BBBB"})
    plugins.refresh()
    assert plugins.files_digest(plugins.describe("method", "recency")) != recorded
    (info / "direct_url.json").write_text('{"url": "file:///src", "dir_info": {"editable": true}}')
    plugins.refresh()  # an editable install's RECORD names its link, not its code: the files are read
    assert plugins.files_digest(plugins.describe("method", "recency")) not in (recorded, None)

    entry = stream_releases("recency", "db", "sim")
    assert entry["method"] == "hp-recency 0.3.1" and set(entry["files"]) == {"method"}
    assert stream_releases("rag", "db", "sim") == {kind: entry["benchmark"] for kind in ("method", "benchmark",
                                                                                          "backbone")}  # as before


def test_the_refusals_name_what_changed_and_say_reinstall_not_pip() -> None:
    from tokenworth_agent.experiment.releases import changed_line

    names = {"method": "recency", "benchmark": "db", "backbone": "sim"}
    made = {"method": "hp-recency 0.4.0", "benchmark": "tokenworth-agent 0.3.0", "backbone": "tokenworth-agent 0.3.0",
            "files": {"method": "1111111111111111"}}
    upgraded = changed_line("run/recency", names, made, {**made, "method": "hp-recency 0.4.1"}, "--overwrite")
    assert "reinstall the release it was made with (hp-recency 0.4.0) to resume it" in upgraded and "==" not in upgraded
    other_code = changed_line("run/recency", names, made, {**made, "files": {"method": "2222222222222222"}},
                              "--overwrite")
    assert "\n" not in other_code and other_code.startswith(
        "run/recency was made with other code of hp-recency 0.4.0 (method recency: files 1111111111111111 then, "
        "2222222222222222 now), under the same version"), other_code
    assert "reinstall the release it was made with (hp-recency 0.4.0" in other_code and "--overwrite" in other_code
    older = {k: v for k, v in made.items() if k != "files"}  # recorded before the digests: resumed once
    assert changed_line("run/recency", names, older, made, "--overwrite") is None
    assert changed_line("run/recency", names, made, made, "--overwrite") is None


def test_a_resume_under_other_code_of_the_same_version_is_refused(here, tmp_path, data_dir) -> None:
    """The same version reinstalled with other code: the stream's checkpoint refuses it in one line naming what
    changed (it resumed silently and mixed records); a checkpoint from before the digests resumes once."""
    from tokenworth_agent.core import plugins
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.experiment.engine import run_experiment
    from tokenworth_agent.experiment.streams import StreamSpec
    from tokenworth_agent.sim.backbone import SimBackbone
    from tokenworth_agent.storage.checkpoint import CheckpointError
    from tokenworth_agent.tasks import load_tasks

    tasks = {"db": load_tasks("db", data_dir, limit=3)}
    streams = [StreamSpec("db", "recency", 0, Budget.for_env("db"))]
    run_experiment(streams, SimBackbone(), tmp_path / "run", tasks=tasks, stop_after=2)  # as if killed after 2
    checkpoint = tmp_path / "run" / "recency" / "checkpoint.pkl"
    identity = load_checkpoint(checkpoint)["identity"]
    assert identity["parameters"] == {"k": 2} and identity["releases"]["files"]["method"]
    install_recency(here, "0.3.1", k=1)  # same version, other code
    plugins.refresh()
    with pytest.raises(CheckpointError) as refused:
        run_experiment(streams, SimBackbone(), tmp_path / "run", tasks=tasks)
    line = str(refused.value)
    assert "\n" not in line and "was made with other code of hp-recency 0.3.1 (method recency: files " in line, line
    assert "--overwrite --methods recency" in line

    state = load_checkpoint(checkpoint)
    del state["identity"]["releases"]["files"]  # as a checkpoint from before the digests
    save_checkpoint(checkpoint, state)
    run_experiment(streams, SimBackbone(), tmp_path / "run", tasks=tasks)  # resumed once, under the installed code
    assert load_checkpoint(checkpoint)["next_index"] == 3
    assert load_checkpoint(checkpoint)["identity"]["releases"]["files"] == {
        "method": plugins.files_digest(plugins.describe("method", "recency"))}
