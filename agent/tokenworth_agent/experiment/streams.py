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
  ``lambda_w``, ``beta`` for ``beta_w``); ``plus_*`` fields only for ``tokenworth+``;
* **a method's parameters**, ``METHOD.NAME`` (``recency.k``, ``memrl.epsilon``,
  ``tokenworth.eta_max``): what the method declares (:attr:`MemoryPolicy.parameters
  <tokenworth_agent.policies.base.MemoryPolicy.parameters>`), passed to its constructor; only that
  method's streams multiply, the run's other methods run once per point of the other axes;
* **a benchmark's options**, by their own names (``kg_parser``, ``units_tolerance``): the options its
  benchmark declares with ``identity=True`` (those that change results by their value; a file's or a
  server's option cannot be swept); only the streams of that benchmark multiply. A grid value
  overrides the option's flag for those streams.

A grid that names an unknown field, a value out of range, a field twice, a controller field
while some method of the run has no controller, a parameter of a method the run does not run,
or an option no benchmark of the run has is refused (:class:`GridError`, one line naming what
the method or benchmark declares) before anything loads.

Task orders (``--orders``, :mod:`tokenworth_agent.experiment.orders`) are an axis like the seeds: order 0 is the
benchmark's own order, order k > 0 a permutation of it. A run without ``--orders`` (or with ``--orders 0``) has no
order axis: its streams' ``order`` is None, and their folders and records are what they were before orders existed.

Folder names: a stream lives in ``<out>/<name>`` with ``name`` = ``[<env>/][seed<k>/][order<k>/]<method>
[@<grid point>]``: the env part only when the experiment has several envs, the seed part only
when it has several seeds, the order part only when the run has orders other than just 0, the grid point only for
grid streams (e.g. ``db/seed1/rag@o_max=64``, ``order2/rag``, ``recency@recency.k=3``). A plain one-env, one-seed
run keeps ``<out>/<method>``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
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
    """One stream: env, method, seed, budget, the method's own settings and its benchmark's option overrides."""

    env: str
    method: str
    seed: int
    budget: Budget
    # sorted (name, value) pairs of the method's settings (TokenWorth: HParams fields; others: their declared
    # parameters), passed to its constructor; () is its defaults
    hparams: tuple[tuple[str, Any], ...] = ()
    point: tuple[tuple[str, Any], ...] = ()  # the grid point this stream stands for (labels, figures)
    options: tuple[tuple[str, Any], ...] = ()  # sorted (name, value): the benchmark options a grid sets for it
    # the task order (tokenworth_agent.experiment.orders); None: a run without an order axis (the benchmark's own
    # order, and folders and records as before orders existed)
    order: int | None = None

    def __post_init__(self) -> None:
        if self.order is not None and (isinstance(self.order, bool) or not isinstance(self.order, int)
                                       or self.order < 0):
            raise GridError(f"stream {self.method}: order must be a non-negative integer, got {self.order!r}")
        if self.budget.env != self.env:
            raise GridError(f"stream {self.method}: budget is for {self.budget.env!r}, stream env is {self.env!r}")
        if self.hparams and self.method not in CONTROLLER_METHODS:
            _check_method_settings(self.method, [k for k, _ in self.hparams])
        if any(k.startswith("plus_") for k, _ in self.hparams) and self.method != "tokenworth+":
            raise GridError(f"--grid {', '.join(k for k, _ in self.hparams if k.startswith('plus_'))}: plus_* "
                            "hyperparameters only act on tokenworth+")

    @property
    def overrides(self) -> dict[str, Any]:
        return dict(self.hparams)

    @property
    def option_overrides(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def point_label(self) -> str:
        return ",".join(f"{k}={_fmt(v)}" for k, v in self.point)

    @property
    def task_order(self) -> int:
        """The order its tasks run in: 0 (the benchmark's) for a run without an order axis."""
        return self.order or 0

    def name(self, *, with_env: bool, with_seed: bool) -> str:
        """Its folder name (the module docstring); the ``order<k>/`` part whenever the run has an order axis."""
        parts = ([self.env] if with_env else []) + ([f"seed{self.seed}"] if with_seed else [])
        parts += [f"order{self.order}"] if self.order is not None else []
        return "/".join(parts + [self.method + (f"@{self.point_label}" if self.point else "")])

    def describe(self) -> dict[str, Any]:
        """What every record says about its stream (the same whatever runs beside it); ``options`` only for a
        stream a grid sets benchmark options for, ``order`` only in a run with an order axis (so every other stream's
        records are as they were)."""
        described = {"env": self.env, "method": self.method, "seed": self.seed, "budget": self.budget.as_dict(),
                     "hparams": self.overrides, "hparams_digest": digest(self.overrides) if self.hparams else None}
        if self.options:
            described["options"] = self.option_overrides
        if self.order is not None:
            described["order"] = self.order
        return described


PARAMETERS = "parameters"  # where parameters_in_use goes: a stream's identity, config.json's per-stream entries


def parameters_in_use(spec: StreamSpec) -> dict[str, Any]:
    """The values ``spec``'s method runs with of the parameters it declares, by name: a grid's, else the declared
    default (what the constructor then takes). A parameter whose default is None is there only when a grid sets
    it: its value is the method's own choice (TokenWorth's come from the benchmark's preset, which the stream's
    benchmark and releases pin). Empty for a method that declares none, so its stream's identity and config.json
    are what they were before these values were recorded."""
    from tokenworth_agent.policies.registry import method_parameters

    given = spec.overrides
    return {p.name: given.get(p.name, p.default) for p in method_parameters(spec.method)
            if p.name in given or p.default is not None}


def _check_method_settings(method: str, names: Sequence[str]) -> None:
    """Settings for a method without a controller must be parameters it declares (one line otherwise)."""
    from tokenworth_agent.policies.registry import describe_parameters, method_parameters

    try:
        declared = {p.name for p in method_parameters(method)}
    except ValueError as exc:
        raise GridError(str(exc)) from None
    unknown = [n for n in names if n not in declared]
    if unknown and not declared:
        raise GridError(f"--grid {', '.join(unknown)}: {method} has no controller hyperparameters (only "
                        f"{', '.join(sorted(CONTROLLER_METHODS))} do) and {describe_parameters(method)}")
    if unknown:
        raise GridError(f"--grid {', '.join(unknown)}: {method} has no such parameter; {describe_parameters(method)}")


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _fmt(value: float | int) -> str:
    return str(value)  # 64, 0.1: what the user typed, normalised by float()/int()


# ------------------------------------------------------------------------- grids
def parse_grid_item(item: str) -> tuple[str, list[Any]]:
    """``NAME=v1,v2`` → (canonical name, values), every value converted and range-checked.

    ``NAME`` is a budget axis, a controller field (or its alias), ``METHOD.NAME`` (a method's declared parameter)
    or a benchmark option's name (see the module docstring)."""
    name, sep, values = item.partition("=")
    name = ALIASES.get(name.strip(), name.strip())
    if not sep or not values.strip():
        raise GridError(f"--grid {item!r}: expected NAME=v1,v2,...")
    raws = [v.strip() for v in values.split(",")]
    if "." in name:
        name, parsed = _method_values(item, name, raws)
    else:
        fields, _ = _hparam_fields()
        if name in fields or name in BUDGET_AXES:
            parsed = _numbers(item, name, raws)
        else:
            parsed = _option_values(item, name, raws)
    if len(set(parsed)) != len(parsed):
        raise GridError(f"--grid {item!r}: a value is listed twice")
    return name, parsed


def _numbers(item: str, name: str, raws: Sequence[str]) -> list[float | int]:
    """A budget axis's or a controller field's values."""
    from tokenworth_jax.presets import check_value

    _, int_fields = _hparam_fields()
    integer = name in int_fields or name in BUDGET_AXES
    parsed: list[float | int] = []
    for raw in raws:
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
    return parsed


def _method_values(item: str, name: str, raws: Sequence[str]) -> tuple[str, list[Any]]:
    """``METHOD.NAME``'s values: the method must be installed and declare NAME."""
    from tokenworth_agent.core.plugins import PluginError
    from tokenworth_agent.policies.registry import POLICIES, describe_parameters, method_parameters

    method, _, parameter = name.partition(".")
    parameter = ALIASES.get(parameter, parameter)
    if method not in POLICIES:
        raise GridError(f"--grid {item!r}: unknown method {method!r} (METHOD.NAME sets a method's parameter); "
                        f"methods: {', '.join(POLICIES.names)}")
    try:
        declared = {p.name: p for p in method_parameters(method)}
        described = describe_parameters(method)
    except (PluginError, ValueError) as exc:
        raise GridError(f"--grid {item!r}: {exc}") from None
    if parameter not in declared:
        raise GridError(f"--grid {item!r}: {method} has no parameter {parameter!r}; {described}")
    where = f"--grid {item!r}: {method}.{parameter}"
    return f"{method}.{parameter}", [_converted(declared[parameter], raw, where, f" ({described})") for raw in raws]


def _option_values(item: str, name: str, raws: Sequence[str]) -> list[Any]:
    """A benchmark option's values: one that enters the identity by value (see the module docstring)."""
    fields, _ = _hparam_fields()
    owners = _benchmark_options()
    if name not in owners:
        declarers = _declaring_methods(name)
        hint = f" (did you mean {' or '.join(f'{m}.{name}' for m in declarers)}?)" if declarers else ""
        sweepable = [o for o, (_, option) in owners.items() if _sweepable(option)]
        raise GridError(f"--grid {item!r}: unknown field {name!r}{hint}; budget fields: {', '.join(BUDGET_AXES)}; "
                        f"controller fields: {', '.join(fields)}; a method's parameters: METHOD.NAME (tokenworth "
                        f"plugins METHOD lists them); benchmark options: {', '.join(sweepable) or 'none'}")
    benchmark, option = owners[name]
    if not _sweepable(option):
        raise GridError(f"--grid {item!r}: {option.flag} of the {benchmark} benchmark names a file, a place or a "
                        "setting that leaves results alone, so it cannot be swept; only options that enter the "
                        "run's identity by value can (tokenworth plugins " + benchmark + " lists them)")
    return [_converted(option, raw, f"--grid {item!r}: {name}", "") for raw in raws]


_FOLDER_SAFE = re.compile(r"^[A-Za-z0-9_.+-]+$")


def _converted(parameter: Any, raw: str, where: str, tail: str) -> Any:
    """One grid value of a declared parameter, converted and checked; a text value must be fit for a folder name."""
    from tokenworth_agent.core.harness import HarnessError

    try:
        value = parameter.convert(raw, where=where)
    except HarnessError as exc:
        raise GridError(f"{exc}{tail}") from None
    if isinstance(value, str) and not _FOLDER_SAFE.match(value):
        raise GridError(f"{where}: {raw!r} names a stream folder, so a grid's text values are letters, digits, "
                        "'.', '_', '+' and '-'")
    return value


def _sweepable(option: Any) -> bool:
    from pathlib import Path

    return bool(option.identity) and option.type is not Path


def _benchmark_options() -> dict[str, tuple[str, Any]]:
    """option name -> (benchmark, option) of every installed benchmark (one that fails to import is left out)."""
    from tokenworth_agent.core.plugins import loadable

    return {o.name: (name, o) for name, bench in loadable("benchmark").items() for o in bench.options}


def _declaring_methods(parameter: str) -> list[str]:
    """The installed methods that declare ``parameter`` (for a hint; one that fails to load is skipped)."""
    from tokenworth_agent.policies.registry import POLICIES, method_parameters

    found = []
    for method in POLICIES.names:
        if method in CONTROLLER_METHODS:
            continue  # their parameters are the bare controller fields
        try:
            if any(p.name == parameter for p in method_parameters(method)):
                found.append(method)
        except Exception:  # noqa: BLE001 - a broken plugin gives no hint; it is refused when asked for
            continue
    return found


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


def axis_kind(name: str) -> str:
    """What a canonical grid name sets: ``budget``, ``controller``, ``method`` (``METHOD.NAME``) or ``option``."""
    if name in BUDGET_AXES:
        return "budget"
    if "." in name:
        return "method"
    return "controller" if name in _hparam_fields()[0] else "option"


def split_point(point: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, Any], dict[str, Any]]:
    """(Budget changes, the method's settings, the benchmark's option overrides) of one stream's point (the axes
    that act on it, :func:`acts_on`); one setting given twice (``eta_max`` and ``tokenworth.eta_max``) is refused."""
    budget: dict[str, int] = {}
    settings: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for name, value in point.items():
        kind = axis_kind(name)
        if kind == "budget":
            budget[BUDGET_AXES[name]] = int(value)
        elif kind == "option":
            options[name] = value
        else:
            setting = name.partition(".")[2] if kind == "method" else name
            if setting in settings:
                both = [k for k in point if k == setting or k.endswith("." + setting)]
                raise GridError(f"--grid sets {setting} twice for one stream ({' and '.join(both)}); name it once")
            settings[setting] = value
    return budget, settings, options


def acts_on(name: str, method: str, env: str) -> bool:
    """Whether the grid axis ``name`` acts on a stream of ``method`` on ``env``: a method's parameter on that
    method, a benchmark's option on that benchmark's streams, a budget axis or a controller field on every stream
    (:func:`expand` refuses a controller field beside a method without a controller)."""
    kind = axis_kind(name)
    if kind == "method":
        return name.partition(".")[0] == method
    if kind == "option":
        from tokenworth_agent.core.plugins import benchmark

        return any(o.name == name for o in benchmark(env).options)
    return True


def _check_axes(envs: Sequence[str], methods: Sequence[str], names: Sequence[str]) -> None:
    """Refuse an axis that acts on no stream of the run, or a controller field beside a method without one."""
    controller_fields = [n for n in names if axis_kind(n) == "controller"]
    lacking = [m for m in methods if m not in CONTROLLER_METHODS]
    if controller_fields and lacking:
        raise GridError(f"--grid {', '.join(controller_fields)}: {', '.join(lacking)} has no controller "
                        f"hyperparameters; run the grid with --methods {' or '.join(sorted(CONTROLLER_METHODS))}, "
                        f"or set one method's as METHOD.NAME (e.g. tokenworth.{controller_fields[0]})")
    for name in names:
        if not any(acts_on(name, m, e) for m in methods for e in envs):
            if axis_kind(name) == "method":
                raise GridError(f"--grid {name}: {name.partition('.')[0]} is not among the run's methods "
                                f"({', '.join(methods)}); add it to --methods")
            owner = _benchmark_options().get(name, ("another benchmark",))[0]
            raise GridError(f"--grid {name}: it is an option of the {owner} benchmark, and this run's --env is "
                            f"{','.join(envs)}")


def expand(envs: Sequence[str], methods: Sequence[str], seeds: Sequence[int], budgets: Mapping[str, Budget],
           points: Sequence[Mapping[str, Any]] = ({},), orders: Sequence[int] = (0,)) -> list[StreamSpec]:
    """Every (env, seed, order, point, method) stream, in that nesting order (methods innermost).

    A stream's point keeps only the axes that act on it (a method's parameter on that method, a benchmark's
    option on that benchmark), so a method the grid's method axes leave alone runs once per point of the rest.
    ``orders`` (0,), the default, is a run without an order axis: every stream's ``order`` is None."""
    from tokenworth_agent.experiment.orders import OrderError, check_orders

    if not envs or not methods or not seeds or not points or not orders:
        raise GridError("an experiment needs at least one env, method, seed, order and grid point")
    for what, values in (("--env", envs), ("--methods", methods), ("--seeds", seeds)):
        if len(set(values)) != len(values):
            raise GridError(f"{what} lists a value twice: {','.join(map(str, values))}")
    try:
        axis: Sequence[int | None] = [None] if tuple(check_orders(orders)) == (0,) else orders
    except OrderError as exc:
        raise GridError(str(exc)) from None
    _check_axes(envs, methods, list(dict.fromkeys(k for p in points for k in p)))
    streams: list[StreamSpec] = []
    seen: set[tuple[Any, ...]] = set()
    for env in envs:
        for seed in seeds:
            for order in axis:
                for point in points:
                    for method in methods:
                        own = {k: v for k, v in point.items() if acts_on(k, method, env)}
                        key = (env, seed, order, method, tuple(own.items()))
                        if key in seen:
                            continue
                        seen.add(key)
                        changes, settings, options = split_point(own)
                        try:
                            budget = budgets[env].replace(**changes) if changes else budgets[env]
                        except ValueError as exc:
                            raise GridError(f"--grid: {exc}") from None
                        streams.append(StreamSpec(env, method, int(seed), budget, tuple(sorted(settings.items())),
                                                  tuple(own.items()), tuple(sorted(options.items())), order))
    return streams


def stream_names(streams: Sequence[StreamSpec]) -> list[str]:
    """Each stream's folder name (see the module docstring); unique within the experiment."""
    with_env = len({s.env for s in streams}) > 1
    with_seed = len({s.seed for s in streams}) > 1
    names = [s.name(with_env=with_env, with_seed=with_seed) for s in streams]
    if len(set(names)) != len(names):
        raise GridError("two streams of the experiment are the same stream; check --methods/--seeds/--orders/--grid")
    return names


__all__ = ["StreamSpec", "GridError", "BUDGET_AXES", "CONTROLLER_METHODS", "parse_grid_item", "grid_points",
           "axis_kind", "acts_on", "split_point", "expand", "stream_names", "digest"]
