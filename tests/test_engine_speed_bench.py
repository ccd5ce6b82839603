"""The GPU-model server of bench/tokenworth_bench/engine_speed.py: its economics, its replies, its bookkeeping.

Every check counts steps, tokens and modelled GPU seconds (a fake clock where time matters);
nothing asserts on wall-clock durations.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import ThreadingHTTPServer

import pytest

from tokenworth_bench.engine_speed import ScheduleRun, compare, record_digest, render, totals
from tokenworth_bench.gpu_model_server import (QWEN_TOKENS_PER_S_INPUT_1, QWEN_TOKENS_PER_S_INPUT_6144, BusyClock, DecodeCost,
                                    DecodeLoop, GPUModel, PrefixCache, SimReplies, handler_for)
from tests.fakes import task_record

A, B = 0.020, 0.001  # a round fixed and per-sequence cost, context term off: counts are easy to check


class FakeTime:
    """A clock that only moves when the loop sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def drain(loop: DecodeLoop, limit: int = 10_000) -> int:
    steps = 0
    while not loop.idle:
        loop.step()
        steps += 1
        assert steps < limit, "the decode loop never emptied"
    return steps


@pytest.mark.parametrize("k,n", [(1, 7), (15, 40), (4, 1)])
def test_a_batch_of_k_requests_of_n_tokens_costs_n_steps_of_a_plus_k_b(k: int, n: int) -> None:
    fake = FakeTime()
    loop = DecodeLoop(DecodeCost(A, B, 0.0), scale=0.5, clock=fake.clock, sleep=fake.sleep)
    sequences = [loop.submit(prompt_tokens=100, new_tokens=n) for _ in range(k)]
    assert drain(loop) == n
    assert all(s.done.is_set() for s in sequences)
    assert loop.steps == n and loop.decoded_tokens == k * n
    assert dict(loop.batch_steps) == {k: n}
    assert loop.model_s == pytest.approx(n * (A + B * k))
    assert sum(fake.slept) == pytest.approx(0.5 * loop.model_s)  # the time scale applies to every step
    assert loop.late_s == 0.0


def test_batching_k_sequences_beats_serving_them_one_by_one_by_the_cost_ratio() -> None:
    k, n = 15, 50
    batched = DecodeLoop(DecodeCost(A, B, 0.0), clock=FakeTime().clock, sleep=lambda s: None)
    for _ in range(k):
        batched.submit(10, n)
    drain(batched)
    alone = DecodeLoop(DecodeCost(A, B, 0.0), clock=FakeTime().clock, sleep=lambda s: None)
    for _ in range(k):
        alone.submit(10, n)
        drain(alone)
    assert alone.model_s / batched.model_s == pytest.approx(k * (A + B) / (A + k * B))


def test_sequences_join_at_the_next_step_and_leave_when_done() -> None:
    loop = DecodeLoop(DecodeCost(A, B, 0.0), clock=FakeTime().clock, sleep=lambda s: None)
    short, long_ = loop.submit(0, 2), loop.submit(0, 5)
    loop.step()
    late = loop.submit(0, 3)  # joins at step 2, with both running
    drain(loop)
    assert short.done.is_set() and long_.done.is_set() and late.done.is_set()
    # steps: [2 seqs], [3: short's last], [2: long, late], [2], [1: long's last]
    assert dict(loop.batch_steps) == {2: 3, 3: 1, 1: 1}
    assert loop.decoded_tokens == 2 + 5 + 3


def test_a_batch_cap_keeps_the_rest_waiting_first_come_first_served() -> None:
    loop = DecodeLoop(DecodeCost(A, B, 0.0), max_num_seqs=2, clock=FakeTime().clock, sleep=lambda s: None)
    first, second, third = loop.submit(0, 2), loop.submit(0, 4), loop.submit(0, 1)
    loop.step()
    loop.step()
    assert first.done.is_set() and not third.done.is_set()  # two decode at most; the third waited
    drain(loop)
    # steps: [first, second] x2, then [second, third] (third's only token), then [second] once more
    assert dict(loop.batch_steps) == {2: 3, 1: 1} and loop.decoded_tokens == 2 + 4 + 1
    with pytest.raises(ValueError, match="max_num_seqs"):
        DecodeLoop(DecodeCost(A, B, 0.0), max_num_seqs=0)


