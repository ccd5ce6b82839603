"""The Ray scaling benchmark's arithmetic (the runs themselves are the benchmark, not a test)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.server  # real Ray nodes (make test-quick leaves it out)

from tokenworth_bench.ray_scaling import cli_command, parse_args, ratios, served_window


def stats(first_in, last_out, model_s=1.0):
    return {"first_in": first_in, "last_out": last_out, "model_s": model_s}


def run(mode, window, model_s):
    return {"mode": mode, "window_s": window, "servers": [stats(0, window, m) for m in model_s]}


def test_the_served_window_spans_every_replica_and_refuses_one_that_served_nothing() -> None:
    assert served_window([stats(10.0, 50.0), stats(12.0, 61.5)]) == pytest.approx(51.5)
    with pytest.raises(RuntimeError, match="served nothing"):
        served_window([stats(10.0, 50.0), stats(None, None)])


def test_ratios_come_from_the_medians_of_each_mode() -> None:
    runs = [run("local", 100.0, [60]), run("ray1", 104.0, [60]), run("ray2", 50.0, [31, 29]),
            run("local", 120.0, [60]), run("ray1", 110.0, [60]), run("ray2", 60.0, [30, 30])]
    got = ratios(runs)
    assert got["median_window_s"] == {"local": 110.0, "ray1": 107.0, "ray2": 55.0}
    assert got["shrink_two_nodes"] == pytest.approx(107 / 55, abs=1e-3)
    assert got["ray_overhead"] == pytest.approx(107 / 110 - 1, abs=1e-3)
    assert got["gpu_time_shrink_two_nodes"] == pytest.approx(60 / 30.5, abs=1e-3)  # the busiest replica's


def test_each_mode_is_the_real_command_with_its_executor_and_replicas() -> None:
    args = parse_args(["--seeds", "2", "--tasks", "3", "--max-num-seqs", "8"])
    local = cli_command(args, "out", ["http://a/v1"], None)
    two = cli_command(args, "out", ["http://a/v1", "http://b/v1"], "10.0.0.1:6379")
    assert "--executor" not in local and local[local.index("--seeds") + 1] == "0,1"
    assert two[-4:] == ["--executor", "ray", "--ray-address", "10.0.0.1:6379"]
    assert [two[i + 1] for i, a in enumerate(two) if a == "--base-url"] == ["http://a/v1", "http://b/v1"]
    with pytest.raises(SystemExit):
        parse_args(["--modes", "ray3"])
