"""The lockstep experiment engine: batching, independence of streams, aux calls, failures, resume, grids."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Sequence

import pytest

from tokenworth_agent.policies.auxiliary import AuxRequest
from tokenworth_agent.backbones.base import BackboneError
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.results.record import read_records
from tokenworth_agent.storage.checkpoint import load_checkpoint
from tokenworth_agent.envs.base import StepResult
from tokenworth_agent.experiment import GridError, StreamSpec, comparable, expand, grid_points, run_experiment, stream_names
from tokenworth_agent.experiment.engine import StreamHook
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.policies.base import MemoryPolicy
from tokenworth_agent.policies.registry import POLICIES
from tokenworth_agent.experiment.runner import run_stream
from tests.cli_here import run_here
from tests.killing import kill_at
from tests.fakes import FakeBackbone, FakeDBEnv, make_tasks

DB = Budget.for_env("db")


def streams_of(methods: Sequence[str], seeds: Sequence[int], grid: Sequence[str] = ()) -> list[StreamSpec]:
    return expand(["db"], methods, seeds, {"db": DB}, grid_points(grid))


def run_fake(tmp_path, streams, tasks, backbone=None, envs=None, **kwargs):
    names = stream_names(streams)
    environments = envs or {n: FakeDBEnv() for n in names}
    return run_experiment(streams, backbone or FakeBackbone(), tmp_path, tasks={"db": tasks},
                          environments=environments, **kwargs)


def solo(tmp_path, spec: StreamSpec, tasks, env=None, backbone=None) -> list[dict[str, Any]]:
    return run_stream(spec.method, "db", tasks, backbone or FakeBackbone(), spec.budget, spec.seed,
                      tmp_path / f"solo-{spec.method}-{spec.seed}-{spec.point_label}", env=env or FakeDBEnv(),
                      hparams=spec.overrides)


# ------------------------------------------------------------------------- batching and independence
def test_one_batched_call_per_tick_and_every_stream_equals_its_solo_run(tmp_path) -> None:
    tasks = make_tasks(12)
    streams = streams_of(["standard", "rag", "memrl", "memp", "tokenworth"], [0, 1, 2])
    backbone = FakeBackbone()
    result = run_fake(tmp_path / "exp", streams, tasks, backbone)
    # the fake takes 2 rounds per task: 2 ticks per task, each carrying all 15 streams
    assert result.batch_sizes == [15] * (2 * len(tasks)) == backbone.batch_sizes
    for spec, name, records in result.by_stream():
        assert records[0].stream == spec.describe() and records[0].stream["seed"] == spec.seed
        assert comparable(records) == comparable(solo(tmp_path, spec, tasks)), name


def test_sequential_schedule_sends_one_conversation_per_call_and_makes_the_same_records(tmp_path) -> None:
    tasks = make_tasks(6)
    streams = streams_of(["rag", "tokenworth"], [0, 1])
    lockstep = run_fake(tmp_path / "a", streams, tasks)
    backbone = FakeBackbone()
    sequential = run_fake(tmp_path / "b", streams, tasks, backbone, schedule="sequential")
    assert set(backbone.batch_sizes) == {1} and len(backbone.batch_sizes) == 4 * 2 * len(tasks)
    assert {n: comparable(r) for n, r in lockstep.records.items()} == {
        n: comparable(r) for n, r in sequential.records.items()}


def test_no_stream_waits_for_another_streams_task_or_round(tmp_path) -> None:
    """j_max=1 streams finish a task per tick; j_max=3 streams need two: they share ticks at other tasks."""
    tasks = make_tasks(8)
    streams = streams_of(["standard"], [0], ["j_max=1,3"])
    backbone = FakeBackbone()
    run_fake(tmp_path, streams, tasks, backbone)
    calls, offset = [], 0
    for size in backbone.batch_sizes:
        calls.append(backbone.calls[offset:offset + size])
        offset += size
    mixed = [c for c in calls if len({(x["task"], x["round"]) for x in c}) > 1]
    assert mixed, "every tick carried the same task and round for all streams"
    assert any(c[0]["task"] != c[1]["task"] for c in mixed if len(c) == 2)  # e.g. task 4 round 0 beside task 2 round 1
    assert len(backbone.batch_sizes) == 2 * len(tasks)  # the slower stream sets the pace; the other never waits


def test_records_name_their_stream_and_budget_points_change_the_budget(tmp_path) -> None:
    tasks = make_tasks(4)
    streams = streams_of(["standard"], [0], ["o_max=8,128"])
    result = run_fake(tmp_path, streams, tasks)
    assert result.names == ["standard@o_max=8", "standard@o_max=128"]
    small, large = (result.records[n] for n in result.names)
    assert small[0].stream["budget"]["max_output_tokens"] == 8 and large[0].stream["budget"][
        "max_output_tokens"] == 128
    assert max(t["max_tokens"] for r in small for t in r.trajectory) == 8
    assert sum(r.output_tokens for r in small) < sum(r.output_tokens for r in large)


# ------------------------------------------------------------------------- auxiliary calls
class ReflectEveryTask(MemoryPolicy):
    """A test method: after every task one auxiliary call; it remembers what it was given."""

    name = "aux-test"

    def __init__(self, env: str, budget: Budget, seed: int = 0, *, harness: HarnessOptions = DEFAULT_HARNESS) -> None:
        super().__init__(env, budget, seed, harness=harness)
        self.replies: list[str | None] = []

    def retrieve(self, task: Any) -> list:
        return []

    def update(self, task, memories, outcome, trajectory) -> None:  # pragma: no cover - update_steps is used
        raise AssertionError("the engine drives update_steps")

    def update_steps(self, task, memories, outcome, trajectory):
        reply = yield AuxRequest("reflection", ({"role": "system", "content": "Reflect."},
                                                {"role": "user", "content": task.query_text}), max_tokens=5)
        self.replies.append(None if reply is None else reply.text)
        self.note(reflected=reply is not None)

    def state_dict(self) -> dict[str, Any]:
        return {"replies": list(self.replies)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.replies = list(state["replies"])


@pytest.fixture
def aux_method(monkeypatch):
    monkeypatch.setitem(POLICIES._entries, "aux-test", ReflectEveryTask)
    return "aux-test"


def test_auxiliary_calls_share_ticks_with_other_streams_rounds_and_count_in_the_budget(tmp_path, aux_method) -> None:
    tasks = make_tasks(5)
    streams = streams_of([aux_method, "standard"], [0], ["j_max=1"])  # 1 round: the aux call lands beside task t+1
    backbone = FakeBackbone()
    result = run_fake(tmp_path, streams, tasks, backbone)
    offset, shared = 0, 0
    for size in backbone.batch_sizes:
        batch = backbone.calls[offset:offset + size]
        offset += size
        shared += any(c["round"] is None for c in batch) and any(c["round"] == 0 for c in batch)
    assert shared >= 1  # the aux call of task 0 went out beside the standard stream's round of task 1
    assert backbone.batch_sizes == [2] * len(tasks) + [1] * len(tasks)  # the aux stream needs 2 ticks a task
    for record in result.records[f"{aux_method}@j_max=1"]:
        [call] = record.aux_calls
        assert call["purpose"] == "reflection" and call["phase"] == "update" and call["max_tokens"] == 5
        assert 0 < call["tokens"] <= 5 and record.auxiliary_tokens == call["tokens"]
        assert record.output_tokens == record.execution_tokens + record.auxiliary_tokens
        assert record.decision == {"reflected": True}


def test_an_auxiliary_call_the_budget_no_longer_allows_is_skipped_and_recorded(tmp_path, aux_method) -> None:
    tasks = make_tasks(3)
    tight = DB.replace(accounting="per-task", max_output_tokens=12)  # the two rounds spend all 12 tokens
    spec = StreamSpec("db", aux_method, 0, tight)
    backbone = FakeBackbone(verbose_words=30)
    result = run_experiment([spec], backbone, tmp_path, tasks={"db": tasks}, environments={aux_method: FakeDBEnv()})
    for record in result.records[aux_method]:
        assert record.output_tokens == 12 and record.auxiliary_tokens == 0
        assert record.aux_calls[0]["skipped"] and record.aux_calls[0]["tokens"] == 0
        assert record.decision == {"reflected": False}
    assert all(c["round"] is not None for c in backbone.calls)  # no auxiliary request ever reached the backbone


# ------------------------------------------------------------------------- failures stay in their stream
class FailingStepEnv(FakeDBEnv):
    def step(self, reply: str) -> StepResult:
        if self.task.sample_index == 2:
            raise RuntimeError("sandbox died")
        return super().step(reply)


class FailsOneRequest(FakeBackbone):
    """Raises BackboneError for any batch holding a request of (seed, task) ``target`` (or every request)."""

    def __init__(self, target: tuple[int, int] | None) -> None:
        super().__init__()
        self.target = target

    def generate(self, conversations, max_tokens, stop=None, *, facts):
        if any(self.target is None or (f.seed, f.task.sample_index) == self.target for f in facts):
            raise BackboneError("HTTP 400: context length exceeded")
        return super().generate(conversations, max_tokens, stop, facts=facts)


def test_an_environment_failure_fails_that_task_only(tmp_path) -> None:
    tasks = make_tasks(5)
    streams = streams_of(["rag", "standard"], [0])
    names = stream_names(streams)
    result = run_fake(tmp_path, streams, tasks, envs={names[0]: FailingStepEnv(), names[1]: FakeDBEnv()})
    broken = result.records["rag"][2]
    assert broken.status == "env_error" and "sandbox died" in broken.error and broken.reward == 0
    assert [r.index for r in result.records["rag"]] == list(range(5))
    assert comparable(result.records["standard"]) == comparable(solo(tmp_path, streams[1], tasks))


def test_a_backbone_failure_for_one_request_fails_that_task_and_the_others_go_on(tmp_path) -> None:
    tasks = make_tasks(5)
    streams = streams_of(["standard"], [0, 1])
    result = run_fake(tmp_path, streams, tasks, FailsOneRequest(target=(1, 3)))
    failed = result.records["seed1/standard"][3]
    assert failed.status == "backbone_error" and "context length" in failed.error and failed.reward == 0
    assert failed.judge["skipped"]
    assert comparable(result.records["seed0/standard"]) == comparable(solo(tmp_path, streams[0], tasks))
    others = [r for r in result.records["seed1/standard"] if r.index != 3]
    reference = [r for r in solo(tmp_path, streams[1], tasks) if r.index != 3]
    assert comparable(others) == comparable(reference)  # standard is stateless: the failure changed nothing else


def test_a_backbone_that_fails_every_request_stops_the_experiment_with_finished_tasks_kept(tmp_path) -> None:
    tasks = make_tasks(3)
    streams = streams_of(["standard"], [0, 1])
    with pytest.raises(BackboneError, match="context length"):
        run_fake(tmp_path, streams, tasks, FailsOneRequest(target=None))
    assert all(read_records(tmp_path / n / "records.jsonl") == [] for n in stream_names(streams))


# ------------------------------------------------------------------------- resume
def test_stop_after_then_resume_equals_an_uninterrupted_experiment(tmp_path) -> None:
    tasks = make_tasks(9)
    streams = streams_of(["rag", "memrl", "tokenworth"], [0, 1])
    reference = run_fake(tmp_path / "ref", streams, tasks)
    out = tmp_path / "split"
    for _ in range(2):
        run_fake(out, streams, tasks, stop_after=3)
    assert all(load_checkpoint(out / n / "checkpoint.pkl")["next_index"] == 6 for n in stream_names(streams))
    resumed = run_fake(out, streams, tasks)
    assert {n: comparable(r) for n, r in resumed.records.items()} == {
        n: comparable(r) for n, r in reference.records.items()}


# ------------------------------------------------------------------------- grids
@pytest.mark.parametrize("items, match", [
    (["nope=1"], "unknown field"), (["eta=-1"], "eta_max"), (["o_max=0"], "o_max must be >= 1"),
    (["k_max=1.5"], "integers"), (["o_max=64,64"], "twice"), (["o_max=64", "o_max=128"], "twice"),
])
def test_malformed_grids_are_refused(items, match) -> None:
    with pytest.raises(GridError, match=match):
        expand(["db"], ["tokenworth"], [0], {"db": DB}, grid_points(items))


def test_a_controller_grid_needs_controller_methods_only() -> None:
    with pytest.raises(GridError, match="rag has no controller hyperparameters"):
        expand(["db"], ["tokenworth", "rag"], [0], {"db": DB}, grid_points(["eta=0.1,0.2"]))
    with pytest.raises(GridError, match="plus_"):
        expand(["db"], ["tokenworth"], [0], {"db": DB}, grid_points(["plus_margin=0.1"]))
    streams = expand(["db"], ["tokenworth", "tokenworth+"], [0, 1], {"db": DB}, grid_points(["eta=0.1"]))
    assert stream_names(streams) == ["seed0/tokenworth@eta_max=0.1", "seed0/tokenworth+@eta_max=0.1",
                                     "seed1/tokenworth@eta_max=0.1", "seed1/tokenworth+@eta_max=0.1"]


@pytest.mark.parametrize("args, match", [
    (["--grid", "bogus=1"], "unknown field 'bogus'"),
    (["--grid", "gamma=-2"], "gamma"),
    (["--methods", "standard", "--grid", "eta=0.1"], "standard has no controller hyperparameters"),
    (["--seed", "1", "--seeds", "0,1"], "either --seed or --seeds"),
    (["--env", "db,db"], "twice"),
])
def test_cli_refuses_bad_grids_in_one_line_before_any_model_loads(tmp_path, data_dir, args, match) -> None:
    from typer.testing import CliRunner

    from tokenworth_agent.cli import app

    # vllm is not installed here: had the backbone been built first, its import error would show instead
    result = CliRunner().invoke(app, ["run", "--backbone", "vllm", "--model", "m", "--out", str(tmp_path / "o"),
                                      "--data-dir", data_dir, "--no-progress", *args])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and match in errors[0], result.output
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------- real env, CLI, kill -9
def test_real_db_streams_in_lockstep_equal_their_solo_runs(tmp_path, data_dir) -> None:
    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.tasks import load_tasks

    tasks = load_tasks("db", data_dir, limit=10)
    streams = streams_of(["rag", "tokenworth+"], [0, 1])
    result = run_experiment(streams, make_backbone("sim", seed=0), tmp_path / "exp", tasks={"db": tasks})
    for spec, name, records in result.by_stream():
        alone = run_stream(spec.method, "db", tasks, make_backbone("sim", seed=0), DB, spec.seed, tmp_path / name)
        assert comparable(records) == comparable(alone), name


def test_sweep_plus_at_the_preset_equals_run_tokenworth_plus(tmp_path, data_dir) -> None:
    from typer.testing import CliRunner

    from tokenworth_agent.cli import app

    runner = CliRunner()
    base = ["--seed", "1", "--limit", "8", "--data-dir", data_dir, "--no-progress"]
    swept = runner.invoke(app, ["sweep", "--plus", "--out", str(tmp_path / "sweep"), *base])
    ran = runner.invoke(app, ["run", "--methods", "tokenworth+", "--out", str(tmp_path / "run"), *base])
    assert swept.exit_code == 0 and ran.exit_code == 0, swept.output + ran.output
    sweep_records = read_records(tmp_path / "sweep" / "tokenworth+" / "records.jsonl")
    assert len(sweep_records) == 8
    assert comparable(sweep_records) == comparable(read_records(tmp_path / "run" / "tokenworth+" / "records.jsonl"))
    assert any(r.decision["plus"]["abstained"] is not None for r in sweep_records)


def test_kill_9_at_several_points_then_the_same_command_resumes_every_stream_exactly(tmp_path, data_dir) -> None:
    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.tasks import load_tasks

    limit, out = 12, tmp_path / "killed"
    cmd = [sys.executable, "-m", "tokenworth_agent.cli", "run", "--methods", "standard,memrl,tokenworth", "--seeds", "0,1",
           "--limit", str(limit), "--out", str(out), "--data-dir", data_dir, "--no-progress"]
    watched = out / "seed1" / "tokenworth" / "checkpoint.pkl"

    kill_at(cmd, watched, (2, 5, 9))  # real processes: SIGKILL is what this test is about
    # the same command resumes: no process boundary matters to it, so it runs here (same env and folder)
    run_here(cmd, dict(os.environ), cwd=os.getcwd())
    tasks = load_tasks("db", data_dir, limit=limit)
    for method in ("standard", "memrl", "tokenworth"):
        for seed in (0, 1):
            records = read_records(out / f"seed{seed}" / method / "records.jsonl")
            alone = run_stream(method, "db", tasks, make_backbone("sim", seed=seed), DB, seed,
                               tmp_path / f"ref-{method}-{seed}")
            assert comparable(records) == comparable(alone), (method, seed)
    summary = json.loads((out / "summary.json").read_text())
    assert {(r["method"], tuple(r["seeds"])) for r in summary} == {(m, (0, 1)) for m in
                                                                  ("standard", "memrl", "tokenworth")}


# ------------------------------------------------------------------------- concurrent environment steps
class SlowResetEnv(FakeDBEnv):
    """An environment that allows worker threads; counts how many resets run at once."""

    concurrent_steps = True
    active = 0
    most = 0
    threads: set[str] = set()

    def reset(self, task: Any) -> str:
        import threading

        cls = type(self)
        cls.active += 1
        cls.most = max(cls.most, cls.active)
        cls.threads.add(threading.current_thread().name)
        time.sleep(0.05)  # waiting on the kernel, as a sandbox set-up does
        cls.active -= 1
        return super().reset(task)


def test_streams_of_concurrent_environments_overlap_and_make_the_same_records(tmp_path) -> None:
    tasks = make_tasks(6)
    streams = streams_of(["standard", "rag", "memrl", "tokenworth"], [0])
    names = stream_names(streams)
    serial = run_fake(tmp_path / "serial", streams, tasks, env_threads=1)
    SlowResetEnv.most, SlowResetEnv.threads = 0, set()
    threaded = run_fake(tmp_path / "threads", streams, tasks, envs={n: SlowResetEnv() for n in names}, env_threads=4)
    assert SlowResetEnv.most > 1 and all(t.startswith("stream") for t in SlowResetEnv.threads)
    assert {n: comparable(r) for n, r in threaded.records.items()} == {
        n: comparable(r) for n, r in serial.records.items()}


# ------------------------------------------------------------------------- the continuous schedule
class SubmittingBackbone(FakeBackbone):
    """The fake with ``submit``: replies of seed-1 streams are held until the seed-0 stream has finished."""

    def __init__(self, hold_seed: int | None = None, fail: tuple[int, int] | None = None) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        super().__init__()
        self.pool = ThreadPoolExecutor(8)
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.hold_seed, self.fail = hold_seed, fail
        self.order: list[tuple[int, int]] = []  # (seed, task) in the order replies were produced

    def submit(self, conversation, max_tokens, *, facts):
        def answer():
            if facts.seed == self.hold_seed:
                assert self.released.wait(timeout=60), "the held stream was never released"
            if self.fail == (facts.seed, facts.task.sample_index):
                raise BackboneError("HTTP 400: context length exceeded")
            with self.lock:
                [generation] = self.generate([conversation], [max_tokens], facts=[facts])
                self.order.append((facts.seed, facts.task.sample_index))
            return generation

        return self.pool.submit(answer)


def test_continuous_schedule_lets_a_stream_run_ahead_of_a_slow_one_with_the_same_records(tmp_path) -> None:
    tasks = make_tasks(6)
    streams = streams_of(["rag", "standard"], [0, 1])
    reference = run_fake(tmp_path / "lockstep", streams, tasks)
    backbone = SubmittingBackbone(hold_seed=1)

    class Release(StreamHook):  # only the new records matter here
        def __init__(self, name: str) -> None:
            self.name = name

        def __call__(self, record: dict[str, Any]) -> None:
            if self.name == "seed0/standard" and record.index == len(tasks) - 1:
                backbone.released.set()  # the seed-1 streams get their replies only now

    result = run_fake(tmp_path / "continuous", streams, tasks, backbone, schedule="continuous",
                      hooks=lambda name, _spec: Release(name))
    first_seed1 = backbone.order.index(next(o for o in backbone.order if o[0] == 1))
    assert all(seed == 0 for seed, _ in backbone.order[:first_seed1]) and first_seed1 >= 2 * 2 * len(tasks)
    assert {n: comparable(r) for n, r in result.records.items()} == {
        n: comparable(r) for n, r in reference.records.items()}


def test_continuous_schedule_fails_one_task_for_one_failing_request(tmp_path) -> None:
    tasks = make_tasks(4)
    streams = streams_of(["standard"], [0, 1])
    result = run_fake(tmp_path, streams, tasks, SubmittingBackbone(fail=(1, 2)), schedule="continuous")
    assert result.records["seed1/standard"][2].status == "backbone_error"
    assert comparable(result.records["seed0/standard"]) == comparable(solo(tmp_path, streams[0], tasks))


def test_without_submit_the_continuous_schedule_ticks(tmp_path) -> None:
    backbone = FakeBackbone()
    run_fake(tmp_path, streams_of(["standard"], [0, 1]), make_tasks(3), backbone, schedule="continuous")
    assert backbone.batch_sizes == [2] * 6


# ------------------------------------------------------------------------- streams that join between ticks
class QueueSource:
    """A worker's leases in one process: at most ``slots`` live streams, the next one handed over as one ends."""

    def __init__(self, streams: Sequence[StreamSpec], slots: int, taken_over: dict[str, int] | None = None) -> None:
        self.queue = list(zip(stream_names(streams), streams))
        self.slots, self.taken_over = slots, taken_over or {}
        self.joined_at: list[tuple[str, int]] = []  # (name, streams live when it joined)
        self.ended_as: dict[str, bool] = {}
        self.commits: dict[str, int] = {}
        self.frozen: dict[str, dict[str, tuple[int, int]]] = {}

    def take(self, live: int) -> list[tuple[str, StreamSpec]]:
        given, self.queue = self.queue[:max(0, self.slots - live)], self.queue[max(0, self.slots - live):]
        self.joined_at += [(name, live) for name, _ in given]
        return given

    def check_owner(self, name: str) -> None:
        from tokenworth_agent.experiment.engine import StreamTakenOver

        if self.commits.get(name, 0) == self.taken_over.get(name, -1):
            self.frozen[name] = folder_state(self.out / name)
            raise StreamTakenOver(name)
        self.commits[name] = self.commits.get(name, 0) + 1

    def ended(self, name: str, finished: bool) -> None:
        assert name not in self.ended_as, f"{name} ended twice"
        self.ended_as[name] = finished


