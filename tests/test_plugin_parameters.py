"""A method's hyperparameters and a benchmark's options as grid axes (docs/plugins.md, "Parameters").

A stand-in method ``recency`` (distribution hp-recency, one parameter ``k``) and benchmark ``dbx`` (DB's tasks,
one option ``dbx_level``) are installed as distributions in a folder on the path (tests/plugin_fixtures.py):
``--grid recency.k=1,3`` and ``--grid dbx_level=...`` make the streams they act on, their values reach the
method's constructor and the environment, and enter the folder names, the records' ``stream``, ``config.json`` and
the trackers' parameters; every misuse is one line naming the method and what it declares.
"""

from __future__ import annotations

import json

import pytest

from tokenworth_agent.core import plugins
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.experiment.streams import GridError, expand, grid_points, stream_names
from tokenworth_agent.results.record import read_records
from tests.plugin_fixtures import errors, install_dbx, install_recency, tokenworth
from tests.test_plugins import fake_distribution


@pytest.fixture
def site(tmp_path, monkeypatch):
    """hp-recency 0.3.1 and dbx-plugin installed in a folder on sys.path; discovery forgotten before and after."""
    folder = tmp_path / "site"
    folder.mkdir()
    install_recency(folder)
    install_dbx(folder)
    monkeypatch.syspath_prepend(str(folder))
    plugins.refresh()
    from tokenworth_agent.policies import registry

    monkeypatch.setattr(registry, "POLICIES", registry.Registry.from_plugins("method"))
    yield folder
    monkeypatch.undo()
    plugins.refresh()


def _expand(methods, grid, envs=("db",)):
    return expand(list(envs), list(methods), [0], {e: Budget.for_env(e) for e in envs}, grid_points(grid))


def test_a_method_parameter_multiplies_only_its_method_and_reaches_its_constructor(site) -> None:
    streams = _expand(["recency", "rag"], ["recency.k=1,3"])
    assert stream_names(streams) == ["recency@recency.k=1", "rag", "recency@recency.k=3"]
    assert [s.hparams for s in streams] == [(("k", 1),), (), (("k", 3),)]
    assert streams[0].describe()["hparams"] == {"k": 1}
    from tokenworth_agent.policies.registry import make_policy

    policy = make_policy("recency", "db", streams[2].budget, 0, **streams[2].overrides)
    assert policy.k == 3
    # with a budget axis the other method runs once per budget level, recency once per (k, level)
    both = _expand(["recency", "rag"], ["recency.k=1,3", "o_max=64,128"])
    assert sorted(stream_names(both)) == sorted([
        "recency@recency.k=1,o_max=64", "recency@recency.k=1,o_max=128", "recency@recency.k=3,o_max=64",
        "recency@recency.k=3,o_max=128", "rag@o_max=64", "rag@o_max=128"])


@pytest.mark.parametrize("grid, methods, words", [
    (["recency.k=0"], ["recency"], ["recency.k", "must be >= 1", "recency declares: k (int, default 2)"]),
    (["recency.k=two"], ["recency"], ["takes an int", "recency declares: k (int, default 2)"]),
    (["recency.x=1"], ["recency"], ["recency has no parameter 'x'", "recency declares: k (int, default 2)"]),
    (["k=1,3"], ["recency"], ["unknown field 'k'", "did you mean recency.k?"]),
    (["rag.k=1"], ["rag"], ["rag has no parameter 'k'", "rag declares no parameters"]),
    (["nosuch.k=1"], ["rag"], ["unknown method 'nosuch'"]),
    (["recency.k=1"], ["rag"], ["recency is not among the run's methods"]),
    (["memrl.epsilon=1.5"], ["memrl"], ["must be in [0.0, 1.0]", "memrl declares: sim_threshold"]),
    (["dbx_level=0.1"], ["rag"], ["option of the dbx benchmark", "--env is db"]),
    (["dbx_note=a,b"], ["rag"], ["--dbx-note of the dbx benchmark", "cannot be swept"]),
    (["eta=0.1", "tokenworth.eta_max=0.2"], ["tokenworth"], ["sets eta_max twice", "eta_max and tokenworth.eta_max"]),
])
def test_bad_values_and_unknown_names_are_one_line_naming_what_is_declared(site, grid, methods, words) -> None:
    with pytest.raises(GridError) as refused:
        _expand(methods, grid)
    line = str(refused.value)
    assert "\n" not in line and all(w in line for w in words), line


