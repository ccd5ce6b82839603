"""The JAX/vLLM GPU split: what the CLI sets is what jaxlib accepts, the shares add up, and an
impossible split is refused in one line before anything loads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jaxlib import xla_client

import tokenworth_jax as tw
from tokenworth_agent.backbones import colocation as co

REPO = Path(__file__).resolve().parents[1]
GIB = 1 << 30


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "VLLM_", "FAKE_VLLM"))}
    fake = REPO / "tests" / "fake_vllm"  # the fake engine, and a fake nvidia-smi reporting an 80 GiB card
    return {**env, "PYTHONPATH": f"{fake}{os.pathsep}{REPO}", "PYTHONUNBUFFERED": "1",
            "PATH": f"{fake / 'bin'}{os.pathsep}{env.get('PATH', '')}", **extra}


def plugin_options(environ: dict[str, str], monkeypatch) -> dict:
    """jaxlib's own reading of an environment (what the CUDA plugin would start with)."""
    for key in [k for k in os.environ if k.startswith("XLA_")]:
        monkeypatch.delenv(key)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    return dict(xla_client.generate_pjrt_gpu_plugin_options())


# ------------------------------------------------------------------ the environment, in jaxlib's eyes
def test_the_cli_run_sets_an_environment_jaxlib_accepts(tmp_path, data_dir):
    """End to end: `tokenworth run --backbone vllm` with the fake engine, which records, when the
    engine is built, jaxlib's own generate_pjrt_gpu_plugin_options() under the process's environment,
    and the environment when `vllm` was imported. A shell that exported the deprecated
    XLA_PYTHON_CLIENT_MEM_FRACTION, or VLLM_BATCH_INVARIANT without --batch-invariant, must not
    change what runs."""
    report = tmp_path / "engine_start.json"
    command = [sys.executable, "-m", "tokenworth_agent.cli", "run", "--env", "db", "--methods", "standard", "--backbone", "vllm",
               "--model", "fake-model", "--limit", "1", "--out", str(tmp_path / "run"), "--no-progress",
               "--jax-mem-fraction", "0.1", "--max-model-len", "4096", "--engine-arg", "max_num_seqs=16"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=clean_env(FAKE_VLLM_REPORT=str(report), XLA_PYTHON_CLIENT_MEM_FRACTION="0.75",
                                        VLLM_BATCH_INVARIANT="1"))
    assert done.returncode == 0, done.stderr
    start = json.loads(report.read_text())
    assert start["plugin_error"] is None
    assert start["plugin_options"]["memory_fraction"] == pytest.approx(0.1)
    assert start["plugin_options"]["preallocate"] is False
    assert start["env"]["XLA_CLIENT_MEM_FRACTION"] == "0.1"
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in start["env"]  # the deprecated twin is cleared
    assert "VLLM_BATCH_INVARIANT" not in start["env"]  # config.json records it off, so it is off
    assert start["env_at_import"] == start["env"]  # the split was set before vllm (and torch) was imported
    assert start["env"]["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    kwargs = start["kwargs"]
    limit = co.max_combined_fraction(80 << 30)  # the fake nvidia-smi reports an 80 GiB card
    assert kwargs["gpu_memory_utilization"] == pytest.approx(limit - 0.1)  # the two add up to the card's limit
    assert kwargs["max_model_len"] == 4096 and kwargs["max_num_seqs"] == 16 and kwargs["enable_prefix_caching"] is True
    assert (f"GPU split: JAX 0.10 (8.0 GiB), vLLM {limit - 0.1:.2f} ({(limit - 0.1) * 80:.1f} GiB) of 80.0 GiB"
            in done.stderr)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["backbone_options"]["max_model_len"] == 4096 and not config["backbone_options"].get("batch_invariant")
    assert "gpu_memory_utilization" not in config["backbone_options"]  # a resource, not the run's identity


def test_batch_invariance_is_set_only_by_the_flag(tmp_path, data_dir):
    report = tmp_path / "engine_start.json"
    command = [sys.executable, "-m", "tokenworth_agent.cli", "run", "--env", "db", "--methods", "standard", "--backbone", "vllm",
               "--model", "fake-model", "--limit", "1", "--out", str(tmp_path / "run"), "--no-progress",
               "--batch-invariant"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=clean_env(FAKE_VLLM_REPORT=str(report)))
    assert done.returncode == 0, done.stderr
    assert json.loads(report.read_text())["env"]["VLLM_BATCH_INVARIANT"] == "1"
    assert json.loads((tmp_path / "run" / "config.json").read_text())["backbone_options"]["batch_invariant"] is True


def test_an_untested_vllm_is_refused_in_one_line_before_anything_is_written(tmp_path, data_dir):
    fake = tmp_path / "site" / "vllm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (fake / "_version.py").write_text("__version__ = version = '0.11.2'\n")
    command = [sys.executable, "-m", "tokenworth_agent.cli", "run", "--backbone", "vllm", "--model", "fake-model", "--limit", "1",
               "--out", str(tmp_path / "run"), "--no-progress"]
    env = {**clean_env(), "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}"}
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: vLLM 0.11.2 is installed, but this project is tested with vLLM >=0.32,<0.34 "
        "(pip install 'tokenworth-agent[vllm]'); pass --allow-untested-vllm to use it anyway")
    assert not (tmp_path / "run").exists()


