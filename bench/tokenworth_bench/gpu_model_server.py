"""A loopback OpenAI-compatible server that models a GPU's batch economics (for bench/tokenworth_bench/engine_speed.py).

``python -m tokenworth_bench.gpu_model_server [--port 0] [--scale 1.0] [--env db] [--tasks 100]``

It answers ``POST /v1/chat/completions`` the way a continuous-batching engine (vLLM) would, in
time: every request in flight is a sequence in one decode batch; the batch advances one token per
step, all sequences together; a sequence joins the batch at the next step boundary and leaves once
its last token is decoded. One step with ``k`` sequences of context lengths ``c_i`` costs

    step(c_1..c_k) = a + Σ_i (b + κ·c_i)                                  [GPU seconds]

and the server sleeps ``scale · step`` wall seconds per step (``--scale``: a time-scale factor, so
that long runs fit this machine; it scales every model time alike, so ratios of model times are
unaffected; the harness's own time is real time and does not scale, see ``harness_share`` below).

**Parameters and their sources** (Qwen2.5-14B-Instruct, BF16, one A100-80GB, vLLM 0.6.3):

* Qwen's "Qwen2.5 Speed Benchmark" (qwen.readthedocs.io, ``benchmark/speed_benchmark``; vLLM
  table for 14B): generating 2048 tokens at batch 1 runs at **46.30 tokens/s** from a 1-token
  input and **43.83 tokens/s** from a 6144-token input. Per step that is t₁ = 1/46.30 = 21.60 ms
  and t₂ = 1/43.83 = 22.82 ms, at a mean context of c₁ = 1 + 1024 and c₂ = 6144 + 1024 tokens.
* κ, the per-context-token cost of one step (reading the sequence's KV cache), from those two
  rows: κ = (t₂ − t₁)/(c₂ − c₁) = 0.198 µs per token. This puts the whole slowdown on the KV reads
  (none on the 6144-token prefill), so κ is an upper bound: it can only overstate what a large
  batch costs.
* b, the per-sequence compute of one step: 2·N FLOPs per token at N = 14.7 B parameters (the
  model card), on the A100's 312 TFLOPS dense BF16 peak (NVIDIA's datasheet) at an assumed 50 %
  utilisation: b = 2·14.7e9 / (312e12 · 0.5) = 0.188 ms. (Not in Qwen's table, which is batch 1
  only; this is the one assumed figure.)
* a, the fixed cost of a step (streaming the 29.4 GB of weights, launch overheads), so that a
  batch-1 step at c₁ reproduces Qwen's number: a = t₁ − b − κ·c₁ = 21.21 ms.

So a batch of 15 DB sequences (contexts ~600 tokens) costs ~25 ms per step against 21.9 ms for one:
15 tokens for the price of 1.15. Prefill is not modelled by default (the issue's model is
decode-only; vLLM's prefix cache serves the repeated instructions and conversation history);
``--prefill-per-token-s`` adds ``p`` per uncached prompt token to the step a sequence joins, and
``/stats`` counts uncached prompt tokens either way (a message-prefix cache, as vLLM's automatic
prefix caching would hit), so the cost of prefill can be added to a projection afterwards.

**Replies.** So that the real environment sees sensible actions, each reply is the simulated
backbone's (:class:`tokenworth_agent.sim.SimBackbone`) for that conversation: the task is found
by its prompt text (the conversation's fourth message, the environment's ``task_prompt``, among
the first ``--tasks`` tasks of ``--env``), the round is the number of assistant turns after the
opening "OK.", and the injected memory's skills are those of the tasks whose questions appear
in the memory block (a DB/KG memory opens with ``Question: <the source question>``). The sim's
seed is the server's ``--seed`` for every stream (the server sees only text, not which stream
asked). A conversation that is no task's (an auxiliary call: a reflection, an extraction) gets a
short fixed note. ``usage.completion_tokens`` is the sim tokenizer's count (Qwen2.5's BPE) of the
text returned, after ``stop`` and the ``max_tokens`` cut; the decode takes that many steps (at
least one: an empty reply still decodes its end-of-sequence token).

**A batch cap** (``--max-num-seqs N``, vLLM's ``max_num_seqs``): at most N sequences decode in
one step; the others wait and join, first come first served, as sequences finish (what vLLM's
scheduler does when its cap or its KV cache is full). Without a cap a batch is almost free in this
cost model (a DB sequence adds ~0.3 ms to a ~21 ms step), so one replica never runs out of room
below several hundred live streams. The cap the distributed benchmark uses is not tuned: it is the
concurrency vLLM guarantees at full context on the card the cost model describes
(:func:`kv_max_num_seqs`: the KV pool of Qwen2.5-14B on an 80 GiB card under the project's GPU
split, divided by the KV of one 8192-token sequence; vLLM prints the same figure at start-up as
"Maximum concurrency for 8192 tokens per request").

**Harness share.** The server knows when requests are in flight (from a request's arrival to its
response being written). ``/stats`` reports, over the window since ``POST /stats/reset``, the
wall time with no request in flight (``idle_s``) and its share of the window
(``harness_share``): the time the GPU would sit idle waiting for the harness. Since the harness's
time does not scale, a share measured at ``scale < 1`` overstates the share at ``scale = 1``.
``/stats`` also reports the steps, the modelled GPU seconds, tokens, the batch size of every step
(as a histogram) and ``late_s``, the wall time the decode loop fell behind its schedule (a
loaded machine): a faithful run has ``late_s`` small against ``window_s``. ``first_in`` and
``last_out`` (``time.monotonic()`` of the window's first arrival and last response) give the served
window of several replicas on one host: ``max(last_out) - min(first_in)``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import re
import signal
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Sequence

# -------------------------------------------------------------------------------------- cost model
SOURCE = ("Qwen2.5 Speed Benchmark, qwen.readthedocs.io benchmark/speed_benchmark: Qwen2.5-14B-Instruct "
          "BF16, 1x A100-80GB, vLLM 0.6.3, 2048 generated tokens, batch 1")
QWEN_TOKENS_PER_S_INPUT_1 = 46.30
QWEN_TOKENS_PER_S_INPUT_6144 = 43.83
QWEN_GENERATED = 2048
QWEN14B_PARAMS = 14.7e9  # Qwen2.5-14B model card
A100_BF16_FLOPS = 312e12  # NVIDIA A100 datasheet, dense BF16 tensor-core peak
ASSUMED_UTILISATION = 0.5  # of that peak, for one sequence's share of a decode step


@dataclasses.dataclass(frozen=True)
class DecodeCost:
    """What one decode step costs, in GPU seconds (see the module docstring for the derivation)."""

    fixed_s: float
    per_sequence_s: float
    per_context_token_s: float
    prefill_per_token_s: float = 0.0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) < 0:
                raise ValueError(f"DecodeCost.{field.name} must be >= 0, got {getattr(self, field.name)}")

    @classmethod
    def qwen25_14b_a100(cls, prefill_per_token_s: float = 0.0) -> "DecodeCost":
        """Qwen2.5-14B-Instruct BF16 on one A100-80GB under vLLM, from Qwen's speed benchmark."""
        t1, t2 = 1 / QWEN_TOKENS_PER_S_INPUT_1, 1 / QWEN_TOKENS_PER_S_INPUT_6144
        c1, c2 = 1 + QWEN_GENERATED / 2, 6144 + QWEN_GENERATED / 2  # mean context over the 2048 steps
        kappa = (t2 - t1) / (c2 - c1)
        b = 2 * QWEN14B_PARAMS / (A100_BF16_FLOPS * ASSUMED_UTILISATION)
        return cls(fixed_s=t1 - b - kappa * c1, per_sequence_s=b, per_context_token_s=kappa,
                   prefill_per_token_s=prefill_per_token_s)

    def step(self, contexts: Sequence[int], prefill_tokens: int = 0) -> float:
        """One step over sequences with these context lengths, plus the prefill of those joining."""
        if not contexts:
            return 0.0
        return (self.fixed_s + len(contexts) * self.per_sequence_s + self.per_context_token_s * sum(contexts)
                + self.prefill_per_token_s * prefill_tokens)


