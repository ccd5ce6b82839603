"""``--executor ray`` and ``--executor slurm`` on this machine: real Ray nodes (tests/ray_nodes.py) and
submitit's local executor, with the simulated backbone.

What is shown, each against a local run of the same command (records field for field, but ``time_s``):
the records, ``config.json`` and ``summary.md`` equal; both nodes ran streams, each stream's
``node.json`` names its node; a worker killed with ``kill -9`` is restarted and its streams resume
exactly; a node that disappears has its streams finished on the others; a killed driver leaves
nothing running and the same command resumes; a dead head stops the driver in one line and the
same command resumes on another cluster; the refusals (no cluster, a silent port, a bad address, Ray versions that differ,
too few GPUs) are one line within a minute, with nothing written; a Slurm array task preempted
(SIGUSR2) is requeued and resumes. And Ray is never imported by ``tokenworth_jax`` or a local run.

The drivers are ``python -m tokenworth_agent.cli`` subprocesses, so they can be killed. Fault runs use methods
without a JAX controller (faster; the engine's resume of ``tokenworth`` is tested in
test_experiment.py); the equality run includes ``tokenworth``.
"""

from __future__ import annotations

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

pytestmark = pytest.mark.server  # real Ray nodes (make test-quick leaves it out)

from tokenworth_agent.core import interrupt
from tokenworth_agent.results.record import comparable, read_records
from tokenworth_agent.storage.checkpoint import load_checkpoint
from tests.killing import running

# Found, never imported: importing Ray into this process installs its own signal handling (later tests
# that send SIGINT to themselves then saw it swallowed) and threads. Ray runs only in the driver
# subprocesses and the helper process that owns the nodes.
if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is installed by the [ray] extra (make setup installs it)", allow_module_level=True)
pytest.importorskip("submitit", reason="submitit is installed by the [slurm] extra (make setup installs it)")

from tokenworth_agent.experiment.distributed.slurm import Preemption  # noqa: E402
from tests.ray_nodes import RayNodes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EQUAL = ["--methods", "standard,rag,memrl,tokenworth", "--seeds", "0,1", "--limit", "6"]
FAULT = ["--methods", "standard,rag,memrl", "--seeds", "0,1", "--limit", "12"]
# A node taken away must still have streams to lose when the removal lands: the removal itself takes
# seconds on a loaded machine (CI runs the real-engine suite beside this one), in which a 12-task stream
# seen at its second record could finish, leaving nothing to die (measured once in CI).
LONG_FAULT = ["--methods", "standard,rag,memrl", "--seeds", "0,1", "--limit", "30"]
# The nodes run without Ray's log monitor (the drivers join with log_to_driver=False: nothing reads what it
# gathers) and without its autoscaler monitor (nothing here scales; a dead node is the GCS's to notice): two
# daemons that spent CPU for the module's whole life and that no test looks at.
LEAN = {"include_log_monitor": False, "no_monitor": True}


def command(data_dir: str, what: list[str], out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tokenworth_agent.cli", "run", *what, "--data-dir", data_dir, "--out", str(out),
            "--no-progress", *extra]


def environment() -> dict[str, str]:
    # faulthandler: a driver that crashes prints its Python threads' stacks to the stderr the test shows
    return {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "PYTHONFAULTHANDLER": "1"}


def run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """The finished command, with its ``pid`` (a crashed driver's Ray core log is named by it)."""
    proc = start(cmd)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    done.pid = proc.pid  # type: ignore[attr-defined]
    return done


def failed(driver: subprocess.Popen | subprocess.CompletedProcess, stderr: str, nodes: RayNodes) -> str:
    """A failed driver's message: its stderr's end; for a driver a signal ended, faulthandler's report (every
    Python thread's stack) and the end of its Ray core log (where Ray's C++ core writes the crash's stack),
    which the nodes' folder loses at their close."""
    if driver.returncode >= 0:
        return stderr[-3000:]
    start = stderr.rfind("Fatal Python error")
    tail = stderr[start:] if start >= 0 else stderr[-3000:]
    report = "\n".join(line for line in tail.splitlines() if not line.startswith("Extension modules:"))
    return (f"{report[-12000:]}\n--- the driver died of signal {-driver.returncode}; its Ray core log:\n"
            f"{nodes.driver_log(driver.pid)}")


