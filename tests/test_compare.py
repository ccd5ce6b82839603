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
    # the MDE from the discordance at Holm's first step (two comparisons: alpha 0.025):
    # (z_{1-alpha/2} + z_.8) sqrt(discordance / n), t-corrected
    normal = (stats.norm.ppf(1 - 0.025 / 2) + stats.norm.ppf(0.8)) * np.sqrt(rag.sr.second_moment / 200)
    assert rag.sr.second_moment == pytest.approx(20 / 200)
    assert rag.mde == pytest.approx(normal, rel=0.01) and rag.mde > normal and rag.mde_alpha == 0.025


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
    # as many lags as the bank holds memories (64), at most a quarter of the 200 places
    assert memp.matched.bank_capacity == 64 and memp.hac_lags == 50 and memp.to_json()["hac_lags"] == 50
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="HAC", cov_kwds={"maxlags": 50, "use_correction": True})
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


# ------------------------------------------------------------------------- runs made apart, with real releases
@pytest.fixture(scope="module")
def apart(tmp_path_factory, data_dir):
    """Two real runs made apart: `standard` alone and `rag` alone (same env, seed and 10 tasks); each config.json
    lists releases only for its own method."""
    root = tmp_path_factory.mktemp("apart")
    for method in ("standard", "rag"):
        made = runner.invoke(_app(), ["run", "--env", "db", "--methods", method, "--limit", "10", "--out",
                                      str(root / method), "--data-dir", data_dir, "--no-progress"])
        assert made.exit_code == 0, made.output
    return root


