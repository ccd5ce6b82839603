"""CLI backbone settings: what is the run's identity, what is only how it connects."""

import json

import pytest

from tokenworth_agent.backbones.engine_options import EngineOptionError, engine_for_run, engine_options_from_flags
from tokenworth_agent.backbones.options import parse_extra_body, split_options
from tokenworth_agent.experiment.runner import write_run_config


def test_identity_and_connection_are_split():
    identity, connection = split_options("openai", 0, model="m", base_url="http://h:1/v1", timeout=5.0,
                                         concurrency=2, extra_body='{"top_k": -1}')
    assert identity == {"model": "m", "extra_body": {"top_k": -1}}
    assert connection == {"base_url": "http://h:1/v1", "seed": 0, "timeout": 5.0, "retry_for": 300.0, "concurrency": 2}
    assert split_options("sim", 3) == ({"seed": 3, "eos_tokens": 1}, {})
    _, default = split_options("openai", 1, model="m", base_url="http://a:1/v1,http://b:1/v1")
    assert default["base_url"] == ["http://a:1/v1", "http://b:1/v1"] and "concurrency" not in default  # batch-wide


def test_engine_options_split_into_identity_and_resources():
    engine = engine_options_from_flags(gpu_memory_utilization=0.8, max_model_len=4096, dtype="bfloat16",
                                       engine_arg=["max_num_seqs=64", "kv_cache_dtype=fp8"])
    identity, connection = split_options("vllm", 2, model="m", engine=engine)
    assert identity == {"model": "m", "max_model_len": 4096, "dtype": "bfloat16", "enable_prefix_caching": True,
                        "batch_invariant": False, "engine_options": {"max_num_seqs": 64, "kv_cache_dtype": "fp8"}}
    assert connection == {"seed": 2, "gpu_memory_utilization": 0.8}
    with pytest.raises(ValueError, match="--max-model-len only apply to --backbone vllm"):
        split_options("openai", 0, model="m", base_url="http://a/v1",
                      engine=engine_options_from_flags(max_model_len=4096))


@pytest.mark.parametrize(("flags", "message"), [
    (dict(engine_arg=["max_num_seq=64"]), r"no engine option 'max_num_seq' \(did you mean max_num_seqs"),
    (dict(engine_arg=["gpu_memory_utilization=0.5"]), "use --gpu-memory-utilization instead"),
    (dict(engine_arg=["seed=3"]), "use --seed instead"),
    (dict(engine_arg=["novalue"]), "expected KEY=VALUE"),
    (dict(dtype="fp4"), "--dtype 'fp4'"),
    (dict(gpu_memory_utilization=1.0), r"--gpu-memory-utilization must be in \(0, 1\)"),
])
def test_bad_engine_flags_are_refused_in_one_line(flags, message):
    with pytest.raises(EngineOptionError, match=message):
        engine_options_from_flags(**flags)


def test_engine_flags_on_another_backbone_are_refused():
    with pytest.raises(EngineOptionError, match="--no-prefix-caching, --engine-arg only apply to --backbone vllm"):
        engine_for_run("openai", {"prefix_caching": False, "engine_arg": ["x=1"]})
    assert engine_for_run("sim", {"prefix_caching": True}) == (None, None)


def test_bad_or_misplaced_options_name_the_flag():
    with pytest.raises(ValueError, match="--extra-body is not valid JSON"):
        parse_extra_body("{top_k: -1}")
    with pytest.raises(ValueError, match="must be a JSON object"):
        parse_extra_body("[1]")
    with pytest.raises(ValueError, match="--base-url, --timeout only apply to --backbone openai"):
        split_options("sim", 0, base_url="http://x/v1", timeout=3.0)


def test_a_moved_server_resumes_but_another_model_does_not(tmp_path):
    config = {"env": "db", "backbone": "openai", "seed": 0, "backbone_options": {"model": "m"},
              "connection": {"base_url": "http://a:1/v1"}}
    write_run_config(tmp_path, config)
    (tmp_path / "standard").mkdir()  # a method with results: only then do other settings conflict
    (tmp_path / "standard" / "records.jsonl").write_text('{"index": 0}\n')
    moved = dict(config, connection={"base_url": "http://a:2/v1", "timeout": 9})
    write_run_config(tmp_path, moved)  # accepted, and the new connection is recorded
    assert json.loads((tmp_path / "config.json").read_text())["connection"]["base_url"] == "http://a:2/v1"
    with pytest.raises(RuntimeError, match="different settings"):
        write_run_config(tmp_path, dict(moved, backbone_options={"model": "other"}))
    with pytest.raises(RuntimeError, match="different settings"):
        write_run_config(tmp_path, dict(moved, backbone_options={"model": "m", "extra_body": {"top_k": 1}}))
