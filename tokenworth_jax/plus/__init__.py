"""TokenWorth+: an opt-in extension of the controller (``Spec(plus=True)``).

Four additions, each a small pure function over its own sub-state (:class:`PlusState`,
held in ``State.plus``; ``None`` in the paper-faithful mode, which stays bit-for-bit the
default):

1. :mod:`.abstain` — a "no memory" arm: p̂₀(q), a kernel-smoothed, Beta-shrunk estimate of
   the success probability without injection, trained on the tasks where nothing was injected.
2. :mod:`.lift` — advantage credit: an offset-logistic "lift" model
   P(y=1 | q, m) = σ(logit p̂₀(q) + θᵀψ(q, m)) and the residual target y − (2p̂₀(q) − 1).
3. Exploration — a Laplace posterior N(θ̂, H⁻¹) of the lift weights, Thompson-sampled with
   the PRNG key carried in the state.
4. :mod:`.policy` — selection by predicted advantage, abstention by a margin, and the
   worth-aware lifecycle (V⁺(m) = mean over probes of the predicted advantage).

See docs/tokenworth-plus.md.
"""

from .abstain import null_probability
from .lift import N_LIFT, lift_features, lift_fit, thompson
from .policy import choose, on_write, record, residual_target, worth_scores
from .state import PlusPending, PlusState, init_plus

__all__ = ["N_LIFT", "PlusPending", "PlusState", "choose", "init_plus", "lift_features", "lift_fit",
           "null_probability", "on_write", "record", "residual_target", "thompson", "worth_scores"]
