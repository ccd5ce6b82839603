"""The OpenAI-compatible backbone against a loopback stub server (127.0.0.1 only).

The stub records every request, answers with canned completions and usage, can fail the
first N requests with a chosen status, and counts requests in flight. It refuses to serve
more than ``MAX_REQUESTS`` requests, so no test can loop on it without bound."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tokenworth_agent.backbones.base import BackboneError
from tokenworth_agent.backbones.openai_backbone import OpenAIBackbone
from tokenworth_agent.backbones.registry import make_backbone

MAX_REQUESTS = 200


class Stub:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.fail_first = 0
        self.fail_status = 500
        self.fail_headers: dict[str, str] = {}
        self.always_status: int | None = None
        self.delay = 0.0
        self.omit_usage = False
        self.reject_max_tokens = False  # as OpenAI's newer models do
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()


def _handler(stub: Stub):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output quiet
            pass

        def _send(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with stub.lock:
                stub.requests.append({"path": self.path, "body": body})
                number = len(stub.requests)
                stub.in_flight += 1
                stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
            try:
                time.sleep(stub.delay)
                if number > MAX_REQUESTS:
                    return self._send(503, {"error": {"message": "stub request limit reached"}})
                if stub.always_status is not None:
                    return self._send(stub.always_status, {"error": {"message": f"status {stub.always_status}"}})
                if number <= stub.fail_first:
                    return self._send(stub.fail_status, {"error": {"message": "try again"}}, stub.fail_headers)
                if stub.reject_max_tokens and "max_tokens" in body:
                    return self._send(400, {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported "
                                                                 "with this model. Use 'max_completion_tokens' instead."}})
                cap = body.get("max_tokens") or body["max_completion_tokens"]
                last = body["messages"][-1]["content"]
                response = {
                    "id": f"cmpl-{number}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": f"echo {last}"},
                                 "finish_reason": "length" if len(last) >= cap else "stop"}],
                }
                if not stub.omit_usage:
                    # completion tokens tied to the item, so a mix-up or a double count shows
                    response["usage"] = {"prompt_tokens": 11, "completion_tokens": len(last), "total_tokens": 11 + len(last),
                                         "prompt_tokens_details": {"cached_tokens": 8}}
                return self._send(200, response)
            finally:
                with stub.lock:
                    stub.in_flight -= 1

    return Handler


class Server(ThreadingHTTPServer):
    request_queue_size = 128  # the default backlog (5) makes a burst of connections wait ~1 s in SYN retries


@pytest.fixture
def stub():
    state = Stub()
    server = Server(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def backbone(stub):
    with OpenAIBackbone("stub-model", base_url=stub.url, concurrency=4, max_retries=3,
                        backoff_base=0.01, backoff_max=0.05, timeout=10, on_notice=lambda line: None) as b:
        yield b


def conv(text):
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def test_batch_in_order_with_usage_counts(stub, backbone):
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    out = backbone.generate([conv(t) for t in texts], [64, 64, 64, 3, 64], stop=["Observation:"])
    assert [g.text for g in out] == [f"echo {t}" for t in texts]
    assert [g.output_tokens for g in out] == [1, 2, 3, 4, 5]
    assert [g.finish_reason for g in out] == ["stop", "stop", "stop", "length", "stop"]
    assert len(stub.requests) == 5
    by_text = {r["body"]["messages"][-1]["content"]: r["body"] for r in stub.requests}
    body = by_text["dddd"]
    assert stub.requests[0]["path"] == "/v1/chat/completions"
    assert body["model"] == "stub-model" and body["max_tokens"] == 3
    assert body["temperature"] == 0 and body["top_p"] == 1 and body["stop"] == ["Observation:"]
    assert body["messages"] == conv("dddd")


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_errors_are_retried_without_double_counting(stub, backbone, status):
    stub.fail_first, stub.fail_status = 2, status
    out = backbone.generate([conv("abc")], [64])
    assert out[0].output_tokens == 3  # only the successful attempt's usage
    assert len(stub.requests) == 3 and backbone.attempts == 3


def test_retry_after_is_honoured_within_the_cap(stub, backbone):
    stub.fail_first, stub.fail_status, stub.fail_headers = 1, 429, {"Retry-After": "0.2"}
    start = time.monotonic()
    backbone.generate([conv("x")], [8])
    # the server asked for 0.2 s, the cap (backoff_max) is 0.05 s
    assert 0.04 <= time.monotonic() - start < 1.0


@pytest.mark.parametrize("status", [400, 401, 404])
def test_non_transient_errors_raise_at_once(stub, backbone, status):
    stub.always_status = status
    with pytest.raises(BackboneError, match=str(status)):
        backbone.generate([conv("x")], [8])
    assert len(stub.requests) == 1


def test_attempts_are_bounded(stub, backbone):
    stub.always_status = 500
    with pytest.raises(BackboneError, match="4 attempts"):
        backbone.generate([conv("x")], [8])
    assert len(stub.requests) == 4


def test_missing_usage_is_an_error(stub, backbone):
    stub.omit_usage = True
    with pytest.raises(BackboneError, match="usage"):
        backbone.generate([conv("x")], [8])


def test_concurrency_is_bounded(stub):
    stub.delay = 0.15
    with OpenAIBackbone("m", base_url=stub.url, concurrency=3, backoff_base=0.01) as b:
        out = b.generate([conv(str(i)) for i in range(9)], [8] * 9)
    assert [g.text for g in out] == [f"echo {i}" for i in range(9)]
    assert stub.max_in_flight == 3  # reached, never exceeded


def test_connection_errors_are_retried_then_fail():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with OpenAIBackbone("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff_base=0.01, timeout=2,
                        on_notice=lambda line: None) as b:
        with pytest.raises(BackboneError, match="2 attempts"):
            b.generate([conv("x")], [8])
        assert b.attempts == 2


def test_works_from_inside_a_running_event_loop(stub, backbone):
    async def caller():
        return backbone.generate([conv("loop")], [16])

    assert asyncio.run(caller())[0].text == "echo loop"
    assert backbone.generate([conv("again")], [16])[0].output_tokens == 5  # the client survives


def test_bad_input_and_registry(stub, monkeypatch):
    with OpenAIBackbone("m", base_url=stub.url) as b:
        with pytest.raises(ValueError, match="at least 1"):
            b.generate([conv("x")], [0])
        with pytest.raises(ValueError, match="max_tokens"):
            b.generate([conv("x")], [1, 2])
        assert b.generate([], []) == []
    with pytest.raises(ValueError, match="concurrency"):
        OpenAIBackbone("m", base_url=stub.url, concurrency=0)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(BackboneError, match="OPENAI_API_KEY"):
        OpenAIBackbone("m")
    built = make_backbone("openai", model="m", base_url=stub.url, concurrency=2)
    assert isinstance(built, OpenAIBackbone) and built.concurrency == 2
    built.close()
    built.close()  # idempotent


def test_seed_prompt_and_cached_tokens(stub):
    with OpenAIBackbone("m", base_url=stub.url, seed=7, on_notice=lambda line: None) as b:
        [out] = b.generate([conv("abc")], [16])
    assert stub.requests[0]["body"]["seed"] == 7
    assert (out.output_tokens, out.prompt_tokens, out.cached_tokens) == (3, 11, 8)  # OutputTok is the completion only


def test_a_server_that_wants_max_completion_tokens_gets_it(stub):
    stub.reject_max_tokens = True
    lines = []
    with OpenAIBackbone("m", base_url=stub.url, on_notice=lines.append) as b:
        out = b.generate([conv("a"), conv("bb")], [16, 16])
        again = b.generate([conv("ccc")], [16])
    assert [g.output_tokens for g in out + again] == [1, 2, 3]
    assert [r["body"].get("max_completion_tokens") for r in stub.requests[-1:]] == [16]
    assert "max_tokens" not in stub.requests[-1]["body"]
    assert any("max_completion_tokens" in line for line in lines)
    with OpenAIBackbone("m", base_url=stub.url, max_tokens_field="max_completion_tokens") as b:
        before = len(stub.requests)
        b.generate([conv("d")], [4])
        assert len(stub.requests) == before + 1  # no rejected first attempt


def test_by_default_the_whole_batch_is_in_flight(stub):
    stub.delay = 0.5
    with OpenAIBackbone("m", base_url=stub.url) as b:
        out = b.generate([conv(str(i)) for i in range(12)], [8] * 12)
    assert [g.text for g in out] == [f"echo {i}" for i in range(12)]
    assert stub.max_in_flight == 12


def test_replicas_share_the_load(stub):
    second = Stub()
    server = Server(("127.0.0.1", 0), _handler(second))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        stub.delay = second.delay = 0.1
        urls = [stub.url, f"http://127.0.0.1:{server.server_address[1]}/v1"]
        with OpenAIBackbone("m", base_url=urls) as b:
            out = b.generate([conv(str(i)) for i in range(10)], [8] * 10)
        assert [g.text for g in out] == [f"echo {i}" for i in range(10)]
        assert len(stub.requests) == len(second.requests) == 5  # least-loaded: an even split
        with pytest.raises(ValueError, match="twice"):
            OpenAIBackbone("m", base_url=[stub.url, stub.url])
    finally:
        server.shutdown()
        server.server_close()


def test_submit_answers_one_request_asynchronously_like_generate(stub, backbone):
    futures = [backbone.submit(conv(t), 64) for t in ("a", "bb", "ccc")]
    out = [f.result(timeout=30) for f in futures]
    assert [g.text for g in out] == ["echo a", "echo bb", "echo ccc"] and [g.output_tokens for g in out] == [1, 2, 3]
    assert len(stub.requests) == 3
    with pytest.raises(ValueError, match="max_tokens"):
        backbone.submit(conv("x"), 0)