def test_the_cap_is_the_full_context_concurrency_of_the_kv_pool() -> None:
    from tokenworth_bench.gpu_model_server import kv_max_num_seqs

    cap = kv_max_num_seqs()
    assert cap["kv_bytes_per_token"] == 48 * 8 * 128 * 2 * 2  # Qwen2.5-14B: layers x KV heads x dim x (K, V) x bf16
    assert cap["max_num_seqs"] == int(cap["kv_pool_gib"] * (1 << 30) // (cap["kv_bytes_per_token"] * 8192))
    assert 40 < cap["kv_pool_gib"] < 60 and 20 <= cap["max_num_seqs"] <= 40  # an 80 GiB card, 26 GiB of weights


def test_context_and_prefill_terms_are_charged_per_token() -> None:
    cost = DecodeCost(A, B, per_context_token_s=1e-6, prefill_per_token_s=1e-4)
    loop = DecodeLoop(cost, clock=FakeTime().clock, sleep=lambda s: None)
    loop.submit(prompt_tokens=1000, new_tokens=2, uncached_prompt_tokens=300)
    drain(loop)
    # step 1: context 1000 and the prefill of 300 tokens; step 2: context 1001, nothing to prefill
    assert loop.model_s == pytest.approx((A + B + 1000e-6 + 300e-4) + (A + B + 1001e-6))
    assert loop.prefill_tokens == 300


def test_a_late_step_is_not_shortened_to_catch_up() -> None:
    fake = FakeTime()
    loop = DecodeLoop(DecodeCost(A, B, 0.0), clock=fake.clock, sleep=fake.sleep)
    loop.submit(0, 3)
    loop.step()
    fake.now += 1.0  # the machine stalled between two steps
    loop.step()
    loop.step()
    assert loop.late_s == pytest.approx(1.0)
    assert fake.slept == pytest.approx([A + B] * 3)


def test_the_qwen_parameters_reproduce_the_cited_batch_1_speeds() -> None:
    cost = DecodeCost.qwen25_14b_a100()
    assert 1 / cost.step([1 + 1024]) == pytest.approx(QWEN_TOKENS_PER_S_INPUT_1)
    assert 1 / cost.step([6144 + 1024]) == pytest.approx(QWEN_TOKENS_PER_S_INPUT_6144)
    assert cost.fixed_s > 10 * cost.per_sequence_s > 0  # decode is weight-bound: batching is cheap
    with pytest.raises(ValueError, match="per_sequence_s"):
        DecodeCost(A, -1.0, 0.0)


def test_busy_clock_on_a_synthetic_timeline() -> None:
    clock = BusyClock(now=0.0)
    clock.enter(1.0)
    clock.enter(2.0)  # overlapping requests count once
    clock.leave(3.0)
    clock.leave(5.0)
    clock.enter(7.0)
    clock.leave(8.0)
    read = clock.read(10.0)
    assert read["busy_s"] == pytest.approx(5.0) and read["idle_s"] == pytest.approx(5.0)
    assert read["harness_share"] == pytest.approx(0.5)
    clock.enter(11.0)
    clock.reset(12.0)  # a request in flight across the reset counts from the reset
    clock.leave(13.0)
    read = clock.read(16.0)
    assert read["window_s"] == pytest.approx(4.0) and read["busy_s"] == pytest.approx(1.0)
    assert read["first_in"] is None and read["last_out"] == 13.0  # the window's own first arrival and last answer
    assert read["harness_share"] == pytest.approx(0.75)
    with pytest.raises(RuntimeError, match="without a matching enter"):
        clock.leave(17.0)


def test_prefix_cache_counts_only_new_leading_messages() -> None:
    cache = PrefixCache()
    first = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert cache.uncached(first, [10, 20]) == 30
    assert cache.uncached(first + [{"role": "user", "content": "c"}], [10, 20, 5]) == 5
    assert cache.uncached([{"role": "user", "content": "a"}, {"role": "user", "content": "x"}], [10, 7]) == 7


@pytest.fixture(scope="module")
def server(data_dir):
    from tokenworth_agent.tasks import load_tasks

    tasks = load_tasks("db", data_dir, limit=5)
    model = GPUModel(SimReplies("db", tasks), DecodeCost(A, B, 0.0), scale=1e-3)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(model))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", model, tasks
    httpd.shutdown()
    model.loop.stop()


def post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=30).read())


