"""Configuration: a static :class:`Spec` that fixes shapes, and traced :class:`HParams`.

Everything a user sweeps lives in :class:`HParams` as array leaves, so a batch of
configurations is just a stacked pytree that ``jax.vmap`` maps over, and changing a
value never recompiles. Only integers that fix array shapes are static, in :class:`Spec`.
Interval hyperparameters (``base_interval``, ``krr_interval``, ...) are traced too: they
only enter ``lax.cond`` predicates.

Presets follow Table A1 and App. B.2 of the paper (see the algorithm spec, §6).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .pytree import Empty

N_BASE_FEATURES = 4  # phi = [cos, u, rel, rec]
N_STAT_FEATURES = 5  # z tail = [cos, u, rel, rec, freq]


class _SpecFields(NamedTuple):
    dim: int = 512
    capacity: int = 64  # B_max
    base_window: int = 256
    fast_window: int = 128
    slow_window: int = 256
    k_candidates: int = 12
    n_probes: int = 8  # earlier queries kept as probes; |P| <= n_probes + 1
    dtype: str = "float32"
    # Worth is computed over the bank in chunks of this many memories (0 = all at once).
    # Bounds peak memory for very large banks; decisions are identical, values equal to
    # rounding (XLA blocks the smaller matmuls differently; tests/test_transforms.py).
    worth_chunk: int = 0
    # Incremental worth (tokenworth_jax.worth_cache): cache the D-dimensional part of the KRR
    # distances for probes x bank x support, so a task costs (B + P + 1) N D instead of
    # (P + 1)(B + 1) N D. Same decisions as the full computation (scores equal to rounding);
    # costs (P + 1) B (N + 1) floats of state. worth_chunk does not apply to it.
    incremental: bool = False
    # TokenWorth+ (opt-in, docs/tokenworth-plus.md): the plus mode and its state; False = the paper.
    plus: bool = False
    null_window: int = 128  # TokenWorth+: tasks with nothing injected kept for p̂₀(q)
    word_dim: int = 512  # TokenWorth+: hashed question words and bigrams (featurize.word_vectors)
    action_dim: int = 256  # TokenWorth+: hashed action tokens and bigrams (featurize.action_vectors)


SPEC_MINIMUM = dict(dim=1, capacity=1, base_window=1, fast_window=1, slow_window=1, k_candidates=1, n_probes=1,
                    worth_chunk=0, null_window=1, word_dim=1, action_dim=1)
DTYPES = ("float32", "float64")


class Spec(_SpecFields):
    """Static, shape-fixing settings. Hashable, so it is a static jit argument.

    Every field is checked when a Spec is made (also by ``_replace``): a ValueError names the
    field, its value and the allowed range.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "Spec":
        self = super().__new__(cls, *args, **kwargs)
        validate_spec(self)
        return self

    def _replace(self, **changes: Any) -> "Spec":
        return type(self)(**{**self._asdict(), **changes})

    @property
    def feature_dim(self) -> int:
        return self.dim + N_STAT_FEATURES

    @property
    def float_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)


def validate_spec(spec: _SpecFields) -> None:
    for name, lo in SPEC_MINIMUM.items():
        value = getattr(spec, name)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"Spec.{name} = {value!r} must be an integer >= {lo}")
        if value < lo:
            raise ValueError(f"Spec.{name} = {value!r} is out of range: must be an integer >= {lo}")
    for name in ("incremental", "plus"):
        if not isinstance(getattr(spec, name), (bool, np.bool_)):
            raise ValueError(f"Spec.{name} = {getattr(spec, name)!r} must be True or False")
    try:
        name = jnp.dtype(spec.dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"Spec.dtype = {spec.dtype!r} is not supported: must be one of {DTYPES}")


