"""The BigCodeBench sanitiser as a long-lived process of the evaluation venv. Standard library and the evaluator only.

Run by :mod:`tokenworth_agent.benchmarks.bigcodebench.sanitiser` as ``<eval venv>/bin/python -I SERVER RUNNER`` (never
imported by the harness). ``RUNNER`` is the judge's own runner file: this program loads it as a module
and calls exactly what it calls (the ``datasets`` stand-in, ``bigcodebench.sanitize.sanitize`` and its
``defines`` check), so a solution sanitised here is the one the sandboxed runner would test.

Protocol: one JSON object per line on stdin, ``{"reply": ..., "entry_point": ...}``; one JSON object
per line on its own descriptor (a copy of stdout taken before 1 and 2 are pointed at /dev/null, so
nothing the sanitiser prints can break a line): ``{"solution": ..., "defines_entry_point": ...}`` or
``{"error": ...}``. ``{"ready": ...}`` first, once the evaluator is imported. End of stdin ends it.
"""

import importlib.util
import json
import os
import sys


def main(runner_path):
    spec = importlib.util.spec_from_file_location("bigcodebench_runner", runner_path)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    out = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)

    def answer(payload):
        os.write(out, (json.dumps(payload) + "\n").encode())

    try:
        runner.stand_in_for_datasets()
        from bigcodebench.sanitize import sanitize
    except BaseException as exc:  # noqa: BLE001 - the host falls back to the sandbox, which reports it
        answer({"error": "%s: %s" % (type(exc).__name__, exc)})
        return 3
    answer({"ready": True})
    for line in sys.stdin:
        try:
            request = json.loads(line)
            solution = sanitize(request["reply"], request["entry_point"])
            answer({"solution": solution, "defines_entry_point": runner.defines(solution, request["entry_point"])})
        except BaseException as exc:  # noqa: BLE001 - one reply the sanitiser chokes on: the sandbox judges it
            answer({"error": "%s: %s" % (type(exc).__name__, exc)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