def test_the_server_replies_as_the_sim_would_and_reports_its_tokens(server) -> None:
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.envs.base import conversation
    from tokenworth_agent.envs.registry import make_environment
    from tokenworth_agent.sim import Facts, SimBackbone
    from tokenworth_agent.sim.tokens import token_counter

    url, model, tasks = server
    env = make_environment("db", Budget.for_env("db"))
    post(url, "/stats/reset", {})
    expected_tokens = 0
    for task in tasks[:3]:
        messages = conversation(env, task)
        reply = post(url, "/v1/chat/completions", {"model": "m", "messages": messages, "max_tokens": 20})
        [want] = SimBackbone(seed=0).generate([messages], [20], facts=[Facts(task, 0, round=0)])
        text = reply["choices"][0]["message"]["content"]
        assert text == want.text and reply["choices"][0]["finish_reason"] == want.finish_reason
        assert reply["usage"]["completion_tokens"] == token_counter().count(text) == want.output_tokens <= 20
        expected_tokens += want.output_tokens
    env.close()
    odd = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "reflect"}], "max_tokens": 5})
    assert odd["usage"]["completion_tokens"] == 5  # an auxiliary call gets the note, cut at its cap
    stats = json.loads(urllib.request.urlopen(url + "/stats", timeout=30).read())
    assert stats["requests"] == 4 and stats["completion_tokens"] == expected_tokens + 5
    assert stats["decoded_tokens"] == stats["completion_tokens"]  # tokens reported = tokens decoded
    assert 0.0 <= stats["harness_share"] <= 1.0 and stats["busy_s"] <= stats["window_s"]
    assert stats["uncached_prompt_tokens"] < stats["prompt_tokens"]  # the instructions repeat
    bad = urllib.request.Request(url + "/v1/chat/completions", data=b'{"messages": []}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(bad, timeout=30)
    assert error.value.code == 400 and "messages" in error.value.read().decode()


def test_memory_skills_come_from_the_quoted_questions(server) -> None:
    from tokenworth_agent.core.budget import BLOCK_HEADER

    _, model, tasks = server
    block = f"{BLOCK_HEADER}\n\nExperience 1:\nQuestion: {tasks[1].query_text}\nSQL: SELECT 1;"
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "instructions\n\n" + block}]
    assert model.replies.memory_skills(messages) == tuple(dict.fromkeys(tasks[1].skill_list))
    assert model.replies.memory_skills([messages[0], {"role": "user", "content": "instructions"}]) is None


def test_the_report_pairs_runs_of_one_scale_and_judges_the_targets() -> None:
    records = {"standard/seed0": [task_record(0, 1, output_tokens=9, rounds=2,
                                              trajectory=[{"tokens": 5}, {"tokens": 4}])]}
    seq = ScheduleRun("sequential", 30.0, records, [1, 1])
    assert totals(seq)["model_calls"] == 2 and totals(seq)["tokens_per_s"] == pytest.approx(9 / 30)

    def run(schedule: str, seconds: float, scale: float, share: float, model_s: float) -> dict:
        r = ScheduleRun(schedule, seconds, records, [1, 1] if schedule == "sequential" else [2])
        stats = {"harness_share": share, "model_s": model_s, "steps": 5, "mean_batch_per_step": 1.0,
                 "idle_s": share * seconds, "late_s": 0.0, "window_s": seconds}
        return {"server": "gpu-model", "schedule": schedule, "tasks_per_stream": 1, "methods": ["standard"],
                "seeds": [0], "scale": scale, "server_settings": {}, "totals": totals(r), "server_stats": stats,
                "records_digest": json.loads(json.dumps(record_digest(r))), "commit": "abc"}

    runs = [run("sequential", 30.0, 0.5, 0.2, 60.0), run("lockstep", 2.5, 0.5, 0.08, 5.0),
            run("lockstep", 9.0, 1.0, 0.05, 5.0)]  # no sequential run at scale 1: no comparison for it
    text, summary = render(runs)
    [c] = summary["comparisons"]
    assert c["speedup"] == pytest.approx(12.0) and c["gpu_time_speedup"] == pytest.approx(12.0)
    assert c["tasks_identical"] == 1 and c["comparable"]
    assert c["target_speedup_met"] and c["target_harness_share_met"]
    assert "**met** (12.0× measured" in text and text.count("| lockstep |") == 2
    assert c["harness_share_on_time"] == pytest.approx(0.08)
    slow = compare(runs[0], run("lockstep", 6.0, 0.5, 0.3, 5.0))
    assert slow["speedup"] == pytest.approx(5.0)


def test_projection_steps_per_schedule_on_synthetic_streams() -> None:
    from tokenworth_bench.engine_projection import gpu_seconds, schedule_steps

    streams = {"a": [[3, 1], [2]], "b": [[1], [4, 0]]}  # an empty reply still decodes one step
    steps = schedule_steps(streams)
    assert steps["tokens"] == steps["sequential"] == 3 + 1 + 2 + 1 + 4 + 1
    assert steps["ticks"] == 3 and steps["calls"] == 6
    assert steps["lockstep"] == max(3, 1) + max(1, 4) + max(2, 1)  # each tick waits for its longest reply
    assert steps["continuous"] == max(3 + 1 + 2, 1 + 4 + 1)  # the longest stream's tokens
    # the loop's charged cost for the lockstep schedule equals the closed form
    cost = DecodeCost(A, B, 1e-6)
    loop = DecodeLoop(cost, clock=FakeTime().clock, sleep=lambda s: None)
    for tick in ([3, 1], [1, 4], [2, 1]):
        for n in tick:
            loop.submit(prompt_tokens=0, new_tokens=n)
        drain(loop)
    assert loop.steps == steps["lockstep"]
    assert loop.model_s == pytest.approx(gpu_seconds(loop.steps, steps["tokens"], cost, 0.0), rel=0.01)
