"""The in-process vLLM backbone against a faithful fake ``vllm`` (tests/fake_vllm): it accepts
only the keyword names of the real vLLM's ``LLM``, ``LLM.chat`` and ``SamplingParams`` (those of
``.venv-vllm`` when ``make test`` has built it, else the pinned release's). The real engine's own
tests are in tests/test_vllm_engine.py."""

from __future__ import annotations

import importlib
import os
import sys
import tomllib
from pathlib import Path

import pytest

from tokenworth_agent.backbones import vllm_api
from tokenworth_agent.backbones.registry import make_backbone
from tokenworth_agent.backbones.vllm_backbone import ENGINES, GREEDY_SAMPLING, VLLMBackbone, close_engines, passed_names
from tests.killing import running

REPO = Path(__file__).resolve().parents[1]
FAKE_DIR = Path(__file__).with_name("fake_vllm")
VLLM_VENV = REPO / ".venv-vllm"


@pytest.fixture
def fake_vllm(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE_DIR))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    module = importlib.import_module("vllm")
    assert getattr(module, "FAKE", False)
    module.instances.clear()
    close_engines()
    yield module
    close_engines()
    monkeypatch.delitem(sys.modules, "vllm", raising=False)


def conv(text):
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def test_the_engine_loads_lazily_with_the_run_settings(fake_vllm):
    backbone = VLLMBackbone("Qwen/Qwen2.5-14B-Instruct", seed=3, gpu_memory_utilization=0.6, max_model_len=8192,
                            engine_options={"max_num_seqs": 64})
    assert fake_vllm.instances == []  # nothing loads at construction
    backbone.generate([conv("a")], [16])
    [llm] = fake_vllm.instances
    kwargs = llm.init_kwargs
    assert kwargs["model"] == "Qwen/Qwen2.5-14B-Instruct" and kwargs["seed"] == 3
    assert kwargs["gpu_memory_utilization"] == 0.6 and kwargs["max_model_len"] == 8192
    assert kwargs["generation_config"] == "vllm"  # the model's config must not set sampling defaults
    assert kwargs["enable_prefix_caching"] is True  # on by default
    assert kwargs["max_num_seqs"] == 64
    assert backbone.open() is backbone and len(fake_vllm.instances) == 1  # idempotent


def test_one_engine_per_process_reused_then_closed(fake_vllm):
    first = VLLMBackbone("m", seed=0).open()
    second = VLLMBackbone("m", seed=1).open()  # the next seed of a benchmark: same engine
    assert first.llm is second.llm and len(fake_vllm.instances) == 1
    other = VLLMBackbone("m", max_model_len=4096).open()  # other settings: the old engine is shut down first
    assert len(fake_vllm.instances) == 2
    assert fake_vllm.instances[0].llm_engine.engine_core.shut_down == 1
    close_engines()
    assert fake_vllm.instances[1].llm_engine.engine_core.shut_down == 1 and ENGINES.llm is None
    assert other.llm is not None  # the backbone still names it, but the pool has shut it down


def test_batched_chat_with_explicit_greedy_params_per_item(fake_vllm):
    backbone = VLLMBackbone("m")
    out = backbone.generate([conv("a"), conv("b"), conv("c")], [128, 4, 64], stop=["Observation:"])
    llm = fake_vllm.instances[-1]
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
    # the token rule: len(token_ids), the EOS included when the reply ended on it
    assert [g.output_tokens for g in out] == [3 + 1, 4, 5 + 1]
    assert [g.finish_reason for g in out] == ["stop", "length", "stop"]
    assert out[1].text == "reply to b"
    assert [g.prompt_tokens for g in out] == [10, 11, 12] and all(g.cached_tokens == 4 for g in out)