def names_of(out: Path) -> list[str]:
    return sorted(str(p.parent.relative_to(out)) for p in out.rglob("records.jsonl"))


def assert_same_run(got: Path, reference: Path) -> None:
    """Every stream's records equal the reference's field for field (but time_s), and so do config and summary."""
    names = names_of(reference)
    assert names and names_of(got) == names
    for name in names:
        assert comparable(read_records(got / name / "records.jsonl")) == \
            comparable(read_records(reference / name / "records.jsonl")), name
        assert load_checkpoint(got / name / "checkpoint.pkl")["finished"], name
    assert json.loads((got / "config.json").read_text()) == json.loads((reference / "config.json").read_text())
    assert (got / "summary.md").read_text() == (reference / "summary.md").read_text()


def node_notes(out: Path) -> dict[str, dict]:
    return {name: json.loads((out / name / "node.json").read_text()) for name in names_of(out)}


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def two_nodes():
    """Two real nodes of one CPU each (the head is node 0), for the whole module."""
    nodes = RayNodes(cpus=(1, 1), node_args=LEAN)
    try:
        yield nodes
    finally:
        nodes.close()


@pytest.fixture(scope="module")
def references(tmp_path_factory, data_dir, two_nodes) -> dict[str, Path]:
    """The local runs every distributed run is compared with (made while the cluster starts)."""
    from typer.testing import CliRunner

    from tokenworth_agent.cli import app

    root = tmp_path_factory.mktemp("reference")
    found = {}
    for key, what in (("equal", EQUAL), ("fault", FAULT), ("long fault", LONG_FAULT)):
        done = CliRunner().invoke(app, command(data_dir, what, root / key)[3:])
        assert done.exit_code == 0, done.output[-3000:]
        found[key] = root / key
    two_nodes.ready()
    return found


def start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for(condition, proc: subprocess.Popen, timeout: float = 300, what: str = "the run to get going"):
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"the driver exited ({proc.returncode}) before {what}: {proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # a task takes far longer; a stream stays in running_stream's window for seconds


def running_stream(out: Path, node_id: str | None = None) -> tuple[str, dict] | None:
    """A stream under way and its node.json (on ``node_id``, if given).

    Under way: two records or more, and not finished. A kill right after the first record can fall
    before that task's checkpoint (the task is then rightly redone, from task 0); after the second,
    the checkpoint of the first is on disk, so a resume starts at task 1 or later."""
    for folder in out.rglob("node.json"):
        try:
            note = json.loads(folder.read_text())
            records = (folder.parent / "records.jsonl").read_bytes().count(b"\n")
        except (OSError, ValueError):
            continue
        if 2 <= records < 10 and (node_id is None or note["node_id"] == node_id):
            return str(folder.parent.relative_to(out)), note
    return None


# ------------------------------------------------------------------------- Ray: the records and where they ran
@pytest.mark.slow(reason="a four-method run on two Ray nodes against the local run")
def test_records_equal_a_local_runs_and_both_nodes_ran_streams(two_nodes, references, data_dir, tmp_path) -> None:
    out = tmp_path / "ray"
    done = run(command(data_dir, EQUAL, out, "--executor", "ray", "--ray-address", two_nodes.address))
    assert done.returncode == 0, failed(done, done.stderr, two_nodes)
    assert "2 workers" in done.stderr, done.stderr
    assert f"_{done.pid}.log\n" in two_nodes.driver_log(done.pid)  # where failed() finds a crashed driver's stack
    assert_same_run(out, references["equal"])
    notes = node_notes(out)
    assert {n["node_id"] for n in notes.values()} == set(two_nodes.node_ids[:2])  # both nodes ran streams
    for note in notes.values():
        assert note["hostname"] == socket.gethostname() and note["executor"] == "ray"
        assert note["attempts"][-1]["node_id"] == note["node_id"] and len(note["attempts"]) == 1


