"""CLI backbone settings: what is the run's identity, what is only how it connects."""

import json

import pytest

from agent.backbones.options import parse_extra_body, split_options
from agent.runner import write_run_config


def test_identity_and_connection_are_split():
    identity, connection = split_options("openai", 0, model="m", base_url="http://h:1/v1", timeout=5.0,
                                         concurrency=2, extra_body='{"top_k": -1}')
    assert identity == {"model": "m", "extra_body": {"top_k": -1}}
    assert connection == {"base_url": "http://h:1/v1", "timeout": 5.0, "retry_for": 300.0, "concurrency": 2}
    assert split_options("sim", 3) == ({"seed": 3}, {})


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
