"""Smoke test of the controller benchmarks: run the suite at the tiny size into a temporary
directory and check every result file's schema and internal consistency. No timing
assertions (machines differ); the sharded run must equal the unsharded one."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow(reason="runs all six controller benchmarks at the tiny size, once for the module")

from tokenworth_bench.controller import suite
from tokenworth_bench.controller.roofline import flops

import tokenworth_jax as tw


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    suite.main(["--size", "tiny", "--out", str(out)])
    return out


def load(out: Path, name: str) -> dict:
    assert (out / f"{name}.md").read_text().startswith(f"# {name}")
    return json.loads((out / f"{name}.json").read_text())


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def check_machine(p: dict) -> None:
    m = p["machine"]
    for key in ("jax", "backend", "devices", "cpu_model", "cpu_count"):
        assert m[key], key
    assert p["size"] == "tiny"


def test_suite_lists_all(results):
    s = json.loads((results / "suite.json").read_text())
    assert set(s["ran"]) == set(suite.BENCHMARKS)


def test_per_task_schema(results):
    p = load(results, "per_task")
    check_machine(p)
    st = p["state_before"]
    assert st["bank_valid"] == st["capacity"]  # pre-filled: a full bank
    assert st["base_window_full"] and st["fast_window_full"] and st["slow_window_full"]
    for side in ("jax", "numpy"):
        s = p[side]
        for phase in ("select", "observe_no_refit", "offer"):
            assert positive(s[phase]["median_ms"]) and s[phase]["n"] >= 1
        assert s["n_refits_in_window"] >= 1  # the window contains scheduled refits
        total = s["select"]["median_ms"] + s["observe_amortised_ms"] + s["offer"]["median_ms"] + s["end_task"]["median_ms"]
        assert s["mean_task_ms"] == pytest.approx(total)
    assert p["jax"]["n_refits_in_window"] == p["numpy"]["n_refits_in_window"]  # same stream, same schedule
    assert set(p["jax"]["refits"]) == {"base_newton", "krr_fit", "agop_plus_krr"}
    assert p["ratio_numpy_over_jax"]["mean_task"] == pytest.approx(
        p["numpy"]["mean_task_ms"] / p["jax"]["mean_task_ms"])
    assert all(v >= 0 for v in p["compile_s"].values())
    s = p["stream"]  # the host Controller against the reference over a whole stream
    assert s["tasks"] > 0 and 0 < s["successes"] < s["tasks"] and positive(s["host_ms"]["wall"])
    assert s["ratio"]["wall"] == pytest.approx(s["reference_ms"]["wall"] / s["host_ms"]["wall"])
    assert s["target"]["met"] == (s["ratio"]["wall"] >= 80)


def test_roofline_schema(results):
    p = load(results, "roofline")
    check_machine(p)
    assert positive(p["roof"]["gflops"])
    spec = tw.presets.spec_from_dict(p["spec"])
    assert p["flops"] == flops(spec)
    for step, a in p["achieved"].items():
        assert a["gflops"] == pytest.approx(a["mflop"] * 1e6 / (a["ms"] / 1e3) / 1e9)
        assert a["fraction_of_roof"] == pytest.approx(a["gflops"] / p["roof"]["gflops"])


def test_flop_model_counts_the_dominant_terms():
    spec = tw.Spec()
    f = flops(spec)
    F, N = spec.feature_dim, spec.fast_window
    assert f["offer"] > 2 * 9 * 65 * N * F  # the Gram matmul of 9 x 65 pairs against 128 rows
    assert f["krr_fit"] > N ** 3 / 3
    assert f["agop_with_refit"] > 6 * 256 * N * F


def test_bank_scaling_schema(results):
    p = load(results, "bank_scaling")
    check_machine(p)
    Bs = [r["capacity"] for r in p["results"]]
    assert Bs == sorted(Bs) and len(Bs) >= 3
    for r in p["results"]:
        assert positive(r["worth"]["median_ms"]) and positive(r["offer"]["median_ms"])
        assert positive(r["maxrss_peak_mib"]) and r["maxrss_growth_mib"] >= 0
    assert any(r["worth_chunk"] > 0 for r in p["results"])  # the chunked path ran
    for fit in p["fit"].values():
        assert math.isfinite(fit["slope_us_per_memory"]) and math.isfinite(fit["loglog_slope_last_two"])


def test_sweep_schema(results):
    p = load(results, "sweep")
    check_machine(p)
    for r in p["results"]:
        for kind in ("batched_map", "batched_vmap"):
            assert r[f"{kind}_config_tasks_per_s"] == pytest.approx(r["configs"] * r["tasks"] / r[f"{kind}_s"])
        if r["vmap_s"] is not None:
            assert r["vmap_config_tasks_per_s"] == pytest.approx(r["configs"] * r["tasks"] / r["vmap_s"])
        assert positive(r["loop_s"]) and positive(r["numpy_s_extrapolated"])


def test_sharded_equals_unsharded(results):
    p = load(results, "sharded")
    assert len(p["child_machine"]["devices"]) == p["devices"] == 4
    assert "config" in p["output_sharding"] or "4" in p["output_sharding"]
    eq = p["equal"]
    assert eq["integer_leaves_exact"], "admission codes / ids differ between sharded and unsharded runs"
    assert eq["float_leaves_close"], f"sharded floats differ by {eq['max_abs_diff']}"


def test_simulated_db_reward_matches_the_simulator(data_dir):
    """The JAX reward model in tokenworth_bench.controller.simdb gives the simulator's own outcome."""
    if not (Path(data_dir) / "db_bench").exists():
        pytest.skip(f"DB task data not found under {data_dir}")
    import jax
    import jax.numpy as jnp

    from tokenworth_agent.sim import decide
    from tokenworth_agent.tasks import load_tasks
    from tokenworth_bench.controller import simdb

    stream = simdb.load_stream(40, seed=3, directory=data_dir)
    tasks = load_tasks("db", data_dir)[:40]
    # compiled once, as tw.run's reward_fn runs it, instead of ~20 eager ops per call
    success_probability = jax.jit(lambda i, j: simdb.success_probability(stream, i, j))
    for i in range(40):
        for j in (-1, 0, 5, i):
            ep = decide(stream.params, 3, tasks[i], None if j < 0 else tasks[j].skill_list)
            p = float(success_probability(jnp.int32(i), jnp.int32(j)))
            assert p == pytest.approx(ep.p, abs=1e-6)
            assert bool(stream.outcome_u[i] < p) == ep.success


def test_speedups_schema(results):
    p = load(results, "speedups")
    check_machine(p)
    for path in ("run", "host_fused", "host_separate"):
        for worth in ("full", "incremental"):
            assert positive(p["per_task"][f"{path}/{worth}"]["cpu_ms"])
    for clock in ("wall_ms", "cpu_ms"):
        assert all(positive(v) for v in p["speedups"][clock].values())
    assert p["batched"]["configs"] >= 2 and len(p["batched"]["seconds"]) == 6


def test_partial_rerun_merges_suite_json(tmp_path):
    path = tmp_path / "suite.json"
    suite.write_suite(path, "tiny", {"per_task": {"seconds": 1.0}})
    data = suite.write_suite(path, "tiny", {"sweep": {"seconds": 2.0}})
    assert set(data["ran"]) == {"per_task", "sweep"}
    assert json.loads(path.read_text())["ran"]["per_task"]["seconds"] == 1.0
