"""Task orders as an axis of every experiment (``--orders``): the permutation (pure, pinned for every built-in
benchmark, phases kept), a run without orders exactly as before, ordered runs' folders, records, config and
trackers, resume, a plan shipped to another node, and bad orders refused in one line with nothing written."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenworth_agent.cli import app
from tokenworth_agent.core.plugins import benchmark
from tokenworth_agent.experiment import DataConfig, OutputConfig, RunConfig, Streams, comparable, launch
from tokenworth_agent.experiment.config import ConfigError
from tokenworth_agent.experiment.engine import run_experiment
from tokenworth_agent.experiment.executor import run_shard
from tokenworth_agent.experiment.orders import (OrderError, data_digest, ordered, parse_orders, permutation,
                                                sort_key)
from tokenworth_agent.experiment.plan import make_plan
from tokenworth_agent.experiment.streams import GridError, expand, stream_names
from tokenworth_agent.results.record import read_records
from tokenworth_agent.tasks import load_tasks

runner = CliRunner()


def errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def ids_digest(ids) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------- the permutation
def test_orders_parse_as_a_count_or_a_list() -> None:
    assert parse_orders("3") == (0, 1, 2) and parse_orders("1") == (0,)
    assert parse_orders("0,2") == (0, 2) and parse_orders("3,") == (3,) and parse_orders(" 1 , 0 ") == (1, 0)


@pytest.mark.parametrize("text, match", [("-1,0", "negative"), ("0,1,0", "twice"), ("1.5", "integers"),
                                         ("a,b", "integers"), ("0", "at least 1"), ("", "at least one")])
def test_bad_orders_are_refused_by_the_parser(text, match) -> None:
    with pytest.raises(OrderError, match=match):
        parse_orders(text)


def test_the_sort_key_is_sha256_of_the_four_parts() -> None:
    """The documented rule, by value: no library's random stream enters it."""
    assert sort_key("db", "f6417e2301ea0fef", 1, "db-0") == hashlib.sha256(b"db\0f6417e2301ea0fef\0" b"1\0db-0").hexdigest()
    assert sort_key("db", "d", 1, "db-0")[:16] == "588eeb3228d36b73"


def test_order_zero_is_the_benchmarks_and_phases_stay_in_place() -> None:
    ids = [f"t{i}" for i in range(12)]
    labels = ["a"] * 5 + ["b"] * 4 + ["a"] * 3  # a later run of an earlier label is its own phase
    assert permutation("x", "d", 0, ids, labels) == list(range(12))
    for k in (1, 2, 3):
        made = permutation("x", "d", k, ids, labels)
        assert sorted(made[:5]) == list(range(5)) and sorted(made[5:9]) == list(range(5, 9))
        assert sorted(made[9:]) == list(range(9, 12))
        assert made != list(range(12))
    assert permutation("x", "d", 1, ids) != permutation("x", "d", 2, ids)  # no phases: the whole stream moves
    assert permutation("x", "d", 1, ids) != permutation("y", "d", 1, ids) != permutation("x", "e", 1, ids)


def test_a_shortened_stream_keeps_the_full_orders_relative_order() -> None:
    ids = [f"t{i}" for i in range(40)]
    full = [ids[i] for i in permutation("x", "d", 2, ids)]
    short = [ids[:10][i] for i in permutation("x", "d", 2, ids[:10])]
    assert short == [t for t in full if t in set(ids[:10])]


# Orders 1-3 of every built-in benchmark's whole stream (the shared data): the digest of its task ids in order. A
# change here changes which tasks every published ordered run saw; it must never happen by accident.
PINNED = {
    "db": ("f6417e2301ea0fef", ["091b8027a7bb9a9d", "72c848f4f9b1e8fd", "4520011b8e3f4274"]),
    "os": ("80d8d8dd903b0aca", ["910d89212532b2d8", "f0ebe2c7496939e1", "89e0e52eb6c2ede4"]),
    "kg": ("0b1f937bd56743f6", ["09c13ae606f5004e", "7b942e77a51ea661", "e95377fac7fbeb61"]),
    "bigcodebench": ("84733ac7a9a530fa", ["e67f8fc8d5644647", "1086265b5fde32cb", "44449f802ebb0d19"]),
    "alfworld": ("420da55f1626cab4", ["661908b6bb810ea3", "df7678f0b8e59114", "42e512248be991fa"]),
}
PHASES = {"bigcodebench": lambda t: t.hard, "alfworld": lambda t: t.split}


