"""The gate's own time log (tests/conftest.py, scripts/test_times.py; docs/performance.md, "The test suite's time"):
each test's wall and CPU seconds reach the lane's log under pytest-xdist, and the report sums the CPU per file.

A pytest run in a subprocess, with this suite's conftest as a plugin, on three tests of a file made here: one
that spins in its own process, one that waits for a child that spins, one that sleeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass\n"
TESTS = f'''
import subprocess, sys, time

def test_spins():
{"".join("    " + line + chr(10) for line in SPIN.splitlines())}
def test_waits_for_a_child_that_spins():
    subprocess.run([sys.executable, "-c", {SPIN!r}], check=True)

def test_sleeps():
    time.sleep(0.6)
'''


def test_each_test_s_cpu_seconds_reach_the_log_across_workers_and_the_report_sums_them(tmp_path: Path) -> None:
    (tmp_path / "test_spin.py").write_text(TESTS)
    log = tmp_path / "times.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-n", "2", "--rootdir", str(tmp_path), str(tmp_path / "test_spin.py")], cwd=REPO,
                          env={**os.environ, "TOKENWORTH_TEST_LOG": str(log), "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tests = {k.split("::")[-1]: v for k, v in json.loads(log.read_text())["tests"].items()}
    assert set(tests) == {"test_spins", "test_waits_for_a_child_that_spins", "test_sleeps"}
    assert tests["test_spins"]["cpu_seconds"] >= 0.55
    assert tests["test_waits_for_a_child_that_spins"]["cpu_seconds"] >= 0.55  # the child's, once waited for
    assert tests["test_sleeps"]["seconds"] >= 0.6 > 0.3 > tests["test_sleeps"]["cpu_seconds"]

    report = subprocess.run([sys.executable, "scripts/test_times.py", "report", "--top", "0", str(log)], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    [line] = [line for line in report.stdout.splitlines() if "CPU-seconds" in line]
    total = sum(v["cpu_seconds"] for v in tests.values())
    assert line.startswith(f"{total:.0f} CPU-seconds") and f"test_spin.py {total:.0f}" in line, line
