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

import contextlib
import dataclasses
import itertools
import json
import time
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from agent.backbones.base import Backbone
from agent.budget import EMPTY_BLOCK, Budget, build_injection_block
from agent import interrupt, runfolder
from agent.checkpoint import (CheckpointError, CheckpointWriter, atomic_write_json, atomic_write_text, durable_path,
                              load_checkpoint)
from agent.harness import DEFAULT_HARNESS, HarnessOptions
from agent.memory import Memory, build_memory
from agent.runner import Episode, config_digest, make_environment

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

    def __init__(self, env: str, configs: Sequence[dict[str, Any]], capacity: int, plus: bool = False) -> None:
        import tokenworth_jax as tw

        try:
            specs_hps = [tw.preset(env, **config) for config in configs]
            self.spec = specs_hps[0][0]._replace(capacity=capacity, plus=plus)  # plus: TokenWorth+ (opt-in)
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


class _Streams:
    """The sweep's host side between tasks: controllers (with their memory tables), per-stream results.

    Everything a resumed sweep needs lives here, and :meth:`state_dict` / :meth:`load_state_dict`
    round-trip it (the controllers through their own ``state_dict``).
    """

    def __init__(self, env_name: str, configs: Sequence[dict[str, Any]], budget: Budget, plus: bool = False,
                 harness: HarnessOptions = DEFAULT_HARNESS) -> None:
        n = len(configs)
        self.harness = harness
        self.ctl = StackedControllers(env_name, configs, budget.bank_capacity, plus=plus)
        self.results = [StreamResult(dict(c)) for c in configs]
        self.batch_sizes: list[int] = []
        self.next_index = 0
        self.seconds = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"controllers": self.ctl.state_dict(encode=Memory.as_dict),
                "results": [dataclasses.asdict(r) for r in self.results],
                "batch_sizes": list(self.batch_sizes), "next_index": self.next_index, "seconds": self.seconds}

    def load_state_dict(self, data: dict[str, Any]) -> None:
        self.ctl.load_state_dict(data["controllers"], decode=Memory.from_dict)
        self.results = [StreamResult(**r) for r in data["results"]]
        self.batch_sizes = list(data["batch_sizes"])
        self.next_index = int(data["next_index"])
        self.seconds = float(data["seconds"])

    def run_task(self, env_name: str, task: Any, environments: Sequence[Any], backbone: Backbone, budget: Budget,
                 seed: int) -> None:
        """One task on every stream: select, batched episodes, then observe + offer + end_task.

        ``interrupt.check()`` after every phase, as in :func:`agent.runner.run_task`.
        """
        from tokenworth_jax import Admission, featurize

        ctl, n = self.ctl, len(self.results)
        batch_sizes: list[int] = []
        selection = ctl.select(featurize(task.query_text, ctl.spec.dim))
        interrupt.check()
        episodes = []
        injected_count = []
        for i in range(n):
            memory = ctl.selected(selection, i)
            if memory is not None:
                block = build_injection_block([(memory.memory_id, memory.text)], budget)
                injected = [memory] if block.memory_ids else []
            else:
                block, injected = EMPTY_BLOCK, []
            skills = tuple(memory.skills) if injected else None
            episodes.append(Episode(environments[i], task, block, skills, budget, seed))
            injected_count.append(bool(injected))
        interrupt.check()
        while True:
            pending = [(e, r) for e in episodes if (r := e.request()) is not None]
            if not pending:
                break
            batch_sizes.append(len(pending))
            generations = backbone.generate([r.conversation for _, r in pending], [r.max_tokens for _, r in pending],
                                            meta=[r.meta for _, r in pending])
            interrupt.check()
            for (episode, request), generation in zip(pending, generations):
                episode.feed(request, generation)
            interrupt.check()
        rewards = np.asarray([e.judge() for e in episodes], dtype=np.int32)
        interrupt.check()
        candidates = [build_memory(env_name, task, e.turns, int(r), budget, status=e.status,
                                   memory_from=self.harness.memory_from, memory_format=self.harness.memory_format)
                      for e, r in zip(episodes, rewards)]
        vectors = featurize([c.key_text if c else "" for c in candidates], ctl.spec.dim)
        decision = ctl.finish(rewards, vectors, candidates)  # observe + offer + end_task, one call
        for i, candidate in enumerate(candidates):
            if candidate is not None:
                code = Admission(int(decision.code[i])).name
                self.results[i].admissions[code] = self.results[i].admissions.get(code, 0) + 1
        interrupt.check()
        for i, episode in enumerate(episodes):
            self.results[i].rewards.append(int(rewards[i]))
            self.results[i].tokens.append(episode.ledger.total)
            self.results[i].injected += injected_count[i]
        self.batch_sizes.extend(batch_sizes)
        self.next_index += 1


