"""Test-wide JAX settings: catch silent dtype promotion and rank broadcasting, share one compilation
cache across the session's processes (see _COMPILATION_CACHE), and free compiled programs after each
module (see _release_compiled_programs)."""

import gc
import os
import shutil
import tempfile

# One persistent XLA compilation cache for the session: this process and every CLI, bench or engine
# subprocess it starts (they inherit the variables). Otherwise each of them compiles the same controller
# programs again: a 10-task `tokenworth run` of three methods took 60 s cold and 12 s warm on this 2-core
# machine. A cached program is the executable XLA built for the same computation, so no result changes.
# A cache the user names is used as is; the session's own is removed at the end.
_COMPILATION_CACHE = None
if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    _COMPILATION_CACHE = tempfile.mkdtemp(prefix="tokenworth-tests-xla-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _COMPILATION_CACHE
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # the tests' programs are small, and many
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"

# Ray runs in the tests wait longer for a node's first answer than a user's do (SURVEY_TIMEOUT_S, 60 s): the gate
# runs other suites beside them on 2 cores, where a new Ray worker can take over a minute to start.
os.environ.setdefault("TOKENWORTH_RAY_SURVEY_S", "300")

import jax  # noqa: E402  (after the variables: jax reads them at import)
import pytest  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
if _COMPILATION_CACHE is not None:  # in case a plugin imported jax before this file
    jax.config.update("jax_compilation_cache_dir", _COMPILATION_CACHE)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_unconfigure(config) -> None:
    if _COMPILATION_CACHE is not None:
        shutil.rmtree(_COMPILATION_CACHE, ignore_errors=True)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.environ.get(
    "TOKENWORTH_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data", "lifelongagentbench")
)


@pytest.fixture(scope="session")
def data_dir() -> str:
    return DATA_DIR


def _mappings() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


