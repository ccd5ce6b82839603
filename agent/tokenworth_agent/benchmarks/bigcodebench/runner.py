"""The BigCodeBench judge's program inside the sandbox. Standard library and the official evaluator only.

Run by :mod:`tokenworth_agent.benchmarks.bigcodebench.judge` as ``<eval venv>/bin/python -I RUNNER REQUEST`` inside a
fresh sandbox (never imported by the harness). ``REQUEST`` is a JSON file: ``reply`` (the model's
whole reply), ``code_prompt``, ``test``, ``entry_point``, ``time_limit`` (seconds), ``nonce`` and
``known``: the sha256 digests of sanitised solutions of this task the judge has already tested.

It does what ``bigcodebench generate`` + ``bigcodebench evaluate`` (0.2.5) do to one reply, in their
order and with their defaults:

1. ``solution = sanitize(reply, entry_point)`` (tree-sitter: the code the entry point needs);
2. calibrate: ``code_prompt + "\\n    pass\\n" + solution`` (``evaluate --calibrated``, the default);
3. ``untrusted_check(solution, test, entry_point, max_as_limit=30 GiB, max_data_limit=30 GiB,
   max_stack_limit=10 MiB, min_time_limit=1, gt_time_limit=20)``: the test class runs in a forked
   process under one timer of ``max(TIMEOUT_LIMIT, 20) + 1`` seconds. ``TIMEOUT_LIMIT`` (240 s
   upstream) is set to ``time_limit`` as a module constant: its environment override,
   ``BIGCODEBENCH_TIMEOUT_PER_TASK``, raises a TypeError in 0.2.5 (``max`` of a str and a float).
   (20 s is what upstream passes when it has no ground-truth time; a ``time_limit`` below 20 s, which
   only tests use, lowers it too, so that the limit is the one asked for.)

**A test process that dies.** Upstream joins its test process with ``p.join(timeout + 1)``, which
waits on the process's sentinel pipe; the test process's own helpers (the ``Manager`` server its
``safe_environment`` starts) hold that pipe too, so a test process that ends without running its
clean-up (``os._exit``, a signal, the OOM killer) was waited for until the whole time limit. Here the
class it makes (``bigcodebench.eval.multiprocessing.Process``, in this process only) is
:class:`WatchedProcess`, whose ``join`` also returns when the process itself has ended (``waitpid``,
polled every :data:`POLL_S`). The status stays upstream's (no result from the test process:
``timeout``); the report adds how the process ended (``ended``: its exit code, negative for a signal).

When the sanitised solution is a ``known`` one, step 3 is skipped: the report names the digest
instead (:mod:`tokenworth_agent.benchmarks.bigcodebench.verdicts`; nothing of the reply has run at that point).

It reports on its own descriptor (the solution's output goes to /dev/null, so a solution that prints
cannot bury or forge-by-accident the report), one line per marker, tagged with the request's nonce:
``READY`` once the evaluator is imported and before anything of the reply is touched; then ``RESULT``
(``status``, ``solution``, ``defines_entry_point``, ``details``) or, before READY, ``INFRA`` (the
evaluator itself failed).

``datasets``: ``bigcodebench.sanitize`` imports ``bigcodebench.data``, whose module level imports
``datasets.load_dataset`` for the package's download CLI; judging never loads a dataset. Where
``datasets`` is not installed (the project's evaluation venvs, docs/bigcodebench.md), a stand-in
module whose ``load_dataset`` refuses to run is registered under that name for this process only.
Nothing of the ``bigcodebench`` package is changed.
"""

import ast
import hashlib
import json
import multiprocessing
import multiprocessing.connection
import os
import sys
import time
import types

DETAIL_CHARS = 2000  # per test's traceback in the report
POLL_S = 0.25  # how often a waiting join asks whether the test process has ended (a waitpid: no cost to speak of)


