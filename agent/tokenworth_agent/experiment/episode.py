"""One task's interaction with the backbone, as a small state machine.

:class:`Episode` is advanced one backbone reply at a time (``request`` → backbone →
``feed``), so that the experiment engine (:mod:`tokenworth_agent.experiment`) can serve the pending
requests of many streams with one batched ``generate``. It knows nothing of memory
policies: it gets the injected block and the task's :class:`~tokenworth_agent.core.budget.TokenLedger`
(which auxiliary calls of the policy share), runs the rounds, and judges.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from tokenworth_agent.backbones.base import Generation, prompt_usage
from tokenworth_agent.core.budget import Budget, BudgetExceeded, InjectionBlock, TokenLedger
from tokenworth_agent.tasks import Task
from tokenworth_agent.envs.base import Environment, InfrastructureError, conversation, instructions_digest
from tokenworth_agent.memory import Turn
from tokenworth_agent.sim import facts as sim_facts
from tokenworth_agent.sim.facts import AnyBackbone, Facts

# Trajectory logging (records' ``trajectory`` and ``judge`` fields). Replies are kept whole (a
# reply is bounded by max_tokens); an observation, and any string inside a parsed action or the
# judge's details, is cut to this many characters, and the full length is kept beside it.
OBSERVATION_CAP = 1000
JUDGE_CAP = 300  # per string in the judge's details (expected rows, the given answer)
# A backbone that reports more output tokens than the call's max_tokens broke the budget. The
# reply is not applied to the environment, the task fails with this status and reward 0, the
# reported tokens are booked as they are (never hidden), and ``error`` says what happened.
OVER_MAX_TOKENS = "over_max_tokens"
# A backbone that failed one request of a batch for good (the others were answered): that task fails
# with this status and reward 0, ``error`` names the failure, and the stream goes on with its next task.
BACKBONE_ERROR = "backbone_error"


@dataclasses.dataclass
class Request:
    """One model call: what the model sees, its cap, and what only a simulated backbone reads."""

    conversation: list[dict[str, str]]
    max_tokens: int
    facts: Facts


def answer(backbone: AnyBackbone, requests: Sequence[Request]) -> list[Generation]:
    """One batched ``generate`` for ``requests``; the facts go only to a backbone that reads them."""
    return sim_facts.generate(backbone, [r.conversation for r in requests], [r.max_tokens for r in requests],
                              [r.facts for r in requests])


class Episode:
    """One task's interaction, advanced one backbone reply at a time."""

    def __init__(self, env: Environment, task: Task, block: InjectionBlock, skills: tuple[str, ...] | None,
                 budget: Budget, seed: int, ledger: TokenLedger | None = None) -> None:
        self.env, self.task, self.block, self.budget, self.seed = env, task, block, budget, seed
        self.memory_skills = skills  # None: nothing injected (the sim backbone's contract)
        # the task's account; the policy's auxiliary calls before the episode may already have drawn on it
        self.ledger = ledger if ledger is not None else TokenLedger(budget)
        self.turns: list[Turn] = []
        self.rounds = 0  # rounds taken: replies the environment acted on (a repair call is part of its round)
        self.status: str | None = None
        self.error: str | None = None
        self.messages: list[dict[str, str]] = []
        self.log: list[dict[str, Any]] = []  # one entry per round, see round_entry
        self.verdict: dict[str, Any] = {}
        self.instructions_sha: str | None = None
        try:
            self.instructions_sha = instructions_digest(env.instructions())
            env.reset(task)
            self.messages = conversation(env, task, block.text)
        except InfrastructureError:
            raise  # the environment's machinery broke: the run stops, the task is not failed
        except Exception as exc:  # an environment that cannot start the task fails it
            self._fail(exc)

    @property
    def done(self) -> bool:
        return self.status is not None

    def _fail(self, exc: BaseException) -> None:
        self.status = "env_error"
        self.error = f"{type(exc).__name__}: {exc}"

    def request(self) -> Request | None:
        """The next backbone call, or ``None`` when the episode has ended."""
        if self.done:
            return None
        if self.ledger.next_max_tokens() == 0:
            self.status = "budget_exhausted"
            return None
        if self.rounds >= self.budget.max_rounds:
            self.status = "round_limit"
            return None
        facts = Facts(self.task, self.seed, round=len(self.turns), memory_skills=self.memory_skills)
        return Request(list(self.messages), self.ledger.next_max_tokens(), facts)

    def feed(self, request: Request, generation: Generation) -> None:
        """Apply the backbone's reply to the environment."""
        try:
            self.ledger.charge(generation.output_tokens, "execution", request.max_tokens)
        except BudgetExceeded as exc:  # see OVER_MAX_TOKENS
            self.ledger.charge(generation.output_tokens, "execution", generation.output_tokens)
            self.turns.append(Turn(len(self.turns), generation.text, "", None, generation.output_tokens,
                                   generation.finish_reason))
            self.log.append(round_entry(generation, request.max_tokens, None, None))
            self.status, self.error = OVER_MAX_TOKENS, str(exc)
            return
        self.messages.append({"role": "assistant", "content": generation.text})
        try:
            result = self.env.step(generation.text)
        except InfrastructureError:
            raise
        except Exception as exc:
            self.turns.append(Turn(len(self.turns), generation.text, "", None, generation.output_tokens,
                                   generation.finish_reason))
            self.log.append(round_entry(generation, request.max_tokens, None, None))
            self._fail(exc)
            return
        self.turns.append(Turn(len(self.turns), generation.text, result.observation, result.action,
                               generation.output_tokens, generation.finish_reason))
        self.log.append(round_entry(generation, request.max_tokens, result.action, result.observation,
                                    invalid=result.status == "invalid_action"))
        if not result.repair:
            self.rounds += 1
        if result.done:
            self.status = result.status or "completed"
            if self.status == "invalid_action" and self.error is None:
                self.error = f"invalid action: {invalid_reason(result.action, result.observation)}"
        else:
            self.messages.append({"role": "user", "content": result.observation})

    def fail_backbone(self, error: str) -> None:
        """The backbone could not answer this episode's request (it answered the others of its batch)."""
        self.status, self.error = BACKBONE_ERROR, f"backbone: {error}"

    def judge(self) -> int:
        """The environment's verdict (0 when the grader itself fails, or the backbone broke the budget or failed)."""
        if self.status == OVER_MAX_TOKENS:
            self.verdict = {"reward": 0, "skipped": "the backbone exceeded max_tokens; the reply was not applied"}
            return 0
        if self.status == BACKBONE_ERROR:
            self.verdict = {"reward": 0, "skipped": "the backbone failed this task's request"}
            return 0
        try:
            judgement = self.env.judge()
        except InfrastructureError:
            raise
        except Exception as exc:
            self.status, self.error = "env_error", self.error or f"judge: {type(exc).__name__}: {exc}"
            self.verdict = {"reward": 0, "error": self.error}
            return 0
        self.verdict = {"reward": int(judgement.reward), **clipped(dict(judgement.details), JUDGE_CAP)}
        return int(judgement.reward)


