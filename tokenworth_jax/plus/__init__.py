"""TokenWorth+: an opt-in mode of the controller (``Spec(plus=True)``), beyond the paper.

Four additions, each a small pure function over TokenWorth+'s own state
(:class:`~.state.PlusState`; the paper mode has none):

1. :mod:`.abstain` — a "no memory" arm: p̂₀(q), a kernel-smoothed, Beta-shrunk estimate of
   the success probability without injection, trained on the tasks where nothing was injected.
2. :mod:`.lift` — advantage credit: an offset-logistic "lift" model
   P(y=1 | q, m) = σ(logit p̂₀(q) + θᵀψ(q, m)) and the residual target y − (2p̂₀(q) − 1).
3. Exploration — a Laplace posterior N(θ̂, H⁻¹) of the lift weights, Thompson-sampled with
   the PRNG key carried in the state.
4. :mod:`.mode` — the :class:`~tokenworth_jax.modes.Mode` value: selection by predicted
   advantage, abstention by a margin, and the worth-aware lifecycle.

Its hyperparameters are their own pytree, :class:`~tokenworth_jax.config.PlusHParams`
(``HParams.plus``), declared with the rest of the configuration. See docs/tokenworth-plus.md.
"""
