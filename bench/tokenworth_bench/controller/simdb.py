"""The simulated DB stream in JAX, for sweeps and notebooks: no LLM, no database.

**The backbone is simulated.** Success is drawn from the same skill-overlap model as the
simulated backbone (:mod:`tokenworth_agent.sim`, :class:`SimParams` defaults), evaluated
inside ``tw.run`` as a ``reward_fn``:

* task i has a base success probability ``p0_i`` (its difficulty) and an outcome uniform
  ``v_i``, both from ``stable_rng("tokenworth-sim", seed, "db", i)`` exactly as the
  simulator draws them;
* if the controller injects the memory of source task j, ``J = |S_j ∩ S_i| / |S_j ∪ S_i|``
  (Jaccard overlap of the tasks' ``skill_list``), and
  ``p = clip(p0_i + gain·J − harm·(1 − J)·[J < harm_threshold], p_floor, p_ceil)``;
  with nothing injected, ``p = clip(p0_i)``;
* success iff ``v_i < p``.

So for the same seed, task and memory, the outcome equals ``tokenworth_agent.sim.decide``'s
(the tests check this). What it leaves out: the token budget (O_max = 128 cuts many real
DB answers) and the real environment's grading, so absolute success rates are not the
paper's; only the *shape* of hyperparameter effects is comparable.

Memory ids are source-task indices: task i offers, on success, a memory keyed by its own
featurised instruction with id i. The skill table (a multi-hot matrix over the stream's
skills), ``p0`` and ``v`` are closure constants of the reward function.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import tokenworth_jax as tw

REPO = Path(__file__).resolve().parents[3]


def data_dir() -> Path:
    """``TOKENWORTH_DATA_DIR``, else ``../shared/data/lifelongagentbench`` next to the repo."""
    env = os.environ.get("TOKENWORTH_DATA_DIR")
    return Path(env) if env else REPO.parent / "shared" / "data" / "lifelongagentbench"


@dataclasses.dataclass(frozen=True)
class SimStream:
    instructions: list[str]
    skills: list[tuple[str, ...]]
    skill_names: list[str]
    skill_table: np.ndarray  # (T, n_skills) 0/1
    p0: np.ndarray  # (T,)
    outcome_u: np.ndarray  # (T,)
    queries: np.ndarray  # (T, D) featurised instructions
    params: Any  # SimParams
    seed: int

    def events(self) -> tw.Event:
        T = len(self.instructions)
        q = jnp.asarray(self.queries)
        return tw.Event(query=q, reward=jnp.zeros((T,), jnp.int32), memory=q,
                        memory_id=jnp.arange(T, dtype=jnp.int32))


def load_stream(n_tasks: int | None = None, *, dim: int = 512, seed: int = 0,
                directory: str | os.PathLike[str] | None = None, env: str = "db") -> SimStream:
    """The first ``n_tasks`` tasks of ``env`` (DB: all 500 by default), featurised, with the sim's draws."""
    from tokenworth_agent.sim import SimParams, stable_rng
    from tokenworth_agent.tasks import load_tasks

    tasks = load_tasks(env, directory or data_dir())[:n_tasks]
    params = SimParams()
    lo, hi = params.p0_range(env)
    names = sorted({s for t in tasks for s in t.skill_list})
    index = {s: k for k, s in enumerate(names)}
    table = np.zeros((len(tasks), len(names)), np.float32)
    p0, v = np.zeros(len(tasks)), np.zeros(len(tasks))
    for i, t in enumerate(tasks):
        table[i, [index[s] for s in set(t.skill_list)]] = 1.0
        difficulty_u, outcome_u = stable_rng("tokenworth-sim", seed, t.env, t.sample_index).random(2)
        p0[i] = lo + (hi - lo) * float(difficulty_u) - params.skill_penalty * max(0, len(t.skill_list) - 1)
        v[i] = outcome_u
    instructions = [t.instruction for t in tasks]
    return SimStream(instructions=instructions, skills=[tuple(t.skill_list) for t in tasks], skill_names=names,
                     skill_table=table, p0=p0, outcome_u=v, queries=tw.featurize(instructions, dim), params=params,
                     seed=seed)


def overlap(table: jax.Array, task: jax.Array, memory: jax.Array) -> jax.Array:
    """J: the Jaccard overlap of two rows of a multi-hot skill table (0 when both are empty)."""
    s_i, s_j = table[task], table[jnp.maximum(memory, 0)]
    inter = jnp.sum(s_i * s_j)
    union = jnp.sum(s_i) + jnp.sum(s_j) - inter
    return jnp.where(union > 0, inter / jnp.maximum(union, 1.0), 0.0)


def probability(params: Any, p0: jax.Array, j: jax.Array, injected: jax.Array) -> jax.Array:
    """The sim's success probability from the task's ``p0`` and the injected memory's overlap ``j``."""
    harmful = j < params.harm_threshold
    with_memory = p0 + params.gain * j - jnp.where(harmful, params.harm * (1.0 - j), 0.0)
    return jnp.clip(jnp.where(injected, with_memory, p0), params.p_floor, params.p_ceil)


def success_probability(stream: SimStream, task: jax.Array, memory: jax.Array) -> jax.Array:
    """p for task index ``task`` with the memory of source task ``memory`` (-1: none)."""
    j = overlap(jnp.asarray(stream.skill_table), task, memory)
    return probability(stream.params, jnp.asarray(stream.p0, jnp.float32)[task], j, memory >= 0)


def reward_fn(stream: SimStream) -> Callable[[tw.Event, tw.Selection], jax.Array]:
    """A ``reward_fn`` for ``tw.run``/``tw.step``: the simulated outcome of this task.

    The controller's programs key on the function (hashed by identity): build it once per stream.
    """
    v = jnp.asarray(stream.outcome_u, jnp.float32)

    def reward(event: tw.Event, selection: tw.Selection) -> jax.Array:
        task = event.memory_id  # a task's own memory id is its index
        p = success_probability(stream, task, selection.memory_id)
        return (v[task] < p).astype(jnp.int32)

    return reward


def sweep(stream: SimStream, configs: Sequence[tw.HParams], spec: tw.Spec) -> tuple[tw.State, tw.StepOutput]:
    """All configurations over the stream in one compiled ``tw.run_batched`` call."""
    hps = tw.stack_hparams(list(configs))
    fn = reward_fn(stream)
    events = stream.events()

    @jax.jit
    def go(hps: tw.HParams, events: tw.Event) -> tuple[tw.State, tw.StepOutput]:
        return tw.run_batched(jax.vmap(functools.partial(tw.init, spec))(hps), events, hps, spec, fn)

    return jax.block_until_ready(go(hps, events))


def run_chunks(stream: SimStream, hp: tw.HParams, spec: tw.Spec, chunk: int) -> list[tuple[tw.State, tw.StepOutput]]:
    """One configuration over the stream, ``chunk`` tasks per ``tw.run``; the state after each
    chunk and its outputs (for plots of how the state evolves)."""
    fn = reward_fn(stream)
    events = stream.events()
    state = tw.init(spec, hp)
    out = []
    T = events.query.shape[0]
    for start in range(0, T, chunk):
        part = jax.tree_util.tree_map(lambda x: x[start:start + chunk], events)
        state, o = tw.run(state, part, hp, spec, fn)
        out.append((state, o))
    return out
