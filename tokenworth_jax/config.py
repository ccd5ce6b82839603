"""Configuration: shape fields (static) and hyperparameters (traced), and how each is declared.

Everything a user sweeps is an array leaf of :class:`HParams`, so a batch of configurations is a
stacked pytree that ``jax.vmap`` maps over, and changing a value never recompiles. Only integers
that fix array shapes are static (``tw.Spec``; this module checks them). Interval
hyperparameters (``base_interval``, ``krr_interval``, ...) are traced too: they only enter
``lax.cond`` predicates.

A :class:`Schema` declares one pytree of hyperparameters: its flat names (how grids, checkpoints
and messages name each leaf), defaults, allowed ranges, integer and vector fields, and the
cross-field order rules. The core's is :data:`CORE`; a scorer or a mode declares its own (it
lives in ``HParams.scorer`` / ``HParams.mode``), so this module knows no extension. The values
of the environment presets (Table A1, App. C) are the preset table's (:mod:`tokenworth_jax.presets`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from . import _doc
from .pytree import Empty

N_BASE_FEATURES = 4  # phi = [cos, u, rel, rec]
N_STAT_FEATURES = 5  # z tail = [cos, u, rel, rec, freq]
DTYPES = ("float32", "float64")


# ----- static shape fields ----------------------------------------------------------------------
def check_shapes(owner: str, values: Mapping[str, Any], minimum: Mapping[str, int]) -> None:
    """Each ``minimum`` field of ``values`` is an integer at least that large, else a ValueError naming it."""
    for name, lo in minimum.items():
        value = values[name]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{owner}.{name} = {value!r} must be an integer >= {lo}")
        if value < lo:
            raise ValueError(f"{owner}.{name} = {value!r} is out of range: must be an integer >= {lo}")


def check_dtype(owner: str, dtype: Any) -> None:
    try:
        name = jnp.dtype(dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"{owner}.dtype = {dtype!r} is not supported: must be one of {DTYPES}")
    check_x64(owner, name)


def check_x64(owner: str, dtype: Any) -> None:
    """Refuse (ValueError) a float64 ``dtype`` while JAX's 64-bit mode is off: every array would silently be
    float32 under a spec that says float64. Reads the current setting, so a ``jax.enable_x64`` block counts."""
    if jnp.dtype(dtype) == np.float64 and jax.dtypes.canonicalize_dtype(np.float64) != np.float64:
        raise ValueError(f"{owner}.dtype = float64 needs JAX's 64-bit mode, which is off (every array would be "
                         "float32): enable it first with jax.config.update('jax_enable_x64', True) (or "
                         "JAX_ENABLE_X64=1), or use dtype='float32'")


def as_int(value: Any) -> Any:
    """NumPy integers (e.g. from a checkpoint) as Python ints; anything else unchanged."""
    return int(value) if isinstance(value, np.integer) else value


# ----- hyperparameter declarations --------------------------------------------------------------
class Range(NamedTuple):
    """Allowed values: [lo, hi], an end open where flagged; None = unbounded."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def text(self, integer: bool) -> str:
        kind = "an integer" if integer else "a finite number"
        if self.lo is None and self.hi is None:
            return kind
        if self.hi is None:
            return f"{kind} {'>' if self.lo_open else '>='} {self.lo}"
        if self.lo is None:
            return f"{kind} {'<' if self.hi_open else '<='} {self.hi}"
        return f"{kind} in {'(' if self.lo_open else '['}{self.lo}, {self.hi}{')' if self.hi_open else ']'}"


def _where(bad: np.ndarray) -> str:
    """' (first at index i)' for the first offending entry of a stacked or vector hyperparameter."""
    if bad.ndim == 0:
        return ""
    return f" (first at index {tuple(int(i) for i in np.argwhere(bad)[0])})"


_SCHEMAS: dict[type, "Schema"] = {}


