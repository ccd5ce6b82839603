"""Each test's time, from the logs a lane writes (docs/performance.md, "The test suite's time").

A lane run with ``TOKENWORTH_TEST_LOG=FILE`` (tests/conftest.py) writes, per test, its seconds (set-up,
call and teardown together), its CPU seconds (the test process's and its waited-for children's), its outcome
and whether it is marked ``slow``. A JUnit XML file
(``pytest --junitxml``) is read too, without the marks.

    python scripts/test_times.py report LOG [LOG ...] [--top N]
        the count, the summed seconds (and CPU seconds, per file), the N slowest tests, and every test over
        60 s that carries no ``slow`` mark (listed, never failed: time is a benchmark's business, not a test's)
    python scripts/test_times.py update LOG [LOG ...] [--quick-log]
        rewrite tests/durations.json, each file's summed seconds: the order the suites run their files in
        (longest first, tests/conftest.py)
    python scripts/test_times.py coverage COVERAGE_JSON
        the main suite's line and branch coverage (pytest-cov's JSON report), failed (exit 1) when either is
        below its floor in tests/coverage-floor.json: what the suite covers may grow, never shrink unseen
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DURATIONS = REPO / "tests" / "durations.json"
FLOOR = REPO / "tests" / "coverage-floor.json"
SLOW_S = 60.0  # a test over this carries @pytest.mark.slow(reason=...)


def read(path: Path) -> dict[str, dict]:
    """nodeid -> {"seconds", "outcome", "slow"} (``slow`` is None when the log cannot tell)."""
    if path.suffix == ".xml":
        tests = {}
        for case in ET.parse(path).getroot().iter("testcase"):
            file = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
            nodeid = f"{file}::{case.get('name')}"
            outcome = ("failed" if case.find("failure") is not None or case.find("error") is not None
                       else "skipped" if case.find("skipped") is not None else "passed")
            tests[nodeid] = {"seconds": float(case.get("time") or 0.0), "outcome": outcome, "slow": None}
        return tests
    return json.loads(path.read_text())["tests"]


def file_of(nodeid: str) -> str:
    return nodeid.split("::")[0].rsplit("/", 1)[-1]


def test_of(nodeid: str) -> str:
    """A test's key in tests/durations.json: its file's name and its name, wherever the lane ran it from."""
    return file_of(nodeid) + "::" + nodeid.split("::", 1)[-1]


def report(tests: dict[str, dict], top: int) -> str:
    ran = {k: v for k, v in tests.items() if v["outcome"] != "skipped"}
    lines = [f"{len(ran)} tests ran ({len(tests) - len(ran)} skipped), {sum(v['seconds'] for v in ran.values()):.0f} s "
             f"summed over the processes"]
    if all("cpu_seconds" in v for v in ran.values()):
        cpu = defaultdict(float)
        for k, v in ran.items():
            cpu[file_of(k)] += v["cpu_seconds"]
        lines.append(f"{sum(cpu.values()):.0f} CPU-seconds in the test processes and the children they waited for; "
                     f"the files that took most: " + ", ".join(f"{name} {s:.0f}" for name, s in
                                                              sorted(cpu.items(), key=lambda kv: -kv[1])[:8]))
    slowest = sorted(ran.items(), key=lambda kv: -kv[1]["seconds"])
    if top:
        lines.append(f"the {top} slowest (seconds, set-up and teardown included):")
        lines += [f"  {v['seconds']:7.1f}  {k}" for k, v in slowest[:top]]
    unmarked = [k for k, v in slowest if v["seconds"] > SLOW_S and v["slow"] is False]
    if unmarked:
        lines.append(f"over {SLOW_S:.0f} s without @pytest.mark.slow(reason=...) (mark it, or make it faster):")
        lines += [f"  {tests[k]['seconds']:7.1f}  {k}" for k in unmarked]
    return "\n".join(lines)


def per_file(tests: dict[str, dict]) -> dict[str, float]:
    files: dict[str, float] = defaultdict(float)
    for nodeid, entry in tests.items():
        if file_of(nodeid).startswith("test"):  # not a collection error's or a conftest's entry
            files[file_of(nodeid)] += entry["seconds"]
    return {name: round(s, 1) for name, s in sorted(files.items())}


def coverage(report: dict) -> dict[str, float]:
    """Line and branch coverage, percent, from pytest-cov's (coverage.py's) JSON report."""
    t = report["totals"]
    return {"lines": 100.0 * t["covered_lines"] / max(t["num_statements"], 1),
            "branches": 100.0 * t["covered_branches"] / max(t["num_branches"], 1)}


def check_coverage(path: Path) -> int:
    got = coverage(json.loads(path.read_text()))
    floor = json.loads(FLOOR.read_text())
    below = [k for k in ("lines", "branches") if got[k] < floor[k]]
    print("coverage of the main suite: " + ", ".join(f"{k} {got[k]:.2f} % (floor {floor[k]:.2f})" for k in got))
    for k in below:
        print(f"error: {k} coverage {got[k]:.2f} % fell below its floor {floor[k]:.2f} % ({FLOOR.relative_to(REPO)}): "
              "test the code that lost it", file=sys.stderr)
    return 1 if below else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("report", "update", "coverage"))
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--quick-log", action="store_true", help="update: the logs are make test-quick's (tests' times only)")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.logs if not p.is_file()]
    if missing:
        print(f"error: no test log at {', '.join(missing)} (run the lane with TOKENWORTH_TEST_LOG set)", file=sys.stderr)
        return 2
    if args.command == "coverage":
        return check_coverage(args.logs[0])
    tests: dict[str, dict] = {}
    for path in args.logs:
        tests.update(read(path))
    if args.command == "report":
        print(report(tests, args.top))
    else:
        old = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {"files": {}, "tests": {}}
        # A file's time is taken from a log that ran it whole (not from make test-quick's, which leaves tests out)
        files = {**old["files"], **({} if args.quick_log else per_file(tests))}
        timed = {**old["tests"], **{test_of(k): round(v["seconds"], 1) for k, v in tests.items()}}
        timed = {k: v for k, v in timed.items() if v >= 1.0}  # the rest are fast: the table stays small
        DURATIONS.write_text(json.dumps({"what": "seconds in the last measured lane run, set-up and teardown included, "
                                                 "of each test file and of each test that took 1 s or more "
                                                 "(scripts/test_times.py update; tests/conftest.py reads it)",
                                         "files": dict(sorted(files.items())), "tests": dict(sorted(timed.items()))},
                                        indent=0) + "\n")
        print(f"{DURATIONS.relative_to(REPO)}: {len(files)} files, {len(timed)} tests of 1 s or more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
