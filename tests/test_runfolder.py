"""The run folder: --overwrite deletes only what tokenworth wrote, locks, damaged or missing
checkpoints, one-line errors, read-only folders, parallel methods, stale temp files."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.storage.checkpoint import CheckpointError, load_checkpoint, read_records
from tokenworth_agent.cli import app
from tokenworth_agent.experiment.plan import default_out
from tokenworth_agent.results.report import ReportError, summarize
from tokenworth_agent.storage.runfolder import FolderLocked, locked
from tokenworth_agent.experiment.runner import comparable, run_stream
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks, task_record

runner = CliRunner()
DB = Budget.for_env("db")
REPO = Path(__file__).resolve().parents[1]


def run_args(out: Path, data_dir: str, methods: str = "standard,memp", limit: int = 4, *extra: str) -> list[str]:
    return ["run", "--methods", methods, "--limit", str(limit), "--out", str(out), "--data-dir", data_dir,
            "--no-progress", *extra]


def one_error_line(output: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in output, output
    return errors[0]


# ------------------------------------------------------------------------- 1. --overwrite
def test_overwrite_refuses_a_folder_that_is_not_a_run_folder(tmp_path, data_dir) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    (out / "standard").mkdir()
    (out / "standard" / "notes.txt").write_text("not ours")
    for extra in (["--overwrite"], []):
        result = runner.invoke(app, run_args(out, data_dir, "standard", 3, *extra))
        assert result.exit_code == 2 and "not a tokenworth run folder" in one_error_line(result.output)
    assert (out / "thesis.tex").read_text() == "years of work"
    assert (out / "standard" / "notes.txt").read_text() == "not ours"


def test_a_folder_another_run_is_making_is_not_taken_for_someone_elses(tmp_path, data_dir) -> None:
    """Two runs started together into one new folder: the second may look while the first holds only
    its locks and its config's temporary file (an atomic write under way). Seen once in CI as a refusal."""
    out = tmp_path / "run"
    (out / "standard").mkdir(parents=True)
    for lock in (out / ".lock", out / "standard" / ".lock"):
        lock.write_text("{}")
    (out / ".config.json.k2x8w1.tmp").write_text('{"half": ')  # being written, or cut by a kill
    result = runner.invoke(app, run_args(out, data_dir, "standard", 3))
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["env"] == "db"
    other = tmp_path / "other"
    other.mkdir()
    (other / ".config.json.k2x8w1.tmp").mkdir()  # a folder of that name is not ours
    result = runner.invoke(app, run_args(other, data_dir, "standard", 3))
    assert result.exit_code == 2 and "not a tokenworth run folder" in one_error_line(result.output)


def test_overwrite_redoes_only_the_named_methods(tmp_path, data_dir) -> None:
    out = tmp_path / "run"
    assert runner.invoke(app, run_args(out, data_dir)).exit_code == 0
    memp_before = (out / "memp" / "records.jsonl").read_bytes()
    (out / "standard" / "records.jsonl").write_text("")  # overwrite must remake this one
    for method in ("standard", "memp"):  # where a distributed executor ran them: goes with its stream
        (out / method / "node.json").write_text('{"node_id": "ab12", "hostname": "n1"}')
    (out / "notes.txt").write_text("the user's own file")
    result = runner.invoke(app, run_args(out, data_dir, "standard", 4, "--overwrite"))
    assert result.exit_code == 0, result.output
    assert not (out / "standard" / "node.json").exists() and (out / "memp" / "node.json").exists()
    assert (out / "memp" / "records.jsonl").read_bytes() == memp_before
    assert [r["index"] for r in read_records(out / "standard" / "records.jsonl")] == [0, 1, 2, 3]
    assert (out / "notes.txt").read_text() == "the user's own file"
    summary = json.loads((out / "summary.json").read_text())
    assert [s["method"] for s in summary] == ["standard", "memp"]  # memp's finished results are still summarised


def test_overwrite_with_other_settings_keeps_other_methods(tmp_path, data_dir) -> None:
    out = tmp_path / "run"
    assert runner.invoke(app, run_args(out, data_dir)).exit_code == 0
    result = runner.invoke(app, run_args(out, data_dir, "standard", 4, "--overwrite", "--seed", "5"))
    line = one_error_line(result.output)
    assert result.exit_code == 2 and "different settings" in line and "seed" in line and "memp" in line
    assert len(read_records(out / "memp" / "records.jsonl")) == 4


