"""A simulated LLM backbone that acts on the real environments.

Where no GPU or model is present, this backbone stands in for the frozen LLM. It does not
judge anything: it emits replies in each environment's action format, and the real
environment (SQLite database, sandboxed shell, KG tool executor) runs them and grades the
task. Its generative model, with every parameter in :class:`SimParams`:

1. **Task difficulty.** Each task gets a base success probability
   ``p0 = lo + (hi − lo)·u − skill_penalty·(n_skills − 1)``, with ``(lo, hi)`` the
   environment's range and ``u ~ U(0,1)`` drawn from a stable hash of
   ``(seed, env, sample_index)``. Tasks with more skills are harder.
2. **Memory effect through skills, not text.** With an injected memory whose source task
   had skills ``M`` and a current task with skills ``S``, ``J = |M∩S| / |M∪S|`` (Jaccard):
   ``p = clip(p0 + gain·J − harm·[J < harm_threshold]·(1 − J), p_floor, p_ceil)``.
   A memory that merely *looks* relevant (similar text, other skills) lowers success.
   No memory: ``p = clip(p0)``.
3. **Outcome.** ``success = v < p`` with a second uniform ``v`` from the same per-task hash.
   Decision: the uniforms depend on (seed, task) only and the memory enters through ``p``
   (common random numbers). So the outcome is a deterministic function of
   (seed, task, memory), and a memory that raises ``p`` can only turn a failure into a
   success: method comparisons are not blurred by unrelated redraws.
4. **Replies.** A success replays the gold actions: DB ``Action: Operation`` with the gold
   SQL, then ``Action: Answer`` with ``Final Answer: <the observed rows>`` read from the
   last user turn; OS the ground-truth script in an ``Act: bash`` block, then
   ``Act: finish``; KG one gold tool call per round, then ``Final Answer: #k``. A failure
   emits a plausible wrong action (a perturbed or unrelated query, a command that does
   not solve the task, a truncated tool path with a wrong variable).
5. **Token cost.** Round 0 opens with a ``Thought:`` of ``thought_sentences_*`` sentences:
   fewer with a helpful memory, more with a harmful one. A harmful memory that leads to a
   failure also spends ``harmful_extra_rounds`` extra rounds on wrong actions. Tokens are
   counted with the real Qwen2.5 tokenizer (see :mod:`agent.backbones.tokens`), plus the
   end-of-sequence token (``eos_tokens``) when the reply ends by itself, as vLLM counts; a reply
   that does not fit its ``max_tokens`` is cut to exactly that many tokens (``"length"``).

``meta[i]`` (required) describes item i:

- ``task``: the task record (:class:`~agent.data.DBTask`, ``OSTask`` or ``KGTask``);
- ``memory_skills``: the injected memory's source-task ``skill_list`` (a tuple), or
  ``None`` when nothing is injected (an empty tuple is a memory with no skills: J = 0);
- ``round``: the 0-based index of this reply within the task;
- ``seed`` (optional): the run's seed; defaults to the backbone's ``seed``.

6. **Auxiliary calls.** An item whose meta has ``aux`` (a method's reflection, fact extraction,
   skill writing, …; :mod:`agent.auxiliary`) is answered by :mod:`agent.backbones.sim_aux`:
   text in the grammar the request's ``form`` names, carrying the skills of the task it is
   about, counted and capped like every reply. ``round`` and ``memory_skills`` are not read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any, Mapping, Sequence

import numpy as np

from agent.backbones import sim_aux
from agent.backbones.base import BackboneError, Conversation, Generation
from agent.backbones.tokens import DEFAULT_TOKENIZER_MODEL, token_counter
from agent.data import DBTask, KGTask, OSTask, Task


@dataclasses.dataclass(frozen=True)
class SimParams:
    """Every knob of the simulator, fixed here before any method comparison.

    Calibration (full streams, seeds 0 and 1): without memory the mean success probability
    is about 0.53 on DB, 0.58 on OS and 0.31 on KG (KG near the paper's local Standard,
    30.7%). Measured end to end on the real DB environment with an uncapped output budget,
    the no-memory DB success rate is 53.4% / 51.6%, mean 155 output tokens per task. Under
    the paper's DB budget read per task (O_max = 128 tokens shared by all rounds) it drops to
    about 27%, because many gold answers (SQL plus the returned rows) need more than 128
    tokens: even an always-successful simulator without a Thought line reaches only 56.6%
    there (78.0% under the default per-call accounting; ``bench/budget_ceiling.py``).
    """

    p0_range_db: tuple[float, float] = (0.25, 0.90)
    p0_range_os: tuple[float, float] = (0.40, 0.95)
    p0_range_kg: tuple[float, float] = (0.05, 0.60)
    skill_penalty: float = 0.015  # per skill beyond the first
    gain: float = 0.30  # "a": success bonus per unit of skill overlap J
    harm: float = 0.25  # "b": penalty for a memory whose skills barely overlap
    harm_threshold: float = 0.25  # J below this makes an injected memory harmful
    p_floor: float = 0.02
    p_ceil: float = 0.98
    thought_sentences_base: int = 1
    thought_sentences_helpful: int = 0
    thought_sentences_harmful: int = 3
    harmful_extra_rounds: int = 1
    # auxiliary calls (agent/backbones/sim_aux.py); fixed with the rest, before any method comparison
    aux_items_max: int = 2  # lines of a notes reply (facts, reflections, insights)
    aux_match_overlap: float = 0.5  # skill overlap J at which shown text counts as "about the same thing"
    tokenizer_model: str = DEFAULT_TOKENIZER_MODEL
    # The token rule every backbone shares: a reply that ends by itself also decodes the
    # end-of-sequence token (Qwen2.5: <|im_end|>), which vLLM's len(token_ids) counts.
    eos_tokens: int = 1

    def __post_init__(self) -> None:
        for env in ("db", "os", "kg"):
            lo, hi = self.p0_range(env)
            if not 0.0 <= lo <= hi <= 1.0:
                raise ValueError(f"p0_range_{env} must satisfy 0 <= lo <= hi <= 1, got {(lo, hi)}")
        if not 0.0 <= self.p_floor <= self.p_ceil <= 1.0:
            raise ValueError(f"need 0 <= p_floor <= p_ceil <= 1, got {self.p_floor}, {self.p_ceil}")
        if self.aux_items_max < 1 or not 0.0 <= self.aux_match_overlap <= 1.0:
            raise ValueError(f"need aux_items_max >= 1 and 0 <= aux_match_overlap <= 1, got "
                             f"{self.aux_items_max}, {self.aux_match_overlap}")
        for name in ("skill_penalty", "gain", "harm", "harm_threshold"):
            if getattr(self, name) < 0:
                raise ValueError(f"SimParams.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("thought_sentences_base", "thought_sentences_helpful", "thought_sentences_harmful",
                     "harmful_extra_rounds", "eos_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"SimParams.{name} must be >= 0, got {getattr(self, name)}")

    def p0_range(self, env: str) -> tuple[float, float]:
        return {"db": self.p0_range_db, "os": self.p0_range_os, "kg": self.p0_range_kg}[env]


# ---------------------------------------------------------------------------------------
# The probability model


def stable_rng(*key: object) -> np.random.Generator:
    """A NumPy generator seeded from BLAKE2b of ``repr(key)`` (never Python's ``hash``)."""
    digest = hashlib.blake2b(repr(key).encode("utf-8"), digest_size=16).digest()
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(digest, "little")))