def folder_state(folder) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir()) if p.is_file()}


def test_streams_that_join_as_others_end_make_the_records_of_one_batch_of_all(tmp_path, data_dir) -> None:
    """A worker with two slots takes the next stream whenever one ends (between ticks): every stream's
    records equal those of the same streams run as one batch, and each stream is reported once, finished."""
    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.storage import runfolder
    from tokenworth_agent.tasks import load_tasks

    tasks = load_tasks("db", data_dir, limit=6)
    streams = streams_of(["standard", "rag", "memrl"], [0, 1])
    together = run_experiment(streams, make_backbone("sim", seed=0), tmp_path / "together", tasks={"db": tasks})
    (tmp_path / "refill").mkdir()
    source = QueueSource(streams, slots=2)
    refill = run_experiment([], make_backbone("sim", seed=0), tmp_path / "refill", tasks={"db": tasks}, names=[],
                            source=source)
    assert max(refill.batch_sizes) == 2 < len(streams)
    assert [live for _, live in source.joined_at[2:]] == [1] * (len(streams) - 2)  # each joined as one ended
    assert source.ended_as == {name: True for name in stream_names(streams)}
    assert refill.names == [name for name, _ in source.joined_at]
    for name in together.names:
        assert comparable(refill.records[name]) == comparable(together.records[name]), name
        with runfolder.locked(*runfolder.method_lock(tmp_path / "refill", name)):  # closed: its lock is free
            pass


def test_a_stream_taken_over_by_another_process_stops_without_writing_anything_more(tmp_path, data_dir) -> None:
    from tokenworth_agent.backbones.registry import make_backbone
    from tokenworth_agent.tasks import load_tasks

    tasks = load_tasks("db", data_dir, limit=5)
    streams = streams_of(["standard", "rag"], [0])
    source = QueueSource(streams, slots=2, taken_over={"rag": 2})  # fenced out before its third commit
    source.out = tmp_path
    result = run_experiment([], make_backbone("sim", seed=0), tmp_path, tasks={"db": tasks}, names=[], source=source)
    assert source.ended_as == {"standard": True, "rag": False}
    assert [r.index for r in result.records["rag"]] == [0, 1] and len(result.records["standard"]) == 5
    assert folder_state(tmp_path / "rag") == source.frozen["rag"]  # no record, checkpoint or flush after the fence
    assert load_checkpoint(tmp_path / "rag" / "checkpoint.pkl")["next_index"] == 2
