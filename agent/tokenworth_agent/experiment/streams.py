"""Streams and grids: what one experiment runs.

A **stream** is one (environment, method, seed, budget, controller hyperparameters) point: one
policy over one task stream, with its own environment instance, records and checkpoint.
An experiment is a list of streams; :func:`expand` builds it from the CLI's axes (``--env``,
``--methods``, ``--seeds``, ``--grid``).

Grid axes (``--grid NAME=v1,v2``, repeatable, Cartesian product):

* **budget axes**, for every method: ``o_max`` (O_max, output tokens), ``j_max`` (J_max,
  rounds), ``b_max`` (B_max, bank capacity), ``k_max`` (K_max, memories injected) and
  ``l_max`` (L_max, injected characters);
* **controller axes**, for TokenWorth methods only: any field of
  :class:`tokenworth_jax.HParams` (``eta`` is accepted for ``eta_max``, ``lambda`` for
  ``lambda_w``, ``beta`` for ``beta_w``); ``plus_*`` fields only for ``tokenworth+``.

A grid that names an unknown field, a value out of range, a field twice, or a controller
field while some method of the run has no controller is refused (:class:`GridError`) before
anything loads.

Folder names: a stream lives in ``<out>/<name>`` with ``name`` = ``[<env>/][seed<k>/]<method>
[@<grid point>]``: the env part only when the experiment has several envs, the seed part only
when it has several seeds, the grid point only for grid streams (e.g.
``db/seed1/rag@o_max=64``). A plain one-env, one-seed run keeps ``<out>/<method>``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from typing import Any, Mapping, Sequence

from tokenworth_agent.core.budget import BUDGET_AXES, Budget

ALIASES = {"eta": "eta_max", "lambda": "lambda_w", "beta": "beta_w"}
CONTROLLER_METHODS = frozenset({"tokenworth", "tokenworth+"})  # methods whose policy takes HParams overrides


class GridError(ValueError):
    """A grid or stream set that cannot be run (unknown field, bad value, field a method lacks)."""


def _hparam_fields() -> tuple[tuple[str, ...], frozenset[str]]:
    from tokenworth_jax.presets import int_names, names

    return names(), int_names()


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """One stream: env, method, seed, budget and the method's controller overrides."""

    env: str
    method: str
    seed: int
    budget: Budget
    hparams: tuple[tuple[str, float | int], ...] = ()  # sorted (name, value) pairs; () is the preset
    point: tuple[tuple[str, float | int], ...] = ()  # the grid point this stream stands for (labels, figures)

    def __post_init__(self) -> None:
        if self.budget.env != self.env:
            raise GridError(f"stream {self.method}: budget is for {self.budget.env!r}, stream env is {self.env!r}")
        if self.hparams and self.method not in CONTROLLER_METHODS:
            raise GridError(f"--grid {', '.join(k for k, _ in self.hparams)}: {self.method} has no controller "
                            f"hyperparameters (only {', '.join(sorted(CONTROLLER_METHODS))} do)")
        if any(k.startswith("plus_") for k, _ in self.hparams) and self.method != "tokenworth+":
            raise GridError(f"--grid {', '.join(k for k, _ in self.hparams if k.startswith('plus_'))}: plus_* "
                            "hyperparameters only act on tokenworth+")

    @property
    def overrides(self) -> dict[str, float | int]:
        return dict(self.hparams)

    @property
    def point_label(self) -> str:
        return ",".join(f"{k}={_fmt(v)}" for k, v in self.point)

    def name(self, *, with_env: bool, with_seed: bool) -> str:
        parts = ([self.env] if with_env else []) + ([f"seed{self.seed}"] if with_seed else [])
        return "/".join(parts + [self.method + (f"@{self.point_label}" if self.point else "")])

    def describe(self) -> dict[str, Any]:
        """What every record says about its stream (the same whatever runs beside it)."""
        return {"env": self.env, "method": self.method, "seed": self.seed, "budget": self.budget.as_dict(),
                "hparams": self.overrides, "hparams_digest": digest(self.overrides) if self.hparams else None}


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _fmt(value: float | int) -> str:
    return str(value)  # 64, 0.1: what the user typed, normalised by float()/int()