def test_the_fake_refuses_what_vllm_refuses(fake_vllm):
    with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'"):
        fake_vllm.SamplingParams(temprature=0.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'gpu_mem_util'"):
        fake_vllm.LLM(model="m", gpu_mem_util=0.5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sampling'"):
        fake_vllm.LLM(model="m").chat([conv("a")], sampling=None)
    fake_vllm.LLM(model="m", max_num_seqs=8)  # an EngineArgs field, passed through **kwargs: accepted


def test_a_misspelt_engine_option_is_refused_before_loading(fake_vllm):
    with pytest.raises(ValueError, match=r"no engine option 'max_num_seq' \(did you mean max_num_seqs"):
        VLLMBackbone("m", engine_options={"max_num_seq": 8})
    assert fake_vllm.instances == []


def test_bad_input(fake_vllm):
    backbone = VLLMBackbone("m")
    with pytest.raises(ValueError, match="max_tokens"):
        backbone.generate([conv("a")], [1, 2])
    with pytest.raises(ValueError, match="at least 1"):
        backbone.generate([conv("a")], [0])
    assert backbone.generate([], []) == []
    assert fake_vllm.instances == []  # an empty batch loads nothing
    with pytest.raises(ValueError, match="gpu-memory-utilization"):
        VLLMBackbone("m", gpu_memory_utilization=1.5)


def test_registry_builds_vllm(fake_vllm):
    backbone = make_backbone("vllm", model="m", gpu_memory_utilization=0.5)
    assert isinstance(backbone, VLLMBackbone)
    with pytest.raises(ValueError, match="model"):
        make_backbone("vllm")


def test_the_fake_takes_its_names_from_the_real_vllm_when_that_environment_exists(fake_vllm):
    real = vllm_api.venv_api(VLLM_VENV)
    if real is None:
        assert fake_vllm.API_SOURCE == "pinned" and fake_vllm.API == vllm_api.pinned_api()
        pytest.skip(".venv-vllm is not built (make test builds it): the fake uses the pinned names")
    assert fake_vllm.API_SOURCE == "venv" and fake_vllm.API == real
    assert real["version"] == vllm_api.PINNED_VERSION  # CI's engine is the pinned release


def test_engine_start_checks_the_version(fake_vllm, monkeypatch, capsys):
    monkeypatch.setattr(fake_vllm, "__version__", "0.11.2")
    with pytest.raises(vllm_api.UntestedVLLMError, match=r"^vLLM 0.11.2 is installed, but this project is tested "
                                                          r"with vLLM >=0.32,<0.34 .*--allow-untested-vllm"):
        VLLMBackbone("m").open()
    assert fake_vllm.instances == []  # refused before the engine was built
    VLLMBackbone("m", allow_untested_vllm=True).open()
    assert len(fake_vllm.instances) == 1
    assert capsys.readouterr().err.strip() == ("note: vLLM 0.11.2 is installed, but this project is tested with vLLM "
                                               ">=0.32,<0.34 (pip install 'tokenworth-agent[vllm]'); going on "
                                               "because of --allow-untested-vllm")


@pytest.mark.parametrize(("version", "ok"), [("0.32.0", True), ("0.32.0+cpu", True), ("0.33.1", True),
                                             ("0.31.9", False), ("0.34.0", False), ("0.11.2", False),
                                             ("dev", False)])
def test_the_tested_range(version, ok):
    assert vllm_api.is_supported(version) is ok


def test_engine_start_sets_or_clears_batch_invariance(fake_vllm, monkeypatch):
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")  # exported in the user's shell
    VLLMBackbone("m").open()
    assert "VLLM_BATCH_INVARIANT" not in os.environ  # what the run records (off) is what runs
    VLLMBackbone("m", batch_invariant=True).open()
    assert os.environ["VLLM_BATCH_INVARIANT"] == "1"
    monkeypatch.delenv("VLLM_BATCH_INVARIANT")


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"pip install 'tokenworth-agent\[gpu\]'"):
        VLLMBackbone("m")
    with pytest.raises(ImportError, match=r"tokenworth-agent\[gpu\]"):
        make_backbone("vllm", model="m")


# --- the pinned API and the tested range ------------------------------------------------------


def test_the_extras_name_the_tested_range():
    extras = tomllib.loads((REPO / "agent" / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["vllm"] == [f"vllm{vllm_api.SUPPORTED}"]
    assert vllm_api.is_supported(vllm_api.PINNED_VERSION)


def test_pinned_api_is_the_supported_release_and_has_what_we_pass():
    api = vllm_api.pinned_api()
    assert api["version"] == vllm_api.PINNED_VERSION
    assert_has_what_we_pass(api)


def assert_has_what_we_pass(api):
    names = passed_names()
    missing = {"llm_init": sorted(names["llm_init"] - vllm_api.llm_keywords(api)),
               "llm_chat": sorted(names["llm_chat"] - set(api["llm_chat"])),
               "sampling_params": sorted(names["sampling_params"] - set(api["sampling_params"]))}
    assert not any(missing.values()), f"vllm {api['version']} lacks {missing}"


def test_passed_names_are_what_the_backbone_passes(fake_vllm):
    VLLMBackbone("m", gpu_memory_utilization=0.5, max_model_len=64, dtype="float32", tensor_parallel_size=1,
                 enforce_eager=True).generate([conv("a")], [4], stop=["x"])
    [llm] = fake_vllm.instances
    messages, params, use_tqdm, _ = llm.chat_calls[0]
    assert set(llm.init_kwargs) == passed_names()["llm_init"]
    assert set(params[0].kwargs) == passed_names()["sampling_params"]


def test_the_source_reader_finds_keywords_and_fields():
    source = {
        "vllm/entrypoints/llm.py": "class LLM:\n    def __init__(self, model, *, seed=None, **kwargs): ...\n"
                                   "    def chat(self, messages, sampling_params=None, *, use_tqdm=True): ...\n",
        "vllm/sampling_params.py": "from typing import ClassVar\nclass SamplingParams:\n    n: int = 1\n"
                                   "    top_k: int = 0\n    kind: ClassVar[str] = 'x'\n",
        "vllm/engine/arg_utils.py": "class EngineArgs:\n    model: str = 'm'\n    max_num_seqs: int | None = None\n"
                                    "    def helper(self) -> None: ...\n",
    }
    api = vllm_api.api_from_source(source.__getitem__, "9.9")
    assert api == {"version": "9.9", "llm_init": ["model", "seed"], "llm_chat": ["messages", "sampling_params", "use_tqdm"],
                   "sampling_params": ["n", "top_k"], "engine_args": ["max_num_seqs", "model"]}


def test_an_installed_package_is_read_without_importing_it(tmp_path, monkeypatch):
    package = tmp_path / "vllm"
    (package / "entrypoints").mkdir(parents=True)
    (package / "engine").mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "_version.py").write_text("__version__ = version = '0.32.1'\n")
    (package / "entrypoints" / "llm.py").write_text("class LLM:\n    def __init__(self, model): ...\n"
                                                    "    def chat(self, messages): ...\n")
    (package / "sampling_params.py").write_text("class SamplingParams:\n    n: int = 1\n")
    (package / "engine" / "arg_utils.py").write_text("class EngineArgs:\n    model: str = 'm'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    assert vllm_api.installed_version() == "0.32.1"
    assert vllm_api.installed_api()["llm_chat"] == ["messages"]
    assert "vllm" not in sys.modules


@pytest.mark.skipif(vllm_api.venv_api(VLLM_VENV) is None and vllm_api.installed_api() is None,
                    reason="no real vLLM here and .venv-vllm is not built (make test builds it)")
def test_the_real_vllm_has_every_name_the_project_passes():
    """Strict, but only about the names the project passes: other differences from the pin are
    vLLM's business (0.32 dropped swap_space and best_of, which the project never passed)."""
    for api in (vllm_api.installed_api(), vllm_api.venv_api(VLLM_VENV)):
        if api is not None:
            assert_has_what_we_pass(api)
            assert vllm_api.is_supported(api["version"]), api["version"]


# --- no orphaned engine after kill -9 -----------------------------------------------------------
REAPED_RUN = """
import subprocess, sys, time
from tokenworth_agent.backbones.vllm_backbone import child_processes, reap_on_exit
before = child_processes()
engine = subprocess.Popen(["bash", "-c", "sleep 600 & sleep 600"])  # stands for vLLM's engine core and its worker
time.sleep(0.5)
started = child_processes() - before
reap_on_exit(started)
print(" ".join(str(pid) for pid, _ in started), flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the reaper reads /proc")
def test_a_killed_run_takes_its_engine_processes_with_it():
    import signal
    import subprocess
    import time

    run = subprocess.Popen([sys.executable, "-c", REAPED_RUN], cwd=REPO, stdout=subprocess.PIPE, text=True)
    engine = [int(pid) for pid in run.stdout.readline().split()]
    assert len(engine) == 3 and all(running(pid) for pid in engine)  # bash and its two sleeps
    run.send_signal(signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 20
    while any(running(pid) for pid in engine) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in engine if running(pid)]
    for pid in left:  # do not leave them behind if the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, "the engine's processes outlived the killed run"


def test_a_normal_shutdown_stops_the_reaper(fake_vllm):
    import subprocess

    from tokenworth_agent.backbones.vllm_backbone import REAPER_ATTRIBUTE, reap_on_exit, shutdown_engine

    sleeper = subprocess.Popen(["sleep", "600"])
    llm = fake_vllm.LLM(model="m")
    reaper = reap_on_exit({(sleeper.pid, "not-its-start-time")})  # a reused PID: must be left alone
    setattr(llm, REAPER_ATTRIBUTE, reaper)
    shutdown_engine(llm)
    assert reaper.returncode is not None and sleeper.poll() is None
    assert getattr(VLLMBackbone("m").open().llm, REAPER_ATTRIBUTE) is None  # the fake starts no process
    reaper = reap_on_exit({(sleeper.pid, "not-its-start-time")})
    reaper.stdin.close()  # as if the run had ended: the reaper checks the start time and spares the PID
    reaper.wait(timeout=30)
    assert sleeper.poll() is None
    sleeper.kill()
    sleeper.wait()
