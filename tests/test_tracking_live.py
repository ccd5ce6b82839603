"""``--track mlflow`` as a user searches it, against a real ``mlflow server`` on loopback: the undelivered line
names its cause (a refused port, a socket that accepts and never answers, an HTTP status), hyperparameters are
logged as written (``0.05``), and the folder's parent run exists while the run goes and a resume continues it."""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.server  # a real MLflow server (make test-quick leaves it out)

if importlib.util.find_spec("mlflow") is None:
    pytest.skip("mlflow comes with the [track] extra (make setup installs it)", allow_module_level=True)

from tests.killing import checkpointed_tasks
from tests.cli_here import run_here
from tests.test_tracking import REPO, command, environment
from tests.test_tracking import server  # noqa: F401 - a real mlflow server for the module, started first

SWEEP = ["sweep", "--grid", "eta_max=0.05,0.1", "--limit", "40", "--no-progress", "--track", "mlflow"]
STREAMS = ("tokenworth@eta_max=0.05", "tokenworth@eta_max=0.1")


# ------------------------------------------------------------------------- the undelivered line
class Answers503(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def target(request):
    """A tracking URI where (refused) nothing listens, (timed out) a socket accepts and never answers,
    (HTTP 503) a server answers every request with 503."""
    if request.param == "refused":
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            yield f"http://127.0.0.1:{probe.getsockname()[1]}", "Connection refused"
    elif request.param == "timed out":
        with socket.socket() as hang:
            hang.bind(("127.0.0.1", 0))
            hang.listen(64)
            yield f"http://127.0.0.1:{hang.getsockname()[1]}", "timed out"
    else:
        answering = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers503)
        threading.Thread(target=answering.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{answering.server_address[1]}", "503"
        finally:
            answering.shutdown()


@pytest.mark.parametrize("target", ["refused", "timed out", "HTTP 503"], indirect=True)
def test_the_undelivered_line_names_its_cause(target, data_dir, tmp_path) -> None:
    uri, cause = target
    env = environment(MLFLOW_TRACKING_URI=uri, MLFLOW_HTTP_REQUEST_TIMEOUT="1")
    done = run_here(command(data_dir, tmp_path / "run", "--track", "mlflow",
                            what=["--methods", "standard", "--limit", "3"]), env)
    [line] = [x for x in done.stderr.splitlines() if x.startswith("tracking: could not send")]
    assert cause in line, line


# ------------------------------------------------------------------------- parameters and the parent run
def runs_of(uri: str, out: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = [e for e in client.search_experiments() if e.name.startswith(f"tokenworth/{out.name}-")]
    return client.search_runs([found[0].experiment_id]) if found else []


def parents(runs: list) -> list:
    return [r for r in runs if r.info.run_name.endswith("(all streams)")]


def runs_kept(out: Path) -> bool:
    """Every stream's folder names its MLflow run (its tracking.json, written once the run is made, a child of the
    parent from the start): until then the server has nothing to show, and each question costs it and this
    process ~10 ms of CPU (the wait below asks ten times a second)."""
    try:
        return all((json.loads((out / name / "tracking.json").read_text()).get("mlflow") or {}) for name in STREAMS)
    except (OSError, ValueError, AttributeError):
        return False


def test_a_sweep_s_parent_exists_from_the_start_a_resume_continues_it_and_params_read_as_written(
        server, data_dir, tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    server.ready()
    uri, out = server.uri, tmp_path / "live"
    env = environment(MLFLOW_TRACKING_URI=uri)
    cmd = [sys.executable, "-m", "tokenworth_agent.cli", *SWEEP, "--data-dir", data_dir, "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:  # caught while it runs: its stream runs are already the parent's children
            if runs_kept(out):
                runs = runs_of(uri, out)
                children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
                if parents(runs) and len(children) == 2:
                    break
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no grouped stream runs in time"
            time.sleep(0.1)
        [parent] = parents(runs)
        assert parent.info.status == "RUNNING"
        # made first, not at the run's end (where it used to be made, and its streams were top-level till then)
        assert parent.info.start_time <= min(r.info.start_time for r in children)
        assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}
        while checkpointed_tasks(out / STREAMS[0] / "checkpoint.pkl") < 3:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    run_here(cmd, env)  # the resume
    runs = runs_of(uri, out)
    [again] = parents(runs)
    assert again.info.run_id == parent.info.run_id and again.info.status == "FINISHED"
    assert {r.data.tags.get("mlflow.parentRunId") for r in runs if r is not again} == {parent.info.run_id}
    client = MlflowClient(uri)
    found = client.search_runs([again.info.experiment_id], filter_string="params.`hparams.eta_max` = '0.05'")
    assert [r.info.run_name for r in found] == [STREAMS[0]]
    params = found[0].data.params
    assert params["hparams.delta_rep"] == "0.1" and params["grid_point"] == "eta_max=0.05"