# ------------------------------------------------------------------------- 2. locks and the summary
def hold_lock(path: Path) -> subprocess.Popen:
    code = ("import sys; from pathlib import Path; from tokenworth_agent.storage.runfolder import locked\n"
            f"with locked(Path({str(path)!r}), 'x'):\n    print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_run_of_a_method_fails_at_once_naming_the_holder(tmp_path, data_dir) -> None:
    out = tmp_path / "run"
    assert runner.invoke(app, run_args(out, data_dir, "standard", 2)).exit_code == 0
    holder = hold_lock(out / "memp" / ".lock")
    try:
        started = time.monotonic()
        result = runner.invoke(app, run_args(out, data_dir, "standard,memp", 2))
        assert time.monotonic() - started < 20
        line = one_error_line(result.output)
        assert result.exit_code == 2 and f"pid {holder.pid}" in line and "in use" in line and "started" in line
        assert not (out / "memp" / "records.jsonl").exists()  # nothing ran: every lock is taken first
    finally:
        holder.stdin.close()
        holder.wait()
    assert runner.invoke(app, run_args(out, data_dir, "standard,memp", 2)).exit_code == 0  # released with its holder


def test_lock_is_exclusive_across_processes_and_reentrant_within_one(tmp_path) -> None:
    path = tmp_path / ".lock"
    with locked(path, "here"):
        with locked(path, "here again"):  # the same process: re-entrant
            pass
    holder = hold_lock(path)
    try:
        with pytest.raises(FolderLocked, match=f"pid {holder.pid}"):
            with locked(path, "the folder"):
                pass
    finally:
        holder.stdin.close()
        holder.wait()


def test_summary_refuses_duplicated_or_missing_tasks() -> None:
    def records(indices):
        return [task_record(i, 1, output_tokens=3, execution_tokens=3) for i in indices]

    assert summarize({"memp": records(range(4))})[0].tasks == 4
    with pytest.raises(ReportError, match="1 duplicated"):
        summarize({"memp": records([0, 1, 1, 2])})
    with pytest.raises(ReportError, match="1 missing"):
        summarize({"memp": records([0, 2, 3])})


def test_cli_refuses_to_summarise_duplicated_records(tmp_path, data_dir) -> None:
    out = tmp_path / "run"
    assert runner.invoke(app, run_args(out, data_dir, "standard", 3)).exit_code == 0
    path = out / "standard" / "records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2] + lines[1:]))  # what two writers produced before the lock
    state = load_checkpoint(out / "standard" / "checkpoint.pkl")
    from tokenworth_agent.storage.checkpoint import save_checkpoint
    save_checkpoint(out / "standard" / "checkpoint.pkl", {**state, "jsonl_offset": path.stat().st_size})
    result = runner.invoke(app, run_args(out, data_dir, "standard", 3))
    assert result.exit_code == 2 and "duplicated" in one_error_line(result.output)


# ------------------------------------------------------------------------- 5. records without a checkpoint
def test_records_without_checkpoint_are_kept_and_the_advice_touches_one_method(tmp_path) -> None:
    tasks = make_tasks(8)
    run_stream("memp", "db", tasks, FakeBackbone(), DB, 0, tmp_path, env=FakeDBEnv(), stop_after=5)
    before = (tmp_path / "memp" / "records.jsonl").read_bytes()
    for name in ("checkpoint.pkl", "checkpoint.durable.pkl"):
        (tmp_path / "memp" / name).unlink()
    with pytest.raises(CheckpointError) as info:
        run_stream("memp", "db", tasks, FakeBackbone(), DB, 0, tmp_path, env=FakeDBEnv())
    message = str(info.value)
    assert "records are kept" in message and "--methods memp --overwrite" in message
    assert "delete" not in message.replace("deletes only", "")
    assert (tmp_path / "memp" / "records.jsonl").read_bytes() == before


def test_stateless_method_is_rebuilt_from_its_records(tmp_path) -> None:
    tasks = make_tasks(9)
    reference = run_stream("standard", "db", tasks, FakeBackbone(), DB, 0, tmp_path / "ref", env=FakeDBEnv())
    out = tmp_path / "run"
    run_stream("standard", "db", tasks, FakeBackbone(), DB, 0, out, env=FakeDBEnv(), stop_after=4)
    for name in ("checkpoint.pkl", "checkpoint.durable.pkl"):
        (out / "standard" / name).unlink()
    with open(out / "standard" / "records.jsonl", "ab") as handle:
        handle.write(b'{"index": 4, "torn')  # a half-written record is dropped and re-made
    backbone = FakeBackbone()
    resumed = run_stream("standard", "db", tasks, backbone, DB, 0, out, env=FakeDBEnv())
    assert comparable(resumed) == comparable(reference)
    assert {c["task"] for c in backbone.calls} == {t.task_id for t in tasks[4:]}  # the first four were kept


def test_damaged_checkpoint_error_names_only_that_method(tmp_path, data_dir) -> None:
    out = tmp_path / "run"
    assert runner.invoke(app, run_args(out, data_dir, "standard,memp", 3)).exit_code == 0
    for name in ("checkpoint.pkl", "checkpoint.durable.pkl"):
        (out / "memp" / name).write_bytes(b"garbage")
    result = runner.invoke(app, run_args(out, data_dir, "standard,memp", 3))
    line = one_error_line(result.output)
    assert result.exit_code == 2 and "memp" in line and "--methods memp --overwrite" in line
    assert "delete it" not in line and len(read_records(out / "memp" / "records.jsonl")) == 3
    fixed = runner.invoke(app, run_args(out, data_dir, "memp", 3, "--overwrite"))
    assert fixed.exit_code == 0 and len(read_records(out / "standard" / "records.jsonl")) == 3


# ------------------------------------------------------------------------- 6/7. one error line
def test_garbage_config_is_one_error_line_naming_the_file(tmp_path, data_dir) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{not json")
    result = runner.invoke(app, run_args(out, data_dir, "standard", 2))
    line = one_error_line(result.output)
    assert result.exit_code == 2 and str(out / "config.json") in line and "not valid JSON" in line
    debug = runner.invoke(app, ["--debug", *run_args(out, data_dir, "standard", 2)])
    assert debug.exit_code != 0 and type(debug.exception).__name__ == "RunFolderError"


def test_disk_full_is_one_error_line_and_the_run_resumes(tmp_path, data_dir, monkeypatch) -> None:
    from tokenworth_agent.storage import checkpoint

    out = tmp_path / "run"
    real_append = checkpoint.RecordLog.append
    calls = {"n": 0}

    def append(self, record, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        return real_append(self, record, **kwargs)

    monkeypatch.setattr(checkpoint.RecordLog, "append", append)
    result = runner.invoke(app, run_args(out, data_dir, "standard", 5))
    line = one_error_line(result.output)
    assert result.exit_code == 1 and "disk full" in line and "records.jsonl" in line and "rerun" in line
    monkeypatch.setattr(checkpoint.RecordLog, "append", real_append)
    assert runner.invoke(app, run_args(out, data_dir, "standard", 5)).exit_code == 0
    assert [r["index"] for r in read_records(out / "standard" / "records.jsonl")] == list(range(5))


def test_backbone_failure_before_any_task_leaves_the_folder_usable(tmp_path, data_dir, monkeypatch) -> None:
    import tokenworth_agent.backbones.registry as registry
    from tokenworth_agent.backbones.base import BackboneError

    class Down:
        name = "openai"

        def generate(self, *args, **kwargs):
            raise BackboneError("http://127.0.0.1:9/v1 refused the connection")

    real = registry.make_backbone
    monkeypatch.setattr(registry, "make_backbone", lambda name, **options: Down())
    out = tmp_path / "run"
    result = runner.invoke(app, run_args(out, data_dir, "standard,memp", 3, "--seed", "1"))
    line = one_error_line(result.output)
    assert result.exit_code == 1 and "127.0.0.1:9" in line
    monkeypatch.setattr(registry, "make_backbone", real)
    # other settings (here the seed; in practice the URL) work in the same folder: no task had run
    again = runner.invoke(app, run_args(out, data_dir, "standard,memp", 3, "--seed", "2"))
    assert again.exit_code == 0, again.output
    assert json.loads((out / "config.json").read_text())["seed"] == 2


# ------------------------------------------------------------------------- 11. defaults and help
def test_default_folder_names_the_limit(tmp_path, data_dir, monkeypatch) -> None:
    assert default_out("db-sim-seed0", None) == Path("runs/db-sim-seed0")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "--methods", "standard", "--limit", "2", "--data-dir", data_dir,
                                 "--no-progress"])
    assert result.exit_code == 0, result.output
    assert len(read_records(tmp_path / "runs" / "db-sim-seed0-limit2" / "standard" / "records.jsonl")) == 2


def test_help_shows_bracketed_defaults() -> None:
    # COLUMNS alone: typer reads TERMINAL_WIDTH once, when typer.rich_utils is first imported, so setting it here
    # would fix every later help of this process at 200 columns (the 80-column tests of test_cli_user.py then fail
    # when this file runs first on their worker)
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert "e.g. runs/db-sim-seed0" in result.output and "$TOKENWORTH_DATA_DIR" in result.output
    assert "Output folder ." not in result.output and "Run directory ." not in result.output


@pytest.mark.parametrize("command,option", [("controller", "--full"), ("agent", "--seeds")])
def test_bench_help_lists_the_benchmarks_options(command, option) -> None:
    # tokenworth-bench's own app in this process (`python -m tokenworth_bench` is only `app()`; a real process of
    # it runs in test_colocation.py): the help is the benchmark's own parser's, passed through by the command
    from tokenworth_bench.cli import app as bench_app

    result = CliRunner().invoke(bench_app, [command, "--help"])
    assert result.exit_code == 0 and option in result.stdout, result.output


def test_agent_does_not_import_bench() -> None:
    code = "import sys, tokenworth_agent.cli, tokenworth_agent.experiment.runner, tokenworth_agent.experiment.sweep; print([m for m in sys.modules if m.split('.')[0] == 'bench'])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


# ------------------------------------------------------------------------- 13. hygiene
def test_stale_checkpoint_temp_files_are_removed_on_start(tmp_path) -> None:
    tasks = make_tasks(3)
    run_stream("memp", "db", tasks, FakeBackbone(), DB, 0, tmp_path, env=FakeDBEnv(), stop_after=1)
    stale = tmp_path / "memp" / ".checkpoint.pkl.abc123.tmp"
    stale.write_bytes(b"x" * 1000)  # what a kill during the checkpoint write leaves
    run_stream("memp", "db", tasks, FakeBackbone(), DB, 0, tmp_path, env=FakeDBEnv())
    assert not stale.exists()


def test_parallel_methods_into_one_folder_summarise_every_finished_method(tmp_path, data_dir) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "tokenworth_agent.cli", *run_args(out, data_dir, "standard", 6)]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    second = subprocess.run([*cmd[:5], "memp", *cmd[6:]], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    first.communicate(timeout=300)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert sorted(s["method"] for s in json.loads((out / "summary.json").read_text())) == ["memp", "standard"]


def read_only_supported() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not read_only_supported(), reason="needs unshare -m (root) for a read-only bind mount")
def test_finished_run_in_a_read_only_folder_can_be_summarised(tmp_path, data_dir) -> None:
    out = tmp_path / "run"
    assert runner.invoke(app, run_args(out, data_dir, "standard,memp", 3)).exit_code == 0
    for name in ("summary.md", "summary.json", "cumulative_sr.png", ".lock", "memp/.lock"):
        (out / name).unlink()  # as if the run had been copied without them
    elsewhere = tmp_path / "report"
    args = run_args(out, data_dir, "standard,memp", 3)
    # both invocations in one interpreter inside the mount namespace (the namespace is the process boundary that
    # matters; a second interpreter start is not), each as `python -m tokenworth_agent.cli` runs it, stopping at the
    # first that fails as `a && b` would
    cli = ("from tokenworth_agent.cli import app\n"
           f"for args in ({args!r}, {[*args, '--summary-dir', str(elsewhere)]!r}):\n"
           "    try:\n        app(args)\n"
           "    except SystemExit as exit:\n"
           "        if exit.code not in (0, None):\n            raise\n")
    script = f"mount --bind {out} {out} && mount -o remount,bind,ro {out} && exec \"$0\" -c \"$1\""
    result = subprocess.run(["unshare", "-m", "sh", "-c", script, sys.executable, cli], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    # The summary table's row (method, tasks, SR, its interval), printed once per invocation; the
    # comparison table below it starts "| memp | 3 | 66.7 [" and does not match.
    summary_row = re.compile(r"^\| memp \| 3 \| [\d.]+ \| \[", re.M)
    assert len(summary_row.findall(result.stdout)) == 2 and "read-only" in result.stderr
    assert len(re.findall(r"^\| standard \| 3 \| [\d.]+ \| \[", (elsewhere / "summary.md").read_text(), re.M)) == 1
    assert not (out / "summary.md").exists()
