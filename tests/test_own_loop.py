"""The controller inside a user's own agent loop (examples/own_agent_loop.py), against a loopback
OpenAI-compatible server, with nothing of the harness imported.

The server stands in for a model that can read a puzzle family's hidden rule off one solved example
of the same family: with such an example it answers right, with an example of another family it
applies that family's rule (a relevant-looking memory that hurts), and with none it is right on a
fixed ~30 % of puzzles. So the loop with TokenWorth+ (which learns when to inject nothing) must beat
the same loop without memory by far. The paper's method, which always injects a recalled candidate,
is measured too: on this stream it does no better than no memory (the example's docstring says why)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.library

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "own_agent_loop.py"
QUESTION = re.compile(r"A (\w+) puzzle: what does the \w+ rule give for (\d+)\?")
FAMILIES = ["ledger", "orbit", "harvest", "cipher", "tide", "lantern"]
RULES = [(2, 1), (3, 0), (5, 2), (7, 3), (4, 4), (6, 1)]  # the example's, read back by the stand-in model


def reply_for(messages: list[dict[str, str]]) -> str:
    name, n = QUESTION.search(messages[-1]["content"]).groups()
    family, n = FAMILIES.index(name), int(n)
    example = QUESTION.search(messages[0]["content"])
    if example is not None:  # the rule of the example's family, right or wrong for this puzzle
        a, b = RULES[FAMILIES.index(example.group(1))]
        return str(n * a + b)
    a, b = RULES[family]
    lucky = zlib.crc32(f"{family}:{n}".encode()) % 10 < 3
    return str(n * a + b if lucky else n * a + b + 1)


@pytest.fixture(scope="module")
def server():
    served = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert self.path == "/v1/chat/completions" and body["model"] == "stand-in"
            served.append(body)
            text = reply_for(body["messages"])
            data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                            "finish_reason": "stop"}],
                               "usage": {"completion_tokens": 1}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", served
    httpd.shutdown()
    httpd.server_close()


def run_example(base_url: str, *flags: str) -> tuple[dict, list[str]]:
    """The example as a user runs it, in a fresh interpreter; also which tokenworth modules it loaded."""
    code = ("import runpy, sys, json; sys.argv = ['own_agent_loop.py', *sys.argv[1:]]; "
            f"runpy.run_path({str(EXAMPLE)!r}, run_name='__main__'); "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules if m.startswith('tokenworth')})))")
    done = subprocess.run([sys.executable, "-c", code, "--base-url", base_url, "--model", "stand-in", *flags],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result, modules = done.stdout.strip().splitlines()[-2:]
    return json.loads(result), json.loads(modules)


def test_the_controller_in_a_users_loop_beats_the_same_loop_without_it(server) -> None:
    base_url, served = server
    without, _ = run_example(base_url, "--no-memory", "--tasks", "150")
    plus, modules = run_example(base_url, "--tasks", "150")
    paper, _ = run_example(base_url, "--tasks", "150", "--method", "tokenworth")
    assert modules == ["tokenworth_jax"]  # nothing of the harness
    assert len(served) == 450
    assert 0.2 < without["success_rate"] < 0.4 and without["injected"] == 0
    assert plus["injected"] > 0.5 and plus["bank"] > 0
    assert plus["success_rate"] > without["success_rate"] + 0.3, (plus, without)
    assert paper["injected"] > 0.9 and paper["success_rate"] < without["success_rate"] + 0.05, (paper, without)