@dataclasses.dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, so a part holding it stays hashable
class Schema:
    """A pytree of traced hyperparameters, declared once: the core's (:data:`CORE`), a scorer's or a mode's.

    ``fields`` are the leaves of ``cls`` (a NamedTuple) in order; outside the pytree each goes by
    its flat name, ``prefix + field.rstrip("_")`` (``x_lambda`` for ``lambda_`` under prefix ``x_``). Integers are
    int32 leaves, everything else of the configuration's float dtype.

    Attributes:
        cls: the NamedTuple of the hyperparameters (its fields are the leaves).
        fields: its field names, in order.
        ranges: the allowed :class:`Range` of every field, by field.
        defaults: default values by field; a field without one must be given.
        prefix: prepended to every field's flat name, so that no two parts share one.
        ints: the integer fields (int32 leaves).
        sizes: the vector fields and their lengths.
        broadcast: vector fields for which a scalar stands for ``sizes[field]`` equal entries.
        order: ``(lo, hi)`` pairs of fields that need ``lo <= hi``, entry by entry.
    """

    cls: type
    fields: tuple[str, ...]
    ranges: Mapping[str, Range]  # by field; every field has one
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # by field; the rest must be given
    prefix: str = ""
    ints: frozenset[str] = frozenset()
    sizes: Mapping[str, int] = dataclasses.field(default_factory=dict)  # vector fields: their length
    broadcast: frozenset[str] = frozenset()  # vector fields for which a scalar stands for `size` equal entries
    order: tuple[tuple[str, str], ...] = ()  # (lo, hi): need lo <= hi, entry by entry

    def __post_init__(self) -> None:
        missing = set(self.fields) - set(self.ranges)
        extra = (set(self.ranges) | set(self.defaults) | set(self.ints) | set(self.sizes) | set(self.broadcast)
                 | {f for pair in self.order for f in pair}) - set(self.fields)
        if missing or extra:
            raise ValueError(f"Schema of {self.cls.__name__}: fields without a range {sorted(missing)}, "
                             f"unknown fields named {sorted(extra)}")
        _SCHEMAS[self.cls] = self  # so a pytree of this type can be validated wherever it is met

    # -- names
    def flat(self, field: str) -> str:
        return self.prefix + field.rstrip("_")

    def names(self) -> tuple[str, ...]:
        """Every field's flat name, in order.

        Returns:
            tuple[str, ...]: ``prefix + field`` (a trailing ``_`` dropped) of every field, in order.
        """
        return tuple(self.flat(f) for f in self.fields)

    def field(self, name: str) -> str:
        return {self.flat(f): f for f in self.fields}[name]

    def is_int(self, name: str) -> bool:
        return self.field(name) in self.ints

    # -- values
    def check(self, name: str, value: Any) -> np.ndarray:
        """The host value of the leaf ``name`` (flat) as float64, or a ValueError naming name, value and range."""
        field = self.field(name)
        try:
            v = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"hyperparameter {name} = {value!r} is not a number") from None
        rng, integer = self.ranges[field], field in self.ints
        if integer and np.any(np.isfinite(v) & ((v < np.iinfo(np.int32).min) | (v > np.iinfo(np.int32).max))):
            shown = np.asarray(value).tolist()  # np.int64(2**32 + 3) would be cast to the int32 3
            raise ValueError(f"hyperparameter {name} = {shown!r} does not fit int32 (an integer hyperparameter is an "
                             "int32 leaf): must lie in [-2**31, 2**31 - 1]")
        bad = ~np.isfinite(v)
        if integer:
            bad |= np.isfinite(v) & (v != np.round(v))
        if rng.lo is not None:
            bad |= (v <= rng.lo) if rng.lo_open else (v < rng.lo)
        if rng.hi is not None:
            bad |= (v >= rng.hi) if rng.hi_open else (v > rng.hi)
        if np.any(bad):
            shown = np.asarray(value).tolist()  # plain Python numbers (or nested lists) in the message
            raise ValueError(f"hyperparameter {name} = {shown!r} is out of range{_where(bad)}: "
                             f"must be {rng.text(integer)}")
        return v

    def leaves(self, values: Mapping[str, Any], dtype: DTypeLike) -> dict[str, jax.Array]:
        """``{field: array}`` from ``{flat name: value}`` over the defaults, each checked before any cast
        (2.5 must not become 2); ints as int32, the rest as ``dtype``."""
        given = {**{self.flat(f): v for f, v in self.defaults.items()}, **values}
        missing = [self.flat(f) for f in self.fields if self.flat(f) not in given]
        if missing:
            raise ValueError(f"hyperparameters {missing} have no default: give them")
        out = {}
        for f in self.fields:
            value = given[self.flat(f)]
            if f in self.broadcast and np.ndim(value) == 0:
                value = np.full((self.sizes[f],), value, np.float64)
            self.check(self.flat(f), value)
            out[f] = jnp.asarray(value, dtype=jnp.int32 if f in self.ints else dtype)
        return out

    def make(self, values: Mapping[str, Any], dtype: DTypeLike) -> Any:
        """A validated ``cls`` pytree from flat names over the defaults.

        Args:
            values: ``{flat name: value}``; the fields not given take their defaults.
            dtype: the float dtype of the non-integer leaves (integers are int32).

        Returns:
            The ``cls`` NamedTuple of array leaves.

        Raises:
            ValueError: a field without a default not given, or a value out of its range (naming both).
        """
        return self.validate(self.cls(**self.leaves(values, dtype)))

    def flatten(self, tree: Any) -> dict[str, Any]:
        return {self.flat(f): getattr(tree, f) for f in self.fields}

    def validate(self, tree: Any) -> Any:
        """Host-side check of every leaf (stacked configurations too); returns ``tree``. Skipped for traced
        values (inside a transformation nothing is concrete).

        Args:
            tree: a ``cls`` pytree (one configuration, or C stacked on a leading axis).

        Returns:
            ``tree``, unchanged.

        Raises:
            TypeError: ``tree`` is not a ``cls``.
            ValueError: a vector of another length, a value out of its range, or a pair out of order (naming the
                field, its value and the configuration).
        """
        if not isinstance(tree, self.cls):
            raise TypeError(f"expected {self.cls.__name__} hyperparameters, got {type(tree).__name__}")
        try:
            concrete = {f: np.asarray(getattr(tree, f)) for f in self.fields}
        except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
            return tree
        for f, n in self.sizes.items():
            if concrete[f].shape[-1:] != (n,):
                raise ValueError(f"hyperparameter {self.flat(f)} must have {n} entries, got shape {concrete[f].shape}")
        v = {f: self.check(self.flat(f), value) for f, value in concrete.items()}
        for lo, hi in self.order:
            bad = v[lo] > v[hi]
            if np.any(bad):
                raise ValueError(f"hyperparameters {self.flat(lo)} = {concrete[lo].tolist()} and {self.flat(hi)} = "
                                 f"{concrete[hi].tolist()}{_where(np.asarray(bad))}: "
                                 f"need {self.flat(lo)} <= {self.flat(hi)}")
        return tree


