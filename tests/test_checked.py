"""Checked mode (tw.checked): the first non-finite input or state is reported; clean calls equal the plain API."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.checkify import JaxRuntimeError

import tokenworth_jax as tw

from tests.controller_helpers import (assert_no_callback_log, clustered_stream, precision, small_setup,
                                      with_default_emitters)

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too


# Every stream in this file has T tasks, so tw.run's program (and tw.checked.run's) for it is compiled once here. T is
# the set-up's stream length: the shorter streams of the checks grew to it, and the set-up's did not shrink.
T = 12


@pytest.fixture(scope="module")
def setup():
    with precision("float32") as f:
        spec, hp = small_setup(f)
        q, m, r = clustered_stream(seed=2, T=T, dim=spec.dim)
        events = tw.Event(jnp.asarray(q, f), jnp.ones(T, jnp.int32), jnp.asarray(m, f), jnp.arange(T, dtype=jnp.int32))
        state, _ = tw.run(tw.init(spec, hp), events, hp, spec)
        yield spec, hp, state, jnp.asarray(q[0], f), jnp.asarray(m[0], f)


def test_checked_calls_equal_plain_calls(setup):
    spec, hp, state, q, m = setup
    a = tw.checked.select(state, q, hp, spec)
    b = tw.select(state, q, hp, spec)
    chex.assert_trees_all_equal(a, b)
    s = tw.checked.observe(a[0], 1, hp, spec)
    chex.assert_trees_all_equal(s, tw.observe(a[0], jnp.int32(1), hp, spec))
    chex.assert_trees_all_equal(tw.checked.offer(s, m, 99, hp, spec), tw.offer(s, m, jnp.int32(99), hp, spec))
    chex.assert_trees_all_equal(tw.checked.finish_task(a[0], 1, m, 99, True, hp, spec),
                                tw.finish_task(a[0], jnp.int32(1), m, jnp.int32(99), jnp.ones((), bool), hp, spec))


def test_nan_query_is_reported_by_name(setup):
    spec, hp, state, q, m = setup
    with pytest.raises(JaxRuntimeError, match=r"select: input query has a non-finite entry"):
        tw.checked.select(state, q.at[3].set(jnp.nan), hp, spec)


def test_nan_memory_is_reported_before_it_poisons_the_bank(setup):
    spec, hp, state, q, m = setup
    s = tw.observe(tw.select(state, q, hp, spec)[0], jnp.int32(1), hp, spec)
    with pytest.raises(JaxRuntimeError, match=r"offer: input memory has a non-finite entry"):
        tw.checked.offer(s, m.at[0].set(jnp.inf), 5, hp, spec)
    # the unchecked API takes a NaN query silently and the windows are poisoned: what checked mode is for
    poisoned = tw.observe(tw.select(state, q.at[0].set(jnp.nan), hp, spec)[0], jnp.int32(1), hp, spec)
    assert not np.all(np.isfinite(np.asarray(poisoned.base.window.data[0])))
    with pytest.raises(JaxRuntimeError, match=r"end_task: incoming state\.base\.window\.data\[0\] has a non-finite entry"):
        tw.checked.end_task(poisoned, spec)


def test_every_controller_function_has_a_checked_twin_with_its_signature():
    """Derived from the controller's own table: no function is wrapped by hand."""
    import inspect

    from tokenworth_jax.controller import COMPOSED

    assert set(tw.checked.__all__) == set(COMPOSED) == set(tw.ControllerFunctions._fields)
    for name in COMPOSED:
        assert list(inspect.signature(getattr(tw.checked, name)).parameters) == \
            list(inspect.signature(getattr(tw, name)).parameters)


def test_checked_run_and_worth_equal_plain_ones(setup):
    spec, hp, state, q, m = setup
    events = _stream(q, m, T)
    # bit for bit: a claim about the programs a user compiles, so with XLA's default emitters (controller_helpers)
    run, checked_run, worth, checked_worth = (with_default_emitters(fn, static_argnames=("spec",)) for fn in
                                              (tw.run, tw.checked.run, tw.worth, tw.checked.worth))
    chex.assert_trees_all_equal(checked_run(state, events, hp, spec), run(state, events, hp, spec))
    chex.assert_trees_all_equal(checked_worth(state, m, hp, spec), worth(state, m, hp, spec))
    with pytest.raises(JaxRuntimeError, match=r"init: input hp\.w0 has a non-finite entry"):
        tw.checked.init(spec, hp._replace(w0=hp.w0.at[0].set(jnp.nan)))


def test_nan_hyperparameter_leaf_is_named(setup):
    spec, hp, state, q, m = setup
    bad = hp._replace(gamma=jnp.asarray(jnp.nan, jnp.float32))
    with pytest.raises(JaxRuntimeError, match=r"select: input hp\.gamma has a non-finite entry"):
        tw.checked.select(state, q, bad, spec)


def _stream(q, m, T):
    return tw.Event(q[None].repeat(T, 0), jnp.ones(T, jnp.int32), m[None].repeat(T, 0), jnp.arange(T, dtype=jnp.int32))


TWO_AT_TASK_3 = jax.tree_util.Partial(lambda e, s: jnp.where(e.memory_id == 3, 2, 1).astype(jnp.int32))


def test_checked_run_names_the_task_of_a_bad_reward_as_tw_run_does(setup, capfd):
    """A reward_fn's bad reward: tw.run's own words (the first bad task), eagerly and inside the user's jit; a
    stream's non-finite input names its first task too."""
    spec, hp, state, q, m = setup
    events = _stream(q, m, T)
    with pytest.raises(ValueError, match=r"\(first at task 3\)$") as plain:
        tw.run(state, events, hp, spec, TWO_AT_TASK_3)
    with pytest.raises(JaxRuntimeError) as checked:
        tw.checked.run(state, events, hp, spec, TWO_AT_TASK_3)
    assert str(checked.value) == f"{plain.value} (`check` failed)"
    with pytest.raises(jax.errors.JaxRuntimeError) as staged:
        jax.block_until_ready(jax.jit(tw.checked.run)(state, events, hp, spec, TWO_AT_TASK_3))
    assert str(staged.value).strip().splitlines()[-1] == f"JaxRuntimeError: {plain.value} (`check` failed)"
    with pytest.raises(JaxRuntimeError) as nan:
        tw.checked.run(state, events._replace(query=events.query.at[4, 1].set(jnp.nan)), hp, spec)
    assert str(nan.value) == "run: input events.query has a non-finite entry (first at task 4) (`check` failed)"
    assert_no_callback_log(capfd.readouterr().err)  # JAX's log of the failed callback is not repeated
