"""The lifelong runner: one memory policy over one task stream, under the joint budget.

Per task (spec §1, §8), strictly in stream order::

    memories = policy.retrieve(task)                 # from feedback of tasks 1..t-1 only
    block    = build_injection_block(memories, C)    # ≤ K_max memories, ≤ L_max chars
    episode  = Episode(env, task, block, ...)        # rounds until done / J_max / O_max
    reward   = env.judge()                           # the environment's own grader
    policy.update(task, memories, outcome, trajectory)
    append one JSONL record; checkpoint

:class:`Episode` is a small state machine (``request`` → backbone → ``feed``) so that the
sweep can advance many streams round by round with one batched ``generate``; here the
batch is one episode.

Resume: after every task the record is appended (fsynced) and then the checkpoint
(policy state incl. bank, controller and RNG state, JSONL offset, next task index) is
replaced atomically. A resumed run truncates the JSONL to the checkpointed offset and
continues at the next task, so its records equal an uninterrupted run's, field for field,
except the wall-clock ``time_s``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from agent.auxiliary import AuxRequest, aux_cap, book, drive, without_model
from agent.backbones.base import Backbone, Generation
from agent.budget import EMPTY_BLOCK, Budget, InjectionBlock, TokenLedger, build_injection_block
from agent import interrupt, runfolder
from agent.checkpoint import (DURABLE_EVERY_S, CheckpointError, CheckpointWriter, RecordLog, load_checkpoint,
                              read_records, records_reach)
from agent.envs.base import Environment
from agent.envs.registry import make_environment  # the registries map names to classes (agent/registry.py)
from agent.episode import (JUDGE_CAP, OBSERVATION_CAP, OVER_MAX_TOKENS, Episode, Request, clipped,  # noqa: F401
                           invalid_reason, round_entry)
from agent.harness import DEFAULT_HARNESS, HarnessOptions
from agent.memory import Memory
from agent.policies.base import MemoryPolicy, Outcome
from agent.policies.registry import METHOD_NAMES, make_policy

NONDETERMINISTIC_FIELDS = frozenset({"time_s"})  # wall clock; everything else must replay exactly



def injection_for(policy: MemoryPolicy, task: Any, budget: Budget,
                  answer: Callable[[AuxRequest], Generation | None] | None = None,
                  ) -> tuple[list[Memory], InjectionBlock, tuple[str, ...] | None]:
    """Retrieve and render; the memories returned are only those actually injected.

    ``answer`` serves the policy's auxiliary calls while it retrieves (none: they are skipped).
    """
    steps = policy.retrieve_steps(task)
    retrieved = drive(steps, answer) if answer is not None else without_model(steps)
    if not retrieved:
        return [], EMPTY_BLOCK, None
    block = build_injection_block([(m.memory_id, m.text) for m in retrieved], budget)
    injected = [m for m in retrieved if m.memory_id in block.memory_ids]
    skills = tuple(dict.fromkeys(s for m in injected for s in m.skills)) if injected else None
    return injected, block, skills


def make_record(method: str, index: int, task: Any, episode: Episode, reward: int, block: InjectionBlock,
                decision: dict[str, Any], bank_size: int, seconds: float,
                aux_calls: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    return {
        "method": method,
        "index": index,
        "task_id": task.task_id,
        "env": task.env,
        "reward": reward,
        "status": episode.status,
        "rounds": len(episode.turns),
        "output_tokens": episode.ledger.total,
        "execution_tokens": episode.ledger.execution_tokens,
        "auxiliary_tokens": episode.ledger.auxiliary_tokens,
        "aux_calls": list(aux_calls),
        "injected_memory_id": block.memory_ids[0] if block.memory_ids else None,
        "injected_memory_ids": list(block.memory_ids),
        "injected_length": block.length,
        "injection": block.log(),
        "skill_list": list(task.skill_list),
        "decision": decision,
        "bank_size": bank_size,
        "finish_reasons": [t.finish_reason for t in episode.turns],
        "error": episode.error,
        "accounting": episode.budget.accounting,
        "instructions_sha256": episode.instructions_sha,
        "task_prompt": episode.messages[3]["content"] if len(episode.messages) > 3 else None,
        "injection_text": block.text,
        "trajectory": episode.log,
        "judge": episode.verdict,
        "time_s": round(seconds, 4),
    }


def aux_meta(task: Any, seed: int, request: AuxRequest) -> dict[str, Any]:
    """The backbone's per-item facts for an auxiliary call (only the sim backbone reads them)."""
    return {**request.meta, "task": task, "seed": seed, "aux": request.purpose, "memory_skills": None, "round": None}


