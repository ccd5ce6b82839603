"""Nothing the pure API is given is silently ignored (the pure API's inputs): each case is a one-line refusal or a
correct result.

* a reward of a float dtype (a graded score) is refused at trace time, saying to threshold it;
* a concrete integer reward other than 0 or 1 is refused before the program runs, naming the first bad task;
  a traced one is the documented no-op (the task gets no feedback), and never wraps round to 0 or 1;
* a memory with a non-finite entry, or an id below 0, is never admitted: ``INVALID_MEMORY``, state unchanged
  (``tw.checked`` and the host ``Controller`` raise);
* one task's event given to a stream function says which leading axis it expects;
* ``jax.jit(fn)(...)`` of every pure function works as written (``Spec`` is a static pytree node), and
  compiles once.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.checkify import JaxRuntimeError

import tokenworth_jax as tw

from tests.controller_helpers import clustered_stream, precision, refused, same, small_setup

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too

T = 8


@pytest.fixture(scope="module")
def setup():
    spec, hp = small_setup(jnp.float32)
    q, m, _ = clustered_stream(seed=3, T=T, dim=spec.dim)
    q, m = jnp.asarray(q, jnp.float32), jnp.asarray(m, jnp.float32)
    events = tw.Event(q, jnp.ones(T, jnp.int32), m, jnp.arange(T, dtype=jnp.int32))
    state, _ = tw.run(tw.init(spec, hp), events, hp, spec)  # a bank with memories, the task closed (idle)
    return spec, hp, state, events


# ----- rewards ---------------------------------------------------------------------------------------------------
GRADED = r"got dtype b?float\w*: a graded score is not a reward here: threshold it to 0 or 1 yourself, e\.g\. reward"


@pytest.mark.parametrize("reward", [0.9, 1.0, np.float32(1.0), jnp.asarray(0.9), jnp.asarray(1.0, jnp.bfloat16)],
                         ids=["0.9", "1.0", "np.float32", "jax 0.9", "jax bfloat16"])
def test_a_float_reward_is_refused_saying_what_to_do_with_a_graded_score(setup, reward):
    spec, hp, state, events = setup
    opened, _ = tw.select(state, events.query[0], hp, spec)
    refused(TypeError, rf"observe: input reward must be an integer 0 or 1 .*{GRADED}",
            lambda: tw.observe(opened, reward, hp, spec))
    refused(TypeError, GRADED, lambda: tw.finish_task(opened, reward, events.memory[0], 3, True, hp, spec))
    refused(TypeError, GRADED, lambda: tw.checked.observe(opened, reward, hp, spec))
    refused(TypeError, GRADED, lambda: jax.jit(lambda s, r: tw.observe(s, r, hp, spec))(opened, reward))  # traced


def test_a_float_reward_stream_or_reward_fn_is_refused_at_trace_time(setup):
    """The issue's case: tw.run over a graded reward of 0.9 learned nothing and said nothing."""
    spec, hp, state, events = setup
    graded = events._replace(reward=jnp.full((T,), 0.9))
    refused(TypeError, rf"run: input events\.reward must be an integer 0 or 1 .*{GRADED}",
            lambda: tw.run(tw.init(spec, hp), graded, hp, spec))
    refused(TypeError, GRADED, lambda: jax.jit(lambda s, e: tw.run(s, e, hp, spec))(tw.init(spec, hp), graded))
    refused(TypeError, GRADED, lambda: tw.step(state, jax.tree_util.tree_map(lambda x: x[0], graded), hp, spec))
    refused(TypeError, GRADED, lambda: tw.run_batched(
        jax.vmap(functools.partial(tw.init, spec))(tw.stack_hparams([hp, hp])), graded, tw.stack_hparams([hp, hp]),
        spec))
    refused(TypeError, rf"the reward that reward_fn returns must be an integer .*{GRADED}",
            lambda: tw.run(tw.init(spec, hp), events, hp, spec, lambda e, s: jnp.float32(0.9)))
    # thresholded, as the message says: a correct result
    final, out = tw.run(tw.init(spec, hp), graded._replace(reward=(graded.reward >= 0.5).astype(jnp.int32)), hp, spec)
    assert int(final.bank.valid.sum()) > 0 and np.all(np.asarray(out.reward) == 1)