def run_sweep(env_name: str, tasks: Sequence[Any], backbone: Backbone, budget: Budget,
              configs: Sequence[dict[str, Any]], seed: int, *, kg_endpoint: str | None = None,
              envs: Sequence[Any] | None = None, progress: bool = False, out_dir: str | Path | None = None,
              settings: dict[str, Any] | None = None, overwrite: bool = False,
              stop_after: int | None = None, plus: bool = False,
              harness: HarnessOptions | None = None) -> SweepResult:
    """Run every configuration over ``tasks`` in lockstep; see the module docstring.

    ``plus`` runs TokenWorth+ controllers (docs/tokenworth-plus.md); grids over its ``plus_*``
    hyperparameters need it.

    With ``out_dir`` the sweep is resumable (:func:`prepare_sweep_folder`): the folder is locked,
    checked against ``settings`` (a folder holding a sweep with other settings is refused unless
    ``overwrite``), and a checkpoint is committed after every task, so a sweep killed at any
    point (``kill -9`` or Ctrl-C) carries on where it stopped and ends with the same results.
    ``stop_after`` runs at most that many tasks in this call. ``harness`` (the run's
    :class:`~agent.harness.HarnessOptions`) reaches the environments and the memory construction;
    its identity is part of the sweep's.
    """
    harness = harness or DEFAULT_HARNESS
    if not configs:
        raise SweepError("the sweep has no configurations")
    if not plus and any(k.startswith("plus_") for c in configs for k in c):
        raise SweepError("plus_* hyperparameters only act on TokenWorth+ controllers: pass --plus")
    if plus:  # a TokenWorth+ sweep is never resumed as a paper one, nor the reverse
        settings = {**(settings or {}), "plus": True}
    n = len(configs)
    if envs is not None and len(envs) != n:
        raise SweepError(f"need one environment per stream ({n}), got {len(envs)}")
    settings = {**(settings or {}), "harness": harness.identity(env_name)}
    identity = sweep_identity(env_name, tasks, backbone, budget, configs, seed, settings)
    with contextlib.ExitStack() as stack:
        guard = stack.enter_context(interrupt.InterruptGuard())
        streams = _Streams(env_name, configs, budget, plus=plus, harness=harness)
        checkpoint: Path | None = None
        if out_dir is not None:
            out = Path(out_dir)
            stack.enter_context(runfolder.locked(out / runfolder.LOCK, f"sweep folder {out}"))
            checkpoint = prepare_sweep_folder(out, identity, overwrite=overwrite)
            state = _load_sweep_checkpoint(checkpoint, identity)
            if state is not None:
                streams.load_state_dict(state["streams"])
        if streams.next_index >= len(tasks):
            return SweepResult(env_name, seed, streams.results, streams.seconds, streams.batch_sizes)
        environments = list(envs) if envs is not None else []
        if envs is None:
            stack.callback(lambda: [e.close() for e in environments])
            environments.extend(make_environment(env_name, budget, kg_endpoint=kg_endpoint, harness=harness)
                                for _ in range(n))
        from tqdm import tqdm

        bar = stack.enter_context(tqdm(total=len(tasks), initial=streams.next_index, desc=f"sweep x{n}",
                                       unit="task", disable=not progress))
        bar.set_postfix_str("compiling the controller…", refresh=True)
        writer = CheckpointWriter(checkpoint) if checkpoint is not None else None
        if writer is not None:
            stack.callback(writer.flush)  # the last checkpoint reaches the disk however the sweep stops
        processed = 0
        for index in range(streams.next_index, len(tasks)):
            if stop_after is not None and processed >= stop_after:
                break
            guard.check()
            started = time.perf_counter()
            streams.run_task(env_name, tasks[index], environments, backbone, budget, seed)
            streams.seconds += time.perf_counter() - started
            if writer is not None:
                finished = streams.next_index == len(tasks)
                with guard.deferred():  # a task is committed whole or not at all
                    writer.save({"identity": identity, "streams": streams.state_dict(), "finished": finished},
                                durable=finished)
            processed += 1
            bar.update(1)
            bar.set_postfix_str("", refresh=False)
    return SweepResult(env_name, seed, streams.results, streams.seconds, streams.batch_sizes)