def clipped(value: Any, cap: int = OBSERVATION_CAP) -> Any:
    """``value`` with every string longer than ``cap`` cut (JSON-ready; lists/tuples become lists)."""
    if isinstance(value, str):
        return value if len(value) <= cap else value[:cap] + f" …[{len(value)} chars]"
    if isinstance(value, dict):
        return {str(k): clipped(v, cap) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [clipped(v, cap) for v in value[:50]]
        return items + [f"…[{len(value)} items]"] if len(value) > 50 else items
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return clipped(str(value), cap)


def invalid_reason(action: dict[str, Any] | None, observation: str) -> str:
    """Why the environment rejected a reply: the parser's reason, else its observation."""
    reason = (action or {}).get("reason") or observation or "unparseable reply"
    return clipped(str(reason), 300)


def round_entry(generation: Generation, max_tokens: int, action: dict[str, Any] | None, observation: str | None,
                *, invalid: bool = False) -> dict[str, Any]:
    """One round of the trajectory as recorded: the reply, what was parsed, what came back."""
    entry: dict[str, Any] = {"reply": generation.text, "tokens": generation.output_tokens, "max_tokens": max_tokens,
                             "finish_reason": generation.finish_reason,
                             "action": clipped(action) if action is not None and not invalid else None,
                             "invalid": invalid_reason(action, observation or "") if invalid else None}
    if observation is not None:
        entry["observation"] = clipped(observation)
        entry["observation_chars"] = len(observation)
    entry.update(prompt_usage(generation))  # recorded, never charged
    return entry