def skill_overlap(memory_skills: Sequence[str], task_skills: Sequence[str]) -> float:
    """Jaccard overlap of two skill sets; 0 when both are empty."""
    a, b = set(memory_skills), set(task_skills)
    union = a | b
    return len(a & b) / len(union) if union else 0.0


@dataclasses.dataclass(frozen=True)
class Episode:
    """What the simulator decided for one (seed, task, memory)."""

    p0: float
    p: float
    overlap: float | None  # None without memory
    harmful: bool  # a memory was injected and its overlap is below the threshold
    success: bool


def decide(params: SimParams, seed: int, task: Task, memory_skills: Sequence[str] | None) -> Episode:
    difficulty_u, outcome_u = stable_rng("tokenworth-sim", seed, task.env, task.sample_index).random(2)
    lo, hi = params.p0_range(task.env)
    p0 = lo + (hi - lo) * float(difficulty_u) - params.skill_penalty * max(0, len(task.skill_list) - 1)
    overlap: float | None = None
    harmful = False
    p = p0
    if memory_skills is not None:
        overlap = skill_overlap(memory_skills, task.skill_list)
        harmful = overlap < params.harm_threshold
        p = p0 + params.gain * overlap - (params.harm * (1.0 - overlap) if harmful else 0.0)
    p = min(params.p_ceil, max(params.p_floor, p))
    return Episode(p0=p0, p=p, overlap=overlap, harmful=harmful, success=bool(outcome_u < p))