# ----- the core's hyperparameters ---------------------------------------------------------------
class HParams(NamedTuple):
    """Traced hyperparameters (array leaves): the core's, then the parts' own pytrees.

    Build with ``tw.hparams`` / ``tw.preset``. ``scorer`` and ``mode`` hold the hyperparameters
    the controller's scorer and mode declare (their :class:`Schema`), :class:`~tokenworth_jax.pytree.Empty`
    for a part that has none. Every leaf is a JAX array: integers (marked *int*) are int32, the
    rest of the configuration's float dtype; shapes are () unless given. Stacked for ``jax.vmap``
    (``tw.stack_hparams``), every leaf gains a leading axis C.
    """

    w0: jax.Array
    lambda_w: jax.Array
    beta_w: jax.Array
    w_min: jax.Array
    w_max: jax.Array
    base_interval: jax.Array
    lambda_krr: jax.Array
    gamma: jax.Array
    beta_m: jax.Array
    m_min: jax.Array
    m_max: jax.Array
    krr_interval: jax.Array
    agop_interval: jax.Array
    warmup: jax.Array
    fit_at_warmup: jax.Array
    eta_max: jax.Array
    kappa: jax.Array
    tau_nov: jax.Array
    delta_write: jax.Array
    tau_pos: jax.Array
    tau_util: jax.Array
    delta_rep: jax.Array
    u_init: jax.Array
    u_success: jax.Array
    u_failure: jax.Array
    u_min: jax.Array
    u_max: jax.Array
    scorer: Any = Empty()
    mode: Any = Empty()