def run_task(policy: MemoryPolicy, env: Environment, backbone: Backbone, task: Any, index: int,
             budget: Budget, seed: int) -> dict[str, Any]:
    """Run one task end to end, one model call at a time, and return its record.

    ``interrupt.check()`` after every phase: a Ctrl-C that a callee swallowed (e.g. SQLite
    turning it into ``OperationalError``) stops the task instead of becoming its outcome.
    """
    started = time.perf_counter()
    ledger = TokenLedger(budget)
    aux_calls: list[dict[str, Any]] = []

    def answer(phase: str) -> Callable[[AuxRequest], Generation | None]:
        def call(request: AuxRequest) -> Generation | None:
            cap = aux_cap(ledger, request)
            generation = None
            if cap > 0:
                [generation] = backbone.generate([list(request.messages)], [cap],
                                                 meta=[aux_meta(task, seed, request)])
                interrupt.check()
            reply, entry = book(ledger, request, phase, cap, generation)
            aux_calls.append(entry)
            return reply
        return call

    injected, block, skills = injection_for(policy, task, budget, answer("retrieve"))
    interrupt.check()
    episode = Episode(env, task, block, skills, budget, seed, ledger)
    interrupt.check()
    while (request := episode.request()) is not None:
        [generation] = backbone.generate([request.conversation], [request.max_tokens], meta=[request.meta])
        interrupt.check()
        episode.feed(request, generation)
        interrupt.check()
    reward = episode.judge()
    interrupt.check()
    drive(policy.update_steps(task, injected, Outcome(reward, episode.status or "completed"), episode.turns),
          answer("update"))
    interrupt.check()
    return make_record(policy.name, index, task, episode, reward, block, policy.take_log(), policy.bank_size(),
                       time.perf_counter() - started, aux_calls)


# ------------------------------------------------------------------------- one method's stream
def config_digest(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclasses.dataclass
class StreamPaths:
    directory: Path

    @property
    def records(self) -> Path:
        return self.directory / "records.jsonl"

    @property
    def checkpoint(self) -> Path:
        return self.directory / "checkpoint.pkl"


ProgressHook = Callable[[dict[str, Any]], None]


def stream_identity(method: str, env_name: str, tasks: Sequence[Any], backbone: Backbone, budget: Budget,
                    seed: int) -> dict[str, Any]:
    return {"method": method, "env": env_name, "seed": seed, "budget": budget.as_dict(),
            "backbone": getattr(backbone, "name", type(backbone).__name__),
            "task_ids": config_digest({"ids": [t.task_id for t in tasks]})}


def _redo_hint(paths: StreamPaths, method: str) -> str:
    return (f"the records are kept; to redo {method} alone, rerun with --methods {method} --overwrite "
            f"(it deletes only {paths.directory}'s records and checkpoint), or move {paths.directory} aside")


def _rebuild_stateless(paths: StreamPaths, policy: MemoryPolicy, tasks: Sequence[Any]) -> tuple[int, int] | None:
    """(next_index, offset) recovered from the records alone, for a policy with no state.

    Only a policy whose state is empty (``standard``) can resume without its checkpoint: its
    decisions do not depend on earlier tasks. The records must be tasks 0..n-1 in order; a
    torn last line is dropped (it is re-made).
    """
    if policy.state_dict():
        return None
    offset = n = 0
    with open(paths.records, "rb") as handle:
        for line in handle:
            if not line.endswith(b"\n"):
                break
            try:
                record = json.loads(line)
            except ValueError:
                return None
            if n >= len(tasks) or record.get("index") != n or record.get("task_id") != tasks[n].task_id:
                return None
            n, offset = n + 1, offset + len(line)
    return n, offset


def _resume_point(paths: StreamPaths, method: str, identity: dict[str, Any], policy: MemoryPolicy,
                  tasks: Sequence[Any]) -> tuple[int, int]:
    """Where to carry on: (next task index, JSONL offset); restores the policy's state."""
    try:
        state = load_checkpoint(paths.checkpoint, valid=lambda s: records_reach(
            paths.records, int(s.get("jsonl_offset", -1)), int(s.get("next_index", -1))))
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}; {_redo_hint(paths, method)}") from exc
    if state is None:
        if not paths.records.exists() or paths.records.stat().st_size == 0:
            return 0, 0
        rebuilt = _rebuild_stateless(paths, policy, tasks)
        if rebuilt is None:
            raise CheckpointError(
                f"{paths.records} holds records but {paths.checkpoint} is missing, so {method}'s state (its memory "
                f"bank and learned values) cannot be restored; {_redo_hint(paths, method)}")
        return rebuilt
    if state["identity"] != identity:
        raise CheckpointError(
            f"{paths.checkpoint} belongs to a different run ({state['identity']} vs {identity}); "
            f"use another --out, or {_redo_hint(paths, method)}")
    policy.load_state_dict(state["policy"])
    return int(state["next_index"]), int(state["jsonl_offset"])