@pytest.mark.parametrize("env", list(PINNED))
def test_orders_one_to_three_of_every_built_in_benchmark_are_pinned(env, data_dir) -> None:
    tasks = load_tasks(env, data_dir)
    digest = data_digest([t.task_id for t in tasks])
    made = [ordered(env, tasks, digest, k) for k in (1, 2, 3)]
    assert (digest, [ids_digest([t.task_id for t in m]) for m in made]) == PINNED[env]
    for tasks_k in made:  # the same tasks; a benchmark's phases (BigCodeBench: Full then Hard) in place
        assert sorted(t.task_id for t in tasks_k) == sorted(t.task_id for t in tasks)
        if env in PHASES:
            assert [PHASES[env](t) for t in tasks_k] == [PHASES[env](t) for t in tasks]


def test_a_benchmarks_phase_must_take_a_task() -> None:
    from tokenworth_agent.benchmarks.base import BenchmarkError

    with pytest.raises(BenchmarkError, match=r"phase is called as phase\(task\)"):
        dataclasses.replace(benchmark("db"), phase=lambda: "all")


# ------------------------------------------------------------------------- streams
def test_without_orders_streams_have_no_order_and_with_them_an_order_level(tmp_path) -> None:
    from tokenworth_agent.core.budget import Budget

    budgets = {"db": Budget.for_env("db")}
    plain = expand(["db"], ["standard"], [0, 1], budgets)
    assert [s.order for s in plain] == [None, None] and stream_names(plain) == ["seed0/standard", "seed1/standard"]
    assert "order" not in plain[0].describe()
    ordered_streams = expand(["db"], ["standard", "rag"], [0, 1], budgets, orders=(0, 2))
    assert stream_names(ordered_streams)[:4] == ["seed0/order0/standard", "seed0/order0/rag", "seed0/order2/standard",
                                                 "seed0/order2/rag"]
    assert [s.describe()["order"] for s in ordered_streams[:4]] == [0, 0, 2, 2]
    assert stream_names(expand(["db"], ["rag"], [0], budgets, orders=(3,))) == ["order3/rag"]
    for bad in ((0, 0), (-1,), (1.0,)):
        with pytest.raises(GridError, match="--orders"):
            expand(["db"], ["rag"], [0], budgets, orders=bad)
    for bad in ((0, 0), (-1,), (True,)):
        with pytest.raises(ConfigError, match="--orders"):
            Streams(orders=bad)


def test_the_tracker_has_an_order_parameter_only_in_an_ordered_run() -> None:
    from tokenworth_agent.core.budget import Budget
    from tokenworth_agent.tracking.metrics import stream_meta

    budgets = {"db": Budget.for_env("db")}
    [plain] = expand(["db"], ["rag"], [0], budgets)
    [_, second] = expand(["db"], ["rag"], [0], budgets, orders=(0, 1))
    assert "order" not in stream_meta("rag", plain.describe(), {}, Path("."))["params"]
    assert stream_meta("order1/rag", second.describe(), {}, Path("."))["params"]["order"] == "1"


# ------------------------------------------------------------------------- runs
# A run without --orders, made by the code before orders existed (db, sim, --limit 3, standard and rag): the digest
# of each stream's records without time_s. Orders must leave such a run exactly as it was.
BEFORE_ORDERS = {"standard": "831f5090ade99a25", "rag": "29fb6c042902ee5b"}


def records_digest(path: Path) -> str:
    rows = [{k: v for k, v in json.loads(line).items() if k != "time_s"} for line in path.open()]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("orders", [[], ["--orders", "0,"], ["--orders", "1"]])
def test_a_run_without_orders_is_exactly_todays(orders, tmp_path, data_dir) -> None:
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--env", "db", "--methods", "standard,rag", "--limit", "3", "--no-progress",
                                 "--data-dir", data_dir, "--out", str(out), *orders])
    assert result.exit_code == 0, result.output
    assert {m: records_digest(out / m / "records.jsonl") for m in BEFORE_ORDERS} == BEFORE_ORDERS
    config = json.loads((out / "config.json").read_text())
    assert "orders" not in config and "grid" not in config
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["rag", "standard"]


def ordered_config(out: Path, data_dir: str, **streams) -> RunConfig:
    return RunConfig(Streams(methods=("standard", "rag"), orders=(0, 1), **streams),
                     data=DataConfig(data_dir=Path(data_dir), limit=5), output=OutputConfig(out=out, progress=False))