@pytest.mark.parametrize("reward", [2, -1, np.int64(2**32 + 1), jnp.int32(5), np.asarray(3, np.uint8)])
def test_a_concrete_reward_other_than_0_or_1_is_refused_before_the_program(setup, reward):
    spec, hp, state, events = setup
    opened, _ = tw.select(state, events.query[0], hp, spec)
    shown = str(int(reward))
    refused(ValueError, rf"^observe: input reward must be 0 or 1 \(0: the task failed, 1: it succeeded\), got {shown}$",
            lambda: tw.observe(opened, reward, hp, spec))
    refused(ValueError, rf"^advance: input reward must be 0 or 1 .*got {shown}$",
            lambda: tw.advance(opened, reward, events.memory[0], 3, True, events.query[1], hp, spec))


def test_an_integer_reward_of_2_in_a_stream_names_the_first_bad_task(setup):
    """The issue's case: tw.run with an int reward of 2 was a silent no-op."""
    spec, hp, state, events = setup
    rewards = jnp.asarray([1, 0, 1, 2, 1, 7, 0, 1], jnp.int32)
    for run in (tw.run, tw.controller(spec.scorer, spec.mode).run):
        refused(ValueError, r"^run: input events\.reward must be 0 or 1 .*got 2 \(first at index 3\)$",
                lambda: run(tw.init(spec, hp), events._replace(reward=rewards), hp, spec))
    hps = tw.stack_hparams([hp, hp])
    refused(ValueError, r"^run_batched: input events\.reward .*got 2 \(first at index 3\)$",
            lambda: tw.run_batched(jax.vmap(functools.partial(tw.init, spec))(hps), events._replace(reward=rewards),
                                   hps, spec))
    refused(ValueError, r"^step: input event\.reward .*got 2$", lambda: tw.step(
        state, tw.Event(events.query[0], np.int32(2), events.memory[0], np.int32(0)), hp, spec))
    # a reward_fn replaces the events' rewards: theirs are not read
    tw.run(tw.init(spec, hp), events._replace(reward=rewards), hp, spec, lambda e, s: jnp.int32(1))


def test_a_traced_reward_other_than_0_or_1_is_the_documented_no_op_and_never_wraps_round(setup):
    spec, hp, state, events = setup
    opened, _ = tw.select(state, events.query[0], hp, spec)
    # a user's own jax.jit as written (the rewards are its traced arguments): the programs that
    # test_jax_jit_of_every_pure_function_works_as_written compiles too, so the module compiles each once
    observe = jax.jit(tw.observe)
    assert same(observe(opened, jnp.int32(2), hp, spec), opened)
    final, out = jax.jit(tw.run)(tw.init(spec, hp), events._replace(reward=jnp.full((T,), 2, jnp.int32)), hp, spec)
    assert int(final.clock.t) == T and int(final.clock.n_feedback) == 0 and not bool(final.bank.valid.any())
    assert np.all(np.asarray(out.decision.code) == int(tw.Admission.NOT_OFFERED))
    with precision("float64"):  # 2**32 + 1 as int64 must not become int32 1 (a success)
        s64, h64 = small_setup(jnp.float32)
        opened64, _ = tw.select(tw.init(s64, h64), events.query[0], h64, s64)
        observe64 = jax.jit(lambda s, r: tw.observe(s, r, h64, s64))
        assert same(observe64(opened64, jnp.asarray(2**32 + 1, jnp.int64)), opened64)
        assert not same(observe64(opened64, jnp.asarray(1, jnp.int64)), opened64)


