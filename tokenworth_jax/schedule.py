"""When the learners refit (spec §4): counted in feedback examples, not tasks."""

from __future__ import annotations

from typing import NamedTuple

import jax

from .config import HParams


class Due(NamedTuple):
    base: jax.Array  # bool: Newton fit of the base scorer
    krr: jax.Array  # bool: KRR solve of the residual
    agop: jax.Array  # bool: AGOP metric update (then a KRR refit), once a KRR fit exists


def due(n_feedback: jax.Array, hp: HParams) -> Due:
    """The refits due at feedback count ``n_feedback``.

    KRR fits every ``krr_interval`` examples once at least ``warmup`` exist; with ``fit_at_warmup``
    (the Table A1 presets) the first fit also runs at ``warmup`` itself, else (App. C: warm-up 4,
    interval 75) the first is at the first interval."""
    n = n_feedback
    return Due(base=(n > 0) & (n % hp.base_interval == 0),
               krr=((n == hp.warmup) & (hp.fit_at_warmup > 0)) | ((n >= hp.warmup) & (n % hp.krr_interval == 0)),
               agop=(n > 0) & (n % hp.agop_interval == 0))
