"""``--track mlflow`` / ``--track tensorboard`` against the real things, on loopback only.

A real ``mlflow server`` (SQLite store, artifacts in a temporary folder) on a free port of
127.0.0.1 for the module; everything is read back with ``MlflowClient`` and compared with the
records (the scalars are a function of the records: :class:`tokenworth_agent.tracking.metrics.Scalars`).
TensorBoard's event files are read back with TensorBoard's own ``EventAccumulator``. Runs are real
CLI processes: killed with SIGKILL and resumed, a server stopped under a run and started again for
the replay, a two-node Ray cluster whose workers both log to the one server (one worker killed: the
stream another worker takes over continues its MLflow run), and a Slurm array (submitit's local
executor) whose preempted task, requeued, continues its streams' runs. The runs no process boundary
matters to (the uninterrupted reference run, a resume, the local run beside the stopped server's,
``track send``/``replay``) run in this process through the CLI's own app (``run_here``), which saves
a fresh interpreter's imports (~5 CPU-seconds) per run; every killed, signalled or distributed run,
and every run whose imports are checked, is a real process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.server  # a real MLflow server for the module, and two Ray nodes (make test-quick leaves it out)

from tokenworth_agent.results.record import comparable, read_records
from tokenworth_agent.tracking.metrics import Scalars
from tests.cli_here import run_here  # the runs no process boundary matters to, in this process (REPO as the folder)
from tests.killing import checkpointed_tasks

if importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("tensorboard") is None:
    pytest.skip("mlflow and tensorboard come with the [track] extra (make setup installs it)", allow_module_level=True)

REPO = Path(__file__).resolve().parents[1]
# five streams in lockstep: long enough (seconds) that a kill lands after the tracker has logged some steps
# 150 tasks: long enough that the trackers' child (MLflow's import included, on a loaded CI machine) logs a
# stream's first steps while the run still goes, where the kill test must land (40 tasks, with the controller's
# faster start, once finished first in CI)
RUN = ["--methods", "standard,rag,memrl,memp,tokenworth", "--limit", "150"]
STREAMS = ("standard", "rag", "memrl", "memp", "tokenworth")
DOWN = ["--methods", "standard,tokenworth", "--limit", "40"]  # the run whose server is stopped under it
TIME = "time/task_s"  # the record's wall clock: the one scalar a redone task may change


# ------------------------------------------------------------------------- the server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The tracker writes runs, params and metrics over REST; MLflow's job runner (its GenAI jobs: a runner and
# seven Huey consumers, each a Python process importing mlflow) is nothing it uses. Off, a server starts in
# 7 CPU-seconds instead of 23 (measured here with mlflow 3.17; docs/performance.md).
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


class Server:
    """A real ``mlflow server`` that a test may stop and start again (same store, same port)."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        mlflow = Path(sys.executable).with_name("mlflow")
        self.proc = subprocess.Popen(
            [str(mlflow), "server", "--backend-store-uri", f"sqlite:///{self.root / 'store.db'}",
             "--artifacts-destination", str(self.root / "artifacts"), "--host", "127.0.0.1", "--port",
             str(self.port), "--workers", "1"], stdout=subprocess.DEVNULL, stderr=open(self.root / "server.log", "ab"),
            start_new_session=True, env={**os.environ, **SERVER_ENV})

    def ready(self, timeout: float = 180.0) -> "Server":
        import urllib.request

        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            assert self.proc is not None and self.proc.poll() is None, (self.root / "server.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the MLflow server did not come up"
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        with socket.socket() as s:  # nothing answers on the port any more
            assert s.connect_ex(("127.0.0.1", self.port)) != 0


@pytest.fixture(scope="module", autouse=True)
def server(tmp_path_factory):
    """Started first (it takes half a minute on 2 cores), waited for by the tests that use it."""
    found = Server(tmp_path_factory.mktemp("mlflow-server"))
    try:
        yield found
    finally:
        found.stop()


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    # the trackers at the engine's priority: on a loaded machine (CI runs another suite beside this one) the
    # default, the lowest, lets them lag the run, and these tests kill runs at points the trackers must reach
    return {**env, "PYTHONPATH": path, "TOKENWORTH_TRACK_FLUSH_S": "0.2", "TOKENWORTH_TRACK_NICE": "0", **extra}


def command(data_dir: str, out: Path, *extra: str, what: list[str] = RUN) -> list[str]:
    return [sys.executable, "-m", "tokenworth_agent.cli", "run", *what, "--data-dir", data_dir, "--out", str(out),
            "--no-progress", *extra]


def run(cmd: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


# ------------------------------------------------------------------------- reading back
def expected(out: Path, name: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar's (step, value) history, from the stream's records."""
    records = read_records(out / name / "records.jsonl")
    scalars = Scalars(len(records), simulated=True)
    found: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        for key, value in scalars(record).items():
            found.setdefault(key, []).append((record.index, value))
    return found


def experiment_runs(uri: str, out: Path) -> dict[str, object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    [experiment] = [e for e in client.search_experiments() if e.name.startswith(f"tokenworth/{out.name}-")]
    runs = client.search_runs([experiment.experiment_id])
    names = [r.info.run_name for r in runs]
    assert len(names) == len(set(names)), f"a stream has two MLflow runs: {sorted(names)}"
    return {r.info.run_name: r for r in runs}


def histories(uri: str, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric's history as logged: (step, value), in step order, duplicates kept."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    keys = client.get_run(run_id).data.metrics
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in keys}


def close_enough(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(
        [s for s, _ in got[k]] == [s for s, _ in want[k]] and
        all(abs(a - b) <= 1e-6 * max(1.0, abs(b)) for (_, a), (_, b) in zip(got[k], want[k])) for k in want)


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    reader = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    reader.Reload()
    return {tag: [(e.step, e.value) for e in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]}


def without_time(found: dict) -> dict:
    return {k: v for k, v in found.items() if k != TIME}


# ------------------------------------------------------------------------- the runs
@pytest.fixture(scope="module")
def tracked_run(server, data_dir, tmp_path_factory) -> Path:
    """One uninterrupted run, logged to the server and to TensorBoard."""
    out = tmp_path_factory.mktemp("tracked") / "run"
    server.ready()
    done = run_here(command(data_dir, out, "--track", "mlflow", "--track", "tensorboard"),
                    environment(MLFLOW_TRACKING_URI=server.uri))
    assert "could not send" not in done.stderr
    return out


def test_a_run_without_track_imports_no_tracker_and_writes_no_tracking_file(data_dir, tmp_path) -> None:
    code = f"""
import sys
from typer.testing import CliRunner
import tokenworth_agent.cli
def run(out, *flags):
    result = CliRunner().invoke(tokenworth_agent.cli.app, ['run', '--methods', 'standard', '--limit', '2', '--data-dir',
                                {data_dir!r}, '--out', out, '--no-progress', *flags])
    assert result.exit_code == 0, result.output
    print(sorted({{m.split('.')[0] for m in sys.modules}} & {{'mlflow', 'tensorboard', 'tensorboardX', 'google'}}))
run({str(tmp_path / 'run')!r})
run({str(tmp_path / 'tracked')!r}, '--track', 'tensorboard')  # the writer runs in a child process
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=environment(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-2:] == ["[]", "[]"]
    made = sorted(p.name for p in (tmp_path / "run").rglob("*"))
    assert not [n for n in made if "tracking" in n or "mlflow" in n or "tfevents" in n or n == "mlartifacts"]
    assert list((tmp_path / "tracked" / "standard").glob("events.out.tfevents.*"))


def test_the_trackers_run_in_children_at_the_lowest_priority_unless_told(tmp_path) -> None:
    from tokenworth_agent.tracking.child_sink import ChildSink

    own = os.getpriority(os.PRIO_PROCESS, 0)
    for asked, want in ((19, 19), (5, min(19, own + 5)), (0, own)):
        sink = ChildSink("tokenworth_agent.tracking.tensorboard_sink:TensorBoardSink", "tensorboard", str(tmp_path),
                         tmp_path, nice=asked)
        try:
            sink.warm()
            assert sink._proc is not None and sink._proc.pid != os.getpid()
            assert os.getpriority(os.PRIO_PROCESS, sink._proc.pid) == max(want, own), asked
        finally:
            sink.close()


def test_bad_track_values_are_one_line_and_write_nothing(data_dir, tmp_path) -> None:
    from typer.testing import CliRunner

    from tokenworth_agent.cli import app

    cases = [(["--track", "wandb"], {}, "--track 'wandb': unknown tracker; choose mlflow or tensorboard"),
             (["--track", "mlflow"], {"MLFLOW_TRACKING_URI": "ftp://example.org/x"}, "MLflow cannot log to ftp://"),
             (["--track", "mlflow"], {"MLFLOW_TRACKING_URI": "http://127.0.0.1:notaport"}, "is not a URI"),
             (["--track", "mlflow"], {"MLFLOW_TRACKING_URI": "localhost:5000"}, "MLflow cannot log to localhost://"),
             (["--track", "tensorboard"], {"TOKENWORTH_TRACK_NICE": "-5"},
              "TOKENWORTH_TRACK_NICE='-5': give a niceness")]
    for flags, env, message in cases:
        out = tmp_path / "never"
        done = CliRunner().invoke(app, ["run", "--methods", "standard", "--limit", "2", "--data-dir", data_dir,
                                        "--out", str(out), "--no-progress", *flags], env=env)
        assert done.exit_code == 2, done.output
        errors = [line for line in done.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], done.output
        assert not out.exists()
    done = CliRunner().invoke(app, ["track", "send", str(tmp_path), "--to", "http://127.0.0.1:1"])
    assert done.exit_code == 2 and "is not a run folder" in done.output, done.output


def test_mlflow_holds_every_stream_as_its_records_say(server, tracked_run) -> None:
    runs = experiment_runs(server.uri, tracked_run)
    parent = runs.pop("run (all streams)")
    assert sorted(runs) == sorted(STREAMS)
    config = json.loads((tracked_run / "config.json").read_text())
    for name, found in runs.items():
        assert close_enough(histories(server.uri, found.info.run_id), expected(tracked_run, name)), name
        params, tags = found.data.params, found.data.tags
        assert (params["env"], params["method"], params["seed"], params["backbone"]) == ("db", name, "0", "sim")
        assert params["budget.max_output_tokens"] == str(config["budget"]["max_output_tokens"])
        assert len(params["config_hash"]) == 16 and tags["host"] == socket.gethostname() and tags["commit"]
        assert tags["mlflow.parentRunId"] == parent.info.run_id and found.info.status == "FINISHED"
        assert ("hparams.eta_max" in params) == (name == "tokenworth")
    from mlflow.tracking import MlflowClient

    artifacts = {a.path for a in MlflowClient(server.uri).list_artifacts(parent.info.run_id)}
    assert {"summary.md", "summary.json", "cumulative_sr.png"} <= artifacts


def test_tensorboard_holds_every_stream_as_its_records_say(tracked_run) -> None:
    for name in STREAMS:
        assert close_enough(tensorboard_scalars(tracked_run / name), expected(tracked_run, name)), name


def logged_steps(uri: str, folder: Path) -> int:
    """How many steps of ``reward`` the server holds for the stream in ``folder`` (0 before its run exists)."""
    import urllib.request

    try:
        [run_id] = json.loads((folder / "tracking.json").read_text())["mlflow"].values()
        with urllib.request.urlopen(f"{uri}/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key=reward",
                                    timeout=5) as answer:
            return len(json.loads(answer.read()).get("metrics", []))
    except (OSError, ValueError, KeyError):
        return 0


def kill_once_logged(cmd: list[str], env: dict[str, str], uri: str, folder: Path, steps: int) -> None:
    """SIGKILL the run once the server holds ``steps`` of the stream's steps (and the stream is not done): so the
    resumed run finds steps already there, and usually committed steps the courier had not sent yet."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    try:
        while logged_steps(uri, folder) < steps:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "kill point not reached in time"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert checkpointed_tasks(folder / "checkpoint.pkl") < int(RUN[-1]), "the run finished before the kill"


def test_a_killed_run_resumed_logs_every_step_once(server, tracked_run, data_dir, tmp_path) -> None:
    out = tmp_path / "killed"
    env = environment(MLFLOW_TRACKING_URI=server.uri)
    cmd = command(data_dir, out, "--track", "mlflow", "--track", "tensorboard")
    kill_once_logged(cmd, env, server.uri, out / "tokenworth", steps=2)
    run_here(cmd, env)  # the resume (the kill above is the real process's)
    runs, reference = experiment_runs(server.uri, out), experiment_runs(server.uri, tracked_run)
    assert sorted(runs) == sorted([*STREAMS, "killed (all streams)"])
    for name in STREAMS:
        got = histories(server.uri, runs[name].info.run_id)
        assert close_enough(got, expected(out, name)), name  # each step once, with the final values
        uninterrupted = histories(server.uri, reference[name].info.run_id)
        assert close_enough(without_time(got), without_time(uninterrupted)), name
        assert [s for s, _ in got[TIME]] == [s for s, _ in uninterrupted[TIME]]
        board = tensorboard_scalars(out / name)
        assert close_enough(board, expected(out, name)), name
        assert comparable(read_records(out / name / "records.jsonl")) == \
            comparable(read_records(tracked_run / name / "records.jsonl"))


def test_a_server_down_mid_run_stops_nothing_and_the_replay_sends_the_rest(server, data_dir, tmp_path) -> None:
    out = tmp_path / "down"
    env = environment(MLFLOW_TRACKING_URI=server.uri)
    server.ready()
    proc = subprocess.Popen(command(data_dir, out, "--track", "mlflow", what=DOWN), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while checkpointed_tasks(out / "tokenworth" / "checkpoint.pkl") < 3:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    server.stop()
    try:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
        lines = [line for line in stderr.splitlines() if line.startswith("tracking: could not send")]
        assert len(lines) == 1 and "tokenworth track replay" in lines[0], stderr
        assert (out / "tracking-undelivered.jsonl").is_file()
    finally:
        server.start()  # the same store and port; it comes up while the local run below runs
    local = tmp_path / "local"
    run_here(command(data_dir, local, what=DOWN), environment())
    for name in ("standard", "tokenworth"):
        assert comparable(read_records(out / name / "records.jsonl")) == \
            comparable(read_records(local / name / "records.jsonl"))
    server.ready()
    run_here([sys.executable, "-m", "tokenworth_agent.cli", "track", "replay", str(out)], env)
    assert not (out / "tracking-undelivered.jsonl").exists()
    runs = experiment_runs(server.uri, out)
    for name in ("standard", "tokenworth"):
        assert close_enough(histories(server.uri, runs[name].info.run_id), expected(out, name)), name
        assert runs[name].info.status == "FINISHED"
    assert {"summary.md"} <= {a.path for a in __import__("mlflow").tracking.MlflowClient(server.uri).list_artifacts(
        runs["down (all streams)"].info.run_id)}


def test_send_after_the_fact_is_idempotent(server, data_dir, tmp_path) -> None:
    out = tmp_path / "plain"
    run_here(command(data_dir, out, what=["--methods", "standard,rag", "--limit", "6"]), environment())
    server.ready()
    env = environment()
    cmd = [sys.executable, "-m", "tokenworth_agent.cli", "track", "send", str(out), "--to", server.uri]
    first = run_here(cmd, env)
    assert "sent: 12 task steps of 2 streams" in first.stdout, first.stdout
    again = run_here(cmd, env)
    assert "sent: 0 task steps of 2 streams" in again.stdout, again.stdout
    runs = experiment_runs(server.uri, out)
    for name in ("standard", "rag"):
        assert close_enough(histories(server.uri, runs[name].info.run_id), expected(out, name)), name


# ------------------------------------------------------------------------- workers: Ray and Slurm
DISTRIBUTED = ["--methods", "standard,rag,memrl", "--seeds", "0,1"]
# long enough that a worker is caught after its tracker made the stream's run and before the stream ends
TAKEOVER = [*DISTRIBUTED, "--limit", "200"]
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray comes with the [ray] extra")


@pytest.fixture(scope="module")
def two_nodes():
    from tests.ray_nodes import RayNodes

    nodes = RayNodes(cpus=(1, 1))
    try:
        yield nodes
    finally:
        nodes.close()


def node_notes(out: Path) -> dict[str, dict]:
    names = sorted(str(p.parent.relative_to(out)) for p in out.rglob("records.jsonl"))
    return {n: json.loads((out / n / "node.json").read_text()) for n in names}


def caught_logging(out: Path, uri: str, proc: subprocess.Popen, tasks: int) -> tuple[str, dict]:
    """A stream whose worker has logged two steps or more to the server and has many tasks still to go."""
    deadline = time.monotonic() + 300
    while True:
        for note_file in out.rglob("node.json"):
            folder = note_file.parent
            try:
                note = json.loads(note_file.read_text())
                done = (folder / "records.jsonl").read_bytes().count(b"\n")
            except (OSError, ValueError):
                continue
            if done < tasks - 50 and logged_steps(uri, folder) >= 2:
                return str(folder.relative_to(out)), note
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "no stream was caught logging in time"
        time.sleep(0.05)


def assert_grouped_now(uri: str, out: Path, name: str) -> None:
    """While the run goes: the stream's MLflow run, made by a worker, is already the folder's parent run's child."""
    runs = experiment_runs(uri, out)
    assert f"{out.name} (all streams)" in runs, f"no parent run while the run goes: {sorted(runs)}"
    parent = runs[f"{out.name} (all streams)"]
    assert parent.info.status == "RUNNING"
    assert runs[name].data.tags.get("mlflow.parentRunId") == parent.info.run_id, runs[name].data.tags


def assert_one_run_per_stream(uri: str, out: Path, taken: str, first_pid: int) -> dict[str, dict]:
    """Every stream is one MLflow run holding each step once; ``taken`` continued the run its first worker made."""
    notes = node_notes(out)
    runs = experiment_runs(uri, out)
    assert sorted(runs) == sorted([*notes, f"{out.name} (all streams)"])  # no second run for the taken-over stream
    for name, note in notes.items():
        assert close_enough(histories(uri, runs[name].info.run_id), expected(out, name)), name
        assert runs[name].info.status == "FINISHED", name
        assert runs[name].data.tags["tokenworth.pid"] in {str(a["pid"]) for a in note["attempts"]}, name
    attempts = notes[taken]["attempts"]
    assert len(attempts) >= 2 and attempts[0]["pid"] == first_pid != attempts[-1]["pid"], attempts
    assert attempts[-1]["from_task"] >= 1  # resumed from its checkpoint
    assert runs[taken].data.tags["tokenworth.pid"] == str(first_pid)  # the run the first worker made, continued
    return notes


@pytest.mark.slow(reason="a run on two Ray nodes, each worker logging its streams to MLflow")
@needs_ray
def test_ray_workers_log_their_streams_to_one_experiment(server, two_nodes, data_dir, tmp_path) -> None:
    server.ready()
    two_nodes.ready()
    out = tmp_path / "ray"
    run(command(data_dir, out, "--executor", "ray", "--ray-address", two_nodes.address, "--track", "mlflow",
                what=[*DISTRIBUTED, "--limit", "6"]), environment(MLFLOW_TRACKING_URI=server.uri,
                                                                   RAY_USAGE_STATS_ENABLED="0"))
    names = sorted(str(p.parent.relative_to(out)) for p in out.rglob("records.jsonl"))
    notes = {n: json.loads((out / n / "node.json").read_text()) for n in names}
    assert len(names) == 6 and {note["worker"] for note in notes.values()} == {"w0", "w1"}
    runs = experiment_runs(server.uri, out)
    assert sorted(runs) == sorted([*names, "ray (all streams)"])
    for name in names:
        assert close_enough(histories(server.uri, runs[name].info.run_id), expected(out, name)), name
        # made by a worker that ran the stream, not by the driver
        assert runs[name].data.tags["tokenworth.pid"] in {str(a["pid"]) for a in notes[name]["attempts"]}, name


@pytest.mark.slow(reason="two Ray nodes, a worker killed mid-run and its streams resumed, every step checked in MLflow")
@needs_ray
def test_a_stream_a_restarted_ray_worker_takes_over_continues_its_mlflow_run(server, two_nodes, data_dir,
                                                                           tmp_path) -> None:
    server.ready()
    two_nodes.ready()
    out = tmp_path / "takeover"
    env = environment(MLFLOW_TRACKING_URI=server.uri, RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.Popen(command(data_dir, out, "--executor", "ray", "--ray-address", two_nodes.address,
                                    "--track", "mlflow", what=TAKEOVER), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        name, note = caught_logging(out, server.uri, proc, int(TAKEOVER[-1]))
        assert_grouped_now(server.uri, out, name)
        os.kill(note["pid"], signal.SIGKILL)  # the worker, its tracker and its MLflow sender with it
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    assert f"worker {note['worker']} died" in stderr and "could not send" not in stderr, stderr[-3000:]
    assert_one_run_per_stream(server.uri, out, name, note["pid"])


@pytest.mark.slow(reason="a Slurm array task preempted and requeued (submitit's local executor), its MLflow runs continued")
def test_a_preempted_slurm_task_continues_its_streams_mlflow_runs(server, data_dir, tmp_path) -> None:
    pytest.importorskip("submitit", reason="submitit comes with the [slurm] extra")
    server.ready()
    out = tmp_path / "slurm"
    env = environment(MLFLOW_TRACKING_URI=server.uri)
    proc = subprocess.Popen(command(data_dir, out, "--executor", "slurm", "--slurm-cluster", "local", "--workers", "3",
                                    "--track", "mlflow", what=TAKEOVER), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        name, note = caught_logging(out, server.uri, proc, int(TAKEOVER[-1]))
        assert_grouped_now(server.uri, out, name)
        os.kill(note["pid"], signal.SIGUSR2)  # what Slurm sends before it preempts a task; submitit requeues it
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    assert "array of 3 task(s)" in stderr and "could not send" not in stderr, stderr[-3000:]
    notes = assert_one_run_per_stream(server.uri, out, name, note["pid"])
    assert len({a["pid"] for n in notes.values() for a in n["attempts"]}) >= 4  # three array tasks and the requeued one