def test_a_declaration_that_cannot_work_is_refused_in_one_line_naming_the_distribution(site) -> None:
    (site / "bad_params.py").write_text(
        "from tokenworth_agent.core.parameters import Parameter\n"
        "from tokenworth_agent.policies.rag import RAGPolicy\n\n"
        "class Unknown(RAGPolicy):\n    name = 'unknown'\n    parameters = (Parameter('k', int, 2, 'k'),)\n\n"
        "class Other(RAGPolicy):\n    name = 'other'\n    parameters = (Parameter('k', int, 2, 'k'),)\n"
        "    def __init__(self, env, budget, seed=0, *, k=5, **kw):\n        super().__init__(env, budget, seed, **kw)\n")
    fake_distribution(site, "bad-params", {"tokenworth.methods": {"unknown": "bad_params:Unknown",
                                                                  "other": "bad_params:Other"}}, version="0.9")
    plugins.refresh()
    from tokenworth_agent.policies import registry

    registry.POLICIES = registry.Registry.from_plugins("method")
    with pytest.raises(ValueError, match=r"^method 'unknown' \(bad-params 0.9\) declares the parameter 'k', which "
                                         r"its constructor Unknown.__init__ does not take"):
        registry.method_parameters("unknown")
    with pytest.raises(ValueError, match=r"^method 'other' \(bad-params 0.9\) declares k with default 2, its "
                                         r"constructor with 5"):
        registry.method_parameters("other")


def test_the_builtins_declare_their_constructor_keywords() -> None:
    from tokenworth_agent.policies.registry import POLICIES, method_parameters

    declared = {m: {p.name: p.default for p in method_parameters(m)} for m in POLICIES.names}
    assert declared["memrl"] == {"sim_threshold": 0.30, "recall_k": 12, "epsilon": 0.1, "alpha": 0.3, "q_init": 0.0}
    assert declared["memp"] == {"min_hits": 3, "min_success_rate": 0.5}
    assert set(declared["mem0"]) == {"max_facts", "similar_k"} and set(declared["evoskill"]) == {"shown_k", "min_uses"}
    assert "eta_max" in declared["tokenworth"] and "plus_margin" not in declared["tokenworth"]
    assert "plus_margin" in declared["tokenworth+"]
    assert declared["standard"] == declared["rag"] == {}


def test_a_benchmark_option_multiplies_only_its_benchmarks_streams(site) -> None:
    streams = _expand(["rag"], ["dbx_level=0.1,0.9"], envs=("dbx", "db"))
    assert stream_names(streams) == ["dbx/rag@dbx_level=0.1", "dbx/rag@dbx_level=0.9", "db/rag"]
    assert [s.options for s in streams] == [(("dbx_level", 0.1),), (("dbx_level", 0.9),), ()]
    assert streams[0].describe()["options"] == {"dbx_level": 0.1} and "options" not in streams[2].describe()