# ----- memories that can never be admitted -------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["nan", "inf", "id -1"])
def test_an_inadmissible_memory_is_invalid_memory_with_the_state_unchanged(setup, case):
    spec, hp, state, events = setup
    m = events.memory[0]
    memory, mid = {"nan": (m.at[2].set(jnp.nan), 40), "inf": (m.at[0].set(-jnp.inf), 40), "id -1": (m, -1)}[case]
    judged = tw.observe(tw.select(state, events.query[0], hp, spec)[0], 1, hp, spec)
    after, dec = tw.offer(judged, memory, mid, hp, spec)
    assert tw.Admission(int(dec.code)) == tw.Admission.INVALID_MEMORY
    assert int(dec.slot) == -1 and int(dec.evicted_id) == -1
    assert same(after, judged)  # nothing written, the task has not offered: it may offer a valid memory
    again, ok = tw.offer(after, m, 40, hp, spec)
    assert tw.Admission(int(ok.code)) not in (tw.Admission.INVALID_MEMORY, tw.Admission.NOT_OFFERED)
    # the fused step: the task is closed, nothing written
    ended, fused = tw.finish_task(tw.select(state, events.query[0], hp, spec)[0], 1, memory, mid, True, hp, spec)
    assert tw.Admission(int(fused.code)) == tw.Admission.INVALID_MEMORY
    assert int(ended.clock.t) == int(state.clock.t) + 1  # the task got its feedback and ended; no memory entered
    assert same((ended.bank.emb, ended.bank.valid, ended.bank.ids), (state.bank.emb, state.bank.valid, state.bank.ids))
    # tw.checked refuses it
    refused(JaxRuntimeError, r"offer|non-finite", lambda: tw.checked.offer(judged, memory, mid, hp, spec))


def test_checked_offer_refuses_an_id_below_0_naming_it(setup):
    """The issue's case: memory_id=-1 was admitted by tw.checked.offer, and later selected as "-1"."""
    spec, hp, state, events = setup
    judged = tw.observe(tw.select(state, events.query[0], hp, spec)[0], 1, hp, spec)
    refused(JaxRuntimeError, r"offer\(\): an offered memory needs finite entries .* and a memory id >= 0; got memory "
                             r"id -1", lambda: tw.checked.offer(judged, events.memory[0], -1, hp, spec))
    failed = tw.observe(tw.select(state, events.query[0], hp, spec)[0], 0, hp, spec)
    _, dec = tw.checked.offer(failed, events.memory[0], -1, hp, spec)  # a failure offers nothing: no check
    assert tw.Admission(int(dec.code)) == tw.Admission.NOT_OFFERED


def test_the_host_controller_raises_on_a_memory_it_could_not_admit():
    ctl = tw.Controller(*tw.preset("db", spec_overrides=dict(dim=32, capacity=4)))
    ctl.select("count the rows")
    ctl.observe(1)
    before = jax.tree_util.tree_map(np.asarray, ctl.state)
    refused(ValueError, r"memory vector has non-finite entries",
            lambda: ctl.offer("SELECT 1", key_text=np.full(32, np.nan)))
    ctl.memories.next_id = -1  # e.g. a memory table written by other code
    refused(ValueError, r"^an offered memory needs .* a memory id >= 0: this controller's next memory id is -1",
            lambda: ctl.offer("SELECT 1"))
    assert same(ctl.state, before) and ctl.phase == "judged" and len(ctl.memories) == 0
    ctl.memories.next_id = 0
    assert ctl.offer("SELECT 1").code == "ADMITTED_ROOM"
    data = ctl.state_dict()
    data["memories"] = {"items": {}, "next_id": -3}
    refused(ValueError, r"next_id = -3", lambda: tw.Controller.from_state_dict(data))