def spec_from_dict(data: dict[str, Any]) -> Spec:
    """A validated Spec from ``Spec._asdict()`` output (e.g. a checkpoint); unknown keys are an error."""
    unknown = set(data) - set(Spec._fields)
    if unknown:
        raise ValueError(f"unknown Spec field(s) {sorted(unknown)}; known: {list(Spec._fields)}")
    return Spec(**{k: (int(v) if isinstance(v, np.integer) else bool(v) if isinstance(v, np.bool_) else v)
                   for k, v in data.items()})


# ----- TokenWorth+ hyperparameters: their own traced pytree, HParams.plus when Spec.plus -----------------
# Outside this pytree they go by flat names, "plus_" + field ("plus_margin", "plus_lambda" for
# lambda_, ...), which is how grids, checkpoints and error messages name them (docs/tokenworth-plus.md).
N_LIFT_FEATURES = 7  # psi = [1, cos, action affinity s, four cosine bumps]
N_RIDGE_GRID = 5  # ridge multipliers the evidence fit chooses from


class PlusHParams(NamedTuple):
    action_lambda: ArrayLike  # ridge of the action model (question words -> action tokens)
    theta0: ArrayLike  # (7,) prior mean of the lift weights
    lambda_: ArrayLike  # (7,) ridge of the lift model, per feature
    adaptive: ArrayLike  # (7,) 0/1: features whose ridge the Laplace evidence chooses among lambda * lambda_grid
    lambda_grid: ArrayLike  # (5,) those multipliers
    refit_interval: ArrayLike  # int: the lift model refits after every this many injected tasks
    features: ArrayLike  # (7,) 0/1 mask of psi
    optimism: ArrayLike  # posterior sds added to the inject decision (an upper confidence bound)
    explore: ArrayLike  # Thompson scale of the inject decision (0: none)
    margin: ArrayLike  # inject unless the decision's predicted gain is <= margin (probability units)
    abstain: ArrayLike  # 0/1: allow "no memory" at all
    # issue 30: "no memory" as a real arm, its posterior learned from its own outcomes (plus/abstain.py)
    null_explore: ArrayLike  # Thompson scale of the no-memory arm's log-odds (0: its posterior mean)
    null_optimism: ArrayLike  # posterior sds added to the no-memory arm (an upper confidence bound)
    null_first: ArrayLike  # no-memory outcomes gathered before the first injection (an abstention floor)
    null_all: ArrayLike  # 0/1: the global no-memory rate from every no-memory outcome (1) or the ring's (0)
    reoffset: ArrayLike  # 0/1: refit the lift against the current no-memory rate (1) or the one at select time (0)
    guard: ArrayLike  # 0/1: the no-harm guard (plus/guard.py): explore an injection only within the allowance
    guard_sds: ArrayLike  # posterior sds of the guard's lower bound on the total gain
    guard_budget: ArrayLike  # the allowance at the start, in expected successes
    guard_rate: ArrayLike  # the allowance added per task (0.01 = one SR point)
    worth: ArrayLike  # the lifecycle's worth: 0 the paper's score, 1 the mean predicted gain, 2 recency (FIFO)
    p0_prior: ArrayLike  # prior mean of the no-memory rate p0
    p0_strength: ArrayLike  # pseudo-count of that prior (and of the kernel shrinkage)
    bandwidth: ArrayLike  # kernel width of p0(q) on the cosine distance
    seed: ArrayLike  # int: PRNG seed of the exploration key


def flat_name(field: str) -> str:
    return "plus_" + field.rstrip("_")


FLAT_TO_FIELD = {flat_name(f): f for f in PlusHParams._fields}

