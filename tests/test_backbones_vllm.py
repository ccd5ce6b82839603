"""The in-process vLLM backbone against a fake ``vllm`` module that records every call,
plus the JAX/vLLM co-location settings."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import types

import pytest

from agent.backbones.registry import make_backbone
from agent.backbones.vllm_backbone import (
    GREEDY_SAMPLING,
    VLLMBackbone,
    assert_jax_sees_gpu,
    configure_colocation,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass
class FakeCompletion:
    text: str
    token_ids: list[int]
    finish_reason: str


@dataclasses.dataclass
class FakeRequestOutput:
    request_id: str
    outputs: list[FakeCompletion]


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class FakeLLM:
    instances: list["FakeLLM"] = []

    def __init__(self, **kwargs):
        self.init_kwargs = kwargs
        self.chat_calls: list[tuple] = []
        FakeLLM.instances.append(self)

    def chat(self, messages, sampling_params=None, use_tqdm=True, **kwargs):
        self.chat_calls.append((messages, sampling_params, use_tqdm, kwargs))
        outputs = []
        for i, (conversation, params) in enumerate(zip(messages, sampling_params)):
            cap = params.kwargs["max_tokens"]
            # token count deliberately unrelated to len(text): the backbone must use token_ids
            n = min(cap, 3 + i)
            outputs.append(
                FakeRequestOutput(str(i), [FakeCompletion(f"reply to {conversation[-1]['content']}", list(range(n)),
                                                          "length" if n == cap else "stop")])
            )
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = FakeSamplingParams
    FakeLLM.instances.clear()
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def conv(text):
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def test_engine_options(fake_vllm):
    backbone = VLLMBackbone("Qwen/Qwen2.5-14B-Instruct", gpu_memory_utilization=0.6, max_model_len=8192,
                            engine_options={"enable_prefix_caching": True})
    kwargs = FakeLLM.instances[-1].init_kwargs
    assert kwargs["model"] == "Qwen/Qwen2.5-14B-Instruct"
    assert kwargs["gpu_memory_utilization"] == 0.6 and kwargs["max_model_len"] == 8192
    assert kwargs["generation_config"] == "vllm"  # the model's config must not set sampling defaults
    assert kwargs["enable_prefix_caching"] is True
    assert backbone.name == "vllm"


def test_batched_chat_with_explicit_greedy_params_per_item(fake_vllm):
    backbone = VLLMBackbone("m")
    out = backbone.generate([conv("a"), conv("b"), conv("c")], [128, 4, 64], stop=["Observation:"],
                            meta=[{"ignored": 1}] * 3)
    llm = FakeLLM.instances[-1]
    assert len(llm.chat_calls) == 1  # one batched call, not one per item
    messages, params, use_tqdm, _ = llm.chat_calls[0]
    assert messages == [conv("a"), conv("b"), conv("c")]
    assert use_tqdm is False
    assert len(params) == 3
    for p, cap in zip(params, [128, 4, 64]):
        assert p.kwargs["max_tokens"] == cap
        assert p.kwargs["stop"] == ["Observation:"]
        assert p.kwargs["temperature"] == 0.0 and p.kwargs["top_p"] == 1.0 and p.kwargs["top_k"] == -1
        assert p.kwargs["repetition_penalty"] == 1.0
        assert p.kwargs["presence_penalty"] == 0.0 and p.kwargs["frequency_penalty"] == 0.0
    assert set(GREEDY_SAMPLING) <= set(params[0].kwargs)
    # token accounting comes from token_ids, finish_reason from the engine
    assert [g.output_tokens for g in out] == [3, 4, 5]
    assert [g.finish_reason for g in out] == ["stop", "length", "stop"]
    assert out[1].text == "reply to b"


def test_bad_input(fake_vllm):
    backbone = VLLMBackbone("m")
    with pytest.raises(ValueError, match="max_tokens"):
        backbone.generate([conv("a")], [1, 2])
    with pytest.raises(ValueError, match="at least 1"):
        backbone.generate([conv("a")], [0])
    assert backbone.generate([], []) == []
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMBackbone("m", gpu_memory_utilization=1.5)


def test_registry_builds_vllm(fake_vllm):
    backbone = make_backbone("vllm", model="m", gpu_memory_utilization=0.5)
    assert isinstance(backbone, VLLMBackbone)
    with pytest.raises(ValueError, match="model"):
        make_backbone("vllm")


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"pip install 'tokenworth-jax\[vllm\]'"):
        VLLMBackbone("m")
    with pytest.raises(ImportError, match=r"tokenworth-jax\[vllm\]"):
        make_backbone("vllm", model="m")


# --- co-location -------------------------------------------------------------------------


def test_fractions_must_fit():
    with pytest.raises(ValueError, match="exceeds"):
        configure_colocation(0.3, 0.7)
    with pytest.raises(ValueError, match="jax_mem_fraction"):
        configure_colocation(0.0, 0.5)


def test_after_jax_import_only_matching_settings_pass(monkeypatch):
    assert "jax" in sys.modules  # conftest imports it
    for key in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                "VLLM_WORKER_MULTIPROC_METHOD"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(RuntimeError, match="before jax is imported"):
        configure_colocation(0.2, 0.7)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.2")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.2")
    configure_colocation(0.2, 0.7)  # already what jax started with: fine
    assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"


def test_colocation_in_a_fresh_process():
    script = (
        "import os, sys\n"
        "from agent.backbones.vllm_backbone import configure_colocation\n"
        "assert 'jax' not in sys.modules\n"
        "configure_colocation(0.25, 0.65)\n"
        "print(os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'], os.environ['XLA_CLIENT_MEM_FRACTION'],\n"
        "      os.environ['XLA_PYTHON_CLIENT_MEM_FRACTION'], os.environ['VLLM_WORKER_MULTIPROC_METHOD'])\n"
        "import jax\n"
        "configure_colocation(0.25, 0.65)\n"
        "try:\n"
        "    configure_colocation(0.3, 0.6)\n"
        "except RuntimeError:\n"
        "    print('refused')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "VLLM_"))}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["false", "0.25", "0.25", "spawn", "refused"]


def test_assert_jax_sees_gpu_matches_jax():
    import jax

    try:
        has_gpu = bool(jax.devices("gpu"))
    except RuntimeError:
        has_gpu = False
    if has_gpu:
        assert_jax_sees_gpu()
    else:
        with pytest.raises(RuntimeError, match="JAX sees no GPU"):
            assert_jax_sees_gpu()
