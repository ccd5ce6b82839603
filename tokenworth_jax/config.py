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
from jax.typing import ArrayLike

N_BASE_FEATURES = 4  # phi = [cos, u, rel, rec]
N_STAT_FEATURES = 5  # z tail = [cos, u, rel, rec, freq]
N_LIFT_FEATURES = 3  # TokenWorth+ psi = [1, cos, mean advantage]


class Spec(NamedTuple):
    """Static, shape-fixing settings. Hashable, so it is a static jit argument."""

    dim: int = 512
    capacity: int = 64  # B_max
    base_window: int = 256
    fast_window: int = 128
    slow_window: int = 256
    k_candidates: int = 12
    n_probes: int = 8  # earlier queries kept as probes; |P| <= n_probes + 1
    dtype: str = "float32"
    # Worth is computed over the bank in chunks of this many memories (0 = all at once).
    # Bounds peak memory for very large banks; results are identical.
    worth_chunk: int = 0
    # TokenWorth+ (opt-in, docs/tokenworth-plus.md): adds State.plus; False = the paper, unchanged.
    plus: bool = False
    null_window: int = 128  # TokenWorth+: tasks with nothing injected kept for p̂₀(q)

    @property
    def feature_dim(self) -> int:
        return self.dim + N_STAT_FEATURES

    @property
    def float_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)


class HParams(NamedTuple):
    """Traced hyperparameters (array leaves). Build with :func:`hparams`."""

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
    # ---- TokenWorth+ (read only when Spec.plus; docs/tokenworth-plus.md). Defaults of None keep
    # checkpoints written before these leaves existed loadable (the paper path never reads them).
    plus_rank: ArrayLike = None  # 0/1: rank candidates by predicted advantage (else the paper's s)
    plus_abstain: ArrayLike = None  # 0/1: inject only when the predicted advantage beats plus_margin
    plus_advantage: ArrayLike = None  # 0/1: residual target y - (2 p0(q) - 1) (else the paper's delta)
    plus_worth: ArrayLike = None  # 0/1: lifecycle worth = mean predicted advantage over probes
    plus_margin: ArrayLike = None  # abstention margin, in success-probability units
    plus_explore: ArrayLike = None  # Thompson scale on the Laplace posterior (0 = greedy)
    plus_lambda: ArrayLike = None  # ridge of the lift model towards plus_theta0
    plus_theta0: ArrayLike = None  # (3,) prior lift weights for [1, cos, mean advantage]
    plus_p0_prior: ArrayLike = None  # prior mean of p0
    plus_p0_strength: ArrayLike = None  # pseudo-count of that prior (and of the kernel shrinkage)
    plus_bandwidth: ArrayLike = None  # kernel width of p0(q) on the cosine distance
    plus_seed: ArrayLike = None  # int: PRNG seed of the exploration key


INT_FIELDS = frozenset({"base_interval", "krr_interval", "agop_interval", "warmup", "plus_seed"})
PLUS_FIELDS = tuple(f for f in HParams._fields if f.startswith("plus_"))

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
    # TokenWorth+ defaults: every part on (they only act when Spec.plus is True).
    plus_rank=0.0,  # rank by the paper score s; 1 = by predicted advantage (measured worse on sim DB)
    plus_abstain=1.0,
    plus_advantage=1.0,
    plus_worth=1.0,
    plus_margin=-0.05,
    plus_explore=1.0,
    plus_lambda=1.0,
    plus_theta0=(0.5, 0.0, 0.0),  # optimistic intercept: without it a greedy start never injects
    plus_p0_prior=0.5,
    plus_p0_strength=2.0,
    plus_bandwidth=0.05,
    plus_seed=0,
)

# Table A1 (per environment) and App. C (BigCodeBench / ALFWorld).
PRESETS: dict[str, dict[str, Any]] = {
    "db": dict(krr_interval=50, agop_interval=200, eta_max=0.15, warmup=4),
    "os": dict(krr_interval=25, agop_interval=100, eta_max=0.05, warmup=4),
    "kg": dict(krr_interval=25, agop_interval=100, eta_max=0.10, warmup=24),
    "appc": dict(krr_interval=75, agop_interval=225, eta_max=0.10, warmup=4),
}
PRESET_CAPACITY = {"db": 64, "os": 64, "kg": 64, "appc": 50}