def test_jaxlib_refuses_both_variables(monkeypatch):
    with pytest.raises(ValueError, match="XLA_CLIENT_MEM_FRACTION is specified together"):
        plugin_options({"XLA_CLIENT_MEM_FRACTION": "0.2", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.2"}, monkeypatch)


def test_set_environment_keeps_the_current_variable_and_clears_the_deprecated_one(monkeypatch):
    environ = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5", "VLLM_BATCH_INVARIANT": "1", "PATH": "/bin"}
    co.set_environment(co.plan_memory(jax_fraction=0.07, gpu_memory_utilization=0.8), environ)
    assert environ == {"PATH": "/bin", "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_CLIENT_MEM_FRACTION": "0.07",
                       "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    options = plugin_options({k: v for k, v in environ.items() if k.startswith("XLA_")}, monkeypatch)
    assert options["memory_fraction"] == pytest.approx(0.07) and options["preallocate"] is False
    co.set_environment(co.plan_memory(jax_fraction=0.07, gpu_memory_utilization=0.8, batch_invariant=True), environ)
    assert environ["VLLM_BATCH_INVARIANT"] == "1"


def test_after_jax_started_only_the_same_split_passes():
    script = (
        "import os\n"
        "from tokenworth_agent.backbones.colocation import apply_colocation\n"
        "p = apply_colocation('vllm', {}, jax_mem_fraction=0.25, total_bytes=80 << 30, state_bytes=1 << 20)\n"
        "import jax; jax.devices()\n"
        "q = apply_colocation('vllm', {}, jax_mem_fraction=0.25, total_bytes=80 << 30, state_bytes=1 << 20)\n"
        "r = apply_colocation('vllm', {}, total_bytes=80 << 30, state_bytes=1 << 20)  # default: keeps 0.25\n"
        "print(p.gpu_memory_utilization, q.jax_fraction, r.jax_fraction, r.gpu_memory_utilization)\n"
        "try:\n"
        "    apply_colocation('vllm', {}, jax_mem_fraction=0.3, total_bytes=80 << 30, state_bytes=1 << 20)\n"
        "except RuntimeError as exc:\n"
        "    print('refused', 'before JAX starts' in str(exc))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=clean_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0.7", "0.25", "0.25", "0.7", "refused", "True"]


def test_other_backbones_change_nothing_unless_asked():
    assert co.apply_colocation("sim", {}) is None
    with pytest.raises(co.ColocationError, match="--gpu-memory-utilization only applies to --backbone vllm"):
        co.apply_colocation("openai", {"gpu_memory_utilization": 0.5})


# ------------------------------------------------------------------ the arithmetic
def test_default_jax_share_is_sized_from_the_controller():
    one = co.controller_needed_bytes(1_221_698)
    assert one == co.FLOOR_BYTES + int(co.HEADROOM * co.PEAK_PER_STATE_BYTE * 1_221_698)
    plan = co.plan_memory(total_bytes=80 * GIB, jax_needed_bytes=one)
    assert (plan.jax_fraction, plan.gpu_memory_utilization) == (0.01, 0.94)
    sweep = co.plan_memory(total_bytes=80 * GIB, jax_needed_bytes=co.controller_needed_bytes(1_221_698, 256))
    assert sweep.jax_fraction == 0.04 and sweep.gpu_memory_utilization == 0.91  # 256 states: 3.3 GB
    assert sweep.jax_fraction * 80 * GIB >= co.controller_needed_bytes(1_221_698, 256)
    assert co.plan_memory().jax_fraction == co.FALLBACK_JAX_FRACTION  # GPU size unknown


def test_state_bytes_match_the_controller_in_this_process():
    spec, hp = tw.preset("db")
    state = tw.init(spec, hp)
    expected = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(state))
    assert co.controller_state_bytes("db") == expected
    assert co.controller_state_bytes("db", capacity=128) > expected


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(jax_fraction=0.3, gpu_memory_utilization=0.7),
     r"--jax-mem-fraction 0.3 \+ --gpu-memory-utilization 0.7 = 1.00 of the assumed 24 GiB GPU, above 0.88: "
     r"2.73 GiB must stay outside both \(CUDA contexts 2.00, vLLM profiling error 0.25, fragmentation 0.48 GiB\)"),
    (dict(jax_fraction=0.05, gpu_memory_utilization=0.9, total_bytes=24 * GIB),
     r"= 0.95 of the 24 GiB GPU, above 0.88"),
    (dict(jax_fraction=1.2), r"--jax-mem-fraction must be a share of the GPU in \(0, 1\), got 1.2"),
    (dict(jax_fraction=0.05, gpu_memory_utilization=0.0), r"--gpu-memory-utilization must be a share"),
    (dict(jax_fraction=0.05, total_bytes=24 * GIB, model_bytes=28 * 10**9),
     r"weights need 26.1 GiB per GPU, more than vLLM's share \(--gpu-memory-utilization 0.83 x 24.0 GiB"),
    (dict(jax_fraction=0.01, total_bytes=24 * GIB, jax_needed_bytes=2 * GIB),
     r"--jax-mem-fraction 0.01 gives JAX 0.24 GiB .* needs 2.00 GiB; pass --jax-mem-fraction 0.09"),
])
def test_impossible_splits_are_refused_in_one_line(kwargs, message):
    with pytest.raises(co.ColocationError, match=message) as info:
        co.plan_memory(**kwargs)
    assert "\n" not in str(info.value)