KV_CONTEXT_TOKENS = 8192  # the full context a sequence is sized for (the split table's max_model_len)
CARD_GIB = 80  # the A100-80GB of the cost model


def kv_max_num_seqs(card_gib: int = CARD_GIB, context_tokens: int = KV_CONTEXT_TOKENS) -> dict[str, Any]:
    """The batch cap a full KV cache sets: vLLM's KV pool on the card, in full-context sequences.

    The pool is vLLM's share of the card under the project's default split
    (:func:`tokenworth_agent.backbones.colocation.plan_memory`, one DB controller) less Qwen2.5-14B's BF16
    weights; an upper bound, since vLLM also keeps its profiling run's activation peak inside its
    share. One sequence of ``context_tokens`` holds 48 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
    = 192 KiB per token."""
    from tokenworth_agent.backbones.colocation import (GiB, QWEN14B_BF16_BYTES, QWEN14B_KV_BYTES_PER_TOKEN,
                                            controller_needed_bytes, controller_state_bytes, plan_memory)

    total = card_gib << 30
    plan = plan_memory(total_bytes=total, jax_needed_bytes=controller_needed_bytes(controller_state_bytes("db")))
    assert plan.gpu_memory_utilization is not None
    pool = plan.gpu_memory_utilization * total - QWEN14B_BF16_BYTES
    per_sequence = QWEN14B_KV_BYTES_PER_TOKEN * context_tokens
    return {"card_gib": card_gib, "gpu_memory_utilization": plan.gpu_memory_utilization,
            "weights_gib": QWEN14B_BF16_BYTES / GiB, "kv_pool_gib": pool / GiB,
            "kv_bytes_per_token": QWEN14B_KV_BYTES_PER_TOKEN, "context_tokens": context_tokens,
            "kv_pool_tokens": int(pool // QWEN14B_KV_BYTES_PER_TOKEN), "max_num_seqs": int(pool // per_sequence)}


# ------------------------------------------------------------------------------------ bookkeeping
class BusyClock:
    """Wall time with at least one request in flight, over a window (thread-safe; times passed in).

    ``enter``/``leave`` bracket one request. Busy time is the union of the requests' intervals,
    clipped to the window opened by ``reset``; a request in flight across ``reset`` counts from it.
    """

    def __init__(self, now: float) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._busy_since: float | None = None
        self._window_start = now
        self._busy = 0.0
        self._first_in: float | None = None  # the window's first arrival and last response
        self._last_out: float | None = None

    def reset(self, now: float) -> None:
        with self._lock:
            self._window_start, self._busy = now, 0.0
            self._first_in = self._last_out = None
            if self._busy_since is not None:
                self._busy_since = now

    def enter(self, now: float) -> None:
        with self._lock:
            if self._in_flight == 0:
                self._busy_since = max(now, self._window_start)
            if self._first_in is None:
                self._first_in = now
            self._in_flight += 1

    def leave(self, now: float) -> None:
        with self._lock:
            if self._in_flight == 0:
                raise RuntimeError("BusyClock.leave without a matching enter")
            self._in_flight -= 1
            self._last_out = now
            if self._in_flight == 0 and self._busy_since is not None:
                self._busy += max(0.0, now - self._busy_since)
                self._busy_since = None

    def read(self, now: float) -> dict[str, float]:
        """``window_s``, ``busy_s``, ``idle_s`` and ``harness_share`` (idle ÷ window) up to ``now``."""
        with self._lock:
            busy = self._busy + (now - self._busy_since if self._busy_since is not None else 0.0)
            window = max(0.0, now - self._window_start)
            in_flight = self._in_flight
            first_in, last_out = self._first_in, self._last_out
        idle = max(0.0, window - busy)
        return {"window_s": window, "busy_s": busy, "idle_s": idle,
                "harness_share": idle / window if window > 0 else 0.0, "in_flight": in_flight,
                "first_in": first_in, "last_out": last_out}


@dataclasses.dataclass
class _Sequence:
    tokens: int  # to decode (at least one step)
    context: int  # prompt tokens plus those decoded so far
    prefill: int  # uncached prompt tokens, charged on the step it joins
    done: threading.Event = dataclasses.field(default_factory=threading.Event)


class DecodeLoop:
    """Continuous batching in modelled time: all sequences in flight advance one token per step.

    ``step()`` is one decode step (admit the waiting sequences, up to ``max_num_seqs`` running,
    charge the step, advance every sequence, release the finished ones) and returns its cost in GPU seconds; ``run()`` calls it
    forever, sleeping ``scale ×`` each step's cost against a schedule that never runs ahead (a
    step that started late is not shortened to catch up). Tests drive ``step()`` directly.
    """

    def __init__(self, cost: DecodeCost, scale: float = 1.0, *, max_num_seqs: int | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        if max_num_seqs is not None and max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
        self.cost, self.scale, self._clock, self._sleep = cost, scale, clock, sleep
        self.max_num_seqs = max_num_seqs  # None: no cap; else the others wait, first come first served
        self._cond = threading.Condition()
        self._waiting: list[_Sequence] = []
        self._running: list[_Sequence] = []
        self._stopped = False
        self._due: float | None = None  # when the next step may start (None: the loop was idle)
        self.reset_counters()

    def reset_counters(self) -> None:
        with self._cond:
            self.steps = 0
            self.model_s = 0.0
            self.decoded_tokens = 0
            self.prefill_tokens = 0
            self.batch_steps: Counter[int] = Counter()  # batch size -> steps at that size
            self.late_s = 0.0

    def submit(self, prompt_tokens: int, new_tokens: int, uncached_prompt_tokens: int = 0) -> _Sequence:
        """Queue one sequence; wait on ``.done``."""
        if prompt_tokens < 0 or new_tokens < 0 or uncached_prompt_tokens < 0:
            raise ValueError("token counts must be >= 0")
        sequence = _Sequence(tokens=max(1, new_tokens), context=prompt_tokens, prefill=uncached_prompt_tokens)
        with self._cond:
            self._waiting.append(sequence)
            self._cond.notify()
        return sequence

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._waiting and not self._running

    def step(self) -> float:
        with self._cond:
            room = len(self._waiting) if self.max_num_seqs is None else max(0, self.max_num_seqs - len(self._running))
            joining, self._waiting = self._waiting[:room], self._waiting[room:]
            self._running.extend(joining)
            batch = list(self._running)
        if not batch:
            return 0.0
        prefill = sum(s.prefill for s in joining)
        cost = self.cost.step([s.context for s in batch], prefill)
        self._charge(cost)
        with self._cond:
            self.steps += 1
            self.model_s += cost
            self.decoded_tokens += len(batch)
            self.prefill_tokens += prefill
            self.batch_steps[len(batch)] += 1
            for sequence in batch:
                sequence.tokens -= 1
                sequence.context += 1
            finished = [s for s in batch if s.tokens == 0]
            self._running = [s for s in self._running if s.tokens > 0]
        for sequence in finished:
            sequence.done.set()
        return cost

    def _charge(self, cost: float) -> None:
        """Spend ``scale × cost`` wall seconds, counted from when the step was due."""
        now = self._clock()
        due = now if self._due is None else self._due
        if now > due:  # the loop was held up (a loaded machine): start the step now, note the delay
            self.late_s += now - due
            due = now
        self._due = due + cost * self.scale
        wait = self._due - self._clock()
        if wait > 0:
            self._sleep(wait)

    def run(self) -> None:
        while True:
            with self._cond:
                if not self._waiting and not self._running:
                    while not self._waiting and not self._stopped:
                        self._cond.wait()
                    self._due = None  # idle is not lateness: a fresh batch starts its schedule now
                if self._stopped:
                    return
            self.step()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


# ------------------------------------------------------------------------------------------ replies
AUX_NOTE = ("Note: the last task was handled by reading the question, querying the table once and "
            "answering from the observed rows; reuse that pattern when a similar question comes up.")


class SimReplies:
    """Replies from the simulated backbone, with the task, round and memory read from the text."""

    def __init__(self, env_name: str, tasks: Sequence[Any], seed: int = 0) -> None:
        from tokenworth_agent.core.budget import Budget
        from tokenworth_agent.envs.registry import make_environment
        from tokenworth_agent.sim import SimBackbone

        self.sim = SimBackbone(seed=seed)
        self.seed = seed
        self._tokens = self.sim._tokens
        env = make_environment(env_name, Budget.for_env(env_name))
        try:
            self._by_prompt = {env.task_prompt(t): t for t in tasks}
        finally:
            env.close()
        self._by_question = {t.query_text.strip(): t for t in tasks}

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one instance per server; the instructions repeat
    def count(self, text: str) -> int:
        return self._tokens.count(text)

    def task_of(self, messages: Sequence[Mapping[str, str]]) -> Any | None:
        if len(messages) < 4 or messages[3].get("role") != "user":
            return None
        return self._by_prompt.get(str(messages[3].get("content", "")))

    def memory_skills(self, messages: Sequence[Mapping[str, str]]) -> tuple[str, ...] | None:
        """The skills of the tasks whose questions the memory block quotes (None: no memory found)."""
        from tokenworth_agent.core.budget import BLOCK_HEADER

        first = str(messages[1].get("content", ""))
        at = first.find(BLOCK_HEADER.strip())
        if at < 0:
            return None
        sources = [self._by_question.get(q.strip()) for q in re.findall(r"^Question: (.*)$", first[at:], re.M)]
        sources = [t for t in sources if t is not None]
        if not sources:
            return None
        return tuple(dict.fromkeys(s for t in sources for s in t.skill_list))

    def reply(self, messages: Sequence[Mapping[str, str]], max_tokens: int,
              stop: Sequence[str] | None) -> tuple[str, int, str]:
        """``(text, completion tokens, finish_reason)``; never raises on odd conversations."""
        from tokenworth_agent.sim import Facts

        task = self.task_of(messages)
        if task is not None:
            assistant_turns = sum(1 for m in messages if m.get("role") == "assistant")
            facts = Facts(task, self.seed, round=max(0, assistant_turns - 1),
                          memory_skills=self.memory_skills(messages))
            try:
                [generation] = self.sim.generate([messages], [max_tokens], stop, facts=[facts])
                return generation.text, generation.output_tokens, generation.finish_reason
            except Exception:  # noqa: BLE001 - an odd conversation gets the note, as an aux call would
                pass
        text, count, cut = self._tokens.truncate(AUX_NOTE, max_tokens)
        return text, count, "length" if cut else "stop"

    def prompt_tokens(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """Tokens per message (content plus 4 for the chat template's role markers)."""
        return [self.count(str(m.get("content", ""))) + 4 for m in messages]


class PrefixCache:
    """Which leading messages of a prompt were seen before (as vLLM's prefix cache would hit them)."""

    def __init__(self, capacity: int = 200_000) -> None:
        self._seen: dict[str, None] = {}
        self._capacity = capacity
        self._lock = threading.Lock()

    def uncached(self, messages: Sequence[Mapping[str, str]], per_message: Sequence[int]) -> int:
        digest = hashlib.blake2b(digest_size=16)
        cached = 0
        keys = []
        for message, tokens in zip(messages, per_message):
            digest.update(json.dumps([message.get("role"), message.get("content")]).encode())
            keys.append(digest.copy().hexdigest())
        with self._lock:
            for key, tokens in zip(keys, per_message):
                if key not in self._seen:
                    break
                cached += tokens
            for key in keys:
                self._seen[key] = None
            while len(self._seen) > self._capacity:
                self._seen.pop(next(iter(self._seen)))
        return sum(per_message) - cached


# ------------------------------------------------------------------------------------------ server
class GPUModel:
    """The server's state: cost model, decode loop, replies, busy clock and counters."""

    def __init__(self, replies: SimReplies, cost: DecodeCost, scale: float, max_num_seqs: int | None = None) -> None:
        self.replies, self.cost, self.scale = replies, cost, scale
        self.loop = DecodeLoop(cost, scale, max_num_seqs=max_num_seqs)
        self.clock = BusyClock(time.monotonic())
        self.cache = PrefixCache()
        self._lock = threading.Lock()
        self.requests = self.completion_tokens = self.prompt_tokens = self.uncached_prompt_tokens = 0
        threading.Thread(target=self.loop.run, name="decode-loop", daemon=True).start()

    def complete(self, body: Mapping[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ValueError("'messages' must be a non-empty list of {role, content} objects")
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 512)
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        stop = body.get("stop")
        stop = [stop] if isinstance(stop, str) else list(stop or [])
        text, tokens, finish = self.replies.reply(messages, max_tokens, stop)
        per_message = self.replies.prompt_tokens(messages)
        uncached = self.cache.uncached(messages, per_message)
        self.loop.submit(sum(per_message), tokens, uncached).done.wait()
        with self._lock:
            self.requests += 1
            self.completion_tokens += tokens
            self.prompt_tokens += sum(per_message)
            self.uncached_prompt_tokens += uncached
        return {"id": f"chatcmpl-{self.requests}", "object": "chat.completion", "created": int(time.time()),
                "model": str(body.get("model", "gpu-model")),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
                "usage": {"prompt_tokens": sum(per_message), "completion_tokens": tokens,
                          "total_tokens": sum(per_message) + tokens}}

    def reset(self) -> None:
        self.clock.reset(time.monotonic())
        self.loop.reset_counters()
        with self._lock:
            self.requests = self.completion_tokens = self.prompt_tokens = self.uncached_prompt_tokens = 0

    def stats(self) -> dict[str, Any]:
        loop = self.loop
        steps = max(1, loop.steps)
        return {**self.clock.read(time.monotonic()), "scale": self.scale, "params": self.params(),
                "requests": self.requests, "completion_tokens": self.completion_tokens,
                "prompt_tokens": self.prompt_tokens, "uncached_prompt_tokens": self.uncached_prompt_tokens,
                "steps": loop.steps, "model_s": loop.model_s, "decoded_tokens": loop.decoded_tokens,
                "mean_batch_per_step": loop.decoded_tokens / steps, "late_s": loop.late_s,
                "batch_steps": {str(k): v for k, v in sorted(loop.batch_steps.items())}}

    def params(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self.cost), "scale": self.scale, "max_num_seqs": self.loop.max_num_seqs,
                "source": SOURCE,
                "params_b": QWEN14B_PARAMS / 1e9, "peak_flops": A100_BF16_FLOPS,
                "assumed_utilisation": ASSUMED_UTILISATION, "sim_seed": self.replies.seed}


def handler_for(model: GPUModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connections

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def _send(self, status: int, payload: Mapping[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/") == "/stats":
                self._send(200, model.stats())
            elif self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": "gpu-model", "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.rstrip("/")
            try:
                body = self._body()
            except (ValueError, UnicodeDecodeError) as exc:
                self._send(400, {"error": {"message": f"the request body is not JSON: {exc}"}})
                return
            if path == "/stats/reset":
                model.reset()
                self._send(200, {"reset": True})
                return
            if path != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            model.clock.enter(time.monotonic())
            try:
                try:
                    reply = model.complete(body)
                except (ValueError, TypeError) as exc:
                    self._send(400, {"error": {"message": str(exc)}})
                    return
                self._send(200, reply)
            finally:
                model.clock.leave(time.monotonic())

    return Handler


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a tick opens one connection per stream at once; the default backlog (5) resets some


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--scale", type=float, default=1.0, help="wall seconds per modelled GPU second")
    parser.add_argument("--env", default="db", choices=("db", "os", "kg"))
    parser.add_argument("--tasks", type=int, default=100, help="the first N tasks of --env are recognised")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--seed", type=int, default=0, help="the simulated backbone's seed")
    parser.add_argument("--prefill-per-token-s", type=float, default=0.0,
                        help="GPU seconds per uncached prompt token [0: decode only]")
    parser.add_argument("--max-num-seqs", type=int, default=None,
                        help="at most N sequences per decode step, the rest wait (vLLM's max_num_seqs) [no cap]")
    args = parser.parse_args(argv)
    from tokenworth_agent.tasks import load_tasks

    try:
        cost = DecodeCost.qwen25_14b_a100(args.prefill_per_token_s)
        model = GPUModel(SimReplies(args.env, load_tasks(args.env, args.data_dir, limit=args.tasks), args.seed),
                         cost, args.scale, args.max_num_seqs)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    server = LoopbackServer(("127.0.0.1", args.port), handler_for(model))
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        model.loop.stop()
        server.server_close()


if __name__ == "__main__":
    main()