def test_the_grid_runs_records_and_tracks_parameters_and_plugins_prints_them(site, tmp_path, data_dir) -> None:
    """The CLI end to end: `--grid recency.k=1,3 --grid dbx_level=0.2,0.8` with TensorBoard tracking, then
    `tokenworth plugins recency` / `dbx`; on main `--grid recency.k` is "unknown field" and plugins takes no NAME."""
    pytest.importorskip("tensorboard")
    done = tokenworth(site, "run", "--env", "dbx", "--methods", "recency,standard", "--grid", "recency.k=1,3",
                      "--grid", "dbx_level=0.2,0.8", "--limit", "6", "--out", "run", "--track", "tensorboard",
                      "--no-progress", cwd=tmp_path, data_dir=data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "run"
    names = sorted(str(p.parent.relative_to(run)) for p in run.rglob("records.jsonl"))
    assert names == sorted(f"{m}@{p}" for m, p in [
        ("recency", "recency.k=1,dbx_level=0.2"), ("recency", "recency.k=1,dbx_level=0.8"),
        ("recency", "recency.k=3,dbx_level=0.2"), ("recency", "recency.k=3,dbx_level=0.8"),
        ("standard", "dbx_level=0.2"), ("standard", "dbx_level=0.8")])
    records = read_records(run / "recency@recency.k=3,dbx_level=0.8" / "records.jsonl")
    assert {r.decision["k"] for r in records} == {3}  # the constructor got k
    assert records[0].stream["hparams"] == {"k": 3} and records[0].stream["options"] == {"dbx_level": 0.8}
    levels = {name: read_records(run / name / "records.jsonl")[0].instructions_sha256 for name in names}
    assert levels["standard@dbx_level=0.2"] != levels["standard@dbx_level=0.8"]  # the environment got the level
    config = json.loads((run / "config.json").read_text())
    assert config["grid"] == ["recency.k=1,3", "dbx_level=0.2,0.8"]
    assert config["releases"]["recency@recency.k=1,dbx_level=0.2"]["method"] == "hp-recency 0.3.1"
    hparams = _tensorboard_hparams(run / "recency@recency.k=1,dbx_level=0.8")
    assert hparams["hparams.k"] == 1.0 and hparams["harness.dbx_level"] == 0.8
    assert hparams["release.method"] == "hp-recency 0.3.1" and hparams["release.benchmark"] == "dbx-plugin 1.0"
    assert _tensorboard_hparams(run / "standard@dbx_level=0.2")["release.method"].startswith("tokenworth-agent ")

    # what MLflow logs of a stream, as `tokenworth track send` computes it from the folder (config.json, records)
    from tokenworth_agent.tracking.metrics import stream_meta

    name = "recency@recency.k=3,dbx_level=0.2"
    stream = read_records(run / name / "records.jsonl")[0].stream
    params = stream_meta(name, stream, {"backbone": "sim"}, run, config)["params"]
    assert (params["hparams.k"], params["harness.dbx_level"], params["grid_point"]) == ("3", "0.2", "dbx_level=0.2,k=3")
    assert (params["release.method"], params["release.benchmark"]) == ("hp-recency 0.3.1", "dbx-plugin 1.0")

    listed = tokenworth(site, "plugins", "recency", cwd=tmp_path, data_dir=data_dir)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].startswith("recency: method of hp-recency 0.3.1")
    assert ["k", "int", "2", "memories", "retrieved,"] == listed.stdout.splitlines()[2].split()[:5]
    bench = tokenworth(site, "plugins", "dbx", cwd=tmp_path, data_dir=data_dir).stdout.splitlines()
    assert bench[2].split()[:3] == ["dbx_level", "float", "0.5"] and bench[3].split()[:3] == ["dbx_note", "str", "-"]
    assert "--grid NAME=v1,v2 sweeps dbx_level" in bench[0]

    refused = tokenworth(site, "run", "--methods", "recency", "--grid", "recency.k=0", "--out", "bad",
                         cwd=tmp_path, data_dir=data_dir)
    assert refused.returncode == 2 and len(errors(refused)) == 1 and "recency declares: k" in errors(refused)[0]
    assert not (tmp_path / "bad").exists()