# The defaults the research loop kept (docs/ranking-research.md; swept on DB seeds 0-2 only).
PLUS_DEFAULTS: dict[str, Any] = dict(
    plus_action_lambda=1.0,
    plus_theta0=(0.5, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0),  # optimistic intercept; s weighs twice the cosine
    plus_lambda=1.0,  # one ridge for every feature (a scalar is broadcast)
    plus_adaptive=(0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0),  # the bumps' shrinkage is chosen by evidence
    plus_lambda_grid=(1.0, 3.0, 10.0, 30.0, 100.0),
    plus_refit_interval=1,
    plus_features=(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
    # The inject decision of issue 30 (docs/tokenworth-plus.md, "No harm"): Thompson sampling over
    # {no memory} and the best candidate, each arm drawn from its own posterior, under the no-harm
    # guard; swept on the development streams (seeds 10-12) and simulated DB (seeds 0-2) only.
    plus_optimism=0.0,
    plus_explore=1.0,  # the best candidate's arm: a Thompson draw of the lift
    plus_margin=0.0,  # inject when the drawn candidate beats the drawn "no memory"
    plus_abstain=1.0,
    plus_null_explore=1.0,  # the no-memory arm: a Thompson draw of its own posterior
    plus_null_optimism=0.0,
    plus_null_first=50.0,  # measure "no memory" on 50 tasks before the first injection
    plus_null_all=1.0,  # its global rate from every no-memory outcome so far
    plus_reoffset=1.0,  # the lift's offsets against the current no-memory rate
    plus_guard=1.0,  # the no-harm guard (plus/guard.py)
    plus_guard_sds=1.0,
    plus_guard_budget=4.0,  # the guard's allowance: 4 expected successes ...
    plus_guard_rate=0.002,  # ... + 0.2 SR points of the tasks so far
    plus_worth=2,  # a FIFO bank: measured best on DB seeds 0-2 (docs/ranking-research.md)
    plus_p0_prior=0.5,
    plus_p0_strength=2.0,
    plus_bandwidth=0.05,
    plus_seed=0,
)

PLUS_RANGES: dict[str, tuple[float | None, float | None, bool, bool]] = dict(
    plus_action_lambda=(0, None, True, False),
    plus_theta0=(None, None, False, False),
    plus_lambda=(0, None, True, False),
    plus_adaptive=(0, 1, False, False),  # switches: 0 = off, 1 = on
    plus_lambda_grid=(0, None, True, False),
    plus_refit_interval=(1, None, False, False),
    plus_features=(0, 1, False, False),
    plus_optimism=(0, None, False, False),
    plus_explore=(0, None, False, False),
    plus_margin=(-1, 1, False, False),  # a difference of two probabilities
    plus_abstain=(0, 1, False, False),
    plus_null_explore=(0, None, False, False),
    plus_null_optimism=(0, None, False, False),
    plus_null_first=(0, None, False, False),
    plus_null_all=(0, 1, False, False),
    plus_reoffset=(0, 1, False, False),
    plus_guard=(0, 1, False, False),
    plus_guard_sds=(0, None, False, False),
    plus_guard_budget=(0, None, False, False),
    plus_guard_rate=(0, None, False, False),
    plus_worth=(0, 2, False, False),
    plus_p0_prior=(0, 1, True, True),
    plus_p0_strength=(0, None, True, False),
    plus_bandwidth=(0, None, True, False),
    plus_seed=(0, 2**31 - 1, False, False),  # an int32 PRNG seed
)
PLUS_BROADCAST = {"plus_lambda": N_LIFT_FEATURES}  # a scalar stands for that many equal entries


class HParams(NamedTuple):
    """Traced hyperparameters (array leaves). Build with :func:`hparams`.

    ``plus`` holds TokenWorth+'s own hyperparameters (:class:`PlusHParams`)
    when the controller runs in plus mode (``Spec(plus=True)``), and is :class:`~tokenworth_jax.pytree.Empty`
    otherwise.
    """

    w0: ArrayLike  # (4,) prior weights for [cos, u, rel, rec]
    lambda_w: ArrayLike
    beta_w: ArrayLike
    w_min: ArrayLike  # (4,)
    w_max: ArrayLike  # (4,)
    base_interval: ArrayLike  # int
    lambda_krr: ArrayLike
    gamma: ArrayLike
    beta_m: ArrayLike
    m_min: ArrayLike
    m_max: ArrayLike
    krr_interval: ArrayLike  # int
    agop_interval: ArrayLike  # int
    warmup: ArrayLike  # int
    eta_max: ArrayLike
    kappa: ArrayLike
    tau_nov: ArrayLike
    delta_write: ArrayLike
    tau_pos: ArrayLike
    tau_util: ArrayLike
    delta_rep: ArrayLike
    u_init: ArrayLike
    u_success: ArrayLike
    u_failure: ArrayLike
    u_min: ArrayLike
    u_max: ArrayLike
    plus: PlusHParams | Empty = Empty()


CORE_FIELDS = tuple(f for f in HParams._fields if f != "plus")
PLUS_NAMES = tuple(FLAT_TO_FIELD)
INT_FIELDS = frozenset({"base_interval", "krr_interval", "agop_interval", "warmup", "plus_seed", "plus_worth",
                        "plus_refit_interval"})

COMMON: dict[str, Any] = dict(
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
)

# Table A1 (per environment) and App. C (BigCodeBench / ALFWorld).
PRESETS: dict[str, dict[str, Any]] = {
    "db": dict(krr_interval=50, agop_interval=200, eta_max=0.15, warmup=4),
    "os": dict(krr_interval=25, agop_interval=100, eta_max=0.05, warmup=4),
    "kg": dict(krr_interval=25, agop_interval=100, eta_max=0.10, warmup=24),
    "appc": dict(krr_interval=75, agop_interval=225, eta_max=0.10, warmup=4),
}
PRESET_CAPACITY = {"db": 64, "os": 64, "kg": 64, "appc": 50}


# Allowed range of every hyperparameter, by flat name: (low, high, low_open, high_open); None =
# unbounded. Cross-field rules (w_min <= w_max, m_min <= m_max, u_min <= u_init <= u_max) follow below.
RANGES: dict[str, tuple[float | None, float | None, bool, bool]] = dict(
    w0=(None, None, False, False),
    lambda_w=(0, None, True, False),
    beta_w=(0, 1, False, False),
    w_min=(None, None, False, False),
    w_max=(None, None, False, False),
    base_interval=(1, None, False, False),
    lambda_krr=(0, None, True, False),
    gamma=(0, None, True, False),
    beta_m=(0, 1, False, False),
    m_min=(0, None, True, False),
    m_max=(0, None, True, False),
    krr_interval=(1, None, False, False),
    agop_interval=(1, None, False, False),
    warmup=(0, None, False, False),
    eta_max=(0, 1, False, False),
    kappa=(0, None, False, False),
    tau_nov=(0, 2, False, False),  # novelty = 1 - cos lies in [0, 2]
    delta_write=(0, None, False, False),
    tau_pos=(0, 1, False, False),  # a fraction of probes
    tau_util=(None, None, False, False),
    delta_rep=(0, None, False, False),
    u_init=(None, None, False, False),
    u_success=(0, None, False, False),
    u_failure=(0, None, False, False),
    u_min=(None, None, False, False),
    u_max=(None, None, False, False),
    **PLUS_RANGES,
)
VECTOR_SIZES = {"w0": N_BASE_FEATURES, "w_min": N_BASE_FEATURES, "w_max": N_BASE_FEATURES,
                "plus_theta0": N_LIFT_FEATURES, "plus_lambda": N_LIFT_FEATURES, "plus_adaptive": N_LIFT_FEATURES,
                "plus_features": N_LIFT_FEATURES, "plus_lambda_grid": N_RIDGE_GRID}


def names(*, plus: bool = True) -> tuple[str, ...]:
    """Every hyperparameter's flat name (the core ones, then TokenWorth+'s when ``plus``)."""
    return CORE_FIELDS + (PLUS_NAMES if plus else ())


def flatten(hp: HParams) -> dict[str, Any]:
    """``{flat name: leaf}``: the core fields, then ``plus_*`` when ``hp.plus`` is set."""
    out = {name: getattr(hp, name) for name in CORE_FIELDS}
    if isinstance(hp.plus, PlusHParams):
        out.update({flat_name(f): v for f, v in hp.plus._asdict().items()})
    return out


def unflatten(values: dict[str, Any]) -> HParams:
    """The inverse of :func:`flatten` (``plus`` is set when any ``plus_*`` name is present)."""
    plus: PlusHParams | Empty = Empty()
    if any(name in values for name in PLUS_NAMES):
        plus = PlusHParams(**{FLAT_TO_FIELD[name]: values[name] for name in PLUS_NAMES})
    return HParams(**{name: values[name] for name in CORE_FIELDS}, plus=plus)


def _range_text(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool, integer: bool) -> str:
    kind = "an integer" if integer else "a finite number"
    if lo is None and hi is None:
        return kind
    if hi is None:
        return f"{kind} {'>' if lo_open else '>='} {lo}"
    if lo is None:
        return f"{kind} {'<' if hi_open else '<='} {hi}"
    return f"{kind} in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"


def _where(bad: np.ndarray) -> str:
    """' (configuration i)' for the first offending entry of a stacked hyperparameter."""
    if bad.ndim == 0:
        return ""
    return f" (first at index {tuple(int(i) for i in np.argwhere(bad)[0])})"


def check_value(name: str, value: Any) -> np.ndarray:
    """The host value of one hyperparameter as float64, or a ValueError naming field, value and range."""
    if name not in RANGES:
        raise ValueError(f"unknown hyperparameter {name!r}; known: {list(names())}")
    try:
        v = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"hyperparameter {name} = {value!r} is not a number") from None
    lo, hi, lo_open, hi_open = RANGES[name]
    integer = name in INT_FIELDS
    allowed = _range_text(lo, hi, lo_open, hi_open, integer)
    bad = ~np.isfinite(v)
    if integer:
        bad |= np.isfinite(v) & (v != np.round(v))
    if lo is not None:
        bad |= (v <= lo) if lo_open else (v < lo)
    if hi is not None:
        bad |= (v >= hi) if hi_open else (v > hi)
    if np.any(bad):
        shown = np.asarray(value).tolist()  # plain Python numbers (or nested lists) in the message
        raise ValueError(f"hyperparameter {name} = {shown!r} is out of range{_where(bad)}: must be {allowed}")
    return v