def test_tensor_parallelism_spreads_the_weights_and_adds_nccl():
    plan = co.plan_memory(jax_fraction=0.05, total_bytes=24 * GIB, model_bytes=28 * 10**9, tensor_parallel_size=2)
    assert co.outside_bytes(24 * GIB, 2)["NCCL"] == co.NCCL_BYTES
    assert plan.gpu_memory_utilization == 0.81  # 1 - 3.23 GiB / 24 GiB = 0.865 -> 0.86, less JAX's 0.05


def test_the_same_split_fits_a_large_card_but_not_a_small_one():
    co.plan_memory(jax_fraction=0.03, gpu_memory_utilization=0.92, total_bytes=80 * GIB)
    with pytest.raises(co.ColocationError, match="above 0.88"):
        co.plan_memory(jax_fraction=0.03, gpu_memory_utilization=0.92, total_bytes=24 * GIB)
    limits = [co.max_combined_fraction(gib * GIB) for gib in co.CARDS_GIB]
    assert limits == sorted(limits) and limits[0] < limits[-1] < 1  # the fixed costs weigh more on a small card


def split_rows_from_docs() -> list[str]:
    text = (REPO / "docs" / "backbones.md").read_text()
    start = text.index("| card | outside both pools |")
    return text[start:].split("\n\n")[0].strip().splitlines()


