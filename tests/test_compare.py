"""Paired comparisons (tokenworth_agent.results.compare, power) and `tokenworth compare`: pairing within and across
run folders, the libraries' tests and Holm on the same data, MDE and planning, the lifelong gain, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from tests.runfolders import BUDGET, config, write_run, write_stream

runner = CliRunner()


def _rewards(seed: int, n: int, p: float) -> list[int]:
    return (np.random.default_rng(seed).random(n) < p).astype(int).tolist()


@pytest.fixture
def one_seed(tmp_path):
    """A run of 200 tasks: standard at ~40 %, rag equal to it but on 20 tasks, memp clearly better."""
    standard = _rewards(0, 200, 0.4)
    rag = list(standard)  # ten successes lost, ten gained: no difference
    for i in [i for i, r in enumerate(standard) if r][:10] + [i for i, r in enumerate(standard) if not r][:10]:
        rag[i] = 1 - rag[i]
    memp = [max(s, int(u < 0.35)) for s, u in zip(standard, np.random.default_rng(1).random(200))]
    return write_run(tmp_path / "run", {"standard": standard, "rag": rag, "memp": memp})


def test_one_seed_compare_is_mcnemar_with_holm_and_a_verdict(one_seed) -> None:
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.multitest import multipletests

    from tokenworth_agent.results.compare import compare_runs
    from tokenworth_agent.results.runs import streams

    found = {s.method: np.asarray(s.rewards()) for s in streams(one_seed)}
    rows = compare_runs([one_seed])
    assert [(c.method, c.baseline) for c in rows] == [("rag", "standard"), ("memp", "standard")]
    for c in rows:
        a, b = found[c.method], found["standard"]
        table = [[np.sum(a & b), np.sum(a & (1 - b))], [np.sum((1 - a) & b), np.sum((1 - a) & (1 - b))]]
        assert c.sr.p_value == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12)
        assert c.sr.difference == pytest.approx(np.mean(a) - np.mean(b))
        assert c.sr.n == 200 and c.matched.seeds == [0]
    expected = multipletests([c.sr.p_value for c in rows], method="holm")[1]
    assert [c.p_adjusted for c in rows] == pytest.approx(list(expected))
    rag, memp = rows
    assert rag.verdict == "no detectable difference" and memp.verdict == "better" and memp.p_adjusted < 0.05
    # the MDE from the discordance: (z_.975 + z_.8) sqrt(discordance / n), t-corrected
    normal = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * np.sqrt(rag.sr.second_moment / 200)
    assert rag.sr.second_moment == pytest.approx(20 / 200)
    assert rag.mde == pytest.approx(normal, rel=0.01) and rag.mde > normal


def test_json_has_the_documented_fields_in_percentage_points(one_seed) -> None:
    result = runner.invoke(_app(), ["compare", str(one_seed), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    for key in ("env", "method", "baseline", "n_pairs", "difference", "ci", "se", "p_value", "p_adjusted", "verdict",
                "mde"):
        assert key in rows[0], key
    memp = rows[1]
    assert memp["method"] == "memp" and memp["baseline"] == "standard" and memp["n_pairs"] == 200
    assert memp["ci"][0] < memp["difference"] < memp["ci"][1] and memp["ci"][0] > 0  # pp, excludes 0
    assert 1 < memp["mde"] < 20 and memp["verdict"] == "better"
    assert set(memp["tokens"]) >= {"difference", "ci", "p_value", "p_adjusted", "verdict"}
    assert set(memp["gain"]) == {"difference", "ci", "se"}


def test_several_seeds_cluster_by_task(tmp_path) -> None:
    import statsmodels.api as sm

    from tokenworth_agent.results.compare import compare_runs

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config(seed=[0, 1, 2])))
    easy = np.random.default_rng(5).random(150) < 0.5  # the task's own difficulty, the same in every seed
    a, b = [], []
    for seed in range(3):
        rng = np.random.default_rng(10 + seed)
        standard = (easy & (rng.random(150) < 0.8)).astype(int)
        rag = ((easy & (rng.random(150) < 0.9)) | (rng.random(150) < 0.05)).astype(int)
        write_stream(run, f"seed{seed}/standard", standard, seed=seed)
        write_stream(run, f"seed{seed}/rag", rag, seed=seed)
        a.append(rag)
        b.append(standard)
    [c] = compare_runs([run])
    d = np.concatenate(a) - np.concatenate(b)
    tasks = np.tile(np.arange(150), 3)
    fit = sm.OLS(d, np.ones_like(d, dtype=float)).fit(cov_type="cluster", cov_kwds={"groups": tasks}, use_t=True)
    assert c.sr.test == "cluster-t" and c.matched.seeds == [0, 1, 2] and c.sr.n == 450 and c.sr.n_clusters == 150
    assert c.sr.se == pytest.approx(fit.bse[0], rel=1e-12) and c.sr.p_value == pytest.approx(fit.pvalues[0], rel=1e-10)
    assert c.parts.seeds == 3 and c.parts.between is not None


def test_a_plugin_run_pairs_with_a_builtin_run_of_the_same_tasks_and_seeds(tmp_path) -> None:
    from tokenworth_agent.results.compare import compare_runs

    builtin = write_run(tmp_path / "builtin", {"standard": _rewards(0, 100, 0.4), "rag": _rewards(1, 100, 0.4)})
    plugin = write_run(tmp_path / "plugin", {"mymethod": _rewards(2, 60, 0.5)})  # stopped after 60 tasks
    rows = compare_runs([builtin, plugin])
    assert [c.method for c in rows] == ["rag", "mymethod"]
    mine = rows[1]
    assert mine.sr.n == 60 and mine.runs == (str(plugin), str(builtin))  # on the tasks both ran


@pytest.mark.parametrize("change, named", [
    ({"backbone": "vllm"}, "backbone 'vllm' in"),
    ({"budget": dict(BUDGET, max_output_tokens=64)}, "budget.max_output_tokens 64 in"),
    ({"harness": {"memory_format": "full"}}, "harness.memory_format 'full' in"),
])
def test_streams_run_under_other_settings_are_refused_naming_the_difference(tmp_path, change, named) -> None:
    builtin = write_run(tmp_path / "builtin", {"standard": _rewards(0, 50, 0.4)})
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(config(**change)))
    write_stream(other, "mymethod", _rewards(1, 50, 0.4), budget=change.get("budget", BUDGET))
    result = runner.invoke(_app(), ["compare", str(builtin), str(other)])
    assert result.exit_code == 2
    line = result.output.strip()
    assert line.startswith("error: cannot pair mymethod with standard (db, seed 0)") and named in line
    assert len(line.splitlines()) == 1


def test_another_task_order_or_the_same_stream_twice_is_refused(tmp_path) -> None:
    from tokenworth_agent.results.compare import CompareError, compare_runs

    builtin = write_run(tmp_path / "builtin", {"standard": _rewards(0, 20, 0.4)})
    other = write_run(tmp_path / "other", {})
    write_stream(other, "mymethod", _rewards(1, 20, 0.4), task_ids=[f"db-{19 - i}" for i in range(20)])
    with pytest.raises(CompareError, match=r"another task order \(task 0 is db-19 in the first, db-0 in the second"):
        compare_runs([builtin, other])
    twice = write_run(tmp_path / "twice", {"standard": _rewards(3, 20, 0.4)})
    with pytest.raises(CompareError, match="standard .db, seed 0. is both .* pass only one"):
        compare_runs([builtin, twice])


def test_the_baseline_is_standard_or_asked_for_or_a_sweeps_preset(tmp_path, one_seed) -> None:
    from tokenworth_agent.results.compare import CompareError, compare_runs

    assert {c.baseline for c in compare_runs([one_seed], "rag")} == {"rag"}
    with pytest.raises(CompareError, match="--baseline mem0: db has no stream of it; it has standard, rag, memp"):
        compare_runs([one_seed], "mem0")
    sweep = write_run(tmp_path / "sweep", {})
    write_stream(sweep, "tokenworth", _rewards(0, 30, 0.4))
    write_stream(sweep, "tokenworth@eta_max=0.1", _rewards(1, 30, 0.4), hparams={"eta_max": 0.1})
    [c] = compare_runs([sweep])
    assert (c.method, c.baseline) == ("tokenworth@eta_max=0.1", "tokenworth")
    lone = write_run(tmp_path / "lone", {"rag": [1, 0], "memp": [0, 1]})
    with pytest.raises(CompareError, match="has no standard stream; pass --baseline METHOD"):
        compare_runs([lone])


def test_the_cli_prints_tables_plans_and_one_line_errors(one_seed, tmp_path) -> None:
    result = runner.invoke(_app(), ["compare", str(one_seed), "--plan", "2"])
    assert result.exit_code == 0, result.output
    assert "## Paired comparison against standard · DB · seed 0" in result.output
    assert "| memp | 200 |" in result.output and "better" in result.output
    assert "Gain over the stream" in result.output and "tasks needed to detect 2 pp" in result.output
    bad = runner.invoke(_app(), ["compare", str(one_seed), "--plan", "-1"])
    assert bad.exit_code == 2 and "--plan -1" in bad.output
    missing = runner.invoke(_app(), ["compare", str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "is not a folder" in missing.output
    planned = json.loads(runner.invoke(_app(), ["compare", str(one_seed), "--json", "--plan", "5"]).output)
    assert planned[0]["plan"]["delta"] == 5 and planned[0]["plan"]["known"] is False


def test_planning_follows_the_normal_formula_and_seeds_help_only_when_they_vary() -> None:
    from tokenworth_agent.results import power

    rng = np.random.default_rng(0)
    d = rng.choice([-1, 0, 1], p=[0.05, 0.88, 0.07], size=500)
    one = power.components(d)
    formula = ((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) / 0.02) ** 2 * one.total
    made = power.plan(0.02, one)
    assert made.rows[0][1] == made.rows[0][2] == pytest.approx(formula, rel=0.01)
    assert made.rows[2][1] == pytest.approx(formula / 3, rel=0.01) and made.rows[2][2] == made.rows[0][2]
    # three seeds whose pairs repeat the task's outcome entirely: more seeds do not help
    repeated = power.components(np.tile(d, 3), np.tile(np.arange(500), 3))
    assert repeated.within == pytest.approx(0.0) and repeated.between == pytest.approx(one.total)
    assert power.tasks_needed(0.02, repeated, 10) == power.tasks_needed(0.02, repeated, 1)
    with pytest.raises(ValueError, match="must be positive"):
        power.tasks_needed(0.0, one, 1)
    # statsmodels answers some sizes with a (1,) array (120 and 1,500 tasks among them): a float every time
    mdes = [power.mde(power.Components(None, None, 0.1, n, 1)) for n in (40, 119, 120, 500, 1500)]
    assert all(type(m) is float for m in mdes) and mdes == sorted(mdes, reverse=True)


def test_the_lifelong_gain_is_last_third_minus_first_third(tmp_path) -> None:
    from statsmodels.stats.proportion import confint_proportions_2indep

    from tokenworth_agent.results.compare import compare_runs

    standard = [1, 0] * 45  # 50 % throughout
    rag = [0] * 30 + [1, 0] * 15 + [1] * 30  # 0 %, then 50 %, then 100 %
    run = write_run(tmp_path / "run", {"standard": standard, "rag": rag})
    [c] = compare_runs([run])
    assert c.gain.mean == pytest.approx(1.0) and c.baseline_gain.mean == pytest.approx(0.0)
    expected = confint_proportions_2indep(30, 30, 0, 30, method="newcomb", compare="diff")
    assert (c.gain.ci_low, c.gain.ci_high) == pytest.approx(tuple(expected), rel=1e-9)
    assert c.relative_gain.mean == pytest.approx(1.0) and c.relative_gain.ci_low > 0.5


def test_the_serial_check_is_statsmodels_hac(one_seed) -> None:
    import statsmodels.api as sm

    from tokenworth_agent.results.compare import compare_runs

    memp = compare_runs([one_seed])[1]
    d = memp.matched.method - memp.matched.baseline
    lags = int(np.floor(4 * (200 / 100) ** (2 / 9)))
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="HAC", cov_kwds={"maxlags": lags, "use_correction": True})
    assert memp.se_hac == pytest.approx(fit.bse[0], rel=1e-9)


def test_the_difference_along_the_stream_is_the_paired_difference_of_each_window(one_seed) -> None:
    from tokenworth_agent.results import estimate as E
    from tokenworth_agent.results.compare import along_stream, compare_runs

    memp = compare_runs([one_seed])[1]
    x, diff = along_stream(memp.matched, 40)
    assert x[0] == 40 and x[-1] == 200 and len(diff.difference) == 161
    m = memp.matched
    window = (m.position >= 60) & (m.position < 100)
    direct = E.paired(m.method[window], m.baseline[window])
    assert diff.difference[99 - 39] == pytest.approx(direct.difference)
    assert (diff.ci_low[60], diff.ci_high[60]) == pytest.approx((direct.ci_low, direct.ci_high))


def _app():
    from tokenworth_agent.cli import app

    return app


def test_streams_of_one_or_two_tasks_compare_without_a_gain(tmp_path) -> None:
    from tokenworth_agent.results.compare import compare_runs, markdown

    run = write_run(tmp_path / "run", {"standard": [1, 0], "rag": [1, 1]})
    [c] = compare_runs([run])
    assert c.sr.n == 2 and np.isnan(c.gain.mean) and np.isnan(c.relative_gain.ci_low)
    assert "| rag | 2 |" in markdown([c]) and json.loads(json.dumps(c.to_json(), allow_nan=True))["gain"]
    one = write_run(tmp_path / "one", {"standard": [0], "rag": [1]})
    [single] = compare_runs([one])
    assert single.sr.n == 1 and single.sr.p_value == 1.0  # McNemar on one discordant pair
