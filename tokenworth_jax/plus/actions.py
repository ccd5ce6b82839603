"""The action model: which actions a question will need, learned from memory texts alone.

Every successful task offers a memory whose text shows both its question and its actions. A
ridge regression from the question's hashed words x (W,) to the hashed action tokens a (A,),

    M = (λ_a I + Σ_j x_j x_jᵀ)⁻¹ Σ_j x_j a_jᵀ,

is kept exactly by recursive least squares (Sherman–Morrison; ``P`` is the inverse Gram). The
affinity ŝ(q, m) = x(q)ᵀ M a_m is a learned bilinear form between query words and memory action
tokens: how much of m's procedure the query will need. The paper's features cannot express it
(element-wise products of one hashed space match only words two questions share), and rewards
are too noisy to learn it (docs/ranking-research.md); memory texts are not.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike


class ActionModel(NamedTuple):
    P: jax.Array  # (W, W) inverse of λ_a I + Σ x xᵀ
    M: jax.Array  # (W, A) the ridge solution
    n: jax.Array  # int32 pairs learned


def init(word_dim: int, action_dim: int, action_lambda: ArrayLike, dtype: jnp.dtype) -> ActionModel:
    return ActionModel(P=jnp.eye(word_dim, dtype=dtype) / jnp.asarray(action_lambda, dtype),
                       M=jnp.zeros((word_dim, action_dim), dtype), n=jnp.zeros((), jnp.int32))


def learn(model: ActionModel, x: jax.Array, a: jax.Array, enabled: jax.Array) -> ActionModel:
    """One exact recursive-least-squares step with the pair (words x (W,), actions a (A,)) where
    ``enabled``. Disabled, x is zeroed, which makes the step exactly the identity: no conditional
    has to carry the (W, W) matrix in and out."""
    x = jnp.where(enabled, x, jnp.zeros_like(x))
    Px = model.P @ x
    k = Px / (1.0 + x @ Px)
    return ActionModel(P=model.P - jnp.outer(k, Px), M=model.M + jnp.outer(k, a - x @ model.M),
                       n=model.n + jnp.asarray(enabled).astype(jnp.int32))


def affinity(model: ActionModel, x: jax.Array, actions: jax.Array) -> jax.Array:
    """ŝ = xᵀ M a_m for N memories' action vectors (N, A) and Q queries' words x (Q, W): (Q, N)."""
    return (x @ model.M) @ actions.T