_doc.fields(
    HParams,
    w0="(4,): the prior of the base scorer's weights w over phi = [cos, u, rel, rec]; w starts here.",
    lambda_w="> 0: the strength of the pull of a base fit towards w0 (lambda_w ||w - w0||^2).",
    beta_w="in [0, 1]: how far each base refit moves w towards the new fit.",
    w_min="(4,): the lower clip of w.",
    w_max="(4,): the upper clip of w.",
    base_interval="int >= 1: the base scorer refits after every this many feedback examples.",
    lambda_krr="> 0: the ridge of the residual's kernel ridge regression.",
    gamma="> 0: the Laplacian kernel's scale, K(z, z') = exp(-gamma ||z - z'||_M).",
    beta_m="in [0, 1]: how far each AGOP step moves the metric M towards the new gradient outer product.",
    m_min="> 0: the lower clip of the metric's entries.",
    m_max="> 0: the upper clip of the metric's entries.",
    krr_interval="int >= 1: the KRR refits after every this many feedback examples (once ``warmup`` are there).",
    agop_interval="int >= 1: the metric is updated by AGOP after every this many feedback examples.",
    warmup="int >= 0: how many feedback examples a KRR fit needs.",
    fit_at_warmup="int 0 or 1: 1, the first KRR fit runs as soon as ``warmup`` examples exist; 0, at the first "
                  "interval.",
    eta_max="in [0, 1]: the residual's full weight in s = s_base + eta f (eta ramps up to it over the first "
            "three fits).",
    kappa=">= 0: the decay rate of a memory's recency, rec = exp(-kappa (t - last)).",
    tau_nov="in [0, 2]: a memory offered to a full bank is admitted as novel when 1 - its highest cosine to the "
            "bank exceeds this.",
    delta_write=">= 0: the margin by which the offered memory's worth must beat the bank's best to pass the "
                "worth gate.",
    tau_pos="in [0, 1]: the fraction of probes with positive worth the worth gate also needs.",
    tau_util="when no gate passes, the nearest memory can be replaced only if its utility is below this.",
    delta_rep=">= 0: ... and only if the offered memory's worth beats the nearest one's by this margin.",
    u_init="the utility a new memory starts with.",
    u_success=">= 0: the utility added after a success with the memory injected.",
    u_failure=">= 0: the utility taken away after a failure with the memory injected.",
    u_min="the lower clip of utility.",
    u_max="the upper clip of utility.",
    scorer="The scorer's own hyperparameters (its Schema's NamedTuple), ``Empty()`` when it has none.",
    mode="The mode's own hyperparameters (its Schema's NamedTuple), ``Empty()`` when it has none.",
)


PART_SLOTS = ("scorer", "mode")  # the HParams fields (and tw.Spec fields) that hold the parts
CORE_FIELDS = tuple(f for f in HParams._fields if f not in PART_SLOTS)

