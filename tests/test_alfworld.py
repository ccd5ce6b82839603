"""ALFWorld (App. C's adapter, docs/alfworld.md): the manifest, the protocol (parse, repair call, J_max in
steps), bad input, and one game of each task type through the real TextWorld engine and the real CLI.

The real-engine tests need ALFWorld's engine venv (``make alfworld-setup``; ``make test`` builds it and names
it in $TOKENWORTH_ALFWORLD_VENV, so there they run and can fail); elsewhere, without it, they skip.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import pytest

from tokenworth_agent.benchmarks.alfworld.engine_venv import VENV_VARIABLE, EngineVenvError, open_venv
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import DataError, load_tasks
from tokenworth_agent.tasks.registry import benchmarks
from tokenworth_agent.benchmarks.alfworld import tasks as alf

MANIFEST_SHA256 = "bd84b9686c5b8e275cc5b70a7e684d5d391cc038029a1ab57b647254471ac855"  # phase-1 prototype's file


def _engine_reason() -> str | None:
    try:
        open_venv()
    except EngineVenvError as exc:
        if os.environ.get(VENV_VARIABLE):
            raise  # named (make test) but unusable: fail, never skip
        return str(exc)
    return None


ENGINE = _engine_reason()
_engine_here = pytest.mark.skipif(ENGINE is not None, reason=str(ENGINE))


def needs_engine(test):
    """The engine's venv (make test-quick leaves these out: the ``engine`` mark)."""
    return pytest.mark.engine(_engine_here(test))


@pytest.fixture(scope="module")
def episodes(data_dir: str) -> list[dict]:
    return alf.manifest(data_dir, benchmarks())


@pytest.fixture(scope="module")
def tasks(data_dir: str) -> list:
    return load_tasks("alfworld", data_dir)


# ------------------------------------------------------------------ the manifest
def test_manifest_counts_order_and_digest(episodes: list[dict]) -> None:
    assert len(episodes) == alf.EPISODES == 574
    assert [e["index"] for e in episodes] == list(range(574))
    by_split: dict[str, dict[str, int]] = {}
    for e in episodes:
        by_split.setdefault(e["split"], {}).setdefault(e["task_type"], 0)
        by_split[e["split"]][e["task_type"]] += 1
    assert by_split["train"] == {t: 50 for t in alf.TASK_TYPES}  # stratified: equal allocation
    assert sum(by_split["valid_seen"].values()) == 140 and sum(by_split["valid_unseen"].values()) == 134
    assert [e["split"] for e in episodes] == ["train"] * 300 + ["valid_seen"] * 140 + ["valid_unseen"] * 134
    assert {e["seed"] for e in episodes[:300]} == {42} and {e["seed"] for e in episodes[440:]} == {44}
    for start in (0, 300, 440):  # round-robin: each phase opens with one game of each type, in sorted type order
        assert [e["task_type"] for e in episodes[start:start + 6]] == list(alf.TASK_TYPES)
    assert len({e["game"] for e in episodes}) == 574
    assert hashlib.sha256(alf.manifest_text(episodes).encode()).hexdigest() == MANIFEST_SHA256


def test_phase_order_is_seeded_and_input_order_free(data_dir: str) -> None:
    root = alf.release_root(data_dir, benchmarks())
    games = alf.discover(root, "valid_seen")
    order = alf.phase_order(games, 43, None)
    assert alf.phase_order(list(reversed(games)), 43, None) == order
    assert alf.phase_order(games, 7, None) != order
    assert sorted(g.relpath for g in order) == sorted(g.relpath for g in games)
    with pytest.raises(DataError, match="asks for 141 games"):
        alf.phase_order(games, 43, 141)


def test_stream_follows_manifest_and_limit_keeps_it_whole(tasks: list, episodes: list[dict], data_dir: str) -> None:
    assert [t.game for t in tasks] == [e["game"] for e in episodes]
    assert [t.sha256 for t in tasks] == [e["sha256"] for e in episodes]
    assert [t.skill_list for t in tasks[:6]] == [(t,) for t in alf.TASK_TYPES]
    assert all(t.goal and "Your task" not in t.goal for t in tasks)
    assert len(load_tasks("alfworld", data_dir, limit=6)) == 6
    assert alf.SOURCE.run_files(data_dir, benchmarks()) == {alf.MANIFEST_NAME: alf.manifest_text(episodes)}
    swapped = [tasks[1], tasks[0], *tasks[2:6]]
    with pytest.raises(DataError, match="does not follow the manifest"):
        alf.check_follows(swapped, episodes)


