"""Environment presets (Table A1): ``presets.db()`` etc. return ``(spec, hparams)``."""

from __future__ import annotations

from typing import Any

from jax.typing import ArrayLike

from .config import PRESETS, preset


def db(**overrides: ArrayLike) -> tuple[Any, Any]:
    return preset("db", **overrides)


def os(**overrides: ArrayLike) -> tuple[Any, Any]:  # noqa: A001 - the environment's name
    return preset("os", **overrides)


def kg(**overrides: ArrayLike) -> tuple[Any, Any]:
    return preset("kg", **overrides)


def appc(**overrides: ArrayLike) -> tuple[Any, Any]:
    """App. C (BigCodeBench / ALFWorld) settings, with B_max = 50."""
    return preset("appc", **overrides)


NAMES = tuple(PRESETS)
