"""The `tokenworth` CLI: run (outputs, resume, errors), sweep, data fetch errors."""

import json

from typer.testing import CliRunner

from tokenworth_agent.cli import app

runner = CliRunner()


def test_run_writes_records_summary_and_plot_then_resumes(tmp_path, data_dir) -> None:
    out = tmp_path / "run"
    args = ["run", "--methods", "standard,memp", "--limit", "12", "--out", str(out), "--data-dir", data_dir,
            "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "| standard | 12 |" in result.output and "ΔTok vs Standard" in result.output
    for method in ("standard", "memp"):
        lines = (out / method / "records.jsonl").read_text().splitlines()
        assert [json.loads(x)["index"] for x in lines] == list(range(12))
    assert (out / "summary.md").read_text().startswith("## DB")
    assert (out / "cumulative_sr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    assert summary[0]["method"] == "standard" and summary[0]["delta_tok"] == 0.0 and "skill_sr" in summary[0]
    # every rate with its interval (percent), and the table ends with the paired comparison against standard
    for row in summary:
        low, high = row["sr_ci"]
        assert low <= row["sr"] <= high and row["sr_se"] > 0 and len(row["output_tok_ci"]) == 2
    assert summary[0]["comparison"] is None and summary[1]["comparison"]["baseline"] == "standard"
    assert summary[1]["comparison"]["n_pairs"] == 12 and "p_adjusted" in summary[1]["comparison"]
    text = (out / "summary.md").read_text()
    assert "| SR (%) | 95 % CI |" in text and "### Per-skill SR (%) [95 % CI]" in text
    assert text.index("## Paired comparison against standard") > text.index("Per-skill")
    assert "| memp | 12 |" in text.split("## Paired comparison")[1] and "Gain over the stream" in text
    assert (out / "difference_along_stream.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = runner.invoke(app, args)  # finished: resumes, re-runs nothing, same table
    assert again.exit_code == 0 and len((out / "memp" / "records.jsonl").read_text().splitlines()) == 12
    other = runner.invoke(app, args[:-1] + ["--seed", "4", "--no-progress"])
    assert other.exit_code == 2 and "different settings" in other.output


def test_bad_inputs_give_clear_errors(tmp_path, data_dir, monkeypatch) -> None:
    monkeypatch.delenv("TOKENWORTH_KG_ENDPOINT", raising=False)
    kg = runner.invoke(app, ["run", "--env", "kg", "--out", str(tmp_path / "kg"), "--data-dir", data_dir])
    assert kg.exit_code == 2 and "SPARQL endpoint" in kg.output and "--kg-endpoint" in kg.output
    bad = runner.invoke(app, ["run", "--methods", "standard,magic", "--data-dir", data_dir])
    assert bad.exit_code == 2 and "magic" in bad.output
    missing = runner.invoke(app, ["run", "--data-dir", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")])
    assert missing.exit_code == 2 and "tokenworth data fetch" in missing.output
    env = runner.invoke(app, ["run", "--env", "web"])
    assert env.exit_code == 2 and "unknown environment" in env.output
    grid = runner.invoke(app, ["sweep", "--grid", "bogus=1", "--data-dir", data_dir])
    assert grid.exit_code == 2 and "unknown field" in grid.output


def test_sweep_command_writes_tables(tmp_path, data_dir) -> None:
    out = tmp_path / "sweep"
    result = runner.invoke(app, ["sweep", "--grid", "eta=0.1,0.3", "--limit", "6", "--out", str(out),
                                 "--data-dir", data_dir, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "| eta_max=0.1 |" in result.output and (out / "sweep.md").exists()
    streams = json.loads((out / "sweep.json").read_text())["streams"]
    assert len(streams) == 2
    assert "| Configuration | SR (%) | 95 % CI | ΔSR vs preset (pp) | 95 % CI | p (Holm) |" in result.output
    assert all(s["sr_ci"][0] <= s["sr"] <= s["sr_ci"][1] for s in streams)


def test_data_fetch_reports_failure_clearly(tmp_path, monkeypatch) -> None:
    import tokenworth_agent.tasks

    def offline(data_dir=None, envs=("db", "os", "kg"), say=print, warn=None):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(tokenworth_agent.tasks, "fetch", offline)
    result = runner.invoke(app, ["data", "fetch", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "download failed" in result.output and "no route" in result.output


def test_bar_says_the_controller_is_compiling_during_the_first_tokenworth_task(tmp_path, data_dir) -> None:
    result = runner.invoke(app, ["run", "--methods", "standard,tokenworth", "--limit", "2", "--out", str(tmp_path),
                                 "--data-dir", data_dir])
    assert result.exit_code == 0, result.output
    assert result.output.count("compiling the controller") >= 1
    standard_bar = result.output.split("tokenworth")[0]
    assert "compiling" not in standard_bar  # only the method that compiles says so