def test_the_worked_split_table_in_the_docs_is_what_the_code_computes():
    rows = co.split_table(co.controller_state_bytes("db"))
    assert split_rows_from_docs() == co.split_table_markdown(rows).splitlines()
    for row in rows:  # every row adds up: both pools plus what lies outside them fit the card
        card = row["card_gib"] * GIB
        assert row["j"] + row["u"] <= row["max_combined"]
        assert (row["j"] + row["u"]) * card + row["outside_gib"] * GIB <= card
    assert [("refused" in r) for r in rows] == [True, False, False, False]  # 14B in bf16 needs more than 24 GiB
    assert "weights need 26.1 GiB per GPU" in rows[0]["refused"] and "\n" not in rows[0]["refused"]


@pytest.mark.parametrize(("model", "dtype", "expected"), [
    ("Qwen/Qwen2.5-14B-Instruct", "auto", 28 * 10**9), ("Qwen/Qwen2.5-0.5B-Instruct", "float32", 2 * 10**9),
    ("Qwen/Qwen2.5-14B-Instruct-AWQ", "auto", None), ("my-model", "auto", None),
])
def test_weight_estimates(model, dtype, expected):
    assert co.model_weight_bytes(model, dtype) == expected


def test_weights_of_a_local_folder_are_its_files(tmp_path):
    (tmp_path / "model-00001.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "config.json").write_text("{}")
    assert co.model_weight_bytes(str(tmp_path)) == 1000


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])  # transformers 5 writes dtype, earlier releases torch_dtype
def test_a_float32_checkpoint_is_served_at_16_bits_unless_asked(tmp_path, key):
    (tmp_path / "model.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "config.json").write_text(json.dumps({key: "float32", "num_hidden_layers": 2, "num_attention_heads": 4,
                                                      "hidden_size": 64, "max_position_embeddings": 100}))
    assert co.model_weight_bytes(str(tmp_path)) == 500  # vLLM's "auto" downcasts float32 to 16 bits
    assert co.model_weight_bytes(str(tmp_path), "float32") == 1000
    per_token = 2 * 2 * 4 * 16  # keys and values, 2 layers, 4 heads of 16
    assert co.kv_cache_bytes(str(tmp_path)) == per_token * 2 * 100
    assert co.kv_cache_bytes(str(tmp_path), dtype="float32") == per_token * 4 * 100


def test_a_cli_split_that_cannot_work_fails_before_anything_loads(tmp_path, data_dir):
    report = tmp_path / "engine_start.json"
    command = [sys.executable, "-m", "tokenworth_agent.cli", "run", "--backbone", "vllm", "--model", "fake-model", "--limit", "1",
               "--out", str(tmp_path / "run"), "--jax-mem-fraction", "0.3", "--gpu-memory-utilization", "0.7"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=clean_env(FAKE_VLLM_REPORT=str(report)))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: --jax-mem-fraction 0.3 + --gpu-memory-utilization")
    assert not report.exists() and not (tmp_path / "run").exists()


# ------------------------------------------------------------------ the hint
def test_assert_jax_sees_gpu_names_the_real_cause(monkeypatch):
    if any(d.platform == "gpu" for d in jax.devices()):
        co.assert_jax_sees_gpu()
        return
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.2")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.2")
    with pytest.raises(RuntimeError, match="unset XLA_PYTHON_CLIENT_MEM_FRACTION"):
        co.assert_jax_sees_gpu()
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION")
    with pytest.raises(RuntimeError, match=r"JAX sees no GPU .*(tokenworth-agent\[gpu\]|CUDA plugin is installed)"):
        co.assert_jax_sees_gpu()


