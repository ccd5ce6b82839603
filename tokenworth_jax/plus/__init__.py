"""TokenWorth+: a mode of the controller beyond the paper (``tw.preset(env, method="tokenworth+")``).

Everything TokenWorth+ is lives in this package; the core knows it only as a
:class:`~tokenworth_jax.modes.Mode` value, :func:`.mode.plus`, which the preset table names. Its
state is :class:`.mode.PlusState` (``State.mode``), each piece a small pure function over it:

1. :mod:`.actions`: the action model, a ridge regression from a question's words to the action
   tokens of the memories it offers, learned by recursive least squares (self-supervised).
2. :mod:`.abstain`: the "no memory" arm, p̂₀(q), a kernel-smoothed, Beta-shrunk estimate of the
   success probability without injection, from the tasks where nothing was injected.
3. :mod:`.lift`: the offset-logistic lift model P(y=1 | q, m) = σ(logit p̂₀(q) + θᵀψ(q, m)), its
   Laplace posterior N(θ̂, H⁻¹) with evidence-chosen ridges, and Thompson draws from it.
4. :mod:`.mode`: the mode value: selection by predicted gain, abstention on evidence of harm, and
   the lifecycle's worth (the paper's score, the predicted gain, or recency: a FIFO bank).

What it declares to the core: its shape fields :class:`.config.PlusShapes` (``Spec.mode.shapes``),
its hyperparameters :class:`.config.PlusHParams` (``HParams.mode``, flat names ``plus_*``) and the
two text features it reads, the question's words and the memory's actions (:mod:`.text`, hashed
by the host). See docs/tokenworth-plus.md.
"""