# ---------------------------------------------------------------------------------------
# Reply text

_THOUGHTS = (
    "I need to work out exactly what the task asks for before acting.",
    "The key step here involves {skill}.",
    "I will keep the action minimal and check the result.",
    "Let me make sure the conditions match the instruction.",
    "Following the earlier experience, I will reuse its approach based on {memory_skill}.",
    "That experience handled a similar request, so the same pattern should apply here.",
    "I should double-check every condition and the expected output format once more.",
)


def _thought(task: Task, episode: Episode, memory_skills: Sequence[str] | None, params: SimParams) -> str:
    if episode.harmful:
        count = params.thought_sentences_harmful
    elif episode.overlap is not None:
        count = params.thought_sentences_helpful
    else:
        count = params.thought_sentences_base
    if count == 0:
        return ""
    skill = task.skill_list[0] if task.skill_list else "the data"
    memory_skill = sorted(memory_skills)[0] if memory_skills else "a related task"
    # a harmful memory pulls the reasoning towards the memory's own skills
    order = (4, 5, 0, 6, 1, 2) if episode.harmful else (0, 1, 2, 3, 6)
    sentences = [_THOUGHTS[i].format(skill=skill, memory_skill=memory_skill) for i in order]
    while len(sentences) < count:
        sentences += sentences
    return "Thought: " + " ".join(sentences[:count]) + "\n"


def last_observation(conversation: Conversation) -> str:
    """The content of the last user turn (the environment's latest observation)."""
    if not conversation or conversation[-1].get("role") != "user":
        raise BackboneError("the simulated backbone expects the conversation to end with a user turn")
    return str(conversation[-1].get("content", ""))


def _observed_rows(observation: str) -> str:
    """The row list inside a DB observation (``[(1, 'x'), …]``), else the text itself."""
    text = observation.strip()
    start, end = text.find("["), text.rfind("]")
    if start != -1 and end > start:
        return text[start : end + 1]
    return text.splitlines()[0] if text else "[]"


# Ordered, first-match perturbations that keep a query plausible but change its meaning.
_SQL_PERTURBATIONS = (
    (r"\bDESC\b", "ASC"),
    (r"\bASC\b", "DESC"),
    (r"\bMAX\(", "MIN("),
    (r"\bMIN\(", "MAX("),
    (r" >= ", " < "),
    (r" <= ", " > "),
    (r" > ", " < "),
    (r" < ", " > "),
)