def test_runs_made_apart_pair_on_what_their_streams_share(apart) -> None:
    config = json.loads((apart / "rag" / "config.json").read_text())
    assert set(config["releases"]) == {"rag"}  # the case: each run records only its own method's release
    result = runner.invoke(_app(), ["compare", str(apart / "standard"), str(apart / "rag"), "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert (row["method"], row["baseline"], row["n_pairs"]) == ("rag", "standard", 10)


@pytest.mark.parametrize("kind, release, named", [
    ("benchmark", "tokenworth-agent 9.9.9", "releases.benchmark 'tokenworth-agent 9.9.9' in"),
    ("backbone", "other-backbones 1.0", "releases.backbone 'other-backbones 1.0' in"),
    ("method", "tokenworth-agent 0.0.1", "releases.tokenworth-agent '0.0.1' in"),  # the harness's own release
])
def test_a_real_release_difference_is_refused_in_one_line(apart, tmp_path, kind, release, named) -> None:
    import shutil

    other = tmp_path / "rag"
    shutil.copytree(apart / "rag", other)
    config = json.loads((other / "config.json").read_text())
    config["releases"]["rag"][kind] = release
    (other / "config.json").write_text(json.dumps(config))
    result = runner.invoke(_app(), ["compare", str(apart / "standard"), str(other)])
    assert result.exit_code == 2
    line = result.output.strip()
    assert line.startswith("error: cannot pair rag with standard (db, seed 0)") and named in line, line
    assert len(line.splitlines()) == 1


# ------------------------------------------------------------------------- nothing to detect
def test_with_no_discordant_pair_the_mde_and_the_plan_are_unknown(tmp_path) -> None:
    from tokenworth_agent.results.compare import compare_runs, markdown, plan_markdown

    run = write_run(tmp_path / "run", {})
    for method in ("standard", "rag"):  # both at 0 %, one output token each (a budget of one token)
        write_stream(run, method, [0] * 20, tokens=[1] * 20)
    result = runner.invoke(_app(), ["compare", str(run), "--json", "--plan", "2"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert row["mde"] is None and "no pair differs" in row["mde_unknown"]
    assert row["plan"]["unknown"] == row["mde_unknown"]
    assert all(v == [None, None] for v in row["plan"]["tasks_needed"].values())
    # constant tokens are counts, not 0/1 outcomes: no McNemar, no pseudo-pairs widening a zero difference
    assert row["tokens"]["test"] == "paired-t" and row["tokens"]["ci"] == [0.0, 0.0]
    [c] = compare_runs([run])
    text = markdown([c]) + plan_markdown([c], 2)
    assert "| 20 | 0.0 [0.0, 16.1] | +0.0 | [−13.8, +13.8] | 1.000 | 1.000 | no detectable difference | — |" in text
    assert "MDE and plan unknown: no pair differs" in text and "| — | — | — | — | — |" in text


# ------------------------------------------------------------------------- the interval and the verdict
def _pairs(up: int, down: int, n: int = 500, both: int = 200) -> tuple[list[int], list[int]]:
    """Rewards of a method and a baseline with ``up`` pairs won, ``down`` lost, ``both`` both solved."""
    rest = n - up - down - both
    return [1] * up + [0] * down + [1] * both + [0] * rest, [0] * up + [1] * down + [1] * both + [0] * rest


def _silent(comparisons, text: str) -> list[str]:
    """The rows whose interval and verdict disagree (one excludes 0, the other says no difference, or the other way)
    without a mark in their verdict cell that the note explains."""
    out = []
    for c in comparisons:
        for d, verdict, tokens in ((c.sr, c.verdict, False), (c.tokens, c.tokens_verdict, True)):
            excludes = d.ci_low > 0 or d.ci_high < 0
            if excludes == (verdict != "no detectable difference"):
                continue
            row = next(line for line in text.splitlines() if line.startswith(f"| {c.method} | {c.sr.n} |"))
            cell = row.split(" | ")[-1] if tokens else row.split(" | ")[7]
            mark = next((m for m in "†‡" if m in cell), None)
            note = next((line for line in text.splitlines() if mark and line.startswith(f"{mark} ")), None)
            if note is None or ("Holm" if mark == "‡" else "disagree") not in note:
                out.append(f"{c.method} {'tokens' if tokens else 'SR'}: {row}")
    return out


def test_no_row_contradicts_itself_silently(tmp_path) -> None:
    from tokenworth_agent.results.compare import compare_runs, markdown

    cases = []
    # one seed, 38 won and 22 lost of 500: the adjusted Wald interval excludes 0, McNemar's p is 0.052
    method, base = _pairs(38, 22)
    cases.append(write_run(tmp_path / "edge", {"standard": base, "rag": method}))
    # three seeds: the cluster t test's p is 0.049, the interval (with its pseudo-pairs) just covers 0
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "config.json").write_text(json.dumps(config(seed=[0, 1, 2])))
    rng = np.random.default_rng(25)
    easy = rng.random(150) < 0.5
    standard = [(easy & (rng.random(150) < 0.8)).astype(int) for _ in range(3)]
    rag = [((easy & (rng.random(150) < 0.86)) | (rng.random(150) < 0.03)).astype(int) for _ in range(3)]
    for seed in range(3):
        write_stream(seeds, f"seed{seed}/standard", standard[seed], seed=seed)
        write_stream(seeds, f"seed{seed}/rag", rag[seed], seed=seed)
    cases.append(seeds)
    # Holm: two methods each significant alone (p 0.030 and 0.033), neither after the adjustment
    (memp, base), (memrl, _) = _pairs(40, 22), _pairs(37, 20)
    cases.append(write_run(tmp_path / "holm", {"standard": base, "memp": memp, "memrl": memrl}))
    seen = set()
    for run in cases:
        rows = compare_runs([run])
        text = markdown(rows)
        assert _silent(rows, text) == [], text
        seen |= {c.to_json()["disagreement"] for c in rows}
    assert seen >= {"interval-vs-test", "holm"}  # every kind of contradiction was met, and marked
    edge = compare_runs([cases[0]])[0]
    assert edge.sr.p_value == pytest.approx(0.0519, abs=1e-4) and edge.sr.ci_low > 0 and edge.marks() == "†"


def test_the_mde_is_at_the_level_of_holms_first_step_and_the_table_says_it(tmp_path) -> None:
    from tokenworth_agent.results import power
    from tokenworth_agent.results.compare import compare_runs, markdown

    base = _rewards(0, 500, 0.43)
    arms = {}
    for k, name in enumerate(("rag", "memrl", "memp", "tokenworth")):  # 60 of 500 pairs discordant, as in make run
        arm = list(base)
        for i in range(k * 60, k * 60 + 60):
            arm[i] = 1 - arm[i]
        arms[name] = arm
    rows = compare_runs([write_run(tmp_path / "run", {"standard": base, **arms})])
    assert {round(100 * c.parts.total, 1) for c in rows} == {12.0}
    assert all(c.mde_alpha == 0.0125 and c.family == 4 for c in rows)
    assert round(100 * rows[0].mde, 1) == 5.2 and round(100 * power.mde(rows[0].parts), 1) == 4.3
    assert "MDE at α = 0.05/4 = 0.0125 (Holm's first step over 4 comparisons)" in markdown(rows)


def test_the_gain_over_the_stream_is_labelled_exploratory(one_seed) -> None:
    from tokenworth_agent.results.compare import compare_runs, markdown

    rows = compare_runs([one_seed])
    text = markdown(rows)
    assert "### Gain over the stream (exploratory:" in text and "mixes what it learns with the order's" in text
    assert rows[0].to_json()["gain_status"] == "exploratory"


def test_the_serial_check_reaches_as_far_as_the_bank_and_reports_its_lags(one_seed) -> None:
    from tokenworth_agent.results.compare import compare_runs, markdown, serial_lags, serial_threshold

    assert serial_lags(500, 64) == 64 and serial_lags(200, 64) == 50  # B_max, at most a quarter of the stream
    assert serial_lags(500, None) == serial_lags(500, 1) == 5  # unknown or tiny bank: Newey-West's rule
    # a note only above the ratio's own noise, sqrt(L / 3T) twice: 1.41 at 64 lags of 500 places
    assert serial_threshold(64, 500) == pytest.approx(1 + 2 * np.sqrt(64 / 1500)) and serial_threshold(5, 500) == 1.15
    text = markdown(compare_runs([one_seed]))
    assert "Driscoll-Kraay standard error at 50 lags" in text and "cannot see dependence beyond" in text


def test_a_two_seed_plan_runs_to_the_upper_bound_of_the_between_task_variance() -> None:
    from tokenworth_agent.results import power

    # two seeds whose pairs differ independently of the task: here between's estimate is negative (-0.0033),
    # floored at 0, which alone would plan as if ten seeds were ten times the tasks
    d = np.random.default_rng(1).choice([-1, 0, 1], p=[0.06, 0.88, 0.06], size=(2, 300))
    parts = power.components(d.ravel(), np.tile(np.arange(300), 2))
    assert parts.between == 0.0 and parts.between_high > 0.005
    made = power.plan(0.02, parts)
    assert made.known and all(best < worst for _, best, worst in made.rows[1:])
    ten = dict((s, (best, worst)) for s, best, worst in made.rows)[10]
    # the optimistic end: ten seeds count as ten times the tasks; the other from between's upper bound
    assert ten[0] == pytest.approx(made.rows[0][1] / 10, rel=0.05)
    high = parts.between_high + parts.within / 10
    expected = ((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) / 0.02) ** 2 * high
    assert ten[1] == pytest.approx(expected, rel=0.02)


# ------------------------------------------------------------------------- task orders
ORDER_SHIFTS = {"rag": [(18, 6), (6, 18), (18, 6), (7, 17)],  # (tasks gained, lost) per order: +6, -6, +6, -5 pp
                "memp": [(18, 2), (16, 2), (20, 2), (17, 1)]}  # +8, +7, +9, +8 pp: every order agrees


def _order_streams(k: int, tasks: int = 200) -> tuple[list[str], dict[str, list[int]]]:
    """Order ``k`` of a synthetic run: the task ids in that order and each method's rewards."""
    rng = np.random.default_rng(100 + k)
    ids = [f"db-{i}" for i in (rng.permutation(tasks) if k else range(tasks))]
    standard = (rng.random(tasks) < 0.4).astype(int)
    out = {"standard": standard.tolist()}
    for method, shifts in ORDER_SHIFTS.items():
        up, down = shifts[k]
        own = standard.copy()
        own[np.flatnonzero(standard == 0)[:up]] = 1
        own[np.flatnonzero(standard == 1)[:down]] = 0
        out[method] = own.tolist()
    return ids, out


@pytest.fixture(scope="module")
def orders_run(tmp_path_factory):
    """Four task orders of 200 tasks: rag's difference flips sign between orders, memp's holds."""
    run = tmp_path_factory.mktemp("orders") / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config(orders=[0, 1, 2, 3])))
    for k in range(4):
        ids, rewards = _order_streams(k)
        for method, values in rewards.items():
            write_stream(run, f"order{k}/{method}", values, task_ids=ids, order=k)
    return run


def test_several_orders_give_each_orders_difference_the_spread_and_a_verdict_over_orders(orders_run) -> None:
    import statsmodels.api as sm

    from tokenworth_agent.results.compare import compare_runs

    rag, memp = compare_runs([orders_run])
    assert [k for k, _ in rag.per_order] == [0, 1, 2, 3] and rag.matched.orders == [0, 1, 2, 3]
    assert [round(100 * d, 6) for _, d in rag.per_order] == [6, -6, 6, -5] and rag.favour == 2
    assert [round(100 * d, 6) for _, d in memp.per_order] == [8, 7, 9, 8] and memp.favour == 4
    # pooled over orders, clustered by task (the same ids in every order): statsmodels on the same pairs
    d = rag.matched.method - rag.matched.baseline
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="cluster", cov_kwds={"groups": rag.matched.task}, use_t=True)
    assert rag.sr.n == 800 and rag.sr.n_clusters == 200 and rag.sr.se == pytest.approx(fit.bse[0], rel=1e-12)
    # over orders: the mean of the per-order differences, t with 3 df from their observed spread, the
    # between-order component by the method of moments
    per = np.array([d for _, d in rag.per_order])
    within = np.mean([(rag.matched.of_order(k).method - rag.matched.of_order(k).baseline).std(ddof=1) ** 2 / 200
                      for k in range(4)])
    assert rag.orders.mean == pytest.approx(per.mean())
    assert rag.orders.se == pytest.approx(np.sqrt(per.var(ddof=1) / 4))
    assert rag.orders.between == pytest.approx(max(0.0, per.var(ddof=1) - within))
    assert rag.orders.ci_high - rag.orders.mean == pytest.approx(stats.t.ppf(0.975, 3) * rag.orders.se)
    assert rag.orders_verdict == "not shown over orders" and memp.orders_verdict == "better over orders"
    from statsmodels.stats.multitest import multipletests

    holm = multipletests([rag.orders.p_value, memp.orders.p_value], method="holm")[1]
    assert [rag.orders_p_adjusted, memp.orders_p_adjusted] == pytest.approx(list(holm))