def test_sweep_takes_a_method_and_its_parameters(site, tmp_path, data_dir) -> None:
    done = tokenworth(site, "sweep", "--method", "recency", "--grid", "recency.k=1,2", "--limit", "4", "--out",
                      "sweep", "--no-progress", cwd=tmp_path, data_dir=data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "## recency sweep" in done.stdout and "| recency.k=1 |" in done.stdout
    assert sorted(p.name for p in (tmp_path / "sweep").glob("recency@*")) == ["recency@recency.k=1",
                                                                              "recency@recency.k=2"]
    assert json.loads((tmp_path / "sweep" / "config.json").read_text())["method"] == "recency"


def _tensorboard_hparams(folder) -> dict:
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    found = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for raw in RawEventFileLoader(str(path)).Load():
            for value in Event.FromString(raw).summary.value:
                if value.tag == metadata.SESSION_START_INFO_TAG:
                    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                    for key, v in data.session_start_info.hparams.items():
                        found[key] = getattr(v, v.WhichOneof("kind"))
    return found


def test_the_values_in_use_enter_the_identity_without_a_grid_and_only_for_methods_that_declare_some(site) -> None:
    """recency's k is in its stream's identity at its default (it was there only when --grid set it); a stream of
    a method that declares no parameters, or only preset-defaulted ones (TokenWorth's), keeps the identity it had,
    so earlier folders resume and compare as before."""
    from tokenworth_agent.core.harness import DEFAULT_HARNESS
    from tokenworth_agent.experiment.engine import stream_identity
    from tokenworth_agent.experiment.streams import parameters_in_use
    from tokenworth_agent.storage.runfolder import merged_config

    tasks = ()
    plain, gridded = _expand(["recency"], []), _expand(["recency"], ["recency.k=3"])
    assert stream_identity(plain[0], tasks, "sim", DEFAULT_HARNESS)["parameters"] == {"k": 2}
    assert stream_identity(gridded[0], tasks, "sim", DEFAULT_HARNESS)["parameters"] == {"k": 3}
    assert parameters_in_use(_expand(["memrl"], [])[0])["epsilon"] == 0.1  # a built-in that declares some
    for stream in _expand(["standard", "rag", "tokenworth"], []):
        identity = stream_identity(stream, tasks, "sim", DEFAULT_HARNESS)
        assert set(identity) == {"method", "env", "seed", "budget", "backbone", "task_ids", "harness", "releases"}
        assert set(identity["releases"]) == {"method", "benchmark", "backbone"} and not parameters_in_use(stream)
    assert parameters_in_use(_expand(["tokenworth"], ["eta_max=0.2"])[0]) == {"eta_max": 0.2}
    # config.json's per-stream entries: another command's kept, none written where no stream has one
    existing = {"releases": {"recency": {}}, "parameters": {"recency": {"k": 2}}}
    assert merged_config(existing, {"releases": {"rag": {}}}, ["rag"])["parameters"] == {"recency": {"k": 2}}
    assert "parameters" not in merged_config({"releases": {}}, {"releases": {"rag": {}}}, ["rag"])
    assert "parameters" not in merged_config(existing, {"releases": {}}, ["recency"])


def test_the_docs_grid_example_changes_what_the_method_injects(site) -> None:
    """docs/plugins.md's `--grid recency.k=...` example: every k it sets fits the streams' K_max (on DB, K_max is
    1: `recency.k=1,3` alone made two streams that injected the same one memory), and the streams are the ones the
    docs name; Parameter's own docstring says what a parameter is."""
    import re
    from pathlib import Path

    from tokenworth_agent.plugin import Parameter

    docs = " ".join((Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text().split())
    command = re.search(r"`tokenworth run --methods (\S+) ((?:--grid \S+ ?)+)` makes (.*?) \(", docs)
    methods, grid = command.group(1).split(","), re.findall(r"--grid (\S+)", command.group(2))
    streams = _expand(methods, grid)
    assert sorted(re.findall(r"`([\w@.=,]+)`", command.group(3))) == sorted(stream_names(streams))
    ks = [dict(s.hparams)["k"] for s in streams if s.method == "recency"]
    assert len(set(ks)) > 1 and all(k <= s.budget.max_memories for s in streams for k in ks), (ks, grid)
    assert "see the module docstring" not in Parameter.__doc__ and "--grid" in Parameter.__doc__