# ------------------------------------------------------------------ bad data
def test_missing_data_folder_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no ALFWorld games at .*json_2\.1\.1\.tar\.xz"):
        load_tasks("alfworld", tmp_path)


def test_corrupt_archive_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "alfworld").mkdir()
    (tmp_path / "alfworld" / alf.ARCHIVE).write_bytes(b"not an archive")
    monkeypatch.setenv("TOKENWORTH_ALFWORLD_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DataError, match="sha256 .* expected 106c9127"):
        load_tasks("alfworld", tmp_path)


def _copy_game(tasks: list, tmp_path: Path, index: int, edit=None) -> tuple[Path, dict]:
    """Episode ``index``'s game copied into a release under tmp_path (optionally edited); the new manifest entry."""
    task = tasks[index]
    target = tmp_path / "json_2.1.1" / task.game
    target.parent.mkdir(parents=True, exist_ok=True)
    data = task.path.read_bytes()
    target.write_bytes(data if edit is None else edit(data))
    entry = {"index": index, "game": task.game, "sha256": alf.file_sha256(target)}
    return tmp_path / "json_2.1.1", entry


@pytest.mark.parametrize("edit, problem", [
    (lambda b: b[: len(b) // 2], "not a JSON game file"),
    (lambda b: json.dumps({**json.loads(b), "walkthrough": "go"}).encode(), "'walkthrough' missing or not a list"),
    (lambda b: json.dumps({k: v for k, v in json.loads(b).items() if k != "grammar"}).encode(), "'grammar' missing"),
])
def test_corrupt_game_file_is_named(tasks: list, tmp_path: Path, edit, problem: str) -> None:
    root, entry = _copy_game(tasks, tmp_path, 0, edit)
    with pytest.raises(DataError, match=problem) as info:
        alf.make_task(root, entry)
    assert tasks[0].game in str(info.value)


# ------------------------------------------------------------------ the protocol (no engine)
@pytest.mark.parametrize("reply, command", [
    ("Thought: the lamp.\nAction: use desklamp 1", "use desklamp 1"),
    ("action:  Go To   Desk 1.", "go to desk 1"),
    ("Action: `take mug 1 from desk 1`", "take mug 1 from desk 1"),
    ("I will go to the desk.", None),
    ("Action:   ", None),
    ("Thought: x\nAction: look\nAction: inventory", "look"),
])
def test_parse_action(reply: str, command: str | None) -> None:
    from tokenworth_agent.benchmarks.alfworld.env import parse_action

    assert parse_action(reply) == command


def test_repair_turn_is_recognised_and_lists_the_commands() -> None:
    text = alf.repair_prompt("pick up mug 1", ["go to desk 1", "look"])
    assert text.startswith('"pick up mug 1" is not a command you can use now.')
    assert "\ngo to desk 1\nlook\n" in text and alf.is_repair_turn(text)
    assert alf.repair_prompt(None, ["look"]).startswith('Your reply has no "Action:" line.')
    assert not alf.is_repair_turn("You arrive at desk 1. On the desk 1, you see a mug 1.")


def test_budget_preset_is_appendix_c() -> None:
    budget = Budget.for_env("alfworld")
    assert (budget.max_output_tokens, budget.max_rounds, budget.bank_capacity, budget.max_memories,
            budget.max_injected_chars) == (128, 50, 128, 1, 4200)
    from tokenworth_agent.core.budget import TokenLedger

    ledger = TokenLedger(budget)
    assert ledger.next_max_tokens() == 128 and ledger.next_max_tokens("auxiliary") == 512
    assert TokenLedger(budget.replace(accounting="per-task")).next_max_tokens("auxiliary") == 128
    with pytest.raises(ValueError, match="aux_call_cap"):
        budget.replace(aux_call_cap=0)


# ------------------------------------------------------------------ the real engine
class Scripted:
    """A fact-reading backbone that answers each call from a script (and records the caps it was given)."""

    name = "scripted"
    reads_facts = True

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.caps, self.conversations = list(replies), [], []

    def generate(self, conversations, max_tokens, stop=None, *, facts):
        from tokenworth_agent.backbones.base import Generation

        out = []
        for conversation, cap in zip(conversations, max_tokens):
            self.caps.append(cap)
            self.conversations.append(conversation)
            text = self.replies.pop(0) if self.replies else "Action: look"
            out.append(Generation(text=text, output_tokens=min(cap, 5), finish_reason="stop"))
        return out


def _play(task, backbone, budget: Budget | None = None):
    from tokenworth_agent.core.budget import EMPTY_BLOCK
    from tokenworth_agent.benchmarks.alfworld.env import ALFWorldEnvironment
    from tokenworth_agent.experiment.episode import Episode, answer

    budget = budget or Budget.for_env("alfworld")
    env = ALFWorldEnvironment(max_rounds=budget.max_rounds)
    episode = Episode(env, task, EMPTY_BLOCK, None, budget, seed=0)
    assert episode.error is None, episode.error
    while (request := episode.request()) is not None:
        episode.feed(request, answer(backbone, [request])[0])
    episode.judge()
    return episode


@needs_engine
def test_gold_wins_wrong_plans_fail_one_game_per_type(tasks: list) -> None:
    for i, task in enumerate(tasks[:6]):
        walk = list(task.walkthrough)
        won = _play(task, Scripted([f"Action: {c}" for c in walk]))
        assert won.verdict["reward"] == 1 and won.status == "completed" and won.verdict["steps"] == len(walk), task.game
        # truncated (never the last command), then looking around until J_max = 3 steps beyond it
        budget = Budget.for_env("alfworld").replace(max_rounds=len(walk) + 2)
        lost = _play(task, Scripted([f"Action: {c}" for c in walk[:-1]]), budget)
        assert lost.verdict["reward"] == 0 and lost.status == "round_limit", task.game
        if i < 2:  # reversed plans fail too (shuffled ones may win: some orders are genuinely valid)
            rev = _play(task, Scripted([f"Action: {c}" for c in reversed(walk)]),
                        Budget.for_env("alfworld").replace(max_rounds=len(walk)))
            assert rev.verdict["reward"] == 0, task.game


@needs_engine
def test_repair_call_accounting(tasks: list) -> None:
    task = tasks[0]  # look_at_obj_in_light: go to drawer 7, use desklamp 1, take keychain 2 from dresser 1
    walk = list(task.walkthrough)
    replies = ["I think I should look around.",  # no Action: line -> repair call
               f"Action: {walk[0]}",  # the repair: executed, step 1
               "Action: turn on the lamp",  # inadmissible -> repair call
               "Action: still wrong",  # the repair is inadmissible too: sent, "Nothing happens.", step 2
               f"Action: {walk[1]}", f"Action: {walk[2]}"]
    backbone = Scripted(replies)
    episode = _play(task, backbone)
    assert episode.verdict["reward"] == 1 and episode.status == "completed"
    assert episode.verdict["steps"] == 4 and episode.verdict["repair_calls"] == 2
    assert episode.verdict["inadmissible"] == 3 and episode.rounds == 4 and len(episode.turns) == 6
    assert backbone.caps == [128] * 6  # a repair call has the same 128-token cap
    assert episode.ledger.execution_calls == 6 and episode.ledger.execution_tokens == 30
    calls = [t.action["call"] for t in episode.turns]
    assert calls == ["action", "repair", "action", "repair", "action", "action"]
    assert episode.turns[0].observation.startswith('Your reply has no "Action:" line.')
    assert walk[0] in episode.turns[0].observation  # the repair turn lists the admissible commands
    assert episode.turns[3].observation == "Nothing happens." and episode.turns[3].action["executed"] is False
    assert backbone.conversations[1][-1]["content"] == episode.turns[0].observation  # the model saw the repair turn


@needs_engine
def test_j_max_counts_environment_steps_not_repair_calls(tasks: list) -> None:
    backbone = Scripted(["no command here"] * 10)
    episode = _play(tasks[1], backbone, Budget.for_env("alfworld").replace(max_rounds=3))
    assert episode.status == "round_limit" and episode.verdict["reward"] == 0
    assert episode.verdict["steps"] == 3 and episode.rounds == 3 and len(episode.turns) == 6


@needs_engine
def test_a_game_file_that_is_not_the_manifests_is_not_played(tasks: list) -> None:
    from tokenworth_agent.core.budget import EMPTY_BLOCK
    from tokenworth_agent.benchmarks.alfworld.env import ALFWorldEnvironment
    from tokenworth_agent.experiment.episode import Episode

    other = dataclasses.replace(tasks[2], sha256="0" * 64)
    episode = Episode(ALFWorldEnvironment(), other, EMPTY_BLOCK, None, Budget.for_env("alfworld"), seed=0)
    assert episode.status == "env_error" and "not the manifest's game file" in (episode.error or "")


@needs_engine
def test_walkthrough_never_reaches_a_prompt_or_memory(tasks: list, tmp_path: Path) -> None:
    from tokenworth_agent.memory.build import build_memory

    def poison(data: bytes) -> bytes:
        game = json.loads(data)
        game["walkthrough"] = [*game["walkthrough"], "SECRET-PLAN-STEP"]
        return json.dumps(game).encode()

    root, entry = _copy_game(tasks, tmp_path, 4, poison)
    task = alf.make_task(root, entry)
    assert task.walkthrough[-1] == "SECRET-PLAN-STEP"
    episode = _play(task, Scripted([f"Action: {c}" for c in task.walkthrough[:-1]]))
    assert episode.verdict["reward"] == 1  # the game plays the same
    assert not any("SECRET" in m["content"] for m in episode.messages if m["role"] != "assistant")
    memory = build_memory("alfworld", task, episode.turns, 1, Budget.for_env("alfworld"))
    assert memory is not None and "SECRET" not in memory.text and memory.text.startswith(f"Task: {task.goal}")
    assert len(memory.text) <= 4096


@needs_engine
def test_a_dead_worker_fails_the_game_in_play_and_the_next_game_plays(tasks: list, monkeypatch) -> None:
    from tokenworth_agent.benchmarks.alfworld.env import ALFWorldEnvironment, EngineError, EnginePool, pool

    own = EnginePool(1, cache_games=0)  # every call reaches the worker (the shared pool may answer from its cache)
    try:
        env = ALFWorldEnvironment(engine=own.engine())
        env.reset(tasks[0])
        proc = env.engine.worker.proc
        proc.kill()
        proc.wait(timeout=60)
        # The window this test is about: the worker is dead and nothing has noticed when the step is sent. Without
        # this the test raced: a death seen before the call is caught up on a new worker instead (_catch_up).
        monkeypatch.setattr(proc, "poll", lambda: None)
        with pytest.raises(EngineError, match="died"):
            env.step(f"Action: {tasks[0].walkthrough[0]}")
        assert env.reset(tasks[0]).startswith("You are in the middle of a room")
        assert env.step(f"Action: {tasks[0].walkthrough[0]}").action["executed"]
    finally:
        own.close()
    assert pool()  # the shared pool still serves


@needs_engine
def test_the_workers_speed_ups_change_no_answer(tasks: list) -> None:
    """Two games of two task types, their walkthroughs, and for one a wrong plan (reversed, with an
    inadmissible command and a look around), in a plain worker (upstream's engine untouched) and a fast
    one: every answer equal. (Records of 11 methods x 8 games were compared too: docs/alfworld.md.)"""
    from tokenworth_agent.benchmarks.alfworld.env import EnginePool

    plain, fast = EnginePool(1, cache_games=0, plain=True), EnginePool(1, cache_games=0)
    try:
        engines = [plain.engine(), fast.engine()]
        wrong = ["look", "inventory", "fly away", *reversed(tasks[0].walkthrough)]
        plays = [(tasks[0], list(tasks[0].walkthrough)), (tasks[0], wrong), (tasks[4], list(tasks[4].walkthrough))]
        for task, plan in plays:
            answers = [[engine.start(task.path, task.sha256)] + [engine.step(c) for c in plan] for engine in engines]
            for answer in (a for engine_answers in answers for a in engine_answers):
                answer.cpu = 0.0  # the call's cost, not its answer
            assert answers[0] == answers[1], task.game
    finally:
        plain.close()
        fast.close()


# ------------------------------------------------------------------ the transition cache
def _answer(text: str) -> dict:
    return {"text": text, "admissible": ["look"], "won": False, "executed": True}


def test_the_transition_cache_keeps_the_most_recent_games_and_zero_keeps_none() -> None:
    from tokenworth_agent.benchmarks.alfworld.env import TransitionCache

    cache = TransitionCache(2)
    for game in ("a", "b"):
        cache.put((game,), _answer(game))
        cache.put((game, "look"), _answer(game + "!"))
    cache.touch("a")  # "a" started again: "b" is now the oldest
    cache.put(("c",), _answer("c"))
    assert cache.get(("a", "look")) == _answer("a!") and cache.get(("c",)) == _answer("c")
    assert cache.get(("b",)) is None and cache.get(("b", "look")) is None
    assert (cache.hits, cache.misses) == (2, 2)
    off = TransitionCache(0)
    off.put(("a",), _answer("a"))
    assert off.get(("a",)) is None
    with pytest.raises(ValueError, match="TOKENWORTH_ALFWORLD_CACHE_GAMES"):
        TransitionCache(-1)


def _states(env, task, commands: list[str]) -> list:
    states = [env.reset(task)]
    for command in commands:
        result = env.step(f"Action: {command}")
        states.append((result.observation, result.done, result.status, result.action))
    return states


@needs_engine
def test_cached_answers_equal_the_engines_and_a_new_history_catches_up(tasks: list) -> None:
    """Two streams on one cached pool: the second is answered from the cache while it repeats the first,
    then diverges, and its engine must catch up (a fresh start and the shared commands) before its new
    command; every answer equals an uncached engine's."""
    from tokenworth_agent.benchmarks.alfworld.env import ALFWorldEnvironment, EnginePool

    task = tasks[3]
    walk = list(task.walkthrough)
    diverging = walk[:3] + ["look", "inventory"] + walk[3:]
    plain, shared = EnginePool(1, cache_games=0), EnginePool(1)
    try:
        truth = [_states(ALFWorldEnvironment(engine=plain.engine()), task, c) for c in (walk, diverging)]
        first, second = (ALFWorldEnvironment(engine=shared.engine()) for _ in range(2))
        assert _states(first, task, walk) == truth[0]
        misses = shared.cache.misses
        assert _states(second, task, walk) == truth[0]  # all from the cache
        assert shared.cache.misses == misses and second.judge().details["engine_cpu_s"] == 0.0
        assert _states(second, task, diverging) == truth[1]  # from the cache up to "look", then caught up
        assert second.engine.history == (task.sha256, *diverging)
        assert truth[1][-1][2] == "completed"  # the diverging plan still wins: the caught-up engine is in step
    finally:
        plain.close()
        shared.close()


@needs_engine
def test_a_cached_start_still_refuses_a_game_file_that_is_not_the_manifests(tasks: list, tmp_path: Path) -> None:
    from tokenworth_agent.benchmarks.alfworld.env import EngineError, EnginePool

    task = tasks[2]
    shared = EnginePool(1)
    try:
        shared.engine().start(task.path, task.sha256)  # the game's start is now cached
        forged = tmp_path / "game.tw-pddl"
        forged.write_bytes(Path(task.path).read_bytes() + b" ")
        with pytest.raises(EngineError, match="not the manifest's game file"):
            shared.engine().start(forged, task.sha256)
    finally:
        shared.close()


def test_a_replay_that_answers_otherwise_is_an_engine_error() -> None:
    """The cache trusts the engine to be deterministic, and checks it on every replay."""
    from tokenworth_agent.benchmarks.alfworld.env import EngineError, RemoteEngine, TransitionCache

    class Drifting:  # stands in for a worker whose engine answers a replayed history differently
        generation, calls = 1, 0

        def call(self, request: dict) -> dict:
            Drifting.calls += 1
            return {**_answer(f"{request['op']} {Drifting.calls}"), "cpu": 0.01}

    cache = TransitionCache(4)
    engine = RemoteEngine(Drifting(), "e0", cache)  # type: ignore[arg-type]
    with tempfile_game() as (path, sha):
        cache.put((sha,), _answer("start 0"))
        assert engine.start(path, sha).text == "start 0"  # from the cache
        with pytest.raises(EngineError, match="not deterministic"):
            engine.step("look")  # catching up re-plays the start, which now answers "start 1"


@contextlib.contextmanager
def tempfile_game():
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "game.tw-pddl"
        path.write_bytes(b"{}")
        yield path, hashlib.sha256(b"{}").hexdigest()


@needs_engine
def test_one_game_per_type_through_the_cli_run(data_dir: str, tmp_path: Path, episodes: list[dict]) -> None:
    """`run --env alfworld --limit 6`: the simulated backbone on the real engine, one game per type."""
    from tokenworth_agent.experiment import DataConfig, OutputConfig, RunConfig, Streams
    from tokenworth_agent.experiment.launch import launch
    from tokenworth_agent.sim.backbone import SimBackbone

    out = tmp_path / "run"
    result = launch(RunConfig(Streams(envs=("alfworld",), methods=("standard", "tokenworth"), seeds=(0,)),
                              data=DataConfig(data_dir=Path(data_dir), limit=6),
                              output=OutputConfig(out=out, progress=False)))
    assert (out / alf.MANIFEST_NAME).read_text() == alf.manifest_text(episodes)  # whole, under --limit 6
    sim = SimBackbone()
    tasks6 = load_tasks("alfworld", data_dir, limit=6)
    for name, records in result.result.records.items():
        assert len(records) == 6
        for record, task in zip(records, tasks6):
            assert record.judge["won"] == bool(record.reward) and record.judge["game"] == task.game
            assert record.status in ("completed", "round_limit") and record.judge["steps"] <= 50
            if name == "standard":  # the simulator played what it decided, and the engine agreed
                assert sim.episode(task, None, 0).success == bool(record.reward), task.game
    assert "| standard | 6 |" in result.summary.table


@needs_engine
def test_a_run_folder_with_another_manifest_is_refused(data_dir: str, tmp_path: Path) -> None:
    from tokenworth_agent.experiment import DataConfig, LaunchError, OutputConfig, RunConfig, Streams, make_plan

    out = tmp_path / "run"
    config = RunConfig(Streams(envs=("alfworld",), methods=("standard",)),
                       data=DataConfig(data_dir=Path(data_dir), limit=2), output=OutputConfig(out=out, progress=False))
    plan = make_plan(config)
    assert list(plan.run_files) == [alf.MANIFEST_NAME] and len(plan.tasks["alfworld"]) == 2
    assert plan.settings["harness"]["alfworld_engine"]["textworld"] == "1.7.0"
    import contextlib

    from tokenworth_agent.experiment.launch import prepare

    with contextlib.ExitStack() as held:
        prepare(plan, held)  # the folder as a run makes it: config.json and the manifest
    assert (out / alf.MANIFEST_NAME).read_text() == plan.run_files[alf.MANIFEST_NAME]
    lines = plan.run_files[alf.MANIFEST_NAME].splitlines(keepends=True)
    (out / alf.MANIFEST_NAME).write_text("".join([lines[1], lines[0], *lines[2:]]))
    with pytest.raises(LaunchError, match="differs from the alfworld_manifest.jsonl the data gives"):
        make_plan(config)
    (out / alf.MANIFEST_NAME).write_text("".join(lines))
    assert make_plan(config).run_files == plan.run_files  # the same manifest: resumable


# ------------------------------------------------------------------ the simulator's moves (no engine)
def test_sim_moves_success_replays_the_walkthrough_failure_cannot_win(tasks: list) -> None:
    from tokenworth_agent.sim.model import SimParams
    from tokenworth_agent.benchmarks.alfworld.replies import plan, receptacles, reply

    params = SimParams()
    opening = "You are in the middle of a room. Looking quickly around you, you see a bed 1, a desk 1, and a shelf 2.\n\n" \
              "Your task is to: examine the keychain with the desklamp."
    assert receptacles(opening) == ["bed 1", "desk 1", "shelf 2"]
    for task in tasks[:60]:
        for p0 in (0.3, 0.7):
            moves = plan(task, True, False, p0, opening, params)
            executed = [m.repair or m.action for m in moves if m.kind in ("gold", "format_slip")]
            assert executed == list(task.walkthrough)  # every walkthrough command, in order, the slips repaired
            failed = plan(task, False, False, p0, opening, params)
            first_wander = next(i for i, m in enumerate(failed) if m.kind == "wander")
            played = [m.repair or m.action for m in failed[:first_wander] if m.kind in ("gold", "format_slip")]
            assert played == list(task.walkthrough[: len(played)]) and len(played) < len(task.walkthrough)
            # after the cut, nothing that could change the world: go to, look, near misses repaired to a go to
            assert all((m.repair or m.action).startswith(("go to ", "look")) for m in failed[first_wander:])
            assert len(failed) >= 50
    task = tasks[0]
    from tokenworth_agent.sim.model import Episode

    episode = Episode(p0=0.5, p=0.9, overlap=None, harmful=False, success=True)
    moves = plan(task, True, False, 0.5, opening, params)
    base = [{"role": "system", "content": ""}, {"role": "user", "content": "instructions"},
            {"role": "assistant", "content": "OK."}, {"role": "user", "content": opening}]
    assert reply(task, episode, 0, base, params) == f"Action: {moves[0].action}"
    repair = alf.repair_prompt("walk to x", ["go to desk 1"])
    after_repair = base + [{"role": "assistant", "content": "Action: walk to x"}, {"role": "user", "content": repair}]
    assert reply(task, episode, 1, after_repair, params) == f"Action: {moves[0].repair or moves[0].action}"
    stepped = after_repair + [{"role": "assistant", "content": "Action: go"}, {"role": "user", "content": "You arrive."}]
    assert reply(task, episode, 2, stepped, params) == f"Action: {moves[1].action}"