def test_compare_of_several_orders_labels_its_claims_and_json_has_each_order(orders_run, one_seed) -> None:
    result = runner.invoke(_app(), ["compare", str(orders_run)])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "· orders 0,1,2,3 (about these orders)" in text
    assert "### Over task orders (about orders of this benchmark" in text
    assert "| rag | +6.0 | −6.0 | +6.0 | −5.0 | 2/4 |" in text and "not shown over orders" in text
    assert "| memp | +8.0 | +7.0 | +9.0 | +8.0 | 4/4 |" in text and "better over orders" in text
    rows = json.loads(runner.invoke(_app(), ["compare", str(orders_run), "--json"]).output)
    assert rows[0]["n_orders"] == 4 and [r["order"] for r in rows[0]["per_order"]] == [0, 1, 2, 3]
    assert [round(r["difference"], 6) for r in rows[1]["per_order"]] == [8, 7, 9, 8]
    assert rows[1]["over_orders"]["claim"] == "orders of this benchmark" and rows[1]["over_orders"]["favour"] == 4
    # one order: the tables as before, the JSON with the two new keys only
    one = runner.invoke(_app(), ["compare", str(one_seed)]).output
    assert "orders" not in one and "about these" not in one
    [first, _] = json.loads(runner.invoke(_app(), ["compare", str(one_seed), "--json"]).output)
    assert first["n_orders"] == 1 and first["per_order"] == [{"order": 0, "difference": first["difference"]}]
    assert "over_orders" not in first