def hparams(preset: str = "db", *, dtype: Any = jnp.float32, **overrides: ArrayLike) -> HParams:
    """Hyperparameters of a preset, with overrides, as arrays of ``dtype`` (ints as int32)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
    values = {**COMMON, **PRESETS[preset]}
    unknown = set(overrides) - set(HParams._fields)
    if unknown:
        raise ValueError(f"unknown hyperparameter(s) {sorted(unknown)}; known: {list(HParams._fields)}")
    values.update(overrides)
    leaves = {}
    for name in HParams._fields:
        kind = jnp.int32 if name in INT_FIELDS else dtype
        leaves[name] = jnp.asarray(values[name], dtype=kind)
    hp = HParams(**leaves)
    validate_hparams(hp)
    return hp


def validate_hparams(hp: HParams) -> None:
    """Host-side checks with clear messages (skipped for traced values)."""
    try:
        concrete = {k: np.asarray(v) for k, v in hp._asdict().items() if v is not None}
    except jax.errors.TracerArrayConversionError:  # inside a transformation: nothing to check
        return
    for name in ("w0", "w_min", "w_max"):
        if concrete[name].shape[-1:] != (N_BASE_FEATURES,):
            raise ValueError(f"{name} must have {N_BASE_FEATURES} entries, got shape {concrete[name].shape}")
    if "plus_theta0" in concrete:  # TokenWorth+ leaves (absent in checkpoints that predate them)
        _validate_plus(concrete)
    for name, v in concrete.items():
        if not np.all(np.isfinite(v)):
            raise ValueError(f"hyperparameter {name} must be finite, got {v}")
    for name in ("base_interval", "krr_interval", "agop_interval"):
        if np.any(concrete[name] < 1):
            raise ValueError(f"{name} must be >= 1, got {concrete[name]}")
    for name in ("lambda_w", "lambda_krr", "gamma"):
        if np.any(concrete[name] <= 0):
            raise ValueError(f"{name} must be > 0, got {concrete[name]}")
    if np.any(concrete["m_min"] <= 0) or np.any(concrete["m_max"] < concrete["m_min"]):
        raise ValueError("metric clip needs 0 < m_min <= m_max")


def _validate_plus(concrete: dict[str, np.ndarray]) -> None:
    if concrete["plus_theta0"].shape[-1:] != (N_LIFT_FEATURES,):
        raise ValueError(f"plus_theta0 must have {N_LIFT_FEATURES} entries, got shape {concrete['plus_theta0'].shape}")
    for name in ("plus_lambda", "plus_p0_strength", "plus_bandwidth"):
        if np.any(concrete[name] <= 0):
            raise ValueError(f"{name} must be > 0, got {concrete[name]}")
    if np.any(concrete["plus_p0_prior"] <= 0) or np.any(concrete["plus_p0_prior"] >= 1):
        raise ValueError(f"plus_p0_prior must be in (0, 1), got {concrete['plus_p0_prior']}")
    if np.any(concrete["plus_explore"] < 0):
        raise ValueError(f"plus_explore must be >= 0, got {concrete['plus_explore']}")


def preset(name: str = "db", *, dtype: Any = jnp.float32, spec_overrides: dict[str, Any] | None = None,
           **overrides: ArrayLike) -> tuple[Spec, HParams]:
    """``(spec, hparams)`` for an environment preset: ``"db"``, ``"os"``, ``"kg"`` or ``"appc"``."""
    spec_fields = {"capacity": PRESET_CAPACITY[name], "dtype": jnp.dtype(dtype).name, **(spec_overrides or {})}
    spec = Spec(**spec_fields)
    return spec, hparams(name, dtype=dtype, **overrides)


def stack_hparams(configs: list[HParams]) -> HParams:
    """Stack configurations along a new leading axis, for ``jax.vmap``."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *configs)