# ------------------------------------------------------------------------- the sweep folder
SWEEP_CONFIG = "sweep-config.json"
SWEEP_CHECKPOINT = "sweep-checkpoint.pkl"
SWEEP_OUTPUTS = ("sweep.md", "sweep.json")


def sweep_identity(env_name: str, tasks: Sequence[Any], backbone: Backbone, budget: Budget,
                   configs: Sequence[dict[str, Any]], seed: int, settings: dict[str, Any] | None) -> dict[str, Any]:
    """What makes two sweeps the same: settings, configurations, budget, backbone and task ids."""
    identity = {"env": env_name, "seed": seed, "configs": [dict(c) for c in configs], "budget": budget.as_dict(),
                "backbone": getattr(backbone, "name", type(backbone).__name__),
                "task_ids": config_digest({"ids": [t.task_id for t in tasks]}), "settings": settings or {}}
    return json.loads(json.dumps(identity, default=str))


def _sweep_files(out: Path) -> list[Path]:
    return [out / SWEEP_CONFIG, out / SWEEP_CHECKPOINT, durable_path(out / SWEEP_CHECKPOINT),
            *(out / name for name in SWEEP_OUTPUTS), *sorted(out.glob(".sweep*.tmp"))]


def prepare_sweep_folder(out: Path, identity: dict[str, Any], *, overwrite: bool) -> Path:
    """Check the sweep folder against ``identity`` (lock held); returns the checkpoint path.

    * new or empty folder: becomes a sweep folder;
    * same settings: resumed; stale temp files of a killed checkpoint write are removed;
    * other settings: refused, unless ``overwrite`` (which deletes only the sweep's own files)
      or no task has run yet (e.g. the first attempt could not reach its server);
    * any other non-empty folder (no ``sweep-config.json``): refused; with ``overwrite``, a
      folder holding only an older sweep's ``sweep.md``/``sweep.json`` is taken over.
    """
    if out.exists() and not out.is_dir():
        raise SweepError(f"{out} is a file, not a folder; pass another --out")
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(".sweep-checkpoint*.tmp"):  # a kill mid-write left it; we hold the lock
        stale.unlink(missing_ok=True)
    config_path, checkpoint = out / SWEEP_CONFIG, out / SWEEP_CHECKPOINT
    ours = {p.name for p in _sweep_files(out)} | {runfolder.LOCK}
    foreign = sorted(p.name for p in out.iterdir() if p.name not in ours)
    if foreign:
        raise SweepError(f"{out} holds files that are not a sweep's ({', '.join(foreign[:5])}); pass another --out")
    existing: Any = None
    if config_path.exists():
        try:
            existing = json.loads(config_path.read_text())
        except (OSError, ValueError) as exc:
            raise SweepError(f"{config_path} is unreadable ({exc}); move it aside or pass another --out") from exc
    started = any(p.exists() for p in (checkpoint, durable_path(checkpoint), *(out / n for n in SWEEP_OUTPUTS)))
    if existing != identity and started:
        if not overwrite:
            what = (f"a sweep with other settings ({_first_difference(existing, identity)})" if existing is not None
                    else "an earlier sweep whose settings are unknown")
            raise SweepError(f"{out} holds {what}; pass another --out, or --overwrite to discard that sweep")
    if overwrite or existing != identity:
        for path in _sweep_files(out):
            path.unlink(missing_ok=True)
        atomic_write_json(config_path, identity)
    return checkpoint


def _first_difference(old: Any, new: dict[str, Any]) -> str:
    if not isinstance(old, dict):
        return "unreadable"
    keys = [k for k in new if old.get(k) != new.get(k)] + [k for k in old if k not in new]
    key = keys[0] if keys else "?"
    return f"{key}: {old.get(key)!r} there, {new.get(key)!r} now"[:300]


def _load_sweep_checkpoint(path: Path, identity: dict[str, Any]) -> dict[str, Any] | None:
    state = load_checkpoint(path)
    if state is not None and state.get("identity") != identity:
        raise CheckpointError(f"{path} belongs to another sweep; pass another --out, or --overwrite to discard it")
    return state


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