# ------------------------------------------------------------------------- grids
def parse_grid_item(item: str) -> tuple[str, list[float | int]]:
    """``NAME=v1,v2`` → (canonical name, values), every value range-checked."""
    from tokenworth_jax.presets import check_value

    fields, int_fields = _hparam_fields()
    name, sep, values = item.partition("=")
    name = ALIASES.get(name.strip(), name.strip())
    if not sep or not values.strip():
        raise GridError(f"--grid {item!r}: expected NAME=v1,v2,...")
    if name not in fields and name not in BUDGET_AXES:
        raise GridError(f"--grid {item!r}: unknown field {name!r}; budget fields: {', '.join(BUDGET_AXES)}; "
                        f"controller fields: {', '.join(fields)}")
    integer = name in int_fields or name in BUDGET_AXES
    parsed: list[float | int] = []
    for raw in values.split(","):
        try:
            number = float(raw)
        except ValueError:
            raise GridError(f"--grid {item!r}: {raw!r} is not a number") from None
        if integer:
            if number != int(number):
                raise GridError(f"--grid {item!r}: {name} takes integers, got {raw!r}")
            number = int(number)
        if name in BUDGET_AXES:
            _check_budget_value(item, name, int(number))
        else:
            try:  # the same range check as tokenworth_jax.hparams
                check_value(name, number)
            except ValueError as exc:
                raise GridError(f"--grid {item!r}: {exc}") from None
        parsed.append(number)
    if len(set(parsed)) != len(parsed):
        raise GridError(f"--grid {item!r}: a value is listed twice")
    return name, parsed


def _check_budget_value(item: str, name: str, value: int) -> None:
    floor = 0 if name in ("k_max", "l_max") else 1
    if value < floor:
        raise GridError(f"--grid {item!r}: {name} must be >= {floor}, got {value}")


def grid_points(items: Sequence[str]) -> list[dict[str, float | int]]:
    """The Cartesian product of the grid, in the order given; no items gives the single empty point."""
    axes = [parse_grid_item(i) for i in items]
    names = [n for n, _ in axes]
    if len(set(names)) != len(names):
        raise GridError(f"--grid names a field twice: {names}")
    return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in axes))]


def split_point(point: Mapping[str, float | int]) -> tuple[dict[str, int], dict[str, float | int]]:
    """(Budget changes, HParams overrides) of one grid point."""
    budget = {BUDGET_AXES[k]: int(v) for k, v in point.items() if k in BUDGET_AXES}
    return budget, {k: v for k, v in point.items() if k not in BUDGET_AXES}


def expand(envs: Sequence[str], methods: Sequence[str], seeds: Sequence[int], budgets: Mapping[str, Budget],
           points: Sequence[Mapping[str, float | int]] = ({},)) -> list[StreamSpec]:
    """Every (env, seed, point, method) stream, in that nesting order (methods innermost)."""
    if not envs or not methods or not seeds or not points:
        raise GridError("an experiment needs at least one env, method, seed and grid point")
    for what, values in (("--env", envs), ("--methods", methods), ("--seeds", seeds)):
        if len(set(values)) != len(values):
            raise GridError(f"{what} lists a value twice: {','.join(map(str, values))}")
    controller_fields = sorted({k for p in points for k in split_point(p)[1]})
    lacking = [m for m in methods if m not in CONTROLLER_METHODS]
    if controller_fields and lacking:
        raise GridError(f"--grid {', '.join(controller_fields)}: {', '.join(lacking)} has no controller "
                        f"hyperparameters; run the grid with --methods {' or '.join(sorted(CONTROLLER_METHODS))}")
    streams = []
    for env in envs:
        for seed in seeds:
            for point in points:
                changes, overrides = split_point(point)
                try:
                    budget = budgets[env].replace(**changes) if changes else budgets[env]
                except ValueError as exc:
                    raise GridError(f"--grid: {exc}") from None
                for method in methods:
                    streams.append(StreamSpec(env, method, int(seed), budget, tuple(sorted(overrides.items())),
                                              tuple(point.items())))
    return streams


def stream_names(streams: Sequence[StreamSpec]) -> list[str]:
    """Each stream's folder name (see the module docstring); unique within the experiment."""
    with_env = len({s.env for s in streams}) > 1
    with_seed = len({s.seed for s in streams}) > 1
    names = [s.name(with_env=with_env, with_seed=with_seed) for s in streams]
    if len(set(names)) != len(names):
        raise GridError("two streams of the experiment are the same stream; check --methods/--seeds/--grid")
    return names


__all__ = ["StreamSpec", "GridError", "BUDGET_AXES", "CONTROLLER_METHODS", "parse_grid_item", "grid_points",
           "split_point", "expand", "stream_names", "digest"]