# ----- one task's event where a stream is expected -----------------------------------------------------------------
def test_one_tasks_event_given_to_a_stream_function_names_the_leading_axis(setup):
    """The issue's case: tw.run of a single task's event raised IndexError: tuple index out of range."""
    spec, hp, state, events = setup
    one = tw.Event(events.query[0], jnp.int32(1), events.memory[0], jnp.int32(0))
    axis = r"takes a stream of events, every field stacked on a leading time axis T \(query \(T, D\), reward \(T,\)"
    refused(ValueError, rf"^run {axis}.*for one task call tw\.step", lambda: tw.run(state, one, hp, spec))
    refused(ValueError, rf"^run {axis}", lambda: tw.checked.run(state, one, hp, spec))
    hps = tw.stack_hparams([hp, hp])
    refused(ValueError, rf"^run_batched {axis}", lambda: tw.run_batched(
        jax.vmap(functools.partial(tw.init, spec))(hps), one, hps, spec))
    ragged = events._replace(memory_id=events.memory_id[:3])
    refused(ValueError, r"got events\.memory_id of shape \(3,\) and reward of shape \(8,\)",
            lambda: tw.run(state, ragged, hp, spec))
    # what the message says works
    _, out = tw.run(state, jax.tree_util.tree_map(lambda x: x[None], one), hp, spec)
    assert out.reward.shape == (1,)


# ----- jax.jit of every pure function, as written ------------------------------------------------------------------
def _calls(spec, hp, state, events):
    q, m = events.query[0], events.memory[0]
    opened, _ = tw.select(state, q, hp, spec)
    judged = tw.observe(opened, 1, hp, spec)
    hps = tw.stack_hparams([hp, hp])
    states = jax.vmap(functools.partial(tw.init, spec))(hps)
    return {
        "init": (tw.init, (spec, hp)),
        "select": (tw.select, (state, q, hp, spec)),
        "observe": (tw.observe, (opened, jnp.int32(1), hp, spec)),
        "offer": (tw.offer, (judged, m, jnp.int32(9), hp, spec)),
        "end_task": (tw.end_task, (judged, spec)),
        "finish_task": (tw.finish_task, (opened, jnp.int32(1), m, jnp.int32(9), jnp.bool_(True), hp, spec)),
        "advance": (tw.advance, (opened, jnp.int32(1), m, jnp.int32(9), jnp.bool_(True), q, hp, spec)),
        "step": (tw.step, (state, jax.tree_util.tree_map(lambda x: x[0], events), hp, spec)),
        "run": (tw.run, (state, events, hp, spec)),
        "run_batched": (tw.run_batched, (states, events, hps, spec)),
        "worth": (tw.worth, (state, m, hp, spec)),
    }


def test_jax_jit_of_every_pure_function_works_as_written(setup):
    """The issue's case: jax.jit(tw.select)(state, q, hp, spec) raised TypeError at path spec.dtype."""
    spec, hp, state, events = setup
    calls = _calls(spec, hp, state, events)
    assert set(calls) == set(tw.ControllerFunctions._fields)
    fns = tw.controller(spec.scorer, spec.mode)
    for name, (fn, args) in calls.items():
        want = fn(*args)
        assert same(jax.jit(fn)(*args), want), name
        assert same(jax.jit(getattr(fns, name))(*args), want), name
    assert jax.tree_util.tree_leaves(spec) == []  # a static node: no leaves
    hps = tw.stack_hparams([hp, hp])
    assert same(jax.vmap(tw.init, in_axes=(None, 0))(spec, hps), jax.vmap(functools.partial(tw.init, spec))(hps))


def test_jit_as_written_compiles_once_for_new_hyperparameters_and_an_equal_spec(setup):
    spec, hp, state, events = setup
    select = jax.jit(tw.select)
    select(state, events.query[0], hp, spec)
    for eta in (0.05, 0.3):
        h = small_setup(jnp.float32, eta_max=eta)[1]
        select(state, events.query[1], h, spec)
    select(state, events.query[2], hp, tw.Spec(**spec._asdict()))  # an equal spec, another object
    assert select._cache_size() == 1
    other = spec._replace(k_candidates=2)
    select(state, events.query[0], hp, other)  # a new spec compiles anew
    assert select._cache_size() == 2
