"""``tokenworth sweep``: a TokenWorth grid, as a front end of the experiment engine.

A sweep is an experiment (:func:`tokenworth_agent.experiment.run_experiment`) whose streams are one
TokenWorth method (``tokenworth``, or ``tokenworth+`` with ``--plus``; any method with ``--method``) on one env and seed,
one stream per grid point. Every stream is a stream like any other: its own folder
(``<out>/tokenworth@eta_max=0.1``; the preset point is ``<out>/tokenworth``), per-task JSONL
records (so ``tokenworth show`` and the summaries read it), checkpoint and resume; every
round of every stream goes out in one batched model call per tick. A stream's records equal
those of ``tokenworth run --methods tokenworth`` with the same hyperparameters (and
``sweep --plus --seed S`` at the preset equals ``run --methods tokenworth+ --seed S``: the
exploration key is seeded with the run's seed in both).

Grids: ``--grid NAME=v1,v2`` (repeatable; the Cartesian product is run) over the fields of
:class:`tokenworth_jax.HParams`, the budget axes, the benchmark's options that change results and, with
``--method M``, M's declared parameters as ``M.NAME`` (:mod:`tokenworth_agent.experiment.streams`);
``--table-a3`` is the one-at-a-time sensitivity grid of spec §9 (the preset plus 21 single
changes: 22 streams). ``sweep.md`` / ``sweep.json`` summarise the streams: each configuration's SR with
its 95 % interval, and its paired difference to the preset (the same tasks and seed) with the paired 95 %
interval and a p-value, Holm-adjusted over the configurations (:mod:`tokenworth_agent.results.estimate`,
:func:`tokenworth_agent.results.compare.holm`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from tokenworth_agent.core.budget import Budget
from tokenworth_agent.storage.checkpoint import atomic_write_json, atomic_write_text
from tokenworth_agent.experiment.engine import ExperimentResult
from tokenworth_agent.experiment.streams import GridError, StreamSpec, expand, grid_points
from tokenworth_agent.results.record import TaskRecord

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

SweepError = GridError  # the name earlier versions raised


def configs_from_grid(items: Sequence[str]) -> list[dict[str, float | int]]:
    """The Cartesian product of the grid; no items gives the preset alone."""
    return grid_points(items)


def table_a3_configs(env: str = "db") -> list[dict[str, float | int]]:
    return [{}] + [{name: value} for name, values in TABLE_A3.items() for value in values]


def label(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "preset"


def sweep_streams(env: str, budget: Budget, configs: Sequence[dict[str, Any]], seed: int, *,
                  plus: bool = False, method: str | None = None, orders: Sequence[int] = (0,)) -> list[StreamSpec]:
    """One stream per configuration (heterogeneous points allowed, as in Table A3) of ``method`` (default:
    tokenworth, or tokenworth+ with ``plus``), per task order (``orders``; (0,): no order axis)."""
    if not configs:
        raise GridError("the sweep has no configurations")
    method = method or ("tokenworth+" if plus else "tokenworth")
    if method == "tokenworth" and any(k.startswith("plus_") for c in configs for k in c):
        raise GridError("plus_* hyperparameters only act on TokenWorth+ controllers: pass --plus")
    return expand([env], [method], [seed], {env: budget}, configs, orders)


# ------------------------------------------------------------------------- results
@dataclasses.dataclass
class StreamResult:
    config: dict[str, Any]
    rewards: list[int] = dataclasses.field(default_factory=list)
    tokens: list[int] = dataclasses.field(default_factory=list)
    injected: int = 0
    admissions: dict[str, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_records(cls, config: dict[str, Any], records: Sequence[TaskRecord]) -> "StreamResult":
        admissions: dict[str, int] = {}
        for r in records:
            admission = r.decision.get("admission")  # the controller's own log (tokenworth_agent.policies.tokenworth)
            if admission:
                admissions[admission["code"]] = admissions.get(admission["code"], 0) + 1
        return cls(dict(config), [r.reward for r in records], [r.output_tokens for r in records],
                   sum(r.injected_memory_id is not None for r in records), dict(sorted(admissions.items())))

    def summary(self) -> dict[str, Any]:
        from tokenworth_agent.results import estimate
        from tokenworth_agent.results.report import percent, spread

        n = max(1, len(self.rewards))
        sr_se, sr_ci = percent(estimate.rate(self.rewards)) if self.rewards else (None, (0.0, 100.0))
        tok_se, tok_ci = spread(estimate.mean(self.tokens)) if self.tokens else (None, (None, None))
        return {"config": self.config, "label": label(self.config), "tasks": len(self.rewards),
                "sr": 100.0 * sum(self.rewards) / n, "sr_se": sr_se, "sr_ci": list(sr_ci),
                "output_tok": sum(self.tokens) / n, "output_tok_se": tok_se, "output_tok_ci": list(tok_ci),
                "injection_rate": self.injected / n, "admissions": dict(sorted(self.admissions.items()))}


@dataclasses.dataclass
class SweepResult:
    env: str
    seed: int
    streams: list[StreamResult]
    seconds: float
    batch_sizes: list[int]
    method: str = "tokenworth"

    @classmethod
    def from_experiment(cls, result: ExperimentResult, configs: Sequence[dict[str, Any]], env: str,
                        seed: int) -> "SweepResult":
        """The sweep's rows from the experiment that ran its streams (``configs``: each stream's configuration, in
        order). A sweep over task orders has one row per configuration, its streams' records one after another in
        the run's order of orders, so two rows' records pair by (order, task)."""
        if len(configs) != len(result.names):
            raise GridError(f"{len(configs)} configurations but {len(result.names)} streams")
        pooled: dict[str, tuple[dict[str, Any], list[TaskRecord]]] = {}
        for config, name in zip(configs, result.names):
            pooled.setdefault(label(config), (dict(config), []))[1].extend(result.records[name])
        return cls(env, seed, [StreamResult.from_records(c, records) for c, records in pooled.values()],
                   result.seconds, result.batch_sizes, result.streams[0].method if result.streams else "tokenworth")


def against_preset(result: SweepResult) -> list[dict[str, Any] | None]:
    """Each configuration's paired difference in SR to the preset (percentage points, on the tasks both ran):
    ``difference``, ``ci``, ``p_value`` and ``p_adjusted`` (Holm over the configurations); None for the preset
    itself, or every entry when the sweep has no preset."""
    from tokenworth_agent.results import estimate
    from tokenworth_agent.results.compare import holm

    preset = next((s for s in result.streams if not s.config), None)
    if preset is None:
        return [None] * len(result.streams)
    found: list[dict[str, Any] | None] = []
    for stream in result.streams:
        n = min(len(stream.rewards), len(preset.rewards))
        if stream is preset or n == 0:
            found.append(None)
            continue
        d = estimate.paired(stream.rewards[:n], preset.rewards[:n])
        found.append({"difference": 100.0 * d.difference, "ci": [100.0 * d.ci_low, 100.0 * d.ci_high],
                      "se": 100.0 * d.se, "p_value": d.p_value, "test": d.test, "n_pairs": n})
    tested = [f for f in found if f is not None]
    for entry, adjusted in zip(tested, holm([f["p_value"] for f in tested])):
        entry["p_adjusted"] = adjusted
    return found


def markdown(result: SweepResult) -> str:
    from tokenworth_agent.results.report import interval

    rows = [s.summary() for s in result.streams]
    deltas = against_preset(result)
    name = "TokenWorth" if result.method in ("tokenworth", "tokenworth+") else result.method
    lines = [f"## {name} sweep · {result.env.upper()} · seed {result.seed} · {len(result.streams)} configurations · "
             f"{rows[0]['tasks']} tasks · {result.seconds:.0f}s", "",
             "| Configuration | SR (%) | 95 % CI | ΔSR vs preset (pp) | 95 % CI | p (Holm) | OutputTok | Injected (%) |",
             "|---|---:|---|---:|---|---:|---:|---:|"]
    for r, d in zip(rows, deltas):
        delta = (f"{d['difference']:+.1f} | {interval(d['ci'])} | {d['p_adjusted']:.3f}" if d is not None
                 else "— | — | —")
        lines.append(f"| {r['label']} | {r['sr']:.1f} | {interval(r['sr_ci'])} | {delta} | {r['output_tok']:.1f} "
                     f"| {100 * r['injection_rate']:.1f} |")
    lines += ["", "ΔSR vs preset: paired on the same tasks (McNemar's exact test), p adjusted over the configurations "
              "(Holm); docs/results.md (\"How the numbers are estimated\")."]
    return "\n".join(lines) + "\n"


def write_sweep_results(result: SweepResult, out_dir: str | Path) -> str:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(result)
    atomic_write_text(out / "sweep.md", table)
    atomic_write_json(out / "sweep.json", {"env": result.env, "seed": result.seed, "seconds": result.seconds,
                                           "max_batch": max(result.batch_sizes, default=0),
                                           "streams": [dict(s.summary(), vs_preset=d) for s, d in
                                                       zip(result.streams, against_preset(result))],
                                           "rewards": [s.rewards for s in result.streams]})
    return table


__all__ = ["SweepError", "SweepResult", "StreamResult", "configs_from_grid", "table_a3_configs", "sweep_streams",
           "write_sweep_results"]