@pytest.mark.slow(reason="a Ray run on two nodes whose worker is killed with kill -9 mid-run")
def test_a_killed_worker_is_restarted_and_its_streams_resume_exactly(two_nodes, references, data_dir, tmp_path):
    out = tmp_path / "ray"
    proc = start(command(data_dir, FAULT, out, "--executor", "ray", "--ray-address", two_nodes.address))
    try:
        name, note = wait_for(lambda: running_stream(out), proc)
        os.kill(note["pid"], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, failed(proc, stderr, two_nodes)
    assert f"worker {note['worker']} died" in stderr
    assert_same_run(out, references["fault"])
    attempts = node_notes(out)[name]["attempts"]
    assert len(attempts) >= 2 and attempts[0]["pid"] == note["pid"] != attempts[-1]["pid"]
    assert attempts[-1]["from_task"] >= 1  # resumed from its checkpoint, not redone


@pytest.mark.slow(reason="a Ray run whose driver is killed with kill -9, then the same command resumed on two nodes")
def test_a_killed_driver_leaves_nothing_running_and_the_same_command_resumes(two_nodes, references, data_dir,
                                                                             tmp_path) -> None:
    out = tmp_path / "ray"
    cmd = command(data_dir, FAULT, out, "--executor", "ray", "--ray-address", two_nodes.address)
    proc = start(cmd)
    try:
        wait_for(lambda: running_stream(out), proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    # the streams' workers, from the node.json each wrote: a stream whose worker the kill caught between opening its
    # folder (records.jsonl) and writing node.json names none (seen once in a fresh clone's gate)
    workers = {json.loads(note.read_text())["pid"] for note in out.rglob("node.json")}
    assert workers  # running_stream found one
    deadline = time.monotonic() + 20
    while any(map(running, workers)) and time.monotonic() < deadline:  # Ray ends a dead driver's actors
        time.sleep(0.2)
    assert not [pid for pid in workers if running(pid)]
    done = run(cmd)
    assert done.returncode == 0, failed(done, done.stderr, two_nodes)
    assert "resuming:" in done.stderr
    assert_same_run(out, references["fault"])


# ------------------------------------------------------------------------- Ray: nodes that go away
@pytest.mark.slow(reason="a third Ray node joins the cluster, takes streams of 30 tasks and is removed mid-run")
def test_a_removed_nodes_streams_finish_on_the_other_nodes(two_nodes, references, data_dir, tmp_path) -> None:
    third = two_nodes.add(cpus=1)
    out = tmp_path / "ray"
    proc = start(command(data_dir, LONG_FAULT, out, "--executor", "ray", "--ray-address", two_nodes.address))
    try:
        name, _ = wait_for(lambda: running_stream(out, two_nodes.node_ids[third]), proc)
        two_nodes.remove(third)
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, failed(proc, stderr, two_nodes)
    assert "3 workers" in stderr and "died" in stderr, stderr[-3000:]
    assert_same_run(out, references["long fault"])
    attempts = node_notes(out)[name]["attempts"]
    assert attempts[0]["node_id"] == two_nodes.node_ids[third]
    assert attempts[-1]["node_id"] in two_nodes.node_ids[:2] and attempts[-1]["from_task"] >= 1


@pytest.mark.slow(reason="a second Ray cluster whose head dies mid-run, then a resume on the first")
def test_a_dead_head_stops_the_driver_in_one_line_and_another_cluster_resumes(two_nodes, references, data_dir,
                                                                             tmp_path) -> None:
    out = tmp_path / "ray"
    nodes = RayNodes(cpus=(2,), node_args=LEAN).ready()
    try:
        proc = start(command(data_dir, FAULT, out, "--executor", "ray", "--ray-address", nodes.address))
        try:
            wait_for(lambda: running_stream(out), proc)
            nodes.remove(0)
            died = time.monotonic()
            _, stderr = proc.communicate(timeout=300)
            stopped_s = time.monotonic() - died
        finally:
            proc.kill()
    finally:
        nodes.close()
    assert proc.returncode == 1 and stopped_s < 90, (proc.returncode, stopped_s, stderr[-3000:])
    [line] = error_lines(stderr)
    assert "lost the Ray cluster" in line and "rerun the same command" in line and "Traceback" not in stderr
    done = run(command(data_dir, FAULT, out, "--executor", "ray", "--ray-address", two_nodes.address))
    assert done.returncode == 0, failed(done, done.stderr, two_nodes)
    assert "resuming:" in done.stderr
    assert_same_run(out, references["fault"])


# ------------------------------------------------------------------------- Ray: refusals
def silent_port() -> tuple[socket.socket, int]:
    """A port that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.extend(iter(lambda: server.accept()[0], None)), daemon=True).start()
    return server, server.getsockname()[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_refusals_are_one_line_without_a_long_wait_and_write_nothing(two_nodes, data_dir, tmp_path) -> None:
    """Each refusal is one line, and the waits it can take are seconds: the probe and Ray's connect limits
    (checked as the values they are, not as wall time: the seven commands start at once, on a machine the
    gate keeps busy, where a Python start alone can take a minute; a hang still fails at the timeout)."""
    limits = subprocess.run([sys.executable, "-c", """if True:
        import json, os
        from tokenworth_agent.experiment.distributed import ray_cluster as rc
        os.environ.pop(rc.SURVEY_ENV, None)
        found = {"probe": rc.PROBE_TIMEOUT_S, "ray": [float(v) for v in rc.FAIL_FAST_ENV.values()],
                 "survey": rc.survey_timeout_s(), "refused": []}
        for bad in ("abc", "0", "-1", "inf", "nan"):
            os.environ[rc.SURVEY_ENV] = bad
            try:
                rc.survey_timeout_s()
            except rc.ClusterRefused as e:
                found["refused"].append(str(e))
        os.environ[rc.SURVEY_ENV] = "300"
        found["set"] = rc.survey_timeout_s()
        print(json.dumps(found))"""], capture_output=True, text=True, check=True)  # ray stays out of this process
    found = json.loads(limits.stdout)
    assert found["probe"] <= 5 and max(found["ray"]) <= 5 and found["survey"] == 60 and found["set"] == 300
    assert len(found["refused"]) == 5 and all("TOKENWORTH_RAY_SURVEY_S=" in e for e in found["refused"]), found
    two_nodes.ready()
    silent, port = silent_port()
    skewed = [sys.executable, "-c", "import ray; ray.__version__ = '2.59.0'; from tokenworth_agent.cli import app; app()"]
    # a method plugin the driver has and the nodes do not (a distribution on the driver's path alone)
    site = tmp_path.parent / f"{tmp_path.name}-site"
    info = site / "ghost_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ghost-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tokenworth.methods]\nghost = ghost_policy:GhostPolicy\n")
    (site / "ghost_policy.py").write_text("from tokenworth_agent.policies.standard import StandardPolicy\n\n\n"
                                          "class GhostPolicy(StandardPolicy):\n    name = 'ghost'\n")
    ghost = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(site)!r}); from tokenworth_agent.cli import app; app()"]
    cases = {  # name: (command, what the line must say)
        "nothing listening": (command(data_dir, FAULT, tmp_path / "a", "--executor", "ray", "--ray-address",
                                      f"127.0.0.1:{free_port()}"), "no Ray cluster answers at 127.0.0.1"),
        "a silent port": (command(data_dir, FAULT, tmp_path / "b", "--executor", "ray", "--ray-address",
                                  f"127.0.0.1:{port}"), "nothing answered within"),
        "not an address": (command(data_dir, FAULT, tmp_path / "c", "--executor", "ray", "--ray-address", "garbage"),
                           "expected HOST:PORT"),
        "too few GPUs": (command(data_dir, FAULT, tmp_path / "d", "--executor", "ray", "--ray-address",
                                 two_nodes.address, "--backbone", "vllm", "--model", "m"), "has 0 GPU(s)"),
        "other Ray versions": ([*skewed, *command(data_dir, FAULT, tmp_path / "e", "--executor", "ray",
                                                  "--ray-address", two_nodes.address)[3:]], "other versions"),
        "--ray-address without ray": (command(data_dir, FAULT, tmp_path / "f", "--ray-address", "h:1"),
                                      "--ray-address only applies to --executor ray"),
        "a plugin the nodes lack": ([*ghost, *command(data_dir, ["--methods", "ghost,rag", "--limit", "2"], tmp_path / "g",
                                                      "--executor", "ray", "--ray-address", two_nodes.address)[3:]],
                                    "lacks the method 'ghost' (ghost-plugin 1.0 here)"),
    }
    try:
        procs = {case: start(cmd) for case, (cmd, _) in cases.items()}
        for case, proc in procs.items():
            try:
                _, stderr = proc.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{case}: no refusal after 10 minutes")
            assert proc.returncode == 2, (case, stderr[-2000:])
            [line] = error_lines(stderr)
            assert cases[case][1] in line, (case, line)
            assert "Traceback" not in stderr and len(stderr.strip().splitlines()) <= 2, (case, stderr)
    finally:
        silent.close()
    assert list(tmp_path.iterdir()) == []  # no --out was made, nothing written anywhere


def test_a_node_that_cannot_see_the_folder_or_its_locks_is_refused(tmp_path) -> None:
    from tokenworth_agent.experiment.distributed.storage import storage_probe
    from tokenworth_agent.storage import runfolder

    (tmp_path / "config.json").write_text('{"env": "db"}')
    import hashlib

    digest = hashlib.sha256((tmp_path / "config.json").read_bytes()).hexdigest()
    lock = tmp_path / ".driver.lock"
    with runfolder.locked(lock, "the driver"):
        assert storage_probe(str(tmp_path), digest, str(lock)) is None  # held for it too: shared locks
        assert "sees another" in storage_probe(str(tmp_path), "0" * 64, str(lock))
        assert "does not see" in storage_probe(str(tmp_path / "elsewhere"), digest, str(lock))
    assert "not shared with the driver's" in storage_probe(str(tmp_path), digest, str(lock))  # lock not held


# ------------------------------------------------------------------------- Slurm (submitit's local executor)
def test_a_preempted_array_task_is_requeued_and_resumes_exactly(references, data_dir, tmp_path) -> None:
    out = tmp_path / "slurm"
    proc = start(command(data_dir, FAULT, out, "--executor", "slurm", "--slurm-cluster", "local", "--workers", "2"))
    try:
        name, note = wait_for(lambda: running_stream(out), proc)
        os.kill(note["pid"], signal.SIGUSR2)  # what Slurm sends before it preempts a task (--signal=USR2@120)
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    assert "array of 2 task(s)" in stderr  # --workers, not the default (one task for these 6 streams)
    assert_same_run(out, references["fault"])
    attempts = node_notes(out)[name]["attempts"]
    assert len(attempts) >= 2 and attempts[-1]["pid"] != note["pid"] and attempts[-1]["from_task"] >= 1
    logs = "".join(p.read_text() for p in (out / ".slurm").glob("*_log.err"))
    assert Preemption.NOTICE.strip() in logs  # stopped between steps first, then submitit's requeue
    assert "preempted" in logs and json.loads((out / "slurm.json").read_text())["tasks"] == 2


def test_preemption_lets_a_commit_finish_then_stops_and_hands_over_to_submitit() -> None:
    """The signal inside a commit (the engine's nested guard, deferred) cuts nothing: the commit ends,
    the stop follows at its end, and only then does submitit's handler run (here a stand-in that
    exits as submitit does). A Ctrl-C without the signal stays a Ctrl-C."""
    handed: list[int] = []

    def submitits(signum: int, frame: object) -> None:
        handed.append(signum)
        raise SystemExit(-1)

    previous = signal.signal(signal.SIGUSR2, submitits)
    steps: list[str] = []
    try:
        with pytest.raises(SystemExit):
            with Preemption(signal.SIGUSR2) as preemption:
                with interrupt.InterruptGuard() as guard:
                    with guard.deferred():
                        os.kill(os.getpid(), signal.SIGUSR2)
                        time.sleep(0.05)  # the handler has run by now
                        assert preemption.received and not handed
                        steps.append("committed")
                    steps.append("the next task")
        assert steps == ["committed"] and handed == [signal.SIGUSR2]
        assert signal.getsignal(signal.SIGUSR2) is submitits  # restored

        with pytest.raises(KeyboardInterrupt):
            with Preemption(signal.SIGUSR2):
                interrupt.check()
                raise KeyboardInterrupt  # a Ctrl-C: not requeued
        assert handed == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, previous)


# ------------------------------------------------------------------------- what runs without a cluster
def test_ray_and_submitit_stay_out_of_the_library_and_of_a_local_run(tmp_path, data_dir) -> None:
    code = f"""
import sys
import tokenworth_jax, tokenworth_agent.experiment, tokenworth_agent.cli
assert not {{'ray', 'submitit'}} & set(sys.modules), 'imported by the packages'
from typer.testing import CliRunner
result = CliRunner().invoke(tokenworth_agent.cli.app, ['run', '--methods', 'standard', '--limit', '1', '--data-dir', {data_dir!r},
                                           '--out', {str(tmp_path / 'run')!r}, '--no-progress'])
assert result.exit_code == 0, result.output
print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'submitit')))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_lease_queue_deals_fair_shares_after_every_worker_is_up() -> None:
    from tokenworth_agent.experiment.distributed.leases import StreamLeases

    now = [0.0]
    leases = StreamLeases([f"s{i}" for i in range(7)], workers=2, barrier_s=30, clock=lambda: now[0])
    leases.hello("a")
    assert leases.take("a", 10) == []  # the barrier: b is not up yet
    leases.hello("b")
    assert leases.take("a", 10) == ["s0", "s1", "s2", "s3"]  # ceil(7 / 2)
    assert leases.take("b", 10) == ["s4", "s5", "s6"]
    leases.finished("a", "s0")
    assert leases.take("a", 10) == []  # 6 unfinished / 2 = 3 each: a holds 3
    leases.defer("b", "s5")  # busy lock: back at the end, not before 5 s
    assert leases.take("a", 10) == [] and leases.take("b", 10) == []
    now[0] = 6.0
    assert leases.take("b", 10) == ["s5"]
    assert leases.release("a") == ["s1", "s2", "s3"] and list(leases.pending) == ["s1", "s2", "s3"]
    assert leases.take("a", 10) == []  # a dead worker takes nothing until it says hello again
    assert leases.take("b", 10) == ["s1", "s2", "s3"]  # the survivor's share grows to all
    leases.give_back("b", "s2")
    assert list(leases.pending) == ["s2"] and not leases.complete
    for name in ("s1", "s2", "s3", "s4", "s5", "s6"):
        leases.finished("b", name)
    assert leases.complete and leases.status()["done"] == 7
    late = StreamLeases(["x"], workers=3, barrier_s=30, clock=lambda: now[0])
    late.hello("a")
    now[0] += 31  # a worker Ray cannot place is not waited for
    assert late.take("a", 1) == ["x"]


