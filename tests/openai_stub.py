"""A loopback OpenAI-compatible stub server, run as its own process so tests can kill it.

``python -m tests.openai_stub --port P [--exit-after N] [--hang] [--model NAME] [--log FILE] [--delay S]``

* ``POST /v1/chat/completions``: answers every request with a DB-style final answer and a
  ``usage.completion_tokens`` equal to the reply's whitespace words (cut to ``max_tokens``);
  a model other than ``--model`` gets the 404 that vLLM and OpenAI send for an unknown model.
* ``GET /v1/models``: lists ``--model``. Any path outside ``/v1/`` is a 404.
* ``--exit-after N``: the process dies (``os._exit``) right after answering its N-th completion,
  as a crashed or restarted model server would.
* ``--hang``: accepts connections and never answers.
* ``--log FILE``: appends the last user message of every answered completion, one JSON string a
  line, right after the answer is sent (so a test can check nothing was served twice).
* ``--delay S``: waits S seconds before answering each completion (requests pile up in flight).

It listens on 127.0.0.1 only, prints ``ready`` once listening, serves at most 500 completions,
and exits by itself after ``--lifetime`` seconds (default 120), so no test can leave it behind.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLY = "Action: Answer\nFinal Answer: []"
MAX_COMPLETIONS = 500


def serve(port: int, model: str, exit_after: int | None, log: str | None = None, delay: float = 0.0) -> None:
    served = {"n": 0}
    answered = {"n": 0}
    lock = threading.Lock()
    answering = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/") == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            return self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not self.path.startswith("/v1/"):
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            if body.get("model") != model:
                return self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                                  "type": "NotFoundError"}})
            with lock:
                served["n"] += 1
                number = served["n"]
            if number > MAX_COMPLETIONS:
                return self._send(503, {"error": {"message": "stub limit reached"}})
            if delay:
                time.sleep(delay)
            words = REPLY.split(" ")[: int(body.get("max_tokens") or body["max_completion_tokens"])]
            # Answers go out one at a time, each logged once it is sent, so a death after the N-th
            # answer leaves exactly N answered and logged, and nothing half-done.
            with answering:
                self._send(200, {"id": f"c{number}", "object": "chat.completion", "created": 0, "model": model,
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join(words)},
                                              "finish_reason": "stop"}],
                                 "usage": {"prompt_tokens": 10, "completion_tokens": len(words),
                                           "total_tokens": 10 + len(words)}})
                answered["n"] += 1
                if log is not None:
                    with open(log, "a") as handle:
                        handle.write(json.dumps(body["messages"][-1]["content"]) + "\n")
                if exit_after is not None and answered["n"] >= exit_after:
                    os._exit(0)

    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.request_queue_size = 128  # a burst of connections must not wait in SYN retries
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    server.serve_forever(poll_interval=0.05)


def hang(port: int) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(16)
    print("ready", flush=True)
    held = []
    while True:
        conn, _ = listener.accept()
        held.append(conn)  # read nothing, answer nothing


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="served")
    parser.add_argument("--exit-after", type=int, default=None)
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--lifetime", type=float, default=120.0)
    parser.add_argument("--log", default=None)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    threading.Timer(args.lifetime, lambda: os._exit(0)).start()
    try:
        hang(args.port) if args.hang else serve(args.port, args.model, args.exit_after, args.log, args.delay)
    except OSError as exc:
        print(f"stub: {exc}", file=sys.stderr, flush=True)
        time.sleep(0.1)
        sys.exit(3)


if __name__ == "__main__":
    main()