class WatchedProcess(multiprocessing.Process):
    """The test process, joined until it has ended or the timeout passed, whoever else holds its sentinel."""

    started = []  # every one this process made (untrusted_check makes one)
    outlived = False  # a join's timeout passed while it ran (then upstream's timer stops it: a real timeout)

    def start(self):
        WatchedProcess.started.append(self)
        super().start()

    def join(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.is_alive():  # is_alive reaps the process itself (waitpid WNOHANG)
            left = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
            if left <= 0:
                self.outlived = True
                return
            multiprocessing.connection.wait([self.sentinel], left)  # returns at once on a clean exit


def watch_test_process(evaluator):
    """Make ``evaluator`` (``bigcodebench.eval``) start its test process as a :class:`WatchedProcess`; nothing of
    the package changes, and every other name of ``multiprocessing`` reads as it is."""
    shim = types.ModuleType("multiprocessing")
    shim.__getattr__ = lambda name: getattr(multiprocessing, name)  # a module's __getattr__ (PEP 562)
    shim.Process = WatchedProcess
    evaluator.multiprocessing = shim


def ended():
    """How the last test process ended (``exitcode``: negative for a signal); None when none was started."""
    if not WatchedProcess.started:
        return None
    process = WatchedProcess.started[-1]
    return {"exitcode": process.exitcode, "timer": process.outlived}


class Reporter:
    def __init__(self, nonce):
        self.fd = os.dup(1)
        self.tag = "@@BCB-" + nonce

    def __call__(self, kind, payload):
        os.write(self.fd, ("\n%s %s %s\n" % (self.tag, kind, json.dumps(payload))).encode())

    def silence_others(self):
        """Point descriptors 1 and 2 at /dev/null: what the solution prints goes nowhere."""
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)


def stand_in_for_datasets():
    try:
        import datasets  # noqa: F401 - a real installation is used as it is
        return
    except ImportError:
        pass
    module = types.ModuleType("datasets")

    def load_dataset(*args, **kwargs):
        raise RuntimeError("the BigCodeBench judge never loads a dataset (datasets is a stand-in here)")

    module.load_dataset = load_dataset
    sys.modules["datasets"] = module


def defines(solution, name):
    """Whether ``solution`` parses and defines ``name`` at its top level (else the reply held no usable code)."""
    try:
        tree = ast.parse(solution)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in tree.body)


def main(request_path):
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    report = Reporter(request["nonce"])
    try:
        stand_in_for_datasets()
        import bigcodebench
        import bigcodebench.eval
        from bigcodebench.eval import untrusted_check
        from bigcodebench.sanitize import sanitize

        bigcodebench.eval.TIMEOUT_LIMIT = float(request["time_limit"])
        watch_test_process(bigcodebench.eval)
    except BaseException as exc:  # noqa: BLE001 - nothing of the reply has run: the evaluator is broken
        report("INFRA", {"error": "%s: %s" % (type(exc).__name__, exc)})
        return 3
    report("READY", {"bigcodebench": getattr(bigcodebench, "__version__", "unknown")})
    report.silence_others()
    started = time.monotonic()
    try:
        solution = sanitize(request["reply"], request["entry_point"])
    except BaseException as exc:  # noqa: BLE001 - a reply the sanitiser chokes on fails its task
        report("RESULT", {"status": "fail", "solution": "", "reason": "sanitize-error", "defines_entry_point": False,
                          "details": {"sanitize": "%s: %s" % (type(exc).__name__, exc)}, "seconds": 0.0})
        return 0
    has_code = defines(solution, request["entry_point"])
    digest = hashlib.sha256(solution.encode("utf-8")).hexdigest()
    if digest in set(request.get("known", ())):
        report("RESULT", {"known": digest, "solution": solution, "defines_entry_point": has_code})
        return 0
    calibrated = request["code_prompt"] + "\n    pass\n" + solution
    try:
        status, details = untrusted_check(calibrated, request["test"], request["entry_point"],
                                          30 * 1024, 30 * 1024, 10, 1, min(20.0, float(request["time_limit"])))
    except BaseException as exc:  # noqa: BLE001 - e.g. the solution killed the evaluator's helper processes
        report("RESULT", {"status": "fail", "solution": solution, "reason": "evaluator-error",
                          "defines_entry_point": has_code, "details": {"evaluator": "%s: %s" % (type(exc).__name__, exc)},
                          "seconds": round(time.monotonic() - started, 3)})
        return 0
    report("RESULT", {"status": status, "solution": solution, "reason": "", "defines_entry_point": has_code,
                      "details": {str(k): str(v)[-DETAIL_CHARS:] for k, v in details.items()},
                      "seconds": round(time.monotonic() - started, 3), "ended": ended()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
