"""TokenWorth+'s own configuration: its shape fields and its hyperparameter pytree.

They are declared here and nowhere else: the mode value (:func:`tokenworth_jax.plus.mode.plus`)
carries :class:`PlusShapes` as its ``shapes`` and :data:`SCHEMA` as its ``hparams``, so the core
validates, builds, flattens and checkpoints them without knowing them. Outside the pytree the
hyperparameters go by flat names, ``"plus_" + field`` (``plus_margin``, ``plus_lambda`` for
``lambda_``), which is how grids, checkpoints and error messages name them (docs/tokenworth-plus.md).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from .. import _doc
from ..config import Range, Schema, check_shapes
from .text import ACTION_DIM, WORD_DIM

N_LIFT_FEATURES = 7  # psi = [1, cos, action affinity s, four cosine bumps]
N_RIDGE_GRID = 5  # ridge multipliers the evidence fit chooses from


class _ShapeFields(NamedTuple):
    null_window: int = 128  # tasks with nothing injected kept for p̂₀(q)
    word_dim: int = WORD_DIM  # hashed question words and bigrams (plus.text.word_vectors)
    action_dim: int = ACTION_DIM  # hashed action tokens and bigrams (plus.text.action_vectors)


class PlusShapes(_ShapeFields):
    """TokenWorth+'s static shape fields (``Spec.mode.shapes``); checked when made."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "PlusShapes":
        self = super().__new__(cls, *args, **kwargs)
        check_shapes("PlusShapes", self._asdict(), dict(null_window=1, word_dim=1, action_dim=1))
        return self


class PlusHParams(NamedTuple):
    """TokenWorth+'s traced hyperparameters, ``HParams.mode`` when the mode is :data:`tokenworth_jax.plus_mode`.

    Outside the pytree each goes by its flat name ``"plus_" + field`` (``plus_lambda`` for
    ``lambda_``): ``tw.preset("db", method="tokenworth+", plus_margin=0.05)``. Every leaf is a JAX
    array: int32 where marked *int*, else of the configuration's float dtype; shape () unless
    given. Switches (0/1) are stored as numbers so that a sweep can vary them without recompiling.
    The no-harm work (docs/tokenworth-plus.md, "No harm") added "no memory" as an arm of its own
    (``null_*``), whose posterior is learned from its own outcomes, and the no-harm guard (``guard*``).
    """

    action_lambda: jax.Array
    theta0: jax.Array
    lambda_: jax.Array
    adaptive: jax.Array
    lambda_grid: jax.Array
    refit_interval: jax.Array
    features: jax.Array
    optimism: jax.Array
    explore: jax.Array
    margin: jax.Array
    abstain: jax.Array
    null_explore: jax.Array
    null_optimism: jax.Array
    null_first: jax.Array
    null_all: jax.Array
    reoffset: jax.Array
    guard: jax.Array
    guard_sds: jax.Array
    guard_budget: jax.Array
    guard_rate: jax.Array
    worth: jax.Array
    p0_prior: jax.Array
    p0_strength: jax.Array
    bandwidth: jax.Array
    seed: jax.Array


_doc.fields(
    PlusHParams,
    action_lambda='Ridge of the action model (question words -> action tokens).',
    theta0='(7,) prior mean of the lift weights.',
    lambda_='(7,) ridge of the lift model, per feature.',
    adaptive='(7,) 0/1: features whose ridge the Laplace evidence chooses among lambda * lambda_grid.',
    lambda_grid='(5,) those multipliers.',
    refit_interval='int: the lift model refits after every this many injected tasks.',
    features='(7,) 0/1 mask of psi.',
    optimism='Posterior sds added to the inject decision (an upper confidence bound).',
    explore='Thompson scale of the inject decision (0: none).',
    margin="Inject unless the decision's predicted gain is <= margin (probability units).",
    abstain='0/1: allow "no memory" at all.',
    null_explore="Thompson scale of the no-memory arm's log-odds (0: its posterior mean).",
    null_optimism='Posterior sds added to the no-memory arm (an upper confidence bound).',
    null_first='No-memory outcomes gathered before the first injection (an abstention floor).',
    null_all="0/1: the global no-memory rate from every no-memory outcome (1) or the ring's (0).",
    reoffset='0/1: refit the lift against the current no-memory rate (1) or the one at select time (0).',
    guard='0/1: the no-harm guard: explore an injection only within the allowance.',
    guard_sds="Posterior sds of the guard's lower bound on the total gain.",
    guard_budget='The allowance at the start, in expected successes.',
    guard_rate='The allowance added per task (0.01 = one SR point).',
    worth="The lifecycle's worth: 0 the paper's score, 1 the mean predicted gain, 2 recency (FIFO).",
    p0_prior='Prior mean of the no-memory rate p0.',
    p0_strength='Pseudo-count of that prior (and of the kernel shrinkage).',
    bandwidth='Kernel width of p0(q) on the cosine distance.',
    seed='int: PRNG seed of the exploration key.',
)