def test_the_plan_counts_the_orders_a_conclusion_about_orders_needs(orders_run, one_seed) -> None:
    from statsmodels.stats.power import TTestPower

    from tokenworth_agent.results import power
    from tokenworth_agent.results.compare import ONE_ORDER, compare_runs, plan_json, plan_markdown

    # the t test over orders: the first order count with 80 % power, as statsmodels computes power
    needed = power.orders_needed(3.0, 2.0 ** 2, 1.5 ** 2, alpha=0.05)
    effect = 3.0 / np.hypot(2.0, 1.5)
    assert TTestPower().power(effect, needed, 0.05) >= 0.8 > TTestPower().power(effect, needed - 1, 0.05)
    assert power.orders_needed(3.0, 4.0, 0.0, alpha=0.05) < needed  # more tasks shrink only the within part
    rag, memp = compare_runs([orders_run])
    made = plan_json(memp, 3.0)["orders_needed"]
    first = memp.matched.of_order(0)
    within = float(np.mean((first.method - first.baseline) ** 2)) / 200  # one seed: the discordance per task
    assert made["1"][0] == power.orders_needed(0.03, float(memp.orders.between), within, alpha=0.025)
    assert made["unlimited"][0] <= made["10"][0] <= made["1"][0]
    text = plan_markdown([rag, memp], 3.0)
    assert "### Orders needed for a conclusion about orders (3 pp" in text and "200 tasks × 1 seed × 4 orders" in text
    single = compare_runs([one_seed])
    assert plan_json(single[0], 3.0)["orders_needed"] is None and ONE_ORDER in plan_markdown(single, 3.0)
