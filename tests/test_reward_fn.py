"""A ``reward_fn`` (an environment simulated inside the scan) and the entry points that take one, under a user's own
``jax.jit``, and the bad rewards it may return:

* a ``reward_fn`` is a pytree argument: a ``jax.tree_util.Partial`` passes through ``jax.jit(tw.run)`` as written,
  and the arrays it binds are traced (a new table compiles nothing); a plain function is marked static or closed
  over, and JAX's error for an unmarked one names the argument and ``static_argnames``;
* ``run_batched``'s ``strategy`` is static: marked (``static_argnames``) or bound (``functools.partial``);
* a reward other than 0 or 1 that a ``reward_fn`` returns is refused in one line naming the first task, as a
  concrete input reward is (it was a silent task without feedback), with the outputs on the error.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.checkify import JaxRuntimeError
from jax.tree_util import Partial

import tokenworth_jax as tw

from tests.controller_helpers import clustered_stream, refused, same, small_setup

pytestmark = pytest.mark.library

T = 6


@pytest.fixture(scope="module")
def setup():
    spec, hp = small_setup(jnp.float32)
    q, m, r = clustered_stream(seed=5, T=T, dim=spec.dim)
    events = tw.Event(jnp.asarray(q, jnp.float32), jnp.asarray(r), jnp.asarray(m, jnp.float32),
                      jnp.arange(T, dtype=jnp.int32))
    hps = tw.stack_hparams([hp, small_setup(jnp.float32, eta_max=0.3)[1]])
    states = jax.vmap(functools.partial(tw.init, spec))(hps)
    return spec, hp, events, hps, states


def by_table(table, event, sel):
    """A reward read from a table of the memories that help (bound by a Partial: traced)."""
    helps = (sel.memory_id >= 0) & (table[jnp.maximum(sel.memory_id, 0)] == 1)
    return jnp.where(helps, jnp.int32(1), event.reward)


def expected_rewards(table, events, out) -> np.ndarray:
    """What ``by_table`` gives for the memories ``out`` selected: read on the host, from the table."""
    mid = np.asarray(out.selection.memory_id)
    helps = (mid >= 0) & (np.asarray(table)[np.maximum(mid, 0)] == 1)
    return np.where(helps, 1, np.asarray(events.reward))


# ----- item 3: jax.jit of the entry points that take a reward_fn or a strategy ------------------------------------
def test_jax_jit_of_run_and_step_takes_a_reward_fn_as_a_partial(setup):
    spec, hp, events, _, _ = setup
    table = jnp.asarray(np.arange(T) % 2 == 0, jnp.int32)
    state = tw.init(spec, hp)
    reward = Partial(by_table, table)
    want = tw.run(state, events, hp, spec, reward)
    np.testing.assert_array_equal(np.asarray(want[1].reward), expected_rewards(table, events, want[1]))
    assert same(jax.jit(tw.run)(state, events, hp, spec, reward), want)  # as written: no static_argnames
    assert same(jax.jit(tw.run, static_argnames="reward_fn")(state, events, hp, spec, reward_fn=reward), want)
    one = jax.tree_util.tree_map(lambda x: x[0], events)
    assert same(jax.jit(tw.step)(state, one, hp, spec, reward), tw.step(state, one, hp, spec, reward))
    # a plain function is not an array: JAX names the argument and static_argnames (the page shows the remedies)
    with pytest.raises(TypeError, match=r"(?s)path reward_fn.*static_argnames"):
        jax.jit(tw.run)(state, events, hp, spec, by_table)
    refused(TypeError, r"^run: reward_fn must be a function \(event, selection\) -> reward 0 or 1, or a "
                       r"jax\.tree_util\.Partial of one, got str$", lambda: tw.run(state, events, hp, spec, "by_table"))


def test_a_partials_bound_arrays_are_traced_so_a_new_table_compiles_nothing(setup):
    spec, hp, events, _, _ = setup
    fns = tw.controller(spec.scorer, spec.mode)
    state = tw.init(spec, hp)
    tables = [jnp.asarray(np.arange(T) % k == 0, jnp.int32) for k in (2, 3, 1)]
    out = fns.run(state, events, hp, spec, Partial(by_table, tables[0]))[1]
    size = fns.run._cache_size()
    outs = [out] + [fns.run(state, events, hp, spec, Partial(by_table, table))[1] for table in tables[1:]]
    assert fns.run._cache_size() == size  # a static Partial (hashed by identity) compiled once per table
    for table, out in zip(tables, outs):  # each call reads its own table
        np.testing.assert_array_equal(np.asarray(out.reward), expected_rewards(table, events, out))
    assert np.all(np.asarray(outs[2].reward)[np.asarray(outs[2].selection.memory_id) >= 0] == 1)


def test_jax_jit_of_run_batched_takes_strategy_as_a_static_argument(setup):
    spec, hp, events, hps, states = setup
    reward = Partial(by_table, jnp.asarray(np.arange(T) % 2 == 0, jnp.int32))
    marked = jax.jit(tw.run_batched, static_argnames="strategy")
    for strategy in ("vmap", "loop"):  # under jit "loop" is "map" (a traced loop would unroll): the same decisions
        want = tw.run_batched(states, events, hps, spec, reward, strategy=strategy)
        got = marked(states, events, hps, spec, reward, strategy=strategy)
        np.testing.assert_array_equal(np.asarray(got[1].selection.memory_id), np.asarray(want[1].selection.memory_id))
        np.testing.assert_array_equal(np.asarray(got[1].reward), np.asarray(want[1].reward))
    with pytest.raises(TypeError, match=r"(?s)path strategy.*static_argnames"):  # JAX's words, named on the page
        jax.jit(tw.run_batched)(states, events, hps, spec, reward, "vmap")


# ----- item 5: a reward_fn's bad reward is refused as a concrete input's is ------------------------------------------
# The reward_fn is by_table with no memory that helps: it returns each event's own reward, which is not checked
# before the program (a reward_fn replaces the events' rewards), so a 2 there is a 2 the reward_fn returns. (One
# reward_fn for every test: the programs compiled for the tests above are reused.)
NONE_HELPS = jnp.zeros((T,), jnp.int32)
RULE = r"must be 0 or 1 \(0: the task failed, 1: it succeeded\), got 2"


def returning(events, rewards):
    return events._replace(reward=jnp.asarray(rewards, jnp.int32))


def test_a_reward_fn_returning_2_is_refused_naming_the_first_task(setup):
    """The issue's case: tw.run returned rewards [1, 2, 2, 2, 2, 2] with no feedback and said nothing."""
    spec, hp, events, _, _ = setup
    state = tw.init(spec, hp)
    reward_fn = Partial(by_table, NONE_HELPS)
    twos = returning(events, [1, 2, 2, 2, 2, 2])
    error = refused(ValueError, rf"^run: the reward that reward_fn returned {RULE} \(first at task 1\)$",
                    lambda: tw.run(state, twos, hp, spec, reward_fn))
    final, out = error.result  # nothing is lost: the outputs ride on the error
    assert out.reward.tolist() == [1, 2, 2, 2, 2, 2] and int(final.clock.n_feedback) <= 1
    later = jax.tree_util.tree_map(lambda x: x[3], twos)
    refused(ValueError, rf"^step: the reward that reward_fn returned {RULE}$",
            lambda: tw.step(state, later, hp, spec, reward_fn))
    refused(ValueError, r"^run: the reward that reward_fn returned must be 0 or 1 .*got -1 \(first at task 0\)$",
            lambda: tw.run(state, returning(events, [-1] * T), hp, spec, reward_fn))
    _, ok = tw.run(state, events, hp, spec, reward_fn)  # 0 and 1 pass
    np.testing.assert_array_equal(np.asarray(ok.reward), np.asarray(events.reward))


