"""BigCodeBench's official evaluator, run inside the project's sandbox: one fresh sandbox per judgement.

:meth:`BigCodeBenchJudge.judge` takes a task and the model's whole reply and returns a
:class:`Verdict`. In a fresh :class:`~tokenworth_agent.sandbox.Sandbox` the evaluation venv's interpreter runs
``runner.py``, which sanitises the reply, calibrates it and calls the package's own
``untrusted_check`` (docstring there). The sandbox adds what that check lacks (it says itself that
it is no security boundary): no network (a network namespace with only ``lo``), no write outside
the sandbox's own tmpfs (the venv, its base interpreter and the request are read-only bind mounts;
nothing else of the host is visible), a cgroup for memory, processes and CPU, a wall-clock cap, and
a teardown that kills whatever the solution left running. ``python`` on ``PATH`` is the venv's, as
in upstream's Docker image (tasks 348, 1101, 1103 and 1104 run ``python`` in a subprocess).

**Failed task or broken judge.** The runner reports ``READY`` after the evaluator is imported and
before anything of the reply is touched:

* no ``READY`` (the venv cannot start, the evaluator cannot be imported, the sandbox fails) →
  :class:`JudgeError`, an :class:`~tokenworth_agent.envs.base.InfrastructureError`: the run stops and no
  task is recorded as failed;
* ``READY`` then a ``RESULT`` → the verdict (``pass``, ``fail`` or ``timeout``);
* ``READY`` and then no result (the solution killed the evaluator, the OOM killer took it, the
  wall cap hit) → a failed task with the ``reason``; and because a dead evaluator must not fail
  every later task, such a verdict (and an exception inside the evaluator's own parent) re-judges
  the **canary**, a small known-good solution; if that no longer passes, :class:`JudgeError`.

Before its first judgement the judge checks the canary and a known-wrong solution once per process
(:meth:`BigCodeBenchJudge.preflight`): an evaluator that passes everything is broken too.

**Cost.** Judgements run at most :data:`JudgeSettings.slots` at a time per process (sandboxes of
the streams of one run share them), and a :class:`~tokenworth_agent.benchmarks.bigcodebench.verdicts.VerdictCache`
returns the verdict of a reply already judged for the same task, and skips the tests of a solution
already tested. Which solution a reply holds is asked of the host's
:class:`~tokenworth_agent.benchmarks.bigcodebench.sanitiser.Sanitiser` first (the runner's sanitising code in one
long-lived process of the venv: parsing, nothing of the reply runs; one per venv and process); where
it cannot say, or the solution is new, the sandboxed runner sanitises and judges as before.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from tokenworth_agent.benchmarks.bigcodebench.eval_venv import EvalVenv
from tokenworth_agent.envs.base import InfrastructureError
from tokenworth_agent.benchmarks.bigcodebench.sanitiser import Sanitiser
from tokenworth_agent.benchmarks.bigcodebench.verdicts import VerdictCache, digest, solution_digest
from tokenworth_agent.sandbox import DEFAULT_PATH, Sandbox, SandboxError, SandboxLimits
from tokenworth_agent.benchmarks.bigcodebench.tasks import BCBTask

BCB_TIME_LIMIT = 240.0  # seconds: upstream's per-task limit (bigcodebench.eval.utils.TIMEOUT_LIMIT)

Status = Literal["pass", "fail", "timeout"]
RUNNER = resources.files(__package__).joinpath("runner.py").read_text()
RUNNER_DIGEST = hashlib.sha256(RUNNER.encode()).hexdigest()[:16]
MPLCONFIG = "share/bigcodebench-mplconfig"  # matplotlib's font cache, built with the venv


class JudgeError(InfrastructureError):
    """The evaluator could not judge (not the solution's fault): the run must stop."""


@dataclasses.dataclass(frozen=True)
class JudgeSettings:
    """The limits of one judgement (its sandbox and the evaluator's timer)."""

    time_limit: float = BCB_TIME_LIMIT  # the evaluator's own limit for the whole test class (upstream's 240 s)
    wall_slack: float = 60.0  # the sandbox is killed this long after time_limit (start-up, teardown, hangs)
    memory_bytes: int = 4 << 30  # RAM of the sandbox, files it writes included
    tmpfs_bytes: int = 1 << 30  # all files it writes
    pids_max: int = 512
    cpus: float = 1.0  # CPU share of one judgement
    slots: int = max(1, os.cpu_count() or 1)  # judgements at once in this process

    def identity(self) -> dict[str, Any]:
        """What changes a verdict (``slots`` does not)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "slots"}

    def limits(self) -> SandboxLimits:
        return SandboxLimits(pids_max=self.pids_max, memory_bytes=self.memory_bytes, cpus=self.cpus,
                             tmpfs_bytes=self.tmpfs_bytes)


@dataclasses.dataclass(frozen=True)
class Verdict:
    status: Status
    solution: str  # the sanitised solution, before calibration
    defines_entry_point: bool  # whether that solution defines the task's entry point (else: no usable code)
    details: dict[str, str]  # the evaluator's per-test tracebacks, or why there is no result
    # "" | "sanitize-error" | "evaluator-error" | "evaluator-died" | "oom" | "wall-cap" (the evaluator gave no result);
    # "test-exited" | "test-killed" | "test-oom" (the test process ended before its tests reported; status timeout)
    reason: str = ""
    seconds: float = 0.0  # the judgement's wall time, sandbox included
    memory_peak_bytes: int | None = None
    cached: bool = False  # an earlier verdict on the same reply or solution (seconds: that judgement's)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, cached: bool = False) -> "Verdict":
        return cls(**{**data, "cached": cached})


# A task of our own whose solutions the judge checks itself with: no library but the standard one.
CANARY = {"task_id": "canary", "code_prompt": "def task_func(values):\n", "entry_point": "task_func",
          "test": ("import unittest\nclass TestCases(unittest.TestCase):\n"
                   "    def test_sum(self):\n        self.assertEqual(task_func([1, 2, 3]), 6)\n"
                   "    def test_empty(self):\n        self.assertEqual(task_func([]), 0)\n")}
CANARY_RIGHT = "```python\ndef task_func(values):\n    return sum(values)\n```"
CANARY_WRONG = "```python\ndef task_func(values):\n    return len(values)\n```"
# The canary's own floor: with a short --bcb-time-limit on a loaded host, starting the evaluator alone can take
# seconds, and a slow host is not a broken evaluator.
CANARY_TIME_LIMIT = 60.0

_PREFLIGHT: dict[str, bool] = {}  # judge identity digest -> checked, per process
_PREFLIGHT_LOCK = threading.Lock()
_SLOTS: dict[int, threading.BoundedSemaphore] = {}
_SLOTS_LOCK = threading.Lock()


def _slots(n: int) -> threading.BoundedSemaphore:
    with _SLOTS_LOCK:
        return _SLOTS.setdefault(n, threading.BoundedSemaphore(n))


_SANITISERS: dict[str, Sanitiser] = {}  # venv root -> its sanitiser, shared by the judges (streams) of a process


def _close_sanitisers() -> None:
    for sanitiser in _SANITISERS.values():
        sanitiser.close()


def _sanitiser(venv: EvalVenv) -> Sanitiser:
    with _SLOTS_LOCK:
        if not _SANITISERS:
            atexit.register(_close_sanitisers)
        return _SANITISERS.setdefault(str(venv.root), Sanitiser(venv, RUNNER))


class BigCodeBenchJudge:
    """Judges replies to BigCodeBench tasks (see the module docstring). Thread-safe."""

    def __init__(self, venv: EvalVenv, settings: JudgeSettings = JudgeSettings(),
                 cache: VerdictCache | None = None) -> None:
        self.venv = venv
        self.settings = settings
        self.cache = cache
        self._slots = _slots(settings.slots)
        self.sanitiser = _sanitiser(venv)
        self.env = {"PATH": f"{venv.python.parent}:{DEFAULT_PATH}", "HOME": "/root", "HOSTNAME": "sandbox",
                    "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/mplconfig", "LC_ALL": "C.UTF-8"}

    def identity(self) -> dict[str, Any]:
        """What a verdict depends on besides the task and the reply (the runner's text included)."""
        return {**self.venv.identity(), **self.settings.identity(), "runner": RUNNER_DIGEST}

    # ------------------------------------------------------------------ public
    def judge(self, task: BCBTask, reply: str) -> Verdict:
        """The verdict on ``reply`` for ``task``; JudgeError when the evaluator itself fails."""
        self.preflight()
        fields = {"task_id": task.task_id, "code_prompt": task.code_prompt, "test": task.test,
                  "entry_point": task.entry_point}
        if self.cache is None:
            return self._checked(fields, reply)
        cache = self.cache
        task_key = digest(self.identity(), fields)

        def reached() -> dict[str, Any]:
            known = cache.solutions(task_key)
            verdict = self._known(task.entry_point, reply, known) or self._checked(fields, reply, known)
            if verdict.cached:
                cache.count("solution")
                return verdict.as_dict()
            cache.count("tested")
            return cache.add_solution(task_key, verdict.solution, verdict.as_dict())

        data, known_reply = cache.judged(digest(task_key, reply), reached)
        return Verdict.from_dict(data, cached=known_reply or bool(data.get("cached")))

    def preflight(self) -> None:
        """Once per process and judge identity: the canary passes and a wrong solution fails."""
        key = json.dumps(self.identity(), sort_keys=True)
        with _PREFLIGHT_LOCK:
            if _PREFLIGHT.get(key):
                return
            self._canary()
            wrong = self._run(CANARY, CANARY_WRONG, time_limit=max(self.settings.time_limit, CANARY_TIME_LIMIT))
            if wrong.passed:
                raise JudgeError("the BigCodeBench evaluator passes a wrong solution of its canary task; it cannot "
                                 f"be trusted (venv {self.venv.root})")
            _PREFLIGHT[key] = True

    # ------------------------------------------------------------------ internals
    def _known(self, entry_point: str, reply: str, known: dict[str, dict[str, Any]]) -> Verdict | None:
        """The verdict kept for the solution ``reply`` holds, found without a sandbox; None: ask the sandbox."""
        if not known:
            return None
        sanitised = self.sanitiser.sanitise(reply, entry_point)
        kept = None if sanitised is None else known.get(solution_digest(sanitised.solution))
        return None if kept is None else Verdict.from_dict(kept, cached=True)

    def _checked(self, fields: dict[str, str], reply: str, known: dict[str, dict[str, Any]] | None = None) -> Verdict:
        verdict = self._run(fields, reply, known or {})
        if not verdict.cached and verdict.reason in ("evaluator-died", "evaluator-error", "oom", "wall-cap"):
            self._canary()  # a solution may take the evaluator down, never the run; a broken evaluator must
        return verdict

    def _canary(self) -> None:
        verdict = self._run(CANARY, CANARY_RIGHT, time_limit=max(self.settings.time_limit, CANARY_TIME_LIMIT))
        if not verdict.passed:
            raise JudgeError(f"the BigCodeBench evaluator fails its canary task ({verdict.status}"
                             f"{', ' + verdict.reason if verdict.reason else ''}: "
                             f"{json.dumps(verdict.details)[:1500]}); check the venv {self.venv.root}")

    def _run(self, fields: dict[str, str], reply: str, known: dict[str, dict[str, Any]] | None = None, *,
             time_limit: float | None = None) -> Verdict:
        """One judgement in a fresh sandbox; a solution among ``known`` (digest -> verdict) is not tested again."""
        known = known or {}
        nonce = secrets.token_hex(8)
        time_limit = self.settings.time_limit if time_limit is None else time_limit
        request = {**fields, "reply": reply, "time_limit": time_limit, "nonce": nonce,
                   "known": sorted(known)}
        with self._slots, tempfile.TemporaryDirectory(prefix="tokenworth-bcb-") as folder:
            request_dir = os.path.realpath(folder)
            Path(request_dir, "runner.py").write_text(RUNNER, encoding="utf-8")
            Path(request_dir, "request.json").write_text(json.dumps(request), encoding="utf-8")
            os.chmod(request_dir, 0o755)  # the sandbox's root reads it through a read-only bind
            started = time.monotonic()
            box = Sandbox(self.settings.limits(), read_only_binds=(*self.venv.binds, request_dir))
            try:
                box.start()
                result = box.run(self._script(request_dir), timeout=time_limit + self.settings.wall_slack,
                                 env=self.env)
                usage = box.usage()
            except SandboxError as exc:
                _close(box)
                raise JudgeError(f"the BigCodeBench judge's sandbox failed: {exc}") from exc
            teardown = _close(box)
            seconds = round(time.monotonic() - started, 3)
        return _verdict(result.output, result.timed_out, result.exit_code, nonce, seconds, usage.memory_peak_bytes,
                        bool(usage.oom_kills), teardown, known)

    def _script(self, request_dir: str) -> str:
        fonts = self.venv.root / MPLCONFIG
        return (f"mkdir -p /tmp/mplconfig && cp -r '{fonts}/.' /tmp/mplconfig/ 2>/dev/null; cd /tmp && "
                f"exec '{self.venv.python}' -I '{request_dir}/runner.py' '{request_dir}/request.json'")


def _close(box: Sandbox) -> str:
    """Tear the sandbox down; what could not be removed is reported, not raised (its processes are dead:
    PID 1 is gone; an empty cgroup directory left behind is swept by the next harness)."""
    try:
        box.close()
        return ""
    except SandboxError as exc:
        return f"teardown incomplete: {exc}"


def _markers(output: str, nonce: str) -> dict[str, dict[str, Any]]:
    tag = f"@@BCB-{nonce} "
    found: dict[str, dict[str, Any]] = {}
    for line in output.splitlines():
        if line.startswith(tag):
            kind, _, payload = line[len(tag):].partition(" ")
            try:
                found[kind] = json.loads(payload)
            except ValueError:
                continue
    return found


def _test_process_end(ended: dict[str, Any] | None, oom: bool) -> tuple[str, str] | None:
    """(reason, what the record says) for a test process that ended before its tests reported; None while it ran
    to the time limit (upstream's timer then stops it: a real timeout) or when the runner could not tell."""
    code = None if ended is None else ended.get("exitcode")
    if code is None or ended.get("timer"):
        return None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if oom and -code == signal.SIGKILL:
            return "test-oom", f"the test process was killed at the sandbox's memory limit ({name} from the OOM killer)"
        return "test-killed", f"the test process was killed by {name} before its tests reported"
    return "test-exited", f"the test process exited with status {code} before its tests reported (e.g. os._exit)"


def _verdict(output: str, timed_out: bool, exit_code: int | None, nonce: str, seconds: float,
             peak: int | None, oom: bool, teardown: str, known: dict[str, dict[str, Any]]) -> Verdict:
    marks = _markers(output, nonce)
    extra = {"teardown": teardown} if teardown else {}
    if "INFRA" in marks:
        raise JudgeError(f"the BigCodeBench evaluator failed before judging: {marks['INFRA'].get('error')}")
    if "READY" not in marks:
        raise JudgeError(f"the BigCodeBench evaluator never started (exit {exit_code}"
                         f"{', wall cap' if timed_out else ''}): {output.strip()[-1500:]}")
    if "RESULT" in marks and marks["RESULT"].get("known") in known:
        return Verdict.from_dict(known[marks["RESULT"]["known"]], cached=True)
    if "RESULT" in marks:
        r = marks["RESULT"]
        status = r["status"] if r["status"] in ("pass", "fail", "timeout") else "fail"
        reason, details = r["reason"], {**r["details"], **extra}
        cause = _test_process_end(r.get("ended"), oom) if status == "timeout" and not r["details"] else None
        if cause is not None:  # upstream's status stays (no result from the test process: timeout); the cause is kept
            reason, details["test_process"] = cause
        return Verdict(status=status, solution=r["solution"], defines_entry_point=bool(r["defines_entry_point"]),
                       details=details, reason=reason, seconds=seconds, memory_peak_bytes=peak)
    reason = "wall-cap" if timed_out else "oom" if oom else "evaluator-died"
    return Verdict(status="timeout" if timed_out else "fail", solution="", defines_entry_point=False,
                   details={"ALL": f"no result from the evaluator ({reason}, exit {exit_code})", **extra},
                   reason=reason, seconds=seconds, memory_peak_bytes=peak)


__all__ = ["BigCodeBenchJudge", "JudgeSettings", "JudgeError", "Verdict", "CANARY", "CANARY_RIGHT", "CANARY_WRONG",
           "RUNNER"]
