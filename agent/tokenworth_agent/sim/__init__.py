"""The simulated backbone: a documented generative model that acts on the real environments.

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
   counted with the real Qwen2.5 tokenizer (see :mod:`tokenworth_agent.sim.tokens`), plus the
   end-of-sequence token (``eos_tokens``) when the reply ends by itself, as vLLM counts; a reply
   that does not fit its ``max_tokens`` is cut to exactly that many tokens (``"length"``).

Each request comes with its :class:`~tokenworth_agent.sim.facts.Facts` (the task record, the injected
memory's source-task ``skill_list`` or ``None`` when nothing is injected (an empty tuple is a
memory with no skills: J = 0), the 0-based round, the run's seed); see :mod:`tokenworth_agent.sim.facts`
for how they reach the simulator and no other backbone.

6. **Auxiliary calls.** A request whose facts name an ``aux`` purpose (a method's reflection,
   fact extraction, skill writing, …; :mod:`tokenworth_agent.policies.auxiliary`) is answered by
   :mod:`tokenworth_agent.sim.aux`: text in the grammar its :class:`~tokenworth_agent.sim.facts.AuxHint` names,
   carrying the skills of the task it is about, counted and capped like every reply.

The package sits below the policies and the environments and imports neither
(docs/layout.md): :mod:`~tokenworth_agent.sim.model` holds the probability model, :mod:`~tokenworth_agent.sim.replies`
the reply texts, :mod:`~tokenworth_agent.sim.aux` the auxiliary replies, :mod:`~tokenworth_agent.sim.backbone` the
backbone, :mod:`~tokenworth_agent.sim.tokens` the token counts, :mod:`~tokenworth_agent.sim.facts` the seam.
"""

from tokenworth_agent.sim.backbone import SimBackbone
from tokenworth_agent.sim.facts import AuxHint, FactReader, Facts
from tokenworth_agent.sim.model import Episode, SimParams, decide, skill_overlap, stable_rng

__all__ = ["AuxHint", "Episode", "FactReader", "Facts", "SimBackbone", "SimParams", "decide", "skill_overlap",
           "stable_rng"]