def test_the_engine_loads_only_after_the_run_folder_checks(tmp_path, data_dir):
    report = tmp_path / "engine_start.json"
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "draft.txt").write_text("not a run")
    command = [sys.executable, "-m", "tokenworth_agent.cli", "run", "--backbone", "vllm", "--model", "fake-model", "--limit", "1",
               "--methods", "standard", "--out", str(foreign), "--no-progress", "--jax-mem-fraction", "0.05"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=clean_env(FAKE_VLLM_REPORT=str(report)))
    assert done.returncode == 2 and "is not a tokenworth run folder" in done.stderr
    assert not report.exists()  # refused before any engine was built


def test_the_benchmark_loads_one_engine_for_all_its_runs_and_shuts_it_down(tmp_path, data_dir):
    events = tmp_path / "events.txt"
    command = [sys.executable, "-m", "tokenworth_bench", "agent", "--envs", "db", "--seeds", "0,1", "--limit", "1",
               "--methods", "standard", "--backbone", "vllm", "--model", "fake-model", "--out", str(tmp_path / "b"),
               "--no-progress", "--jax-mem-fraction", "0.05", "--max-model-len", "2048"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=clean_env(FAKE_VLLM_EVENTS=str(events)))
    assert done.returncode == 0, done.stderr
    assert events.read_text().split() == ["start", "shutdown"]  # two runs (seeds 0, 1), one engine
    assert (tmp_path / "b" / "runs" / "db-vllm-per-call-seeds0-1" / "seed1" / "standard" / "records.jsonl").exists()


def test_a_context_that_cannot_fit_beside_the_weights_is_refused(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x" * 100)
    (tmp_path / "config.json").write_text(json.dumps({  # Qwen2.5-14B's attention shape
        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "hidden_size": 5120,
        "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}))
    per_token = 2 * 48 * 8 * 128 * 2
    assert co.kv_cache_bytes(str(tmp_path)) == per_token * 32768  # 6 GiB
    assert co.kv_cache_bytes(str(tmp_path), max_model_len=4096) == per_token * 4096
    weights = 28 * 10**9
    with pytest.raises(co.ColocationError, match=r"not the KV cache of one full-length sequence \(6.0 GiB\).*--max-model-len"):
        co.plan_memory(jax_fraction=0.05, gpu_memory_utilization=0.6, total_bytes=48 * GIB, model_bytes=weights,
                       kv_bytes=co.kv_cache_bytes(str(tmp_path)))
    co.plan_memory(jax_fraction=0.05, gpu_memory_utilization=0.6, total_bytes=48 * GIB, model_bytes=weights,
                   kv_bytes=co.kv_cache_bytes(str(tmp_path), max_model_len=4096))  # a shorter context fits


def test_a_model_in_the_hugging_face_cache_is_sized_from_its_files(tmp_path, monkeypatch):
    snapshot = tmp_path / "models--org--tiny-1B" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").write_bytes(b"x" * 2048)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert co.model_weight_bytes("org/tiny-1B") == 2048  # the files, not the name's 1B x 2 bytes
    assert co.kv_cache_bytes("org/tiny-1B") is None  # no config.json: unknown, no refusal


def test_the_gpu_manuals_table_is_what_the_code_computes():
    section = (REPO / "docs" / "gpu.md").read_text()
    table = re.findall(r"^\| (\d+) GiB \| ([\d.]+) GiB \| ([\d.]+) \| ([\d.]+) \| (.*) \|$", section, re.M)
    rows = co.split_table(co.controller_state_bytes("db"))
    assert [(int(g), float(o), float(j), float(u)) for g, o, j, u, _ in table] == [
        (r["card_gib"], round(r["outside_gib"], 2), r["j"], r["u"]) for r in rows]
    for (*_, verdict), row in zip(table, rows):
        assert verdict.startswith("refused") == ("refused" in row)
        if "refused" not in row:
            assert verdict == f"fits, {row['left_gib']:.1f} GiB left"