@pytest.fixture(scope="module")
def ordered_run(tmp_path_factory, data_dir):
    out = tmp_path_factory.mktemp("orders") / "run"
    return launch(ordered_config(out, data_dir))


def test_an_ordered_run_has_its_folders_records_and_config(ordered_run, data_dir) -> None:
    out = ordered_run.plan.out_dir
    assert list(ordered_run.plan.names) == ["order0/standard", "order0/rag", "order1/standard", "order1/rag"]
    config = json.loads((out / "config.json").read_text())
    assert config["orders"] == [0, 1] and config["grid"] == []
    tasks = load_tasks("db", data_dir)
    digest = data_digest([t.task_id for t in tasks])
    want = {0: [t.task_id for t in tasks[:5]], 1: [t.task_id for t in ordered("db", tasks[:5], digest, 1)]}
    assert want[0] != want[1] and sorted(want[0]) == sorted(want[1])
    for name in ordered_run.plan.names:
        records = read_records(out / name / "records.jsonl")
        order = int(name.split("/")[0][len("order"):])
        assert [r.task_id for r in records] == want[order] and [r.index for r in records] == list(range(5))
        assert {r.stream["order"] for r in records} == {order}
    # order 0 of an ordered run makes the records of the plain run, the stream's description aside
    plain = runner.invoke(app, ["run", "--env", "db", "--methods", "rag", "--limit", "5", "--no-progress",
                                "--data-dir", data_dir, "--out", str(out.parent / "plain")])
    assert plain.exit_code == 0, plain.output

    def without_order(records):
        return [{**r, "stream": {k: v for k, v in r["stream"].items() if k != "order"}} for r in comparable(records)]

    assert without_order(read_records(out / "order0/rag/records.jsonl")) == \
        without_order(read_records(out.parent / "plain/rag/records.jsonl"))


def test_an_interrupted_ordered_run_resumes_each_orders_stream(ordered_run, tmp_path, data_dir) -> None:
    from contextlib import ExitStack

    from tokenworth_agent.experiment.launch import prepare

    plan = make_plan(ordered_config(tmp_path / "run", data_dir))
    with ExitStack() as held:
        prepare(plan, held)
        held.close()
        run_experiment(plan.streams, plan.backbone, plan.out_dir, tasks=plan.tasks, names=plan.names,
                       stop_after=2, data_digests=plan.data_digests)
    assert all(len(read_records(plan.out_dir / n / "records.jsonl")) == 2 for n in plan.names)
    launch(ordered_config(tmp_path / "run", data_dir))
    for name in plan.names:
        assert comparable(read_records(plan.out_dir / name / "records.jsonl")) == \
            comparable(read_records(ordered_run.plan.out_dir / name / "records.jsonl")), name


class ShippedPlanExecutor:
    """What the Ray and Slurm executors do, in one process: the plan pickled as it travels to a node (no backbone),
    and there the Slurm worker's loop (run_worker, streams claimed by their locks) or one shard (Ray's run)."""

    name = "shipped"
    in_process = False

    def __init__(self, worker: bool) -> None:
        self.worker = worker

    def check(self, plan) -> None:
        pass

    def run(self, plan, *, hooks, on_resume):
        from tokenworth_agent.experiment.distributed.slurm import ClaimLease
        from tokenworth_agent.experiment.distributed.worker import run_worker
        from tokenworth_agent.experiment.executor import shards

        node = pickle.loads(pickle.dumps(dataclasses.replace(plan, backbone=None)))
        backbone = node.backbone_spec.make()
        if self.worker:  # the driver then reads the records from the folder, as SlurmExecutor does
            from tokenworth_agent.experiment.engine import ExperimentResult

            run_worker(node, backbone, ClaimLease(node, 0, 1), slots=4, where={})
            records = {n: read_records(plan.out_dir / n / "records.jsonl") for n in plan.names}
            return [ExperimentResult(list(plan.streams), list(plan.names), records, [], 0.0)]
        return [run_shard(node, shard, backbone) for shard in shards(node, 2)]