# The paper's values shared by every environment (spec §6); the environment presets add the rest.
CORE = Schema(
    cls=HParams,
    fields=CORE_FIELDS,
    defaults=dict(
        w0=(1.0, 0.10, 0.10, 0.02),
        lambda_w=0.1,
        beta_w=0.5,
        w_min=(0.0, 0.0, 0.0, 0.0),
        w_max=(2.0, 1.0, 1.0, 1.0),
        base_interval=50,
        lambda_krr=0.01,
        gamma=1.0,
        beta_m=0.25,
        m_min=0.05,
        m_max=8.0,
        fit_at_warmup=1,  # [project choice] for Table A1: the warm-up is the first fit (docs/controller.md)
        kappa=0.02,
        tau_nov=0.35,
        delta_write=0.02,
        tau_pos=0.45,
        tau_util=0.5,
        delta_rep=0.10,
        u_init=1.0,
        u_success=0.25,
        u_failure=0.45,
        u_min=-2.0,
        u_max=5.0,
    ),
    ranges=dict(
        w0=Range(),
        lambda_w=Range(0, None, True),
        beta_w=Range(0, 1),
        w_min=Range(),
        w_max=Range(),
        base_interval=Range(1),
        lambda_krr=Range(0, None, True),
        gamma=Range(0, None, True),
        beta_m=Range(0, 1),
        m_min=Range(0, None, True),
        m_max=Range(0, None, True),
        krr_interval=Range(1),
        agop_interval=Range(1),
        warmup=Range(0),
        fit_at_warmup=Range(0, 1),  # a switch
        eta_max=Range(0, 1),
        kappa=Range(0),
        tau_nov=Range(0, 2),  # novelty = 1 - cos lies in [0, 2]
        delta_write=Range(0),
        tau_pos=Range(0, 1),  # a fraction of probes
        tau_util=Range(),
        delta_rep=Range(0),
        u_init=Range(),
        u_success=Range(0),
        u_failure=Range(0),
        u_min=Range(),
        u_max=Range(),
    ),
    ints=frozenset({"base_interval", "krr_interval", "agop_interval", "warmup", "fit_at_warmup"}),
    sizes=dict(w0=N_BASE_FEATURES, w_min=N_BASE_FEATURES, w_max=N_BASE_FEATURES),
    order=(("w_min", "w_max"), ("m_min", "m_max"), ("u_min", "u_max"), ("u_min", "u_init"), ("u_init", "u_max")),
)


def schemas(parts: Mapping[str, Any]) -> dict[str, Schema | None]:
    """``{slot: schema}`` of the core (slot None) and of each part ({"scorer": ..., "mode": ...}) that has one."""
    out: dict[str, Schema | None] = {"": CORE}
    for slot in PART_SLOTS:
        out[slot] = getattr(parts[slot], "hparams", None)
    return out


def make_hparams(values: Mapping[str, Any], parts: Mapping[str, Any], dtype: DTypeLike) -> HParams:
    """HParams for the controller whose parts are ``parts`` from ``{flat name: value}``, each part's over its
    own defaults; an unknown name is an error that lists the known ones."""
    check_x64("hparams", dtype)
    owned = schemas(parts)
    known = [n for s in owned.values() if s is not None for n in s.names()]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown hyperparameter(s) {unknown}; this controller's: {known}")

    def part(schema: Schema | None) -> Any:
        if schema is None:
            return Empty()
        return schema.make({n: values[n] for n in schema.names() if n in values}, dtype)

    core = CORE.leaves({n: values[n] for n in CORE.names() if n in values}, dtype)
    return validate_hparams(HParams(**core, **{slot: part(owned[slot]) for slot in PART_SLOTS}), parts)


def hparams_shapes(parts: Mapping[str, Any], dtype: DTypeLike, batch_shape: tuple[int, ...] = ()) -> HParams:
    """The shapes and dtypes of the HParams built for ``parts`` (``jax.ShapeDtypeStruct`` leaves, what
    ``jax.eval_shape`` takes), read from the schemas alone: ints int32, the rest ``dtype``, vectors of their size,
    each behind the leading axes ``batch_shape`` (stacked configurations)."""
    def leaves(schema: Schema) -> dict[str, Any]:
        return {f: jax.ShapeDtypeStruct(batch_shape + ((schema.sizes[f],) if f in schema.sizes else ()),
                                        jnp.int32 if f in schema.ints else dtype) for f in schema.fields}

    owned = schemas(parts)
    part: dict[str, Any] = {slot: Empty() if (s := owned[slot]) is None else s.cls(**leaves(s)) for slot in PART_SLOTS}
    return HParams(**leaves(CORE), **part)


