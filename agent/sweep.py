"""Multi-stream sweeps: N TokenWorth configurations as N lockstep streams.

All N streams process the same task at the same time. Per task:

1. one compiled :func:`tokenworth_jax.select_batched` over the stacked controller states and
   stacked hyperparameters (the query vector is shared);
2. each stream builds its episode (its own environment instance, its own injected memory);
   every round, the pending backbone calls of all streams go out as **one batched**
   ``generate`` (streams that finished early drop out of the batch);
3. one compiled :func:`tokenworth_jax.finish_task_batched`: observe with the N rewards, offer
   (masked to the streams whose task succeeded and produced a memory; the admission runs only
   if some stream offers) and end_task.

The controller's batching strategy is ``tokenworth_jax``'s ``"auto"``: a loop over the
configurations inside the compiled call on CPU, ``vmap`` on accelerators (docs/performance.md).

The stream with a configuration equal to the preset makes exactly the decisions of
``tokenworth run --methods tokenworth`` (same featurisation, same pure functions).

Grids: ``--grid NAME=v1,v2`` (repeatable; the Cartesian product is run) over the fields of
:class:`tokenworth_jax.HParams`; ``eta`` is accepted for ``eta_max``. ``--table-a3`` is the
one-at-a-time sensitivity grid of spec §9 (the preset plus 21 single changes: 22 streams).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from agent.backbones.base import Backbone
from agent.budget import EMPTY_BLOCK, Budget, build_injection_block
from agent.checkpoint import atomic_write_json, atomic_write_text
from agent.memory import Memory, build_memory
from agent.runner import Episode, make_environment

ALIASES = {"eta": "eta_max", "lambda": "lambda_w", "beta": "beta_w"}

# Spec §9, sensitivity on DB: each hyperparameter varied alone around the preset.
TABLE_A3: dict[str, tuple[float, ...]] = {
    "eta_max": (0.05, 0.10, 0.20, 0.30),
    "lambda_w": (0.03, 0.3, 1.0),
    "beta_w": (0.25, 0.75, 1.0),
    "base_interval": (25, 100),
    "beta_m": (0.10, 0.50, 0.75),
    "krr_interval": (25, 100),
    "agop_interval": (100, 400),
    "gamma": (0.5, 2.0),
}


class SweepError(ValueError):
    """A grid that cannot be run (unknown name, bad value, empty)."""


def _fields() -> tuple[tuple[str, ...], frozenset[str]]:
    from tokenworth_jax.config import INT_FIELDS, HParams

    return HParams._fields, INT_FIELDS


def parse_grid_item(item: str) -> tuple[str, list[float | int]]:
    from tokenworth_jax.config import check_value

    fields, int_fields = _fields()
    name, sep, values = item.partition("=")
    name = ALIASES.get(name.strip(), name.strip())
    if not sep or not values.strip():
        raise SweepError(f"--grid {item!r}: expected NAME=v1,v2,...")
    if name not in fields:
        raise SweepError(f"--grid {item!r}: unknown hyperparameter {name!r}; known: {', '.join(fields)}")
    parsed: list[float | int] = []
    for raw in values.split(","):
        try:
            number = float(raw)
        except ValueError:
            raise SweepError(f"--grid {item!r}: {raw!r} is not a number") from None
        if name in int_fields:
            if number != int(number):
                raise SweepError(f"--grid {item!r}: {name} takes integers, got {raw!r}")
            number = int(number)
        try:  # the same range check as tokenworth_jax.hparams
            check_value(name, number)
        except ValueError as exc:
            raise SweepError(f"--grid {item!r}: {exc}") from None
        parsed.append(number)
    return name, parsed


def configs_from_grid(items: Sequence[str]) -> list[dict[str, float | int]]:
    """The Cartesian product of the grid; no items gives the preset alone."""
    axes = [parse_grid_item(i) for i in items]
    names = [n for n, _ in axes]
    if len(set(names)) != len(names):
        raise SweepError(f"--grid names a hyperparameter twice: {names}")
    return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in axes))]


def table_a3_configs(env: str = "db") -> list[dict[str, float | int]]:
    return [{}] + [{name: value} for name, values in TABLE_A3.items() for value in values]


def label(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "preset"


# ------------------------------------------------------------------------- batched controller
class StackedControllers:
    """N controller states stacked on axis 0 and one :class:`~tokenworth_jax.MemoryTable` per stream.

    A thin wrapper over the batched pure API: :meth:`select` and :meth:`finish` are one
    compiled call each over all streams. :meth:`state_dict` / :meth:`load_state_dict` hold
    everything a resumed sweep needs of the controllers.
    """

    def __init__(self, env: str, configs: Sequence[dict[str, Any]], capacity: int) -> None:
        import tokenworth_jax as tw

        try:
            specs_hps = [tw.preset(env, **config) for config in configs]
            self.spec = specs_hps[0][0]._replace(capacity=capacity)
            self.hp = tw.stack_hparams([hp for _, hp in specs_hps])
        except ValueError as exc:
            raise SweepError(str(exc)) from exc
        self.state = tw.init_batched(self.spec, self.hp)
        self.tables: list[Any] = [tw.MemoryTable() for _ in configs]

    def select(self, query_vec: np.ndarray) -> Any:
        """Host copy of the N selections (leading axis N)."""
        import tokenworth_jax as tw

        self.state, selection = tw.select_batched(self.state, jnp.asarray(query_vec, self.spec.float_dtype), self.hp,
                                                  self.spec)
        return jax.device_get(selection)

    def selected(self, selection: Any, i: int) -> Any:
        """Stream ``i``'s selected memory payload, or None."""
        return self.tables[i].get(int(selection.memory_id[i])) if int(selection.chosen[i]) >= 0 else None

    def finish(self, rewards: np.ndarray, vectors: np.ndarray, payloads: Sequence[Any]) -> Any:
        """observe + offer (streams whose payload is not None) + end_task; applies the decisions."""
        import tokenworth_jax as tw

        mask = np.asarray([p is not None for p in payloads])
        ids = np.asarray([t.next_id for t in self.tables], np.int32)
        self.state, decision = tw.finish_task_batched(
            self.state, jnp.asarray(rewards, jnp.int32), jnp.asarray(vectors, self.spec.float_dtype),
            jnp.asarray(ids), jnp.asarray(mask), self.hp, self.spec)
        decision = jax.device_get(decision)
        for i, payload in enumerate(payloads):
            if payload is not None:
                self.tables[i].apply(payload.with_id(int(ids[i])), written=int(decision.slot[i]) >= 0,
                                     evicted_id=int(decision.evicted_id[i]))
        return decision

    def state_dict(self, encode: Any = None) -> dict[str, Any]:
        from tokenworth_jax.state import state_to_numpy

        return {"state": state_to_numpy(self.state), "tables": [t.state_dict(encode) for t in self.tables]}

    def load_state_dict(self, data: dict[str, Any], decode: Any = None) -> None:
        import tokenworth_jax as tw
        from tokenworth_jax.state import state_from_numpy

        if len(data["tables"]) != len(self.tables):
            raise SweepError(f"sweep checkpoint has {len(data['tables'])} streams, this sweep {len(self.tables)}")
        self.state = state_from_numpy(self.state, data["state"])
        self.tables = [tw.MemoryTable.from_state_dict(t, decode) for t in data["tables"]]


