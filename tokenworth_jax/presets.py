"""The preset table: environments, and the (scorer, mode) pairs of the methods.

``tw.preset(env, method=..., scorer=...)`` returns ``(spec, hparams)``:

* **environments** (:data:`ENVIRONMENTS`): Table A1 of the paper (``db``, ``os``, ``kg``) and App. C
  (``bigcodebench``, ``alfworld``): the bank capacity B_max and the hyperparameters that differ
  from the paper's shared values (:data:`tokenworth_jax.config.CORE`);
* **methods** (:data:`METHODS`): ``tokenworth``, the paper's (the ``full`` scorer and the ``paper``
  mode), and ``tokenworth+`` (the ``full`` scorer and TokenWorth+'s mode, docs/tokenworth-plus.md);
* **scorers** (:data:`SCORERS`): ``full``, or ``incremental`` (``preset(..., scorer="incremental")``:
  the same decisions, cheaper worth; docs/controller.md).

Modes and scorers are also known here by name (:data:`MODES`, :data:`SCORERS`), so a checkpoint
names its parts and the experiment grid knows every flat hyperparameter name (:func:`names`). A
part defined elsewhere (your own mode) needs no entry: pass the value itself (``hparams(mode=...)``,
``Spec(mode=...)``, ``Controller.from_state_dict(..., parts=...)``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .config import CORE, PART_SLOTS, HParams, Schema, as_int, make_hparams
from .controller import Spec
from .modes import Mode, paper
from .plus.mode import plus
from .scorers import Scorer, full, incremental


class Environment(NamedTuple):
    capacity: int  # B_max
    hparams: dict[str, Any]  # what differs from the paper's shared values (config.CORE's defaults)


# Table A1 (LifelongAgentBench) and App. C. App. C: KRR every 75 and AGOP every 225 feedback
# examples, eta_max 0.10, warm-up 4 with the first fit at the first interval ("a fit needs at
# least 4 examples, so the first KRR fit is at example 75"); everything else (windows 128/256,
# ridge 0.01, gamma 1, AGOP smoothing 0.25 clipped to [0.05, 8], base scorer every 50 over 256
# with lambda 0.1 and beta_w 0.5, 512-d hashing of tokens and character 3-5-grams) is the
# paper's shared value.
_APP_C = dict(krr_interval=75, agop_interval=225, eta_max=0.10, warmup=4, fit_at_warmup=0)
ENVIRONMENTS: dict[str, Environment] = {
    "db": Environment(64, dict(krr_interval=50, agop_interval=200, eta_max=0.15, warmup=4)),
    "os": Environment(64, dict(krr_interval=25, agop_interval=100, eta_max=0.05, warmup=4)),
    "kg": Environment(64, dict(krr_interval=25, agop_interval=100, eta_max=0.10, warmup=24)),
    "bigcodebench": Environment(50, _APP_C),
    "alfworld": Environment(128, _APP_C),
}

SCORERS: dict[str, Callable[..., Scorer]] = {"full": full, "incremental": incremental}
MODES: dict[str, Callable[..., Mode]] = {"paper": paper, "tokenworth+": plus}
METHODS: dict[str, tuple[str, str]] = {"tokenworth": ("full", "paper"), "tokenworth+": ("full", "tokenworth+")}


def capacity(env: str) -> int:
    """B_max of an environment preset (the one definition: the agent's budgets read it)."""
    return _environment(env).capacity


def _environment(env: str) -> Environment:
    if env not in ENVIRONMENTS:
        raise ValueError(f"unknown preset {env!r}; expected one of {sorted(ENVIRONMENTS)}")
    return ENVIRONMENTS[env]


def _part(slot: str, value: Any, **shapes: int) -> Any:
    """A scorer or mode from its name (the table's) or as given."""
    table = SCORERS if slot == "scorer" else MODES
    if isinstance(value, str):
        if value not in table:
            raise ValueError(f"unknown {slot} {value!r}; expected one of {sorted(table)} (or a value)")
        return table[value](**shapes)
    if shapes:
        raise ValueError(f"shape fields {sorted(shapes)} are for a {slot} given by name")
    return value


def hparams(env: str = "db", *, scorer: Any = "full", mode: Any = "paper", dtype: DTypeLike = jnp.float32,
            **overrides: ArrayLike) -> HParams:
    """Hyperparameters of an environment preset for the controller with ``scorer`` and ``mode`` (names of
    the table, or values), with overrides by flat name, as arrays of ``dtype`` (ints as int32).

    Every value is validated on the host first. A name of another part than these (``plus_margin``
    without ``mode="tokenworth+"``) is refused, naming the part it belongs to.

    Args:
        env: an environment of the preset table (:data:`~tokenworth_jax.presets.ENVIRONMENTS`: ``"db"``,
            ``"os"``, ``"kg"``, ``"bigcodebench"``, ``"alfworld"``).
        scorer: the controller's scorer: a name of the table or a :class:`~tokenworth_jax.Scorer` (keyword-only,
            as are the rest).
        mode: the controller's mode: a name of the table or a :class:`~tokenworth_jax.Mode`.
        dtype: the float dtype of the float leaves (the integer ones are int32).
        **overrides: hyperparameters by flat name, the core's and the parts' own (``plus_margin``).

    Returns:
        HParams: every leaf a JAX array, validated (``hp.mode`` holds the mode's own, ``Empty()`` where it has
        none).

    Raises:
        ValueError: an unknown name, a name of another part than these, or a value out of its range.
    """
    env_values = _environment(env).hparams
    parts = {"scorer": _part("scorer", scorer), "mode": _part("mode", mode)}
    foreign = {n: owner for n in overrides for owner, schema in _known_schemas().items()
               if schema is not None and n in schema.names()}
    for name, owner in foreign.items():
        slot, part_name = owner
        if getattr(parts[slot], "name", None) != part_name and name not in CORE.names():
            raise ValueError(f"{name} is a hyperparameter of the {slot} {part_name!r}, not of this controller's "
                             f"({parts[slot].name!r}): pass {slot}={part_name!r}")
    return make_hparams({**env_values, **overrides}, parts, dtype)


def preset(env: str = "db", *, method: str = "tokenworth", scorer: Any = None, dtype: DTypeLike = jnp.float32,
           spec_overrides: Mapping[str, Any] | None = None, **overrides: ArrayLike) -> tuple[Spec, HParams]:
    """``(spec, hparams)`` of ``method`` (:data:`METHODS`) at an environment preset (:data:`ENVIRONMENTS`).

    ``scorer`` replaces the method's (``"incremental"``). ``spec_overrides`` sets shape fields: the
    core's (``capacity``, ``dim``, ...) and the parts' own (``word_dim`` for TokenWorth+) by name.
    ``overrides`` set hyperparameters by flat name.

    Args:
        env: an environment of the preset table (:data:`~tokenworth_jax.presets.ENVIRONMENTS`: ``"db"``,
            ``"os"``, ``"kg"``, ``"bigcodebench"``, ``"alfworld"``).
        method: a method of :data:`~tokenworth_jax.presets.METHODS`: ``"tokenworth"`` (the paper's) or
            ``"tokenworth+"`` (keyword-only, as are the rest).
        scorer: a scorer that replaces the method's: a name of the table (``"incremental"``) or a
            :class:`~tokenworth_jax.Scorer`; None keeps the method's.
        dtype: the float dtype of the spec and of the hyperparameters (float64 needs JAX's 64-bit mode).
        spec_overrides: shape fields by name: the core's (``capacity``, ``dim``, ...) and the parts' own
            (``word_dim`` for TokenWorth+).
        **overrides: hyperparameters by flat name (``eta_max=0.2``), each validated on the host.

    Returns:
        tuple[Spec, HParams]: the :class:`~tokenworth_jax.Spec` and the :class:`~tokenworth_jax.HParams` built
        for its parts.

    Raises:
        ValueError: an unknown environment, method, shape field or hyperparameter, or a value out of its range
            (one line, naming it).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {sorted(METHODS)}")
    env_preset = _environment(env)
    names = dict(zip(PART_SLOTS, METHODS[method]))
    if scorer is not None:
        names["scorer"] = scorer
    spec_overrides = dict(spec_overrides or {})
    core = {k: spec_overrides.pop(k) for k in list(spec_overrides) if k in Spec._fields and k not in PART_SLOTS}
    parts = {}
    for slot in PART_SLOTS:
        value = names[slot]
        own = _shape_fields(slot, value)
        parts[slot] = _part(slot, value, **{k: spec_overrides.pop(k) for k in list(spec_overrides) if k in own})
    if spec_overrides:
        known = [f for f in Spec._fields if f not in PART_SLOTS] + [f for s in PART_SLOTS
                                                                    for f in _shape_fields(s, names[s])]
        raise ValueError(f"unknown spec field(s) {sorted(spec_overrides)}; known: {known}")
    spec = Spec(**{"capacity": env_preset.capacity, "dtype": jnp.dtype(dtype).name, **core}, **parts)
    return spec, hparams(env, scorer=spec.scorer, mode=spec.mode, dtype=dtype, **overrides)


def _shape_fields(slot: str, value: Any) -> tuple[str, ...]:
    part = _part(slot, value) if isinstance(value, str) else value
    return tuple(part.shapes._fields)


# ----- every part the table knows: flat names for the experiment grid, parts for checkpoints ----
def _known_schemas() -> dict[tuple[str, str], Schema | None]:
    """``{(slot, part name): schema}`` of every scorer and mode of the table."""
    out: dict[tuple[str, str], Schema | None] = {}
    for slot, table in (("scorer", SCORERS), ("mode", MODES)):
        for name, make in table.items():
            out[(slot, name)] = make().hparams
    return out


def names() -> tuple[str, ...]:
    """Every flat hyperparameter name of the table's controllers: the core's, then each part's."""
    out = list(CORE.names())
    for schema in _known_schemas().values():
        if schema is not None:
            out += [n for n in schema.names() if n not in out]
    return tuple(out)


def _owner(name: str) -> Schema:
    for schema in [CORE, *(s for s in _known_schemas().values() if s is not None)]:
        if name in schema.names():
            return schema
    raise ValueError(f"unknown hyperparameter {name!r}; known: {list(names())}")


def check_value(name: str, value: Any) -> np.ndarray:
    """The host value of one hyperparameter (by flat name) as float64, or a ValueError naming field,
    value and range."""
    return _owner(name).check(name, value)


def int_names() -> frozenset[str]:
    """The flat names whose values are integers."""
    return frozenset(n for n in names() if _owner(n).is_int(n))


def describe(spec: Spec) -> dict[str, Any]:
    """``spec`` as plain data (JSON, checkpoints): the shape fields, and each part by name and shape fields."""
    out: dict[str, Any] = {f: getattr(spec, f) for f in Spec._fields if f not in PART_SLOTS}
    for slot in PART_SLOTS:
        part = getattr(spec, slot)
        out[slot] = {"name": part.name, "shapes": dict(part.shapes._asdict())}
    return out


def spec_from_dict(data: Mapping[str, Any], parts: Mapping[str, Any] | None = None) -> Spec:
    """The Spec :func:`describe` wrote. Parts are rebuilt from the table by name, or taken from ``parts``
    for those the table does not know; unknown fields or parts are an error.

    ``parts`` is ``{name: part}``, keyed by the name the data gives, which is each part's own ``name``: a
    part under another key is refused (``{'other': mine}`` for a mode named ``'mine'``), and so is a part
    under a table name that is not the table's value (what that name means in a checkpoint). Entries the
    data does not name are unused, so one mapping of all your own parts serves every checkpoint."""
    data = dict(data)
    given = _given_parts(parts)
    built = {}
    for slot in PART_SLOTS:
        entry = data.pop(slot, None)
        if not isinstance(entry, Mapping) or "name" not in entry:
            raise ValueError(f"the spec lacks its {slot} ({{'name': ..., 'shapes': ...}}), got {entry!r}")
        name, shapes = entry["name"], {k: as_int(v) for k, v in dict(entry.get("shapes") or {}).items()}
        kind = Scorer if slot == "scorer" else Mode
        if name in given:
            part = built[slot] = given[name]
            if not isinstance(part, kind):
                raise ValueError(f"parts[{name!r}] is a {type(part).__name__}, but {name!r} is the spec's {slot}: "
                                 f"give a {kind.__name__} under that name")
            if part.name != name:
                raise ValueError(f"the spec's {slot} is {name!r}, but parts[{name!r}] is the {slot} named "
                                 f"{part.name!r}: give the {slot} named {name!r}")
            if dict(part.shapes._asdict()) != shapes:
                raise ValueError(f"the {slot} {name!r} given has shapes {dict(part.shapes._asdict())}, the "
                                 f"spec says {shapes}")
        elif name in (SCORERS if slot == "scorer" else MODES):
            built[slot] = _part(slot, name, **shapes)
        else:
            _check_keys(given)  # the part given under another key: say so
            raise ValueError(f"the spec's {slot} {name!r} is not in the preset table: pass it "
                             f"(parts={{{name!r}: your_{slot}}})")
    _check_keys(given)
    unknown = set(data) - set(Spec._fields)
    if unknown:
        raise ValueError(f"unknown Spec field(s) {sorted(unknown)}; known: {list(Spec._fields)}")
    return Spec(**{k: (as_int(v) if not isinstance(v, str) else v) for k, v in data.items()}, **built)


def _given_parts(parts: Mapping[str, Any] | None) -> dict[str, Any]:
    """``parts`` as a dict, once it is a mapping of scorers and modes (TypeError if not)."""
    if parts is None:
        return {}
    if not isinstance(parts, Mapping):
        raise TypeError(f"parts must be a mapping {{name: scorer or mode}}, got {type(parts).__name__}")
    for key, part in parts.items():
        if not isinstance(part, (Scorer, Mode)):
            raise TypeError(f"parts[{key!r}] is a {type(part).__name__}, not a tokenworth_jax Scorer or Mode")
    return dict(parts)


def _check_keys(given: Mapping[str, Any]) -> None:
    """Each part given under its own name, and none posing as a part of the table (ValueError, one line)."""
    for key, part in given.items():
        slot = "scorer" if isinstance(part, Scorer) else "mode"
        if part.name != key:
            raise ValueError(f"parts[{key!r}] is the {slot} named {part.name!r}: parts are keyed by their own name "
                             f"(parts={{{part.name!r}: ...}})")
        if key in (SCORERS if slot == "scorer" else MODES) and not is_table_part(slot, part):
            raise ValueError(f"parts[{key!r}] is not the preset table's {slot} {key!r}, which is what that name means "
                             f"in a checkpoint (tw.save refuses any other {slot} of that name)")


def is_table_part(slot: str, part: Any) -> bool:
    """Whether ``part`` is the preset table's value of its name (what the name means in a checkpoint)."""
    table = SCORERS if slot == "scorer" else MODES
    if part.name not in table:
        return False
    try:
        return bool(table[part.name](**part.shapes._asdict()) == part)
    except TypeError:  # shape fields the table's part does not take
        return False


# The environments' presets as functions (``presets.db()``), for the quickstart.
def db(**overrides: Any) -> tuple[Spec, HParams]:
    """``preset("db", **overrides)``: the paper's method at the DB environment (Table A1).

    Args:
        **overrides: what :func:`~tokenworth_jax.preset` takes besides the environment: ``method``, ``scorer``,
            ``dtype``, ``spec_overrides`` and hyperparameters by flat name.

    Returns:
        tuple[Spec, HParams]: the :class:`~tokenworth_jax.Spec` and its :class:`~tokenworth_jax.HParams`, as
        :func:`~tokenworth_jax.preset` returns them.
    """
    return preset("db", **overrides)


def os(**overrides: Any) -> tuple[Spec, HParams]:  # noqa: A001 - the environment's name
    """``preset("os", **overrides)``: the paper's method at the OS environment (Table A1).

    Args:
        **overrides: what :func:`~tokenworth_jax.preset` takes besides the environment: ``method``, ``scorer``,
            ``dtype``, ``spec_overrides`` and hyperparameters by flat name.

    Returns:
        tuple[Spec, HParams]: the :class:`~tokenworth_jax.Spec` and its :class:`~tokenworth_jax.HParams`, as
        :func:`~tokenworth_jax.preset` returns them.
    """
    return preset("os", **overrides)


def kg(**overrides: Any) -> tuple[Spec, HParams]:
    """``preset("kg", **overrides)``: the paper's method at the KG environment (Table A1).

    Args:
        **overrides: what :func:`~tokenworth_jax.preset` takes besides the environment: ``method``, ``scorer``,
            ``dtype``, ``spec_overrides`` and hyperparameters by flat name.

    Returns:
        tuple[Spec, HParams]: the :class:`~tokenworth_jax.Spec` and its :class:`~tokenworth_jax.HParams`, as
        :func:`~tokenworth_jax.preset` returns them.
    """
    return preset("kg", **overrides)


def bigcodebench(**overrides: Any) -> tuple[Spec, HParams]:
    """``preset("bigcodebench", **overrides)``: the paper's method at BigCodeBench (App. C).

    Args:
        **overrides: what :func:`~tokenworth_jax.preset` takes besides the environment: ``method``, ``scorer``,
            ``dtype``, ``spec_overrides`` and hyperparameters by flat name.

    Returns:
        tuple[Spec, HParams]: the :class:`~tokenworth_jax.Spec` and its :class:`~tokenworth_jax.HParams`, as
        :func:`~tokenworth_jax.preset` returns them.
    """
    return preset("bigcodebench", **overrides)


def alfworld(**overrides: Any) -> tuple[Spec, HParams]:
    """``preset("alfworld", **overrides)``: the paper's method at ALFWorld (App. C).

    Args:
        **overrides: what :func:`~tokenworth_jax.preset` takes besides the environment: ``method``, ``scorer``,
            ``dtype``, ``spec_overrides`` and hyperparameters by flat name.

    Returns:
        tuple[Spec, HParams]: the :class:`~tokenworth_jax.Spec` and its :class:`~tokenworth_jax.HParams`, as
        :func:`~tokenworth_jax.preset` returns them.
    """
    return preset("alfworld", **overrides)


NAMES = tuple(ENVIRONMENTS)