def _quoted(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name}`"


def wrong_sql(task: DBTask, attempt: int) -> str:
    """A plausible wrong query: the gold SQL perturbed once, then unrelated lookups."""
    candidates: list[str] = []
    for pattern, replacement in _SQL_PERTURBATIONS:
        perturbed = re.sub(pattern, replacement, task.answer_sql, count=1, flags=re.IGNORECASE)
        if perturbed != task.answer_sql:
            candidates.append(perturbed)
            break
    table = _quoted(task.table.name)
    candidates += [f"SELECT * FROM {table} LIMIT 1;", f"SELECT COUNT(*) FROM {table};"]
    return candidates[min(attempt, len(candidates) - 1)]


def _sql_operation(sql: str) -> str:
    return f"Action: Operation\n```sql\n{sql.strip()}\n```"


def db_reply(task: DBTask, episode: Episode, round_index: int, conversation: Conversation, params: SimParams) -> str:
    operations = 1 if episode.success or not episode.harmful else 1 + params.harmful_extra_rounds
    if round_index < operations:
        sql = task.answer_sql if episode.success else wrong_sql(task, round_index)
        return _sql_operation(sql)
    rows = _observed_rows(last_observation(conversation))
    return f"Action: Answer\nFinal Answer: {rows}"


_WRONG_COMMANDS = ("ls -la", "pwd && ls -la /tmp", "echo \"checking\" && whoami")


def os_reply(task: OSTask, episode: Episode, round_index: int, params: SimParams) -> str:
    commands = 1 if episode.success or not episode.harmful else 1 + params.harmful_extra_rounds
    if round_index >= commands:
        return "Act: finish"
    if episode.success and task.ground_truth is not None:
        script = task.ground_truth.script
    else:
        script = _WRONG_COMMANDS[min(round_index, len(_WRONG_COMMANDS) - 1)]
    return f"Act: bash\n```bash\n{script.strip()}\n```"


_KG_VARIABLE_TOOLS = ("get_neighbors", "intersection", "argmax", "argmin", "count")


def kg_calls(task: KGTask) -> list[str]:
    """The gold ``action_list`` with entity MIDs named by their ``entity_dict`` keys."""
    name_of: dict[str, str] = {}
    for name, mid in task.entity_dict.items():
        name_of.setdefault(mid, name)  # the first name, as agent.envs.kg.gold_replies does
    calls = []
    for action in task.action_list:
        match = re.fullmatch(r"\s*(\w+)\((.*)\)\s*", action)
        if not match:
            raise BackboneError(f"{task.task_id}: cannot parse gold action {action!r}")
        args = [name_of.get(arg.strip(), arg.strip()) for arg in match.group(2).split(",")]
        calls.append(f"{match.group(1)}({', '.join(args)})")
    return calls


def _variables_made(calls: Sequence[str]) -> int:
    return sum(call.split("(", 1)[0].strip() in _KG_VARIABLE_TOOLS for call in calls)


def _kg_gold_replies(task: KGTask) -> list[str]:
    """The KG environment's own gold replies when it provides them, else our rendering."""
    try:
        from agent.envs.kg import gold_replies  # type: ignore[attr-defined]
    except ImportError:
        calls = kg_calls(task)
        return [f"Action: {c}" for c in calls] + [f"Final Answer: #{_variables_made(calls) - 1}"]
    return list(gold_replies(task))


def kg_reply(task: KGTask, episode: Episode, round_index: int, params: SimParams) -> str:
    if episode.success:
        replies = _kg_gold_replies(task)
        return replies[min(round_index, len(replies) - 1)]
    calls = kg_calls(task)
    prefix = calls[: max(1, len(calls) // 2)]
    if episode.harmful:  # wasted exploration before the (wrong) path
        prefix = [calls[0]] * params.harmful_extra_rounds + prefix
    if round_index < len(prefix):
        return f"Action: {prefix[round_index]}"
    made = _variables_made(prefix)
    return f"Final Answer: #{made - 1 if made else 0}"


# ---------------------------------------------------------------------------------------
# The backbone


def _apply_stop(text: str, stop: Sequence[str] | None) -> tuple[str, str]:
    """``(text cut at the earliest stop string, that stop string or "")``; the stop string is not
    in the returned text (as vLLM and OpenAI do), but its tokens were decoded."""
    cuts = sorted((text.find(s), s) for s in (stop or ()) if s and s in text)
    return (text[: cuts[0][0]], cuts[0][1]) if cuts else (text, "")


class SimBackbone:
    """The simulated backbone (see the module docstring for its generative model)."""

    name = "sim"

    def __init__(self, params: SimParams | None = None, seed: int = 0, eos_tokens: int | None = None) -> None:
        """``eos_tokens`` overrides ``params.eos_tokens``; the CLI passes it, so the token rule is
        part of a sim run's identity and a run counted under another rule is not resumed."""
        self.params = params or SimParams()
        if eos_tokens is not None:
            self.params = dataclasses.replace(self.params, eos_tokens=int(eos_tokens))
        self.seed = int(seed)
        self._tokens = token_counter(self.params.tokenizer_model)

    def episode(self, task: Task, memory_skills: Sequence[str] | None, seed: int | None = None) -> Episode:
        return decide(self.params, self.seed if seed is None else seed, task, memory_skills)

    def reply(self, conversation: Conversation, item: Mapping[str, Any]) -> str:
        """The full (uncapped) reply text for one item."""
        if item.get("aux") is not None:
            return sim_aux.reply(_aux_task(item), item, self.params)
        task, round_index, memory_skills, seed = _unpack(item)
        episode = self.episode(task, memory_skills, seed)
        if isinstance(task, DBTask):
            action = db_reply(task, episode, round_index, conversation, self.params)
        elif isinstance(task, OSTask):
            action = os_reply(task, episode, round_index, self.params)
        else:
            action = kg_reply(task, episode, round_index, self.params)
        thought = _thought(task, episode, memory_skills, self.params) if round_index == 0 else ""
        return thought + action

    def generate(
        self,
        conversations: Sequence[Conversation],
        max_tokens: Sequence[int],
        stop: Sequence[str] | None = None,
        *,
        meta: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Generation]:
        if meta is None:
            raise BackboneError("the simulated backbone needs meta (task, memory_skills, round) for every item")
        if not len(conversations) == len(max_tokens) == len(meta):
            raise ValueError(
                f"conversations ({len(conversations)}), max_tokens ({len(max_tokens)}) and meta ({len(meta)}) "
                "must have the same length"
            )
        results = []
        for conversation, cap, item in zip(conversations, max_tokens, meta):
            if int(cap) < 1:
                raise ValueError(f"max_tokens must be at least 1, got {cap}")
            results.append(self._finish(self.reply(conversation, item), int(cap), stop))
        return results

    def _finish(self, reply: str, cap: int, stop: Sequence[str] | None) -> Generation:
        """Count as an engine would: the text, then the stop string's tokens or the EOS token.

        Whatever does not fit the cap is not decoded: a reply of exactly ``cap`` text tokens ends
        by length, without its EOS, as vLLM's does.
        """
        text, matched = _apply_stop(reply, stop)
        decoded = self._tokens.count(text + matched) + (0 if matched else self.params.eos_tokens)
        if decoded <= cap:
            return Generation(text=text, output_tokens=decoded, finish_reason="stop")
        cut_text, _, _ = self._tokens.truncate(text, cap)
        return Generation(text=cut_text, output_tokens=cap, finish_reason="length")


def _aux_task(item: Mapping[str, Any]) -> Task:
    task = item.get("task")
    if not isinstance(task, (DBTask, OSTask, KGTask)):
        raise BackboneError(f"simulated backbone: auxiliary call {item.get('aux')!r} needs meta['task'], got {type(task)}")
    return task


def _unpack(item: Mapping[str, Any]) -> tuple[Task, int, tuple[str, ...] | None, int | None]:
    try:
        task, round_index = item["task"], int(item["round"])
    except KeyError as exc:
        raise BackboneError(f"simulated backbone: meta item lacks {exc}; it needs task and round") from exc
    if not isinstance(task, (DBTask, OSTask, KGTask)):
        raise BackboneError(f"simulated backbone: meta['task'] must be a DBTask, OSTask or KGTask, got {type(task)}")
    if round_index < 0:
        raise BackboneError(f"simulated backbone: meta['round'] must be >= 0, got {round_index}")
    skills = item.get("memory_skills")
    seed = item.get("seed")
    return task, round_index, (tuple(skills) if skills is not None else None), (int(seed) if seed is not None else None)
