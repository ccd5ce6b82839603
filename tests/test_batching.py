"""``batching.gated`` and its limits: each gives the right answer or a readable error.

The reference answer is the plain ``lax.cond`` (one configuration) or ``jnp.where`` of both branches
(many): what gated must equal, whatever transform surrounds it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tokenworth_jax.batching import gated

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too


def fn(x, y):
    return x * 2 + y


def otherwise(x, y):
    return x - y


def h(p, x, y):
    return gated(p, fn, otherwise, x, y)


def plain(p, x, y):  # the answer gated must give
    return jnp.where(p, fn(x, y), otherwise(x, y))


P = jnp.array([True, False, True])
X = jnp.arange(3.0) + 0.5
Y = jnp.ones(3)
P2 = jnp.array([[True, False], [False, False]])
X2 = jnp.arange(4.0).reshape(2, 2)
Y2 = jnp.ones((2, 2))


def _conds(jaxpr):
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "cond":
            out.append(eqn)
        for param in eqn.params.values():
            for sub in (param if isinstance(param, (tuple, list)) else [param]):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    out += _conds(inner)
    return out


def test_one_level_of_vmap_is_gated_and_right():
    np.testing.assert_array_equal(jax.vmap(h)(P, X, Y), plain(P, X, Y))
    jaxpr = jax.make_jaxpr(jax.vmap(h))(P, X, Y).jaxpr
    conds = _conds(jaxpr)
    assert conds and all(e.invars[0].aval.shape == () for e in conds)  # "any configuration", never a select
    assert not any(e.primitive.name == "select_n" and e.outvars[0].aval.shape == (3,)
                   for e in jaxpr.eqns)  # the per-configuration pick lives inside the cond


def test_nested_vmap_is_right_and_gates_the_inner_level():
    np.testing.assert_array_equal(jax.vmap(jax.vmap(h))(P2, X2, Y2), plain(P2, X2, Y2))
    np.testing.assert_array_equal(jax.jit(jax.vmap(jax.vmap(h)))(P2, X2, Y2), plain(P2, X2, Y2))


@pytest.mark.parametrize("p", [True, False])
def test_an_unbatched_predicate_is_broadcast(p):
    np.testing.assert_array_equal(jax.vmap(h, in_axes=(None, 0, 0))(p, X, Y), plain(p, X, Y))
    np.testing.assert_array_equal(jax.jit(jax.vmap(h, in_axes=(None, 0, 0)))(p, X, Y), plain(p, X, Y))


def test_closed_over_traced_values_are_hoisted():
    """custom_vmap alone raises a bare AssertionError here; gated retraces with the values as operands."""

    def closing(c, p, x):
        return gated(p, lambda a: a + c, lambda a: a - c, x)

    np.testing.assert_array_equal(jax.vmap(closing)(X, P, X), jnp.where(P, 2 * X, 0.0))
    np.testing.assert_array_equal(jax.jit(jax.vmap(closing))(X, P, X), jnp.where(P, 2 * X, 0.0))
    np.testing.assert_array_equal(jax.vmap(closing, in_axes=(0, None, 0))(X, True, X), 2 * X)
    assert float(jax.jit(closing)(1.0, True, 2.0)) == 3.0  # closed over a jit tracer, no vmap


def _loss(x):
    return jnp.sum(jax.vmap(h)(P, x, Y) ** 2)


def _plain_loss(x):
    return jnp.sum(plain(P, x, Y) ** 2)


def test_reverse_and_forward_mode_give_the_conds_derivative():
    for p in (True, False):
        assert float(jax.grad(lambda x: h(p, x, 1.0))(2.0)) == (2.0 if p else 1.0)
        assert jax.jvp(lambda x: h(p, x, 1.0), (2.0,), (1.0,))[1] == (2.0 if p else 1.0)
    np.testing.assert_allclose(jax.grad(_loss)(X), jax.grad(_plain_loss)(X))  # grad of vmap
    np.testing.assert_allclose(jax.jit(jax.grad(_loss))(X), jax.grad(_plain_loss)(X))
    np.testing.assert_allclose(jax.vmap(jax.grad(lambda p, x: h(p, x, 1.0), argnums=1))(P, X),
                               jnp.where(P, 2.0, 1.0))  # vmap of grad
    np.testing.assert_allclose(jax.jvp(lambda x: jax.vmap(h)(P, x, Y), (X,), (jnp.ones(3),))[1],
                               jnp.where(P, 2.0, 1.0))
    # integer operands carry no tangent
    assert float(jax.grad(lambda x: gated(True, lambda a, i: a * i, lambda a, i: a, x, 3))(2.0)) == 3.0


def test_a_derivative_under_two_vmaps_is_refused_readably_and_inside_them_works():
    with pytest.raises(NotImplementedError, match=r"gated: a derivative .* of a function vmapped twice is not "
                                                  r"supported .* differentiate inside the vmaps"):
        jax.grad(lambda x: jnp.sum(jax.vmap(jax.vmap(h))(P2, x, Y2)))(X2)
    inside = jax.vmap(jax.vmap(jax.grad(lambda p, x: h(p, x, 1.0), argnums=1)))(P2, X2)
    np.testing.assert_array_equal(inside, jnp.where(P2, 2.0, 1.0))
