"""What is tracked of a stream, computed from its committed records alone.

* :func:`stream_meta`: the stream's run name, parameters (env, method, seed, task order (``order``, only in a run
  with ``--orders``), budget level, backbone,
  model, the method's hyperparameters as it runs them: the controller's traced ones flattened, another
  method's declared parameters at their values, ``hparams.NAME``; the benchmark's harness options,
  ``harness.NAME``; the releases of its method, benchmark and backbone, ``release.KIND``; the run's config
  hash) and tags (commit, host). Plain JSON, so it travels in the undelivered file and replays.
* :class:`Scalars`: one set of scalars per task, stepped by the task's index: ``reward``,
  ``sr/cumulative`` and ``sr/rolling`` (fractions), ``sr/ci_low`` and ``sr/ci_high`` (the 95 % interval of
  ``sr/cumulative``, :func:`tokenworth_agent.results.estimate.rate`: a tracker's final values are the
  stream's SR with the interval the summary shows), ``tokens/output``, ``tokens/auxiliary``,
  ``memory/injected`` (0 or 1), ``memory/bank_size``, ``time/task_s``; with the simulated backbone,
  which knows what a memory is worth, also ``memory/harmful`` (the injected memory's skill overlap
  with the task is below the simulator's harm threshold) and ``memory/harmful_share`` (so far).

A stream's scalars depend only on its records in order, so a resumed run, a replay and a run sent
after the fact all compute the same values (``time/task_s`` is the record's own wall clock).
"""

from __future__ import annotations

import collections
import functools
import os
import socket
import subprocess
from pathlib import Path
from typing import Any, Mapping

from tokenworth_agent.results.record import TaskRecord

KEYS = ("reward", "sr/cumulative", "sr/rolling", "sr/ci_low", "sr/ci_high", "tokens/output", "tokens/auxiliary",
        "memory/injected", "memory/bank_size", "time/task_s")
SIM_KEYS = ("memory/harmful", "memory/harmful_share")