def hparams(preset: str = "db", *, plus: bool = False, dtype: DTypeLike = jnp.float32, **overrides: ArrayLike) -> HParams:
    """Hyperparameters of a preset, with overrides by flat name, as arrays of ``dtype`` (ints as int32).

    ``plus=True`` adds TokenWorth+'s (``plus_*``), for a ``Spec(plus=True)`` controller; a
    ``plus_*`` override without it is an error. Every value is validated on the host first.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
    known = names(plus=plus)
    unknown = set(overrides) - set(known)
    if unknown & set(PLUS_NAMES):
        raise ValueError(f"{sorted(unknown & set(PLUS_NAMES))} are TokenWorth+ hyperparameters: "
                         "pass plus=True (and use Spec(plus=True))")
    if unknown:
        raise ValueError(f"unknown hyperparameter(s) {sorted(unknown)}; known: {list(known)}")
    values = {**COMMON, **PRESETS[preset], **(PLUS_DEFAULTS if plus else {}), **overrides}
    for name, size in PLUS_BROADCAST.items():
        if name in values and np.ndim(values[name]) == 0:
            values[name] = np.full((size,), values[name], np.float64)
    for name in known:  # before any cast: 2.5 must not become 2
        check_value(name, values[name])
    leaves = {name: jnp.asarray(values[name], dtype=jnp.int32 if name in INT_FIELDS else dtype) for name in known}
    return validate_hparams(unflatten(leaves))


def validate_hparams(hp: HParams) -> HParams:
    """Host-side check of every field (works on stacked configurations too); returns ``hp``.

    A ValueError names the field, its value (and the configuration index when stacked) and
    the allowed range. Skipped for traced values (inside a transformation nothing is concrete).
    """
    if not isinstance(hp, HParams):
        raise TypeError(f"hyperparameters must be a tokenworth_jax.HParams, got {type(hp).__name__}")
    if not isinstance(hp.plus, (PlusHParams, Empty)):
        raise TypeError(f"HParams.plus must be PlusHParams or Empty, got {type(hp.plus).__name__}")
    try:
        concrete = {k: np.asarray(v) for k, v in flatten(hp).items()}
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return hp
    for name, n in VECTOR_SIZES.items():
        if name in concrete and concrete[name].shape[-1:] != (n,):
            raise ValueError(f"hyperparameter {name} must have {n} entries, got shape {concrete[name].shape}")
    v = {name: check_value(name, value) for name, value in concrete.items()}

    def pair(lo_name: str, hi_name: str) -> None:
        bad = v[lo_name] > v[hi_name]
        if np.any(bad):
            raise ValueError(f"hyperparameters {lo_name} = {concrete[lo_name].tolist()} and {hi_name} = "
                             f"{concrete[hi_name].tolist()}{_where(np.asarray(bad))}: need {lo_name} <= {hi_name}")

    pair("w_min", "w_max")
    pair("m_min", "m_max")
    pair("u_min", "u_max")
    pair("u_min", "u_init")
    pair("u_init", "u_max")
    return hp


def check_matches(spec: Spec, hp: HParams) -> None:
    """A plus-mode Spec needs TokenWorth+ hyperparameters and a paper one must have none."""
    if spec.plus and not isinstance(hp.plus, PlusHParams):
        raise ValueError("Spec(plus=True) needs TokenWorth+ hyperparameters: build them with "
                         "tw.hparams(..., plus=True) or tw.preset(..., plus=True)")
    if not spec.plus and not isinstance(hp.plus, Empty):
        raise ValueError("these hyperparameters carry TokenWorth+ values (plus_*) but Spec.plus is False: "
                         "use Spec(plus=True), or tw.hparams(...) without plus=True")


def hparams_from_arrays(data: dict[str, Any]) -> HParams:
    """Validated HParams from ``{flat name: array}`` (e.g. a checkpoint); missing or unknown names are an error."""
    plus = any(name in data for name in PLUS_NAMES)
    expected = set(names(plus=plus))
    missing, unknown = expected - set(data), set(data) - expected
    if missing or unknown:
        raise ValueError(f"hyperparameters: missing {sorted(missing)}, unknown {sorted(unknown)}")
    return validate_hparams(unflatten({k: jnp.asarray(data[k]) for k in expected}))


def preset(name: str = "db", *, plus: bool = False, dtype: DTypeLike = jnp.float32,
           spec_overrides: dict[str, Any] | None = None, **overrides: ArrayLike) -> tuple[Spec, HParams]:
    """``(spec, hparams)`` for an environment preset: ``"db"``, ``"os"``, ``"kg"`` or ``"appc"``.

    ``plus=True`` gives the TokenWorth+ controller (``Spec(plus=True)`` and its hyperparameters).
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; expected one of {sorted(PRESETS)}")
    spec_fields = {"capacity": PRESET_CAPACITY[name], "dtype": jnp.dtype(dtype).name, "plus": plus,
                   **(spec_overrides or {})}
    spec = Spec(**spec_fields)
    return spec, hparams(name, plus=spec.plus, dtype=dtype, **overrides)


def stack_hparams(configs: list[HParams]) -> HParams:
    """Stack configurations along a new leading axis, for ``jax.vmap`` (each one validated)."""
    if not configs:
        raise ValueError("stack_hparams needs at least one configuration")
    for hp in configs:
        validate_hparams(hp)
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *configs)
