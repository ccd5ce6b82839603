"""Lockstep multi-stream sweeps: grid parsing, batching, and equality with single runs."""

import json

import pytest

from agent.budget import Budget
from agent.runner import run_stream
from agent.sweep import SweepError, configs_from_grid, run_sweep, table_a3_configs, write_sweep_results
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks

DB = Budget.for_env("db")


def test_grid_product_aliases_and_errors() -> None:
    configs = configs_from_grid(["eta=0.05,0.1", "gamma=0.5,1,2", "krr_interval=25,50"])
    assert len(configs) == 12 and configs[0] == {"eta_max": 0.05, "gamma": 0.5, "krr_interval": 25}
    assert isinstance(configs[0]["krr_interval"], int)
    assert configs_from_grid([]) == [{}]
    for bad, match in [("nope=1", "unknown hyperparameter"), ("gamma", "NAME=v1"), ("gamma=x", "not a number"),
                       ("krr_interval=2.5", "integers")]:
        with pytest.raises(SweepError, match=match):
            configs_from_grid([bad])
    with pytest.raises(SweepError, match="twice"):
        configs_from_grid(["gamma=1", "gamma=2"])


def test_table_a3_grid_has_the_spec_values() -> None:
    configs = table_a3_configs()
    assert len(configs) == 22 and configs[0] == {}
    assert {"eta_max": 0.30} in configs and {"agop_interval": 400} in configs and {"lambda_w": 0.03} in configs


def test_sixteen_streams_one_batched_call_per_round_and_match_single_runs(tmp_path) -> None:
    tasks = make_tasks(12)
    configs = configs_from_grid(["eta=0.05,0.15,0.3,0.5", "gamma=0.5,1,2,4"])
    assert len(configs) == 16
    backbone = FakeBackbone()
    result = run_sweep("db", tasks, backbone, DB, configs, 0, envs=[FakeDBEnv() for _ in configs])
    # every episode of the fake takes 2 rounds: 2 batched calls per task, each with all 16 streams
    assert backbone.batch_sizes == [16] * (2 * len(tasks))
    preset_index = configs.index({"eta_max": 0.15, "gamma": 1.0})
    single = run_stream("tokenworth", "db", tasks, FakeBackbone(), DB, 0, tmp_path / "preset", env=FakeDBEnv())
    assert [r["reward"] for r in single] == result.streams[preset_index].rewards
    assert [r["output_tokens"] for r in single] == result.streams[preset_index].tokens
    table = write_sweep_results(result, tmp_path / "out")
    assert table.count("\n| eta_max=") == 16
    data = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert len(data["streams"]) == 16 and data["max_batch"] == 16


def test_sweep_on_real_db_env_matches_tokenworth_run(tmp_path, data_dir) -> None:
    from agent.backbones.registry import make_backbone
    from agent.data import load_tasks

    tasks = load_tasks("db", data_dir, limit=20)
    backbone = make_backbone("sim", seed=0)
    result = run_sweep("db", tasks, backbone, DB, [{}, {"eta_max": 0.3}], 0)
    single = run_stream("tokenworth", "db", tasks, backbone, DB, 0, tmp_path)
    assert [r["reward"] for r in single] == result.streams[0].rewards
    assert [r["output_tokens"] for r in single] == result.streams[0].tokens
