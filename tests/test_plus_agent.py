"""TokenWorth+ in the harness: the policy, its checkpoint/resume, and `tokenworth sweep --plus`."""

import pytest

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.experiment.runner import comparable, make_policy, run_stream
from tokenworth_agent.experiment.sweep import SweepError, sweep_streams
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks
from tests.test_sweep import run_sweep

DB = Budget.for_env("db")


def test_policy_is_registered_and_opt_in() -> None:
    from tokenworth_agent.experiment.runner import METHOD_NAMES

    policy = make_policy("tokenworth+", "db", DB, seed=4)
    assert "tokenworth+" not in METHOD_NAMES  # not part of the default run
    assert policy.controller.spec.mode.name == "tokenworth+" and int(policy.controller.hp.mode.seed) == 4


def test_resume_equals_uninterrupted(tmp_path) -> None:
    tasks = make_tasks(16)
    reference = run_stream("tokenworth+", "db", tasks, FakeBackbone(), DB, 1, tmp_path / "ref", env=FakeDBEnv())
    out = tmp_path / "split"
    run_stream("tokenworth+", "db", tasks, FakeBackbone(), DB, 1, out, env=FakeDBEnv(), stop_after=6)
    resumed = run_stream("tokenworth+", "db", tasks, FakeBackbone(), DB, 1, out, env=FakeDBEnv())
    assert comparable(resumed) == comparable(reference)
    assert all("plus" in r.decision for r in reference if r.decision.get("selection"))


def test_sweep_plus_stream_matches_the_policy_run(tmp_path) -> None:
    tasks = make_tasks(12)
    configs = [{}, {"plus_margin": 0.05}, {"plus_abstain": 0.0}]
    result = run_sweep(tasks, FakeBackbone(), configs, tmp_path / "sweep", envs=[FakeDBEnv() for _ in configs], plus=True)
    single = run_stream("tokenworth+", "db", tasks, FakeBackbone(), DB, 0, tmp_path / "single", env=FakeDBEnv())
    assert [r.reward for r in single] == result.streams[0].rewards
    assert [r.output_tokens for r in single] == result.streams[0].tokens
    assert result.streams[0].injected == sum(bool(r.injected_memory_ids) for r in single)


def test_sweep_refuses_plus_grid_without_plus() -> None:
    with pytest.raises(SweepError, match="--plus"):
        sweep_streams("db", DB, [{"plus_margin": 0.1}], 0)