def _mapping_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 65530  # the kernel's default


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop every compiled program after each test module.

    XLA's CPU JIT keeps each compiled executable in memory mappings of its own (code, constants,
    data: about three each), and JAX's caches keep every executable alive. One pytest process
    compiles thousands of programs over the suite; at ``vm.max_map_count`` (65,530 by default) an
    mmap fails inside LLVM and the process dies of SIGSEGV in a later compile, far from the cause.
    Clearing the caches frees them (a later module recompiles what it uses). Should a single
    module ever come near the limit, fail here, naming the cause, rather than crash later."""
    yield
    jax.clear_caches()
    gc.collect()
    used, limit = _mappings(), _mapping_limit()
    if used > 0.8 * limit:
        raise RuntimeError(f"this test process holds {used} memory mappings after clearing JAX's caches, near "
                           f"vm.max_map_count = {limit}: an mmap will fail and crash a later compile. Split the "
                           "module, or find what keeps compiled programs alive")


# ----------------------------------------------------------------------------------- the suite's own time
# docs/performance.md, "The test suite's time", says how the lanes are laid out; these hooks keep them so.
# DURATIONS: the last measured seconds (set-up and teardown included) of each test file and of each test
# that took a second or more, written by scripts/test_times.py from a lane's log. Under pytest-xdist
# (``-n 2 --dist loadfile``: a file's tests stay on one worker, its module fixtures built once) the files
# are handed out longest first, so the long ones do not start last and leave a core idle at the end; a
# file the table lacks counts as long, so a new file runs early. One process keeps pytest's own order.
# ``--quick`` (make test-quick) also leaves out every test that took over QUICK_S: the inner loop keeps
# the many fast tests, the gate runs them all.
DURATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")
QUICK_S = 2.0
TEST_LOG = os.environ.get("TOKENWORTH_TEST_LOG")  # where this lane writes each test's time and marks


def pytest_addoption(parser) -> None:
    parser.addoption("--quick", action="store_true",
                     help=f"leave out the tests that took over {QUICK_S:g} s in the last make test (tests/durations.json)")


def _durations() -> dict:
    import json

    try:
        with open(DURATIONS) as f:
            found = json.load(f)
        return {"files": {k: float(v) for k, v in found["files"].items()},
                "tests": {k: float(v) for k, v in found["tests"].items()}}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {"files": {}, "tests": {}}


def _file(nodeid: str) -> str:
    return nodeid.split("::")[0].rsplit("/", 1)[-1]


def _test(nodeid: str) -> str:
    return _file(nodeid) + "::" + nodeid.split("::", 1)[-1]


def pytest_collection_modifyitems(config, items) -> None:
    bare = sorted({item.nodeid for item in items for mark in item.iter_markers("slow")
                   if not (mark.kwargs.get("reason") or mark.args)})
    if bare:  # docs/performance.md: a test over 60 s says why it needs the time
        raise pytest.UsageError(f"@pytest.mark.slow needs reason=...: why the test needs the time ({bare[0]}"
                                + (f" and {len(bare) - 1} more" if len(bare) > 1 else "") + ")")
    known = _durations()
    if config.getoption("quick", False):
        long = [item for item in items if known["tests"].get(_test(item.nodeid), 0.0) > QUICK_S]
        if long:
            config.hook.pytest_deselected(items=long)
            items[:] = [item for item in items if known["tests"].get(_test(item.nodeid), 0.0) <= QUICK_S]


# Files that run one after another on one worker, as one unit: each starts its own two-node Ray cluster (and
# test_tracking an MLflow server); two such clusters at once on 2 cores starve each other's workers past
# Ray's and the tests' time limits (seen: a node's survey task unanswered after 60 s).
TOGETHER = {"two-node Ray": ("test_distributed.py", "test_tracking.py")}


@pytest.hookimpl(optionalhook=True)  # a run without pytest-xdist never calls it
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` as xdist does it, but the files handed out longest first (xdist's own order is by
    how many tests a file holds, which starts the few long Ray and MLflow files last)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from collections import OrderedDict

    from xdist.scheduler import LoadFileScheduling

    seconds = _durations()["files"]
    for group, files in TOGETHER.items():
        seconds[group] = sum(seconds.get(f, 0.0) for f in files)
    longest = max(seconds.values(), default=0.0)

    class LongestFileFirst(LoadFileScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            name = _file(nodeid)
            return next((group for group, files in TOGETHER.items() if name in files), nodeid.split("::", 1)[0])

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:  # the first hand-out: the queue holds every file
                order = sorted(self.workqueue, key=lambda scope: -seconds.get(_file(scope), longest))
                self.workqueue = OrderedDict((scope, self.workqueue[scope]) for scope in order)
                self._ordered = True
            super()._assign_work_unit(node)

    return LongestFileFirst(config, log)


_TIMES: dict[str, dict] = {}
_CPU_MARK: list[float] = []  # this process's CPU seconds when the test's last phase ended


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children it has reaped (a CLI or engine subprocess a test ran and
    waited for; not Ray's workers, which are the raylet's, nor a server a module fixture has not stopped yet)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_logstart(nodeid, location) -> None:
    if TEST_LOG:
        _CPU_MARK[:] = [_cpu_seconds()]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's CPU seconds on its report (a float attribute: pytest-xdist carries it to the controller).
    Time on 2 saturated cores is set by the CPU the lanes need, so the log keeps both (docs/performance.md)."""
    outcome = yield
    if TEST_LOG and _CPU_MARK:
        now = _cpu_seconds()
        outcome.get_result().cpu_seconds = round(now - _CPU_MARK[0], 3)
        _CPU_MARK[:] = [now]


def pytest_runtest_logreport(report) -> None:
    """Each test's set-up, call and teardown seconds, wall and CPU (under xdist the controller sees every
    worker's)."""
    if TEST_LOG:
        entry = _TIMES.setdefault(report.nodeid, {"seconds": 0.0, "cpu_seconds": 0.0, "outcome": "passed",
                                                  "slow": False})
        entry["seconds"] += report.duration
        entry["cpu_seconds"] += getattr(report, "cpu_seconds", 0.0)
        entry["slow"] = entry["slow"] or "slow" in report.keywords
        if report.failed:
            entry["outcome"] = "failed"
        elif report.skipped and entry["outcome"] == "passed":
            entry["outcome"] = "skipped"


def pytest_sessionfinish(session) -> None:
    if TEST_LOG and not hasattr(session.config, "workerinput"):  # the controller (or the only process) writes
        import json

        os.makedirs(os.path.dirname(os.path.abspath(TEST_LOG)), exist_ok=True)
        with open(TEST_LOG, "w") as f:
            json.dump({"tests": _TIMES}, f, indent=0, sort_keys=True)
