"""One task of one stream, as a coroutine: the only copy of the per-task procedure.

Per task (spec §1, §8), strictly in stream order::

    memories = policy.retrieve_steps(task)        # from feedback of tasks 1..t-1 only (may call the model)
    block    = build_injection_block(memories, C) # ≤ K_max memories, ≤ L_max chars
    episode  = Episode(env, task, block, ...)     # rounds until done / J_max / O_max
    reward   = env.judge()                        # the environment's own grader
    policy.update_steps(task, memories, outcome, trajectory)   # may call the model (auxiliary)
    → the task's record

:func:`task_steps` *yields* every model call it needs, the agent's rounds and the policy's
auxiliary calls alike, as a :class:`~tokenworth_agent.experiment.episode.Request`, and receives the
:class:`~tokenworth_agent.backbones.base.Generation` (or a :class:`RequestFailed`). Whoever drives it
decides how calls are batched: the experiment engine serves all streams' pending requests with
one ``generate`` per tick; :func:`run_task` serves them one at a time.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Generator, Sequence

from tokenworth_agent.core import interrupt
from tokenworth_agent.policies.auxiliary import AuxRequest, aux_cap, book
from tokenworth_agent.backbones.base import Generation
from tokenworth_agent.core.budget import EMPTY_BLOCK, Budget, InjectionBlock, TokenLedger, build_injection_block
from tokenworth_agent.tasks import Task
from tokenworth_agent.envs.base import Environment
from tokenworth_agent.experiment.episode import Episode, Request, answer
from tokenworth_agent.memory import Memory
from tokenworth_agent.policies.base import MemoryPolicy, Outcome
from tokenworth_agent.results.record import TaskRecord
from tokenworth_agent.sim.facts import AnyBackbone, Facts


@dataclasses.dataclass(frozen=True)
class RequestFailed:
    """The backbone failed this one request for good (other requests of the tick were served)."""

    error: str


Reply = Generation | RequestFailed
TaskSteps = Generator[Request, Reply, TaskRecord]


def aux_facts(task: Task, seed: int, request: AuxRequest) -> Facts:
    """An auxiliary call's facts (only a backbone that reads facts gets them: tokenworth_agent.sim.facts)."""
    return Facts(task, seed, aux=request.purpose, hint=request.hint)


def render(retrieved: Sequence[Memory], budget: Budget) -> tuple[list[Memory], InjectionBlock, tuple[str, ...] | None]:
    """The block to inject; the memories returned are only those actually injected."""
    if not retrieved:
        return [], EMPTY_BLOCK, None
    block = build_injection_block([(m.memory_id, m.text) for m in retrieved], budget)
    injected = [m for m in retrieved if m.memory_id in block.memory_ids]
    skills = tuple(dict.fromkeys(s for m in injected for s in m.skills)) if injected else None
    return injected, block, skills


def _auxiliary(steps: Generator[AuxRequest, Generation | None, Any], phase: str, task: Task, seed: int,
               ledger: TokenLedger, log: list[dict[str, Any]]) -> Generator[Request, Reply, Any]:
    """Drive a policy phase; each auxiliary call it asks for becomes a yielded model request."""
    try:
        ask = next(steps)
        while True:
            cap = aux_cap(ledger, ask)
            reply: Reply | None = None
            if cap > 0:
                reply = yield Request(list(ask.messages), cap, aux_facts(task, seed, ask))
                interrupt.check()
            failed = reply.error if isinstance(reply, RequestFailed) else None
            answer, entry = book(ledger, ask, phase, cap, None if failed else reply, failed=failed)  # type: ignore[arg-type]
            log.append(entry)
            ask = steps.send(answer)
    except StopIteration as stop:
        return stop.value


def task_steps(policy: MemoryPolicy, env: Environment, task: Task, index: int, budget: Budget, seed: int,
               stream: dict[str, Any] | None = None) -> TaskSteps:
    """Run one task end to end; returns its record (the policy has been updated).

    ``interrupt.check()`` after every phase: a Ctrl-C that a callee swallowed (e.g. SQLite
    turning it into ``OperationalError``) stops the task instead of becoming its outcome.
    """
    started = time.perf_counter()
    ledger = TokenLedger(budget)
    aux_calls: list[dict[str, Any]] = []
    retrieved = yield from _auxiliary(policy.retrieve_steps(task), "retrieve", task, seed, ledger, aux_calls)
    injected, block, skills = render(retrieved or [], budget)
    interrupt.check()
    episode = Episode(env, task, block, skills, budget, seed, ledger)
    interrupt.check()
    while (request := episode.request()) is not None:
        reply = yield request
        interrupt.check()
        if isinstance(reply, RequestFailed):
            episode.fail_backbone(reply.error)
        else:
            episode.feed(request, reply)
        interrupt.check()
    reward = episode.judge()
    interrupt.check()
    yield from _auxiliary(policy.update_steps(task, injected, Outcome(reward, episode.status or "completed"),
                                              episode.turns), "update", task, seed, ledger, aux_calls)
    interrupt.check()
    return make_record(policy.name, index, task, episode, reward, block, policy.take_log(), policy.bank_size(),
                       time.perf_counter() - started, aux_calls, stream)


def make_record(method: str, index: int, task: Task, episode: Episode, reward: int, block: InjectionBlock,
                decision: dict[str, Any], bank_size: int, seconds: float,
                aux_calls: Sequence[dict[str, Any]] = (), stream: dict[str, Any] | None = None) -> TaskRecord:
    return TaskRecord(
        method=method,
        index=index,
        task_id=task.task_id,
        env=task.env,
        reward=reward,
        status=episode.status,
        rounds=len(episode.turns),
        output_tokens=episode.ledger.total,
        execution_tokens=episode.ledger.execution_tokens,
        auxiliary_tokens=episode.ledger.auxiliary_tokens,
        aux_calls=list(aux_calls),
        injected_memory_id=block.memory_ids[0] if block.memory_ids else None,
        injected_memory_ids=list(block.memory_ids),
        injected_length=block.length,
        injection=block.log(),
        skill_list=list(task.skill_list),
        decision=decision,
        bank_size=bank_size,
        finish_reasons=[t.finish_reason for t in episode.turns],
        error=episode.error,
        accounting=episode.budget.accounting,
        instructions_sha256=episode.instructions_sha,
        task_prompt=episode.messages[3]["content"] if len(episode.messages) > 3 else None,
        injection_text=block.text,
        trajectory=episode.log,
        judge=episode.verdict,
        time_s=round(seconds, 4),
        stream=stream,
    )


def run_task(policy: MemoryPolicy, env: Environment, backbone: AnyBackbone, task: Task, index: int,
             budget: Budget, seed: int, stream: dict[str, Any] | None = None) -> TaskRecord:
    """:func:`task_steps` with every model call sent alone (tests, and callers without an engine)."""
    return serve_alone(task_steps(policy, env, task, index, budget, seed, stream), backbone)


def serve_alone(steps: TaskSteps, backbone: AnyBackbone,
                on_call: Callable[[], None] | None = None) -> TaskRecord:
    try:
        request = next(steps)
        while True:
            [generation] = answer(backbone, [request])
            if on_call is not None:
                on_call()
            request = steps.send(generation)
    except StopIteration as stop:
        return stop.value


__all__ = ["RequestFailed", "Reply", "TaskSteps", "aux_facts", "render", "task_steps", "make_record", "run_task"]