# ------------------------------------------------------------------------- the sweep
@dataclasses.dataclass
class StreamResult:
    config: dict[str, Any]
    rewards: list[int] = dataclasses.field(default_factory=list)
    tokens: list[int] = dataclasses.field(default_factory=list)
    injected: int = 0
    admissions: dict[str, int] = dataclasses.field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        n = max(1, len(self.rewards))
        return {"config": self.config, "label": label(self.config), "tasks": len(self.rewards),
                "sr": 100.0 * sum(self.rewards) / n, "output_tok": sum(self.tokens) / n,
                "injection_rate": self.injected / n, "admissions": dict(sorted(self.admissions.items()))}


@dataclasses.dataclass
class SweepResult:
    env: str
    seed: int
    streams: list[StreamResult]
    seconds: float
    batch_sizes: list[int]


def run_sweep(env_name: str, tasks: Sequence[Any], backbone: Backbone, budget: Budget,
              configs: Sequence[dict[str, Any]], seed: int, *, kg_endpoint: str | None = None,
              envs: Sequence[Any] | None = None, progress: bool = False) -> SweepResult:
    """Run every configuration over ``tasks`` in lockstep; see the module docstring."""
    from tokenworth_jax import Admission, featurize

    if not configs:
        raise SweepError("the sweep has no configurations")
    started = time.perf_counter()
    n = len(configs)
    ctl = StackedControllers(env_name, configs, budget.bank_capacity)
    environments = list(envs) if envs is not None else [make_environment(env_name, budget, kg_endpoint=kg_endpoint)
                                                         for _ in range(n)]
    if len(environments) != n:
        raise SweepError(f"need one environment per stream ({n}), got {len(environments)}")
    results = [StreamResult(dict(c)) for c in configs]
    batch_sizes: list[int] = []
    from tqdm import tqdm

    bar = tqdm(total=len(tasks), desc=f"sweep x{n}", unit="task", disable=not progress)
    try:
        for task in tasks:
            selection = ctl.select(featurize(task.query_text, ctl.spec.dim))
            episodes = []
            injected_memories: list[list[Memory]] = []
            for i in range(n):
                memory = ctl.selected(selection, i)
                if memory is not None:
                    block = build_injection_block([(memory.memory_id, memory.text)], budget)
                    injected = [memory] if block.memory_ids else []
                else:
                    block, injected = EMPTY_BLOCK, []
                skills = tuple(memory.skills) if injected else None
                episodes.append(Episode(environments[i], task, block, skills, budget, seed))
                injected_memories.append(injected)
                results[i].injected += bool(injected)
            while True:
                pending = [(e, r) for e in episodes if (r := e.request()) is not None]
                if not pending:
                    break
                batch_sizes.append(len(pending))
                generations = backbone.generate([r.conversation for _, r in pending], [r.max_tokens for _, r in pending],
                                                meta=[r.meta for _, r in pending])
                for (episode, request), generation in zip(pending, generations):
                    episode.feed(request, generation)
            rewards = np.asarray([e.judge() for e in episodes], dtype=np.int32)
            candidates = [build_memory(env_name, task, e.turns, int(r), budget) for e, r in zip(episodes, rewards)]
            vectors = featurize([c.key_text if c else "" for c in candidates], ctl.spec.dim)
            decision = ctl.finish(rewards, vectors, candidates)
            for i, candidate in enumerate(candidates):
                if candidate is not None:
                    code = Admission(int(decision.code[i])).name
                    results[i].admissions[code] = results[i].admissions.get(code, 0) + 1
            for i, episode in enumerate(episodes):
                results[i].rewards.append(int(rewards[i]))
                results[i].tokens.append(episode.ledger.total)
            bar.update(1)
    finally:
        bar.close()
        if envs is None:
            for environment in environments:
                environment.close()
    return SweepResult(env_name, seed, results, time.perf_counter() - started, batch_sizes)