def test_executor_settings_are_checked_as_they_are_made() -> None:
    from tokenworth_agent.experiment import ConfigError, ExecutorConfig, RunConfig, SlurmConfig
    from tokenworth_agent.experiment.config import EXECUTOR_NAMES
    from tokenworth_agent.experiment.executor import EXECUTORS

    assert EXECUTORS.names == EXECUTOR_NAMES
    for make, message in [(lambda: ExecutorConfig(name="dask"), "unknown executor 'dask'"),
                          (lambda: ExecutorConfig(workers=2), "--workers applies to --executor ray or slurm"),
                          (lambda: ExecutorConfig(name="ray", workers=0), "--workers must be at least 1"),
                          (lambda: ExecutorConfig(name="ray", slurm=SlurmConfig(partition="gpu")), "--slurm-*"),
                          (lambda: SlurmConfig(options=("account",)), "expected KEY=VALUE"),
                          (lambda: RunConfig(schedule="sequential", executor=ExecutorConfig(name="ray")),
                           "--executor local")]:
        with pytest.raises(ConfigError, match=message.replace("*", r"\*")):
            make()
    assert SlurmConfig(options=("account=proj", "--mem=64G")).sbatch_options() == {"account": "proj", "mem": "64G"}


def test_this_test_process_never_imports_ray() -> None:
    """Ray stays in subprocesses (see the module's find_spec note); this process also runs the JAX tests."""
    assert "ray" not in sys.modules
