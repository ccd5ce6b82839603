"""Hostile BigCodeBench solutions: each is contained, the host does not change, and the next task runs.

Every attack is the solution of a small task of our own whose test asserts ``task_func() == 0``; where
the attack counts what it reached (host paths, the network), a pass means it reached nothing.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine  # the BigCodeBench judge's venv (make test-quick leaves it out)

from tokenworth_agent.benchmarks.bigcodebench.judge import Verdict
from tokenworth_agent.sandbox import leftovers
from tokenworth_agent.benchmarks.bigcodebench.replies import solution_reply
from tokenworth_agent.benchmarks.bigcodebench.tasks import BCBTask
from tokenworth_agent.tasks import load_tasks
from tests.bigcodebench_fixtures import ci_subset, eval_venv, small_judge

PROMPT = "import os\ndef task_func():\n"
TEST = ("import unittest\nclass TestCases(unittest.TestCase):\n"
        "    def test_nothing_reached(self):\n        self.assertEqual(task_func(), 0)\n")
TASK = BCBTask(sample_index=0, task_id="BigCodeBench/containment", instruct_prompt="Return 0.", code_prompt=PROMPT,
               entry_point="task_func", test=TEST, libs=("os",), hard=False, canonical_solution="    return 0\n",
               complete_prompt=PROMPT)
MARKER = "4321.8765"  # an argument no other process on the host uses

ATTACKS = {
    "write outside": """
    import pathlib, shutil
    for path in ["/etc/passwd", "/usr/tokenworth-owned", "/root/tokenworth-owned", "/tmp/tokenworth-owned",
                 "VENV/tokenworth-owned", "BASE/tokenworth-owned", "CANARY/secret.txt"]:
        try:
            pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as handle:
                handle.write("owned\\n")
        except OSError:
            pass
    shutil.rmtree("CANARY", ignore_errors=True)
    # the venv is bound at its own path, so its parent folders exist; nothing else of the host may show
    return sum(os.path.exists(p) for p in ["REPO/pyproject.toml", "REPO/agent", "DATA", "CANARY/sub/data.bin"])
""",
    "network": """
    import socket, urllib.request
    reached = 0
    for host, port in [("1.1.1.1", 53), ("8.8.8.8", 443), ("pypi.org", 443)]:
        try:
            socket.create_connection((host, port), timeout=2).close()
            reached += 1
        except OSError:
            pass
    try:
        urllib.request.urlopen("https://pypi.org/simple/", timeout=2)
        reached += 1
    except Exception:
        pass
    return reached
""",
    "fork bomb": """
    import time
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)
""",
    "memory exhaustion": """
    blocks = []
    while True:
        blocks.append(bytearray(64 << 20))
""",
    "sleep forever": """
    import signal, time
    signal.signal(signal.SIGALRM, signal.SIG_IGN)  # the evaluator's own timer, defeated
    while True:
        time.sleep(1000)
""",
    "kill the evaluator": """
    import ctypes
    libc = ctypes.CDLL(None)
    libc.kill(os.getppid(), 9)
    libc.kill(-1, 9)
    return 0
""",
    "a daemon left behind": """
    import subprocess
    subprocess.Popen(["setsid", "sh", "-c", "sleep MARKER & while true; do sleep 1; done"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 1
""",
    "fill the disk": """
    with open("/tmp/big", "wb") as handle:
        while True:
            handle.write(b"x" * (16 << 20))
""",
}


@pytest.fixture(scope="module")
def venv():
    return eval_venv()


@pytest.fixture(scope="module")
def next_task(data_dir) -> BCBTask:
    return ci_subset(load_tasks("bigcodebench", data_dir), 1)[0]


@pytest.fixture
def canary(tmp_path) -> Path:
    (tmp_path / "canary" / "sub").mkdir(parents=True)
    (tmp_path / "canary" / "secret.txt").write_text("host secret\n")
    (tmp_path / "canary" / "sub" / "data.bin").write_bytes(os.urandom(1024))
    return tmp_path / "canary"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def host_state(canary: Path, venv) -> dict:
    """What an attack could change on the host; only this process's sandboxes are looked at."""
    tag = leftovers.owner_tag()
    ours = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"sbx-{tag}-" in Path(f"/proc/{pid}/cgroup").read_text():
                ours.append(pid)
        except OSError:
            continue
    marked = subprocess.run(["pgrep", "-f", f"sleep {MARKER}"], capture_output=True, text=True).stdout.split()
    return {"canary": _digest(canary), "passwd": hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest(),
            "owned": [str(d) for d in (Path("/usr"), Path("/root"), Path("/tmp"), venv.root, *map(Path, venv.binds))
                      if (d / "tokenworth-owned").exists()],
            "processes": ours, "daemons": marked,
            "mount points": [d for d in os.listdir("/tmp") if d.startswith(f"{leftovers.TEMP_PREFIX}{tag}")]}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_hostile_solution_is_contained_and_the_next_task_runs(attack, venv, canary, next_task, data_dir):
    # attacks that hang get a short limit and wall cap (any verdict but pass will do; the fork bomb meets the
    # cap); those whose verdict is checked get room for a loaded host
    hangs = attack in ("fork bomb", "memory exhaustion", "sleep forever", "fill the disk")
    judge = small_judge(venv, time_limit=5.0 if hangs else 30.0, wall_slack=10.0 if hangs else 25.0)
    code = ATTACKS[attack]
    for name, value in [("CANARY", str(canary)), ("VENV", str(venv.root)), ("BASE", venv.binds[-1]),
                        ("REPO", str(Path(__file__).resolve().parents[1])), ("MARKER", MARKER),
                        ("DATA", str(Path(data_dir).resolve()))]:
        code = code.replace(name, value)
    before = host_state(canary, venv)
    verdict: Verdict = judge.judge(TASK, solution_reply(PROMPT + code.strip("\n")))
    assert host_state(canary, venv) == before
    if attack in ("write outside", "network"):
        assert verdict.passed, verdict.details  # it reached no host path and no address
    else:
        assert not verdict.passed
    if attack == "memory exhaustion":
        assert verdict.memory_peak_bytes is not None and verdict.memory_peak_bytes <= judge.settings.memory_bytes
    if attack == "sleep forever":
        assert verdict.status == "timeout" and verdict.seconds < judge.settings.time_limit + judge.settings.wall_slack
    if attack == "kill the evaluator":
        assert verdict.reason in ("evaluator-died", "evaluator-error"), verdict  # and the canary passed again
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork
    # the next task gets the CI subset's limit: what is checked is that it runs, not how fast a loaded host is
    after = small_judge(venv, time_limit=60.0).judge(next_task, solution_reply(next_task.code_prompt +
                                                                                next_task.canonical_solution))
    assert after.passed, (after.status, after.reason, after.details)
