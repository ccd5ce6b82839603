"""The simulator's probability model: task difficulty, the memory's effect through skills, the outcome.

Every parameter is a field of :class:`SimParams`; the model itself is described in
:mod:`tokenworth_agent.sim` (points 1-3).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Mapping, Sequence

import numpy as np

from tokenworth_agent.tasks import Task
from tokenworth_agent.sim.tokens import DEFAULT_TOKENIZER_MODEL


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
    there (78.0% under the default per-call accounting; ``bench/tokenworth_bench/budget_ceiling.py``).

    A benchmark's ``sim_reply`` is given these (``params``); most replies read none of them but
    ``harmful_extra_rounds``.

    Attributes:
        p0_ranges: benchmark name -> (lo, hi), replacing that benchmark's ``sim_p0_range``.
        skill_penalty: the base probability lost per skill beyond a task's first.
        gain: "a", the success bonus per unit of skill overlap J.
        harm: "b", the penalty for a memory whose skills barely overlap.
        harm_threshold: an injected memory with J below it is harmful.
        p_floor: the least success probability.
        p_ceil: the most success probability.
        thought_sentences_base: sentences of round 0's ``Thought:`` line without memory.
        thought_sentences_helpful: ... with a helpful memory.
        thought_sentences_harmful: ... with a harmful one.
        harmful_extra_rounds: the wrong rounds a harmful memory that leads to a failure costs more.
        aux_items_max: lines of a notes reply to an auxiliary call.
        aux_match_overlap: the skill overlap J at which shown text counts as about the same thing.
        tokenizer_model: the tokenizer the replies are counted with.
        eos_tokens: the end-of-sequence tokens a reply that ends by itself also costs.
    """

    # The base success probability's range per benchmark is the benchmark's own (Benchmark.sim_p0_range: DB
    # (0.25, 0.90), OS (0.40, 0.95), KG (0.05, 0.60), BigCodeBench (0.10, 0.78), ALFWorld (0.40, 0.95));
    # p0_ranges replaces it by benchmark name.
    p0_ranges: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict, hash=False)
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
    # auxiliary calls (agent/tokenworth_agent/sim/aux.py); fixed with the rest, before any method comparison
    aux_items_max: int = 2  # lines of a notes reply (facts, reflections, insights)
    aux_match_overlap: float = 0.5  # skill overlap J at which shown text counts as "about the same thing"
    tokenizer_model: str = DEFAULT_TOKENIZER_MODEL
    # The token rule every backbone shares: a reply that ends by itself also decodes the
    # end-of-sequence token (Qwen2.5: <|im_end|>), which vLLM's len(token_ids) counts.
    eos_tokens: int = 1

    def __post_init__(self) -> None:
        for name, (lo, hi) in self.p0_ranges.items():
            if not 0.0 <= lo <= hi <= 1.0:
                raise ValueError(f"p0_ranges[{name!r}] must satisfy 0 <= lo <= hi <= 1, got {(lo, hi)}")
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
        """The base success probability's range on ``env``: ``p0_ranges[env]``, else its benchmark's own; a benchmark
        that brings no simulated replies cannot run here (one line)."""
        if env in self.p0_ranges:
            return self.p0_ranges[env]
        from tokenworth_agent.core.plugins import benchmark

        found = benchmark(env).sim_p0_range
        if found is None:
            raise ValueError(f"the {env} benchmark brings no simulated replies, so it cannot run on --backbone sim; "
                             "use --backbone vllm or openai")
        return tuple(found)



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
    """What the simulator decided for one (seed, task, memory): what a benchmark's ``sim_reply`` acts out.

    Attributes:
        p0: the task's base success probability (from its benchmark's ``sim_p0_range`` and its skills).
        p: the success probability with the injected memory's effect.
        overlap: the skill overlap J of the injected memory and the task, None without memory.
        harmful: a memory was injected and its overlap is below the harm threshold (a harmful memory that leads
            to a failure costs ``SimParams.harmful_extra_rounds`` more wrong rounds).
        success: the decision: the replies must make the judge pass exactly when it is true.
    """

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



__all__ = ["Episode", "SimParams", "decide", "skill_overlap", "stable_rng"]
