"""Every benchmark refused for each missing set-up (engine venv, endpoint, data, ontology) the way a user reads
it: one ``error:`` line and exit code 2 from ``run``, ``sweep``, ``show`` and ``data``, never a traceback.

The data root is the shared data, linked into a temporary folder, with one part taken away per case."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenworth_agent.cli import app
from tokenworth_agent.benchmarks.alfworld.engine_venv import VENV_VARIABLE as ALFWORLD_VENV
from tokenworth_agent.benchmarks.alfworld.engine_venv import EngineVenvError, open_venv as open_alfworld_venv
from tokenworth_agent.benchmarks.bigcodebench.eval_venv import VENV_VARIABLE as BCB_VENV
from tokenworth_agent.benchmarks.bigcodebench.eval_venv import VenvError, open_venv as open_bcb_venv

runner = CliRunner()
ENDPOINT = "http://127.0.0.1:9/sparql"  # never queried: the plan only needs one named
PARQUET = "train-00000-of-00001.parquet"


def errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def link_root(shared: Path, root: Path, leave_out: str | None = None) -> Path:
    """The shared data root as links under ``root``; ``leave_out``: an env's tasks, or "ontology"."""
    lab = root / "lifelongagentbench"
    for env, folder in (("db", "db_bench"), ("os", "os_interaction"), ("kg", "knowledge_graph")):
        if env == leave_out:
            continue
        (lab / folder).mkdir(parents=True)
        (lab / folder / PARQUET).symlink_to(shared / "lifelongagentbench" / folder / PARQUET)
    if leave_out != "kg" and leave_out != "ontology":
        (lab / "knowledge_graph" / "ontology").symlink_to(shared / "lifelongagentbench/knowledge_graph/ontology")
    for benchmark, name in (("bigcodebench", "BigCodeBench.jsonl.gz"), ("alfworld", "json_2.1.1.tar.xz")):
        (root / benchmark).mkdir()
        if benchmark != leave_out:
            (root / benchmark / name).symlink_to(shared / benchmark / name)
    return root


def needs_real_venv(env: str) -> None:
    try:
        open_bcb_venv() if env == "bigcodebench" else open_alfworld_venv() if env == "alfworld" else None
    except (VenvError, EngineVenvError) as exc:
        pytest.skip(f"the case needs {env}'s venv: {exc}")


# (env, the missing set-up, what the line must name)
CASES = [
    ("db", "data", "data fetch"),
    ("os", "data", "data fetch"),
    ("kg", "data", "data fetch"),
    ("kg", "endpoint", "--kg-endpoint"),
    ("kg", "ontology", "--kg-vocab none"),
    ("bigcodebench", "data", "data fetch"),
    ("bigcodebench", "venv", "make bcb-setup"),
    ("alfworld", "data", "data fetch"),
    ("alfworld", "venv", "make alfworld-setup"),
]


@pytest.mark.parametrize("env, missing, named", CASES, ids=[f"{e}-{m}" for e, m, _ in CASES])
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_each_missing_set_up_is_one_error_line_and_rc_2(command, env, missing, named, data_dir, tmp_path,
                                                        monkeypatch) -> None:
    root = link_root(Path(data_dir).parent, tmp_path / "data", leave_out=env if missing == "data" else
                     "ontology" if missing == "ontology" else None)
    if missing == "venv":
        monkeypatch.setenv(BCB_VENV if env == "bigcodebench" else ALFWORLD_VENV, str(tmp_path / "no-venv"))
    else:
        needs_real_venv(env)
    if missing == "endpoint":
        monkeypatch.delenv("TOKENWORTH_KG_ENDPOINT", raising=False)
    args = [command, "--env", env, "--limit", "2", "--data-dir", str(root), "--out", str(tmp_path / "run"),
            "--no-progress", *(["--kg-endpoint", ENDPOINT] if env == "kg" and missing != "endpoint" else [])]
    if command == "run":
        args += ["--methods", "standard"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, (SystemExit, type(None))), result.output
    [line] = errors(result.output)
    assert named in line, line
    assert not (tmp_path / "run").exists()


def test_the_kg_ontology_refusal_names_both_ways_on(data_dir, tmp_path) -> None:
    root = link_root(Path(data_dir).parent, tmp_path / "data", leave_out="ontology")
    base = ["run", "--env", "kg", "--methods", "standard", "--limit", "1", "--data-dir", str(root),
            "--kg-endpoint", ENDPOINT, "--out", str(tmp_path / "run"), "--no-progress"]
    [line] = errors(runner.invoke(app, base).output)
    assert "data fetch --env kg" in line and "--kg-vocab none" in line and "vocab.json or fb_roles" in line


def test_show_of_a_missing_folder_is_one_line(tmp_path) -> None:
    result = runner.invoke(app, ["show", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and len(errors(result.output)) == 1, result.output


@pytest.mark.parametrize("env", ["db", "kg", "bigcodebench", "alfworld"])
def test_data_fetch_offline_is_one_line_for_every_benchmark(env, tmp_path, monkeypatch) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    for variable in ("HF_ENDPOINT", "TOKENWORTH_KG_ONTOLOGY_URL", "TOKENWORTH_ALFWORLD_URL"):
        monkeypatch.setenv(variable, closed)
    result = runner.invoke(app, ["data", "fetch", "--env", env, "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    [line] = errors(result.output)
    assert closed in line and "Traceback" not in result.output