def _replay(on_record: ProgressHook | None, records: list[dict[str, Any]]) -> None:
    """Show records made before a resume: a hook with ``.resumed()`` counts them as done, not as new work."""
    if on_record is None:
        return
    resumed = getattr(on_record, "resumed", None)
    if resumed is not None:
        resumed(records)
    else:
        for record in records:
            on_record(record)


def run_stream(method: str, env_name: str, tasks: Sequence[Any], backbone: Backbone, budget: Budget, seed: int,
               out_dir: str | Path, *, env: Environment | None = None, kg_endpoint: str | None = None,
               on_record: ProgressHook | None = None, checkpoint_every: int = 1,
               stop_after: int | None = None, on_start: Callable[[int], None] | None = None,
               durable_every_s: float = DURABLE_EVERY_S, harness: HarnessOptions | None = None) -> list[dict[str, Any]]:
    """Run (or resume) ``method`` over ``tasks``; returns all records, old and new.

    ``stop_after`` processes at most that many tasks in this call (for tests and for
    splitting long runs); the checkpoint makes a later call carry on. ``on_start(next_index)``
    is called once the resume point is known, before the first task runs. The checkpoint is
    replaced after every task and synced to disk every ``durable_every_s`` seconds and when
    the call ends (:class:`agent.checkpoint.CheckpointWriter`).

    The method's folder is locked for the whole call (:mod:`agent.runfolder`); a second
    process fails at once. SIGINT stops the stream between two committed tasks
    (:mod:`agent.interrupt`: the first Ctrl-C at the next phase boundary, a second at once):
    the records and checkpoint on disk stay those of the last complete task, and
    ``KeyboardInterrupt`` propagates.
    """
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
    paths = StreamPaths(Path(out_dir) / method)
    with runfolder.locked(*runfolder.method_lock(Path(out_dir), method)), interrupt.InterruptGuard() as guard:
        for stale in runfolder.stale_temp_files(paths.directory):
            stale.unlink(missing_ok=True)  # a kill mid-write left it; we hold the lock, so nobody is writing it
        harness = harness or DEFAULT_HARNESS  # the run's fidelity options (agent/harness.py)
        identity = {**stream_identity(method, env_name, tasks, backbone, budget, seed),
                    "harness": harness.identity(env_name)}
        policy = make_policy(method, env_name, budget, seed, harness=harness)
        next_index, offset = _resume_point(paths, method, identity, policy, tasks)
        if next_index >= len(tasks):  # finished: nothing to write (works in a read-only folder)
            records = read_records(paths.records)
            _replay(on_record, records)
            return records
        try:
            log = RecordLog(paths.records, resume_offset=offset)
        except CheckpointError as exc:
            raise CheckpointError(f"{exc}; {_redo_hint(paths, method)}") from exc
        own_env = env is None
        environment: Environment | None = env
        try:
            if environment is None:
                environment = make_environment(env_name, budget, kg_endpoint=kg_endpoint, harness=harness)
            _replay(on_record, read_records(paths.records))
            if on_start is not None:
                on_start(next_index)
            writer = CheckpointWriter(paths.checkpoint, log=log, durable_every_s=durable_every_s)
            processed = 0
            try:
                for index in range(next_index, len(tasks)):
                    if stop_after is not None and processed >= stop_after:
                        break
                    guard.check()
                    record = run_task(policy, environment, backbone, tasks[index], index, budget, seed)
                    finished = index + 1 == len(tasks)
                    with guard.deferred():  # a task is committed whole (record + checkpoint) or not at all
                        offset = log.append(record, sync=False)
                        if (index + 1) % checkpoint_every == 0 or finished:
                            writer.save({"identity": identity, "policy": policy.state_dict(), "next_index": index + 1,
                                         "jsonl_offset": offset, "finished": finished}, durable=finished)
                    processed += 1
                    if on_record is not None:
                        on_record(record)
            finally:
                with guard.deferred():
                    writer.flush()  # whatever stopped the stream, its last checkpoint reaches the disk
        finally:
            log.close()
            if own_env and environment is not None:
                environment.close()
        return read_records(paths.records)


def comparable(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records without their wall-clock fields, for replay comparisons."""
    return [{k: v for k, v in r.items() if k not in NONDETERMINISTIC_FIELDS} for r in records]


def write_run_config(out_dir: str | Path, config: dict[str, Any], *, overwrite: bool = False) -> None:
    """Record the run's settings; refuse to mix two different runs in one directory.

    A thin wrapper over :func:`agent.runfolder.prepare` for callers that run every method.
    """
    out = Path(out_dir)
    with runfolder.locked(*runfolder.folder_lock(out), wait_s=runfolder.FOLDER_LOCK_WAIT_S):
        runfolder.prepare(out, config, METHOD_NAMES if overwrite else (), METHOD_NAMES, overwrite=overwrite)