@pytest.mark.parametrize("strategy", ["loop", "map", "vmap"])
def test_run_batched_names_the_configuration_and_task_of_a_reward_fns_bad_reward(setup, strategy):
    spec, hp, events, hps, states = setup
    error = refused(ValueError, rf"^run_batched: the reward that reward_fn returned {RULE} \(first at configuration 0, "
                                r"task 2\)$", lambda: tw.run_batched(states, returning(events, [1, 0, 2, 2, 2, 2]), hps,
                                                                     spec, Partial(by_table, NONE_HELPS),
                                                                     strategy=strategy))
    assert error.result[1].reward.shape == (2, T)


def test_under_a_users_own_jit_the_bad_reward_is_the_documented_no_op_and_checked_reports_it(setup):
    spec, hp, events, _, _ = setup
    state = tw.init(spec, hp)
    twos = returning(events, [1, 2, 2, 2, 2, 2])
    final, out = jax.jit(tw.run)(state, twos, hp, spec, Partial(by_table, NONE_HELPS))  # traced: cannot raise
    assert out.reward.tolist() == [1, 2, 2, 2, 2, 2] and int(final.clock.t) == T
    with pytest.raises(JaxRuntimeError, match="2"):
        tw.checked.run(state, twos, hp, spec, Partial(by_table, NONE_HELPS))