@pytest.mark.parametrize("worker", [True, False], ids=["slurm-worker", "ray-shards"])
def test_a_node_elsewhere_makes_each_orders_records_from_the_shipped_plan(worker, ordered_run, tmp_path,
                                                                          data_dir) -> None:
    out = tmp_path / "run"
    launch(ordered_config(out, data_dir), executor=ShippedPlanExecutor(worker))
    for name in ordered_run.plan.names:
        assert comparable(read_records(out / name / "records.jsonl")) == \
            comparable(read_records(ordered_run.plan.out_dir / name / "records.jsonl")), name


# ------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("args, named", [
    (["--orders", "-1,0"], "negative"),
    (["--orders", "0,1,1"], "twice"),
    (["--orders", "x"], "integers"),
    (["--orders", "1.5,2"], "integers"),
    (["--orders", "2", "--limit", "1"], "cannot make 2 distinct orders"),  # one task: only order 0 exists
])
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_bad_orders_are_one_line_and_write_nothing(command, args, named, tmp_path, data_dir, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    extra = ["--methods", "standard,rag"] if command == "run" else ["--method", "memrl"]
    limit = [] if "--limit" in args else ["--limit", "2"]
    result = runner.invoke(app, [command, "--env", "db", *extra, *limit, *args, "--data-dir", data_dir])
    assert result.exit_code == 2, result.output
    [line] = errors(result.output)
    assert named in line and "--orders" in line, line
    assert list(tmp_path.iterdir()) == []


def test_two_orders_that_make_one_permutation_are_refused(tmp_path, data_dir) -> None:
    """Two tasks have two permutations: of orders 0..k some two coincide (a pigeonhole), named in the line."""
    result = runner.invoke(app, ["run", "--env", "db", "--methods", "rag", "--limit", "2", "--orders", "3",
                                 "--data-dir", data_dir, "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    [line] = errors(result.output)
    assert "is the same permutation as order" in line, line
    assert not (tmp_path / "run").exists()


def test_a_sweep_runs_every_configuration_in_every_order(tmp_path, data_dir) -> None:
    out = tmp_path / "sweep"
    result = runner.invoke(app, ["sweep", "--env", "db", "--method", "memrl", "--grid", "memrl.epsilon=0.1,0.2", "--orders",
                                 "2", "--limit", "3", "--no-progress", "--data-dir", data_dir, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(str(p.parent.relative_to(out)) for p in out.rglob("records.jsonl")) == [
        "order0/memrl@memrl.epsilon=0.1", "order0/memrl@memrl.epsilon=0.2", "order1/memrl@memrl.epsilon=0.1",
        "order1/memrl@memrl.epsilon=0.2"]
    table = json.loads((out / "sweep.json").read_text())
    assert [s["tasks"] for s in table["streams"]] == [6, 6]  # each configuration over both orders
    assert json.loads((out / "config.json").read_text())["orders"] == [0, 1]


# ------------------------------------------------------------------------- --until-decided
def until_config(out: Path, data_dir: str, methods=("standard", "rag", "memrl"), max_orders: int = 4,
                 effect: float = 3.0, limit: int = 5) -> RunConfig:
    from tokenworth_agent.experiment.config import UntilDecided

    return RunConfig(Streams(methods=methods, until_decided=UntilDecided(effect=effect, max_orders=max_orders)),
                     data=DataConfig(data_dir=Path(data_dir), limit=limit),
                     output=OutputConfig(out=out, progress=False))


def scripted(seen: list) -> object:
    """The rule's answer scripted (the rule itself is results/sequential.py's): rag is decided once three of its
    orders are finished, memrl never; what each call saw goes to ``seen``."""
    import tokenworth_agent.results.sequential as sequential

    def decide(found, *, baseline, effect, max_orders, alpha=0.05):
        seen.append(sorted((s.order, s.method) for s in found))
        rag = sum(s.method == "rag" for s in found)
        return {"db/rag": sequential.Decision("better" if rag >= 3 else "undecided", rag, (1.0, 9.0), 5.0),
                "db/memrl": sequential.Decision("undecided", rag, (-9.0, 9.0), 0.0)}

    return decide


UNTIL_METHODS = ("standard", "rag", "memrl")


@pytest.fixture
def scripted_rule(monkeypatch):
    import tokenworth_agent.results.sequential as sequential

    seen: list = []
    monkeypatch.setattr(sequential, "decide_streams", scripted(seen))
    return seen


@pytest.fixture(scope="module")
def until_run(tmp_path_factory, data_dir):
    import tokenworth_agent.results.sequential as sequential

    seen: list = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sequential, "decide_streams", scripted(seen))
        return launch(until_config(tmp_path_factory.mktemp("until") / "run", data_dir)), seen


def folders(out: Path) -> list[str]:
    return sorted(str(p.parent.relative_to(out)) for p in out.rglob("records.jsonl"))


def test_until_decided_runs_orders_in_rounds_and_stops_a_decided_method(until_run) -> None:
    result, seen = until_run
    out = result.plan.out_dir
    # orders 0-2 together (no decision is possible before the rule's first look), then one order a round
    assert folders(out) == sorted([f"order{k}/{m}" for k in range(3) for m in UNTIL_METHODS]
                                  + [f"order3/{m}" for m in ("standard", "memrl")])
    # before order 3's round the rule saw orders 0-2, at the end all of them
    assert [max(o for o, _ in call) for call in seen] == [2, 3]
    assert sorted(result.plan.names) == folders(out) and set(result.result.records) == set(folders(out))
    config = json.loads((out / "config.json").read_text())
    assert config["orders"] == [0, 1, 2, 3] and config["until_decided"] == {"baseline": "standard",
                                                                             "effect": 3.0, "max_orders": 4}


class StopsInRound:
    """The local executor, stopped part-way: in round ``at`` it runs two tasks of each stream, then fails."""

    name, in_process = "stops", True

    def __init__(self, at: int) -> None:
        self.at, self.calls = at, 0

    def check(self, plan) -> None:
        pass

    def run(self, plan, *, hooks, on_resume):
        self.calls += 1
        stop = 2 if self.calls == self.at else None
        result = run_experiment(plan.streams, plan.backbone, plan.out_dir, tasks=plan.tasks, names=plan.names,
                                stop_after=stop, data_digests=plan.data_digests, hooks=hooks)
        if stop is not None:
            raise RuntimeError("stopped")
        return [result]


def test_an_interrupted_until_decided_run_resumes_its_rounds_exactly(until_run, scripted_rule, tmp_path,
                                                                    data_dir) -> None:
    whole = until_run[0].plan.out_dir
    with pytest.raises(RuntimeError, match="stopped"):
        launch(until_config(tmp_path / "run", data_dir), executor=StopsInRound(at=2))  # in order 3's round
    assert [len(read_records(tmp_path / "run" / f"order3/{m}" / "records.jsonl")) for m in ("standard", "memrl")] \
        == [2, 2]
    launch(until_config(tmp_path / "run", data_dir))
    assert folders(tmp_path / "run") == folders(whole)
    for name in folders(whole):
        assert comparable(read_records(tmp_path / "run" / name / "records.jsonl")) == \
            comparable(read_records(whole / name / "records.jsonl")), name


def test_until_decided_with_the_rule_ends_as_the_rule_decides_on_the_folder(tmp_path, data_dir, capsys) -> None:
    from tokenworth_agent.results.sequential import decide_run

    out = tmp_path / "run"
    launch(until_config(out, data_dir, methods=("standard", "rag"), max_orders=3, effect=50.0))
    [decision] = decide_run(out, baseline="standard", effect=50.0, max_orders=3).values()
    assert f"db/rag {decision.decision} after {decision.orders_used} order(s)" in capsys.readouterr().err
    assert folders(out) == sorted(f"order{k}/{m}" for k in range(3) for m in ("standard", "rag"))


@pytest.mark.parametrize("args, named", [
    (["--methods", "rag,memp", "--until-decided"], "not in --methods"),
    (["--until-decided", "--effect", "0"], "--effect 0"),
    (["--until-decided", "--effect", "-2"], "--effect -2"),
    (["--until-decided", "--max-orders", "1"], "--max-orders 1"),
    (["--effect", "2"], "only with --until-decided"),
    (["--max-orders", "4"], "only with --until-decided"),
    (["--until-decided", "--orders", "3"], "leave out --orders"),
    (["--until-decided", "--grid", "o_max=64,128"], "no --grid"),
])
def test_bad_until_decided_input_is_one_line_and_writes_nothing(args, named, tmp_path, data_dir, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    methods = [] if "--methods" in args else ["--methods", "standard,rag"]
    result = runner.invoke(app, ["run", "--env", "db", *methods, "--limit", "3", *args, "--data-dir", data_dir])
    assert result.exit_code == 2, result.output
    [line] = errors(result.output)
    assert named in line, line
    assert list(tmp_path.iterdir()) == []