SCHEMA = Schema(
    cls=PlusHParams,
    fields=PlusHParams._fields,
    prefix="plus_",
    # The defaults the research loop kept (docs/ranking-research.md; swept on DB seeds 0-2 only).
    defaults=dict(
        action_lambda=1.0,
        theta0=(0.5, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0),  # optimistic intercept; s weighs twice the cosine
        lambda_=1.0,  # one ridge for every feature (a scalar is broadcast)
        adaptive=(0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0),  # the bumps' shrinkage is chosen by evidence
        lambda_grid=(1.0, 3.0, 10.0, 30.0, 100.0),
        refit_interval=1,
        features=(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
        # The no-harm inject decision (docs/tokenworth-plus.md, "No harm"): Thompson sampling over
        # {no memory} and the best candidate, each arm drawn from its own posterior, under the no-harm
        # guard; swept on the development streams (seeds 10-12) and simulated DB (seeds 0-2) only.
        optimism=0.0,
        explore=1.0,  # the best candidate's arm: a Thompson draw of the lift
        margin=0.0,  # inject when the drawn candidate beats the drawn "no memory"
        abstain=1.0,
        null_explore=1.0,  # the no-memory arm: a Thompson draw of its own posterior
        null_optimism=0.0,
        null_first=50.0,  # measure "no memory" on 50 tasks before the first injection
        null_all=1.0,  # its global rate from every no-memory outcome so far
        reoffset=1.0,  # the lift's offsets against the current no-memory rate
        guard=1.0,  # the no-harm guard (guard.py)
        guard_sds=1.0,
        guard_budget=4.0,  # the guard's allowance: 4 expected successes ...
        guard_rate=0.002,  # ... + 0.2 SR points of the tasks so far
        worth=2,  # a FIFO bank: measured best on DB seeds 0-2 (docs/ranking-research.md)
        p0_prior=0.5,
        p0_strength=2.0,
        bandwidth=0.05,
        seed=0,
    ),
    ranges=dict(
        action_lambda=Range(0, None, True),
        theta0=Range(),
        lambda_=Range(0, None, True),
        adaptive=Range(0, 1),  # switches: 0 = off, 1 = on
        lambda_grid=Range(0, None, True),
        refit_interval=Range(1),
        features=Range(0, 1),
        optimism=Range(0),
        explore=Range(0),
        margin=Range(-1, 1),  # a difference of two probabilities
        abstain=Range(0, 1),
        null_explore=Range(0),
        null_optimism=Range(0),
        null_first=Range(0),
        null_all=Range(0, 1),
        reoffset=Range(0, 1),
        guard=Range(0, 1),
        guard_sds=Range(0),
        guard_budget=Range(0),
        guard_rate=Range(0),
        worth=Range(0, 2),
        p0_prior=Range(0, 1, True, True),
        p0_strength=Range(0, None, True),
        bandwidth=Range(0, None, True),
        seed=Range(0, 2**31 - 1),  # an int32 PRNG seed
    ),
    ints=frozenset({"refit_interval", "worth", "seed"}),
    sizes=dict(theta0=N_LIFT_FEATURES, lambda_=N_LIFT_FEATURES, adaptive=N_LIFT_FEATURES, features=N_LIFT_FEATURES,
               lambda_grid=N_RIDGE_GRID),
    broadcast=frozenset({"lambda_"}),  # a scalar stands for that many equal entries
)