def markdown(result: SweepResult) -> str:
    rows = [s.summary() for s in result.streams]
    preset = next((r for r in rows if not r["config"]), None)
    lines = [f"## TokenWorth sweep · {result.env.upper()} · seed {result.seed} · {len(result.streams)} configurations · "
             f"{rows[0]['tasks']} tasks · {result.seconds:.0f}s", "",
             "| Configuration | SR (%) | ΔSR vs preset | OutputTok | Injected (%) |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        delta = f"{r['sr'] - preset['sr']:+.1f}" if preset is not None else "—"
        lines.append(f"| {r['label']} | {r['sr']:.1f} | {delta} | {r['output_tok']:.1f} | {100 * r['injection_rate']:.1f} |")
    return "\n".join(lines) + "\n"


def write_sweep_results(result: SweepResult, out_dir: str | Path) -> str:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(result)
    atomic_write_text(out / "sweep.md", table)
    atomic_write_json(out / "sweep.json", {"env": result.env, "seed": result.seed, "seconds": result.seconds,
                                           "max_batch": max(result.batch_sizes, default=0),
                                           "streams": [s.summary() for s in result.streams],
                                           "rewards": [s.rewards for s in result.streams]})
    return table


__all__ = ["SweepError", "configs_from_grid", "table_a3_configs", "run_sweep", "write_sweep_results"]