def flatten(hp: HParams, parts: Mapping[str, Any]) -> dict[str, Any]:
    """``{flat name: leaf}``: the core's, then each part's."""
    out = CORE.flatten(hp)
    for slot in PART_SLOTS:
        schema = getattr(parts[slot], "hparams", None)
        if schema is not None:
            out.update(schema.flatten(getattr(hp, slot)))
    return out


def validate_hparams(hp: HParams, parts: Mapping[str, Any] | None = None) -> HParams:
    """Host-side check of every leaf (stacked configurations too) and, given the controller's ``parts``,
    that each part slot holds what the part declares; returns ``hp``. A ValueError names the field, its
    value (and the configuration index when stacked) and the allowed range."""
    if not isinstance(hp, HParams):
        raise TypeError(f"hyperparameters must be a tokenworth_jax.HParams, got {type(hp).__name__}")
    CORE.validate(hp)
    if parts is not None:
        check_parts(hp, parts)
    for slot in PART_SLOTS:  # each part's pytree by the schema its type declared
        value = getattr(hp, slot)
        if not isinstance(value, Empty):
            if type(value) not in _SCHEMAS:
                raise TypeError(f"HParams.{slot} holds a {type(value).__name__}, which no Schema declares")
            _SCHEMAS[type(value)].validate(value)
    return hp


def check_parts(hp: HParams, parts: Mapping[str, Any]) -> None:
    """Each part slot of ``hp`` holds the pytree its part declares (structure only: free under jit)."""
    for slot in PART_SLOTS:
        part, value = parts[slot], getattr(hp, slot)
        schema = getattr(part, "hparams", None)
        if schema is None and not isinstance(value, Empty):
            raise ValueError(f"these hyperparameters carry {type(value).__name__} in HParams.{slot}, but the {slot} "
                             f"{part.name!r} has none: build them for this controller (tw.hparams(..., {slot}=...) "
                             "or tw.preset)")
        if schema is not None and not isinstance(value, schema.cls):
            raise ValueError(f"the {slot} {part.name!r} needs its hyperparameters ({schema.cls.__name__}) in "
                             f"HParams.{slot}, got {type(value).__name__}: build them with tw.hparams(..., "
                             f"{slot}=...) or tw.preset(...)")


def hparams_from_arrays(data: Mapping[str, Any], parts: Mapping[str, Any]) -> HParams:
    """Validated HParams from ``{flat name: array}`` (e.g. a checkpoint); missing or unknown names are an error."""
    owned = [s for s in schemas(parts).values() if s is not None]
    expected = {n for s in owned for n in s.names()}
    missing, unknown = expected - set(data), set(data) - expected
    if missing or unknown:
        raise ValueError(f"hyperparameters: missing {sorted(missing)}, unknown {sorted(unknown)}")

    def part(slot: str) -> Any:
        schema = getattr(parts[slot], "hparams", None)
        if schema is None:
            return Empty()
        return schema.cls(**{f: jnp.asarray(data[schema.flat(f)]) for f in schema.fields})

    return validate_hparams(HParams(**{f: jnp.asarray(data[f]) for f in CORE_FIELDS},
                                    **{slot: part(slot) for slot in PART_SLOTS}), parts)


def stack_hparams(configs: list[HParams]) -> HParams:
    """Stack configurations along a new leading axis, for ``jax.vmap`` (each one validated).

    Args:
        configs: a non-empty list of :class:`~tokenworth_jax.HParams` of one controller (the same parts, so the
            same structure).

    Returns:
        HParams: every leaf stacked on a new leading axis C = ``len(configs)``, for ``jax.vmap`` and
        :func:`~tokenworth_jax.run_batched`.

    Raises:
        ValueError: an empty list, a value out of range (naming it), or configurations of different controllers.
    """
    if not configs:
        raise ValueError("stack_hparams needs at least one configuration")
    for hp in configs:
        validate_hparams(hp)
    structures = {jax.tree_util.tree_structure(c) for c in configs}
    if len(structures) > 1:
        raise ValueError("stack_hparams: the configurations belong to different controllers (their part "
                         "hyperparameters differ in structure)")
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *configs)