def rolling_window(tasks: int) -> int:
    """The rolling SR's window: a tenth of the stream, between 5 and 50 tasks (as the figures use)."""
    return max(5, min(50, tasks // 10))


def _written(decision: Mapping[str, Any]) -> int | None:
    """The memory id a task wrote, from any method's decision log (None: it wrote none)."""
    for key in ("admission", "offer"):
        entry = decision.get(key)
        if isinstance(entry, dict) and entry.get("memory_id") is not None:
            return int(entry["memory_id"])
    write = decision.get("write")
    if isinstance(write, int) and not isinstance(write, bool):
        return int(write)
    return None


class Scalars:
    """A stream's running scalars: feed it the records in task order, get each task's values."""

    def __init__(self, tasks: int, *, simulated: bool = False) -> None:
        self.window: collections.deque[int] = collections.deque(maxlen=rolling_window(tasks))
        self.rewards: list[int] = []
        self.n = self.successes = self.harmful = 0
        self.simulated = simulated
        self.skills: dict[int, tuple[str, ...]] = {}  # memory id -> skills of the task that wrote it
        if simulated:
            from tokenworth_agent.sim.model import SimParams

            self.threshold = SimParams().harm_threshold

    def __call__(self, record: TaskRecord) -> dict[str, float]:
        from tokenworth_agent.results.estimate import rate

        self.n += 1
        self.successes += record.reward
        self.window.append(record.reward)
        self.rewards.append(record.reward)
        interval = rate(self.rewards)
        injected = bool(record.injected_memory_ids) or record.injected_memory_id is not None
        values = {"reward": float(record.reward), "sr/cumulative": self.successes / self.n,
                  "sr/rolling": sum(self.window) / len(self.window), "sr/ci_low": float(interval.ci_low),
                  "sr/ci_high": float(interval.ci_high), "tokens/output": float(record.output_tokens),
                  "tokens/auxiliary": float(record.auxiliary_tokens), "memory/injected": float(injected),
                  "memory/bank_size": float(record.bank_size), "time/task_s": float(record.time_s)}
        if self.simulated:
            harmful = False
            mid = record.injected_memory_id
            if mid is not None and int(mid) in self.skills:
                a, b = set(self.skills[int(mid)]), set(record.skill_list)
                overlap = len(a & b) / len(a | b) if a | b else 0.0
                harmful = overlap < self.threshold
            self.harmful += harmful
            values["memory/harmful"] = float(harmful)
            values["memory/harmful_share"] = self.harmful / self.n
            written = _written(record.decision or {})
            if written is not None:
                self.skills[written] = tuple(record.skill_list)
        return values


@functools.lru_cache(maxsize=1)
def commit() -> str:
    """The project's git commit (``unknown`` outside a checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _text(value: Any) -> str:
    """A hyperparameter as the user or preset wrote it: a float32 as the shortest decimal that gives back the
    same float32 (``0.05``, not ``0.05000000074505806``), so MLflow's filters and compare views match it."""
    import numpy as np

    def plain(array: Any) -> Any:
        if array.ndim:
            return [plain(part) for part in array]
        if array.dtype.kind == "f":
            return float(np.format_float_positional(array[()]))
        return array.item()

    return str(plain(np.asarray(value)))


def controller_params(env: str, method: str, overrides: Mapping[str, Any]) -> dict[str, str]:
    """The controller's traced hyperparameters (``HParams``), flattened, for a TokenWorth method; else none."""
    if not method.startswith("tokenworth"):
        return {}
    try:
        import tokenworth_jax as tw
        from tokenworth_jax.config import flatten

        from tokenworth_agent.core.plugins import benchmark

        spec, hp = tw.preset(benchmark(env).preset, method=method, **dict(overrides))
        return {f"hparams.{k}": _text(v) for k, v in flatten(hp, spec.parts).items()}
    except Exception as exc:  # noqa: BLE001 - a method the preset table does not know: say so, track the rest
        return {"hparams": f"unavailable ({type(exc).__name__})"}


def method_params(env: str, method: str, overrides: Mapping[str, Any]) -> dict[str, str]:
    """The method's hyperparameters as the stream runs them: a TokenWorth method's controller
    (:func:`controller_params`), another method's declared parameters (``hparams.NAME``: the grid's value, else the
    declared default)."""
    if method.startswith("tokenworth"):
        return controller_params(env, method, overrides)
    try:
        from tokenworth_agent.policies.registry import method_parameters

        values = {p.name: p.default for p in method_parameters(method)}
    except Exception as exc:  # noqa: BLE001 - a method that no longer loads here: say so, track the rest
        return {"hparams": f"unavailable ({type(exc).__name__})"}
    return {f"hparams.{k}": _text(v) if v is not None else "-" for k, v in {**values, **overrides}.items()}


def stream_params(name: str, describe: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, str]:
    """What ``config.json`` (``settings``) says of one stream: its benchmark's harness options (the grid's values
    for this stream over the run's, ``harness.NAME``) and the releases that made it (``release.KIND``; ``unknown``
    in a folder made before releases were recorded)."""
    harness = settings.get("harness") or {}
    if "," in str(settings.get("env", "")):  # several envs: one entry per env
        harness = harness.get(describe["env"]) or {}
    options = {**harness, **(describe.get("options") or {})}
    params = {f"harness.{k}": "-" if v is None else str(v) for k, v in sorted(options.items())}
    releases = (settings.get("releases") or {}).get(name) or {}
    params.update({f"release.{kind}": str(releases.get(kind) or "unknown") for kind in ("method", "benchmark",
                                                                                         "backbone")})
    return params


def stream_meta(name: str, describe: Mapping[str, Any], run: Mapping[str, Any], out_dir: Path,
                settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A stream's run name, parameters and tags (see the module docstring); ``describe``: the stream's own
    description (:meth:`StreamSpec.describe`), ``run``: what every stream of the run shares, ``settings``: the
    run's ``config.json`` (its ``env``, ``harness`` and ``releases``; :func:`stream_params`)."""
    budget = describe.get("budget") or {}
    point = {**(describe.get("hparams") or {}), **(describe.get("options") or {})}
    params = {"env": describe["env"], "method": describe["method"], "seed": str(describe["seed"]), "stream": name,
              "backbone": run.get("backbone", ""), "model": run.get("model", "") or "-",
              "config_hash": run.get("config_hash", ""),
              "grid_point": ",".join(f"{k}={v}" for k, v in sorted(point.items())) or "-"}
    if "order" in describe:  # a run with an order axis (tokenworth_agent.experiment.orders); else no such param
        params["order"] = str(describe["order"])
    params.update({f"budget.{k}": str(v) for k, v in sorted(budget.items())})
    params.update(method_params(describe["env"], describe["method"], describe.get("hparams") or {}))
    params.update(stream_params(name, describe, settings or {}))
    tags = {"commit": commit(), "host": socket.gethostname(), "tokenworth.pid": str(os.getpid()), "tokenworth.stream": name,
            "tokenworth.run_folder": str(out_dir)}
    return {"name": name, "params": params, "tags": tags}


__all__ = ["KEYS", "SIM_KEYS", "Scalars", "rolling_window", "stream_meta", "stream_params", "method_params",
           "controller_params", "commit"]
