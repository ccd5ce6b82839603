"""Misuse of the pure API is refused clearly, and the unchecked functions never corrupt the state.

* ``tw.checked.*`` reports a reward outside {0, 1}, a call out of the protocol's order (read from the open
  task's phase in the state) and non-finite inputs, each as a ``checkify`` error naming the problem and the fix.
* The plain functions give the documented fallback for an out-of-protocol call: ``observe`` is a no-op,
  ``offer`` answers NOT_OFFERED with the state unchanged.
* A batch (of queries, memories, states or hyperparameters) given to a function of one configuration is refused
  at trace time, pointing to ``jax.vmap``; a wrong shape names the expected one.
* A state made for another spec (another capacity or dim, another mode's state) is refused in one line naming
  the leaf, by every pure function, tw.checked and run_batched (the host Controller: tests/test_host.py), while
  tracing (no check at run time); it ran on silently, or raised a raw dot_general or pytree error.
* A float64 spec without JAX's 64-bit mode is refused, naming the switch.
* Inputs are cast to the spec's dtype before the jitted program: no new compile for a float64, bfloat16 or
  Python-number input, and the outputs are of the spec's dtype.
"""

from __future__ import annotations

import contextlib
import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.checkify import JaxRuntimeError

import tokenworth_jax as tw

from tests.controller_helpers import SMALL_SPEC, clustered_stream, made_for, precision, refused, same, small_setup


@pytest.fixture(scope="module")
def setup():
    spec, hp = small_setup(jnp.float32)
    q, m, _ = clustered_stream(seed=3, T=8, dim=spec.dim)
    events = tw.Event(jnp.asarray(q, jnp.float32), jnp.ones(8, jnp.int32), jnp.asarray(m, jnp.float32),
                      jnp.arange(8, dtype=jnp.int32))
    state, _ = tw.run(tw.init(spec, hp), events, hp, spec)  # a bank with memories, the task closed (idle)
    return spec, hp, state, jnp.asarray(q[0], jnp.float32), jnp.asarray(m[0], jnp.float32)


# ----- tw.checked: values and the protocol's order ------------------------------------------------------------
@pytest.mark.parametrize("reward", [2, -1, np.int64(2**40), jnp.asarray(5, jnp.int32)])
def test_checked_observe_refuses_a_reward_outside_0_1_naming_it(setup, reward):
    """(A reward of a float dtype is refused before this, at trace time: tests/test_nothing_ignored.py.)"""
    spec, hp, state, q, m = setup
    opened, _ = tw.select(state, q, hp, spec)
    shown = str(float(reward)) if isinstance(reward, np.int64) else str(int(reward))
    with pytest.raises(JaxRuntimeError, match=rf"observe: input reward must be 0 or 1 \(0: the task failed, 1: it "
                                              rf"succeeded\), got {shown}"):
        tw.checked.observe(opened, reward, hp, spec)
    with pytest.raises(JaxRuntimeError, match=rf"finish_task: input reward must be 0 or 1 .*got {shown}"):
        tw.checked.finish_task(opened, reward, m, 5, True, hp, spec)


def test_checked_run_names_the_first_task_with_a_bad_reward(setup):
    spec, hp, state, q, m = setup
    events = tw.Event(jnp.stack([q] * 4), jnp.asarray([1, 0, 3, 2], jnp.int32), jnp.stack([m] * 4),
                      jnp.arange(4, dtype=jnp.int32))
    with pytest.raises(JaxRuntimeError, match=r"run: input events\.reward must be 0 or 1 .*got 3 \(first at index 2\)"):
        tw.checked.run(state, events, hp, spec)


def test_checked_reward_fn_rewards_are_checked_too(setup):
    """With a reward_fn the events' rewards are not read; the reward it computes is checked where observe takes it."""
    spec, hp, state, q, m = setup
    events = tw.Event(jnp.stack([q] * 2), jnp.asarray([7, 7], jnp.int32), jnp.stack([m] * 2),
                      jnp.arange(2, dtype=jnp.int32))
    # a reward_fn that returns a constant, as a Partial (its constant traced): both calls run one checked program
    tw.checked.run(state, events, hp, spec, jax.tree_util.Partial(_constant_reward, jnp.int32(1)))  # the 7s are ignored
    with pytest.raises(JaxRuntimeError, match=r"^run: the reward that reward_fn returned must be 0 or 1 .*got 2 "
                                              r"\(first at task 0\)"):  # worded as tw.run words it, with the task
        tw.checked.run(state, events, hp, spec, jax.tree_util.Partial(_constant_reward, jnp.int32(2)))


def _constant_reward(reward, event, selection):
    return reward


def test_checked_refuses_each_call_out_of_the_protocols_order(setup):
    spec, hp, state, q, m = setup
    opened, _ = tw.checked.select(state, q, hp, spec)
    cases = [
        (lambda: tw.checked.select(opened, q, hp, spec), r"select\(\): a task is still open: call observe\(reward\)"),
        (lambda: tw.checked.offer(opened, m, 9, hp, spec),
         r"offer\(\): offer\(\) is only allowed after observe\(reward\)"),
        (lambda: tw.checked.end_task(opened, spec), r"end_task\(\): the task is not judged yet: call observe\(reward\)"),
        (lambda: tw.checked.observe(state, 1, hp, spec), r"observe\(\): observe\(\) needs an open task: call select\(\)"),
        (lambda: tw.checked.offer(state, m, 9, hp, spec), r"offer\(\): offer\(\) is only allowed after observe"),
        (lambda: tw.checked.end_task(state, spec), r"end_task\(\): no task is open"),
    ]
    judged = tw.checked.observe(opened, 1, hp, spec)
    cases += [
        (lambda: tw.checked.observe(judged, 1, hp, spec), r"observe\(\): .*observe only once"),
        (lambda: tw.checked.select(judged, q, hp, spec),
         r"select\(\): the last task is judged but not ended: call end_task\(state, spec\)"),
    ]
    offered, _ = tw.checked.offer(judged, m, 9, hp, spec)
    cases.append((lambda: tw.checked.offer(offered, m, 10, hp, spec), r"offer\(\): this task already offered its memory"))
    for call, message in cases:
        with pytest.raises(JaxRuntimeError, match=message):
            call()
    # the allowed walk passes, a failed task's offer answers NOT_OFFERED (no error), and the fused calls check too
    failed = tw.checked.observe(opened, 0, hp, spec)
    _, dec = tw.checked.offer(failed, m, 9, hp, spec)
    assert int(dec.code) == int(tw.Admission.NOT_OFFERED)
    tw.checked.end_task(offered, spec)
    with pytest.raises(JaxRuntimeError, match=r"observe\(\): observe\(\) needs an open task"):
        tw.checked.finish_task(state, 1, m, 9, True, hp, spec)
    with pytest.raises(JaxRuntimeError, match=r"select\(\): a task is still open"):
        tw.checked.step(opened, tw.Event(q, jnp.int32(1), m, jnp.int32(3)), hp, spec)


def test_checked_protocol_holds_under_vmap(setup):
    """The phase is an array leaf of the state: the checks hold for stacked states (one configuration out of order).
    Inside a vmap of the caller's own the report comes when the program runs (jax.errors.JaxRuntimeError), naming
    the configuration."""
    spec, hp, state, q, m = setup
    opened, _ = tw.select(state, q, hp, spec)
    states = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), state, opened)  # idle, selected
    hps = tw.stack_hparams([hp, hp])
    observe = jax.vmap(lambda s, h: tw.checked.observe(s, 1, h, spec))
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"at mapped index 0, task \d+ \(state\.clock\.t\): observe\(\): observe\(\) needs an open "
                             r"task"):
        observe(states, hps)
    opened2 = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), opened)
    out = observe(opened2, hps)
    assert np.all(np.asarray(out.task.progress.phase) == tw.protocol.OBSERVED)


def test_checked_still_reports_non_finite_inputs(setup):
    spec, hp, state, q, m = setup
    with pytest.raises(JaxRuntimeError, match=r"select: input query has a non-finite entry"):
        tw.checked.select(state, q.at[0].set(jnp.inf), hp, spec)


# ----- the plain functions: out of order is a documented fallback, never a corruption ---------------------------
def test_plain_observe_out_of_protocol_or_with_a_traced_bad_reward_is_a_no_op(setup):
    """(A concrete bad reward is refused before the program: tests/test_nothing_ignored.py.)"""
    spec, hp, state, q, m = setup
    opened, _ = tw.select(state, q, hp, spec)
    traced = jax.jit(lambda s, r: tw.observe(s, r, hp, spec))
    for reward in (2, -1, jnp.int32(5)):
        assert same(traced(opened, reward), opened), reward
    once = tw.observe(opened, 1, hp, spec)
    assert int(once.clock.n_feedback) == int(opened.clock.n_feedback) + int(opened.task.selected)
    assert same(tw.observe(once, 1, hp, spec), once)  # a second observe: nothing credited twice
    assert same(tw.observe(state, 1, hp, spec), state)  # no open task


def test_plain_offer_out_of_protocol_answers_not_offered_with_the_state_unchanged(setup):
    spec, hp, state, q, m = setup
    opened, _ = tw.select(state, q, hp, spec)
    for s in (state, opened):  # before select, before observe
        after, dec = tw.offer(s, m, 9, hp, spec)
        assert int(dec.code) == int(tw.Admission.NOT_OFFERED) and same(after, s)
    judged = tw.observe(opened, 1, hp, spec)
    first, dec = tw.offer(judged, m, 9, hp, spec)
    assert int(dec.code) != int(tw.Admission.NOT_OFFERED)
    second, dec2 = tw.offer(first, -m, 10, hp, spec)  # the task already offered: nothing is written twice
    assert int(dec2.code) == int(tw.Admission.NOT_OFFERED)
    assert same(second.bank, first.bank) and same(second.scorer, first.scorer)


# ----- shapes: a batch is pointed to jax.vmap --------------------------------------------------------------------
def test_a_batched_query_or_memory_is_refused_pointing_to_vmap(setup):
    spec, hp, state, q, m = setup
    with pytest.raises(ValueError, match=r"query key vector must have shape \(24,\), got a batch of shape \(2, 24\).*"
                                         r"jax\.vmap.*tw\.stack_hparams"):
        tw.select(state, jnp.stack([q, q]), hp, spec)
    judged = tw.observe(tw.select(state, q, hp, spec)[0], 1, hp, spec)
    with pytest.raises(ValueError, match=r"memory key vector .*got a batch of shape \(3, 24\).*jax\.vmap"):
        tw.offer(judged, jnp.stack([m, m, m]), 1, hp, spec)
    with pytest.raises(ValueError, match=r"memory key vector .*batch.*jax\.vmap"):
        tw.worth(state, jnp.stack([m, m]), hp, spec)
    with pytest.raises(ValueError, match=r"query key vector must have shape \(24,\), got \(12,\)"):
        tw.select(state, q[:12], hp, spec)
    with pytest.raises(ValueError, match=r"observe takes one reward .*shape \(2,\).*jax\.vmap"):
        tw.observe(tw.select(state, q, hp, spec)[0], jnp.asarray([1, 0], jnp.int32), hp, spec)


def test_a_batch_of_configurations_given_to_a_function_of_one_is_pointed_to_vmap(setup):
    spec, hp, state, q, m = setup
    hps = tw.stack_hparams([hp, hp])
    states = jax.vmap(lambda h: tw.init(spec, h))(hps)
    with pytest.raises(ValueError, match=r"hyperparameters are a batch of configurations.*jax\.vmap.*"
                                         r"tw\.stack_hparams.*tw\.run_batched"):
        tw.select(state, q, hps, spec)
    with pytest.raises(ValueError, match=r"state are a batch of configurations.*jax\.vmap"):
        tw.select(states, q, hp, spec)
    with pytest.raises(ValueError, match=r"state are a batch of configurations"):
        tw.end_task(states, spec)
    jax.vmap(lambda s, h: tw.select(s, q, h, spec))(states, hps)  # what the message says works


# ----- a state made for another spec ------------------------------------------------------------------------------
def another_spec(name: str, what: str, made: str) -> str:
    """The one-line refusal of a state made for another spec than setup's (capacity 6, dim 24)."""
    return (rf"^{name}: this state was made for another spec: {what}, where tw\.init\(spec, hp\) makes {made} for this "
            r"spec \(scorer 'full', mode 'paper', capacity 6, dim 24, dtype float32\): make the state with "
            r"tw\.init\(spec, hp\) of the spec you pass, or pass the spec it was made with")  # (then JAX's own notes)


@pytest.fixture(scope="module")
def foreign(setup):
    """States made for other specs than setup's: {what differs: (state, the leaf named, what init makes)}."""
    spec, hp, *_ = setup
    plus_spec, plus_hp = tw.preset("db", method="tokenworth+", spec_overrides=SMALL_SPEC)
    return {"capacity": (made_for(spec._replace(capacity=8), hp), r"state\.bank\.emb is \(8, 24\) float32",
                         r"\(6, 24\) float32"),
            "dim": (made_for(spec._replace(dim=32), hp), r"state\.bank\.emb is \(6, 32\) float32",
                    r"\(6, 24\) float32"),
            "tokenworth+": (made_for(plus_spec, plus_hp), r"state\.mode is PlusState", "Empty")}


def calls_with_a_state(setup, state):
    """{name the refusal gives: a call of it with ``state``}: every pure function, each tw.checked twin, and the
    plain ones under a user's own jit and vmap."""
    spec, hp, _, q, m = setup
    events = tw.Event(jnp.stack([q, q]), jnp.ones(2, jnp.int32), jnp.stack([m, m]), jnp.arange(2, dtype=jnp.int32))
    event = jax.tree_util.tree_map(lambda x: x[0], events)
    pure = {"select": lambda f: f.select(state, q, hp, spec), "observe": lambda f: f.observe(state, 1, hp, spec),
            "offer": lambda f: f.offer(state, m, 1, hp, spec), "end_task": lambda f: f.end_task(state, spec),
            "finish_task": lambda f: f.finish_task(state, 1, m, 1, True, hp, spec),
            "advance": lambda f: f.advance(state, 1, m, 1, True, q, hp, spec),
            "step": lambda f: f.step(state, event, hp, spec), "run": lambda f: f.run(state, events, hp, spec),
            "worth": lambda f: f.worth(state, m, hp, spec)}
    calls = {}
    for name, call in pure.items():
        calls[name] = functools.partial(call, tw)
        calls[f"checked {name}"] = functools.partial(call, tw.checked)
    calls["jit run"] = lambda: jax.jit(tw.run)(state, events, hp, spec)
    two = jax.tree_util.tree_map(lambda x: np.stack([x, x]), state)
    calls["vmap select"] = lambda: jax.vmap(lambda s: tw.select(s, q, hp, spec))(two)
    return calls


@pytest.mark.parametrize("differs", ["capacity", "dim", "tokenworth+"])
def test_a_state_made_for_another_spec_is_refused_by_every_function_naming_the_leaf(setup, foreign, differs):
    """A capacity-8 state under a capacity-6 spec ran on silently (12 memories of 16 slots in the issue's case); a
    dim mismatch raised a raw dot_general TypeError; a TokenWorth+ state a raw pytree error, or ran."""
    state, what, made = foreign[differs]
    for label, call in calls_with_a_state(setup, state).items():
        name = label.split()[-1]
        refused(ValueError, another_spec(name, what, made), call)


@pytest.mark.parametrize("strategy", ["loop", "map", "vmap"])
def test_run_batched_refuses_states_made_for_another_spec_before_any_configuration_runs(setup, foreign, strategy):
    spec, hp, _, q, m = setup
    events = tw.Event(q[None], jnp.ones(1, jnp.int32), m[None], jnp.zeros(1, jnp.int32))
    states = jax.tree_util.tree_map(lambda x: np.stack([x, x]), foreign["capacity"][0])
    refused(ValueError, another_spec("run_batched", r"state\.bank\.emb is \(2, 8, 24\) float32",
                                     r"\(2, 6, 24\) float32"),
            lambda: tw.run_batched(states, events, tw.stack_hparams([hp, hp]), spec, strategy=strategy))


def test_the_state_is_checked_while_tracing_never_at_run_time(setup, monkeypatch):
    spec, hp, _, q, m = setup
    seen = []
    module = sys.modules["tokenworth_jax.controller"]  # (tw.controller is the function of that name)
    real = module.check_state
    monkeypatch.setattr(module, "check_state", lambda name, *a, **k: seen.append(name) or real(name, *a, **k))
    spec5 = spec._replace(capacity=5)  # a spec of this test's own: its program (end_task's, small) is traced here
    tw.end_task(made_for(spec5, hp), spec5)
    assert seen == ["end_task"]
    tw.end_task(made_for(spec5, hp), spec5)
    assert seen == ["end_task"]  # the compiled program ran: nothing checked again


# ----- float64 needs x64 -----------------------------------------------------------------------------------------
def test_float64_without_x64_is_refused_naming_the_switch():
    assert not jax.config.jax_enable_x64
    fix = r"jax\.config\.update\('jax_enable_x64', True\) \(or JAX_ENABLE_X64=1\)"
    with pytest.raises(ValueError, match=rf"Spec\.dtype = float64 needs JAX's 64-bit mode, which is off.*{fix}"):
        tw.preset("db", dtype=jnp.float64)
    with pytest.raises(ValueError, match=fix):
        tw.Spec(dim=8, dtype="float64")
    with pytest.raises(ValueError, match=fix):
        tw.hparams("db", dtype=np.float64)
    with pytest.raises(ValueError, match=fix):
        tw.Controller.from_preset("db", dtype=jnp.float64)
    with precision("float64"):  # made while x64 is on, used after it
        spec, hp = tw.preset("db", dtype=jnp.float64, spec_overrides=dict(dim=8, capacity=2))
        tw.init(spec, hp)
    with pytest.raises(ValueError, match=fix):
        tw.init(spec, hp)


# ----- dtypes: cast before the jit boundary, no new compile -----------------------------------------------------
@contextlib.contextmanager
def no_new_program():
    """Fail if anything is traced (so compiled) inside the block: JAX reports every trace to its monitoring
    listeners (``/jax/core/compile/jaxpr_trace_duration``), a cached program's call reports none."""
    traced: list[str] = []

    def listen(name: str, seconds: float, **kwargs) -> None:
        if name.endswith("jaxpr_trace_duration"):
            traced.append(name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert not traced, f"{len(traced)} new program(s) traced"


def test_inputs_are_cast_to_the_specs_dtype_without_a_new_compile(setup):
    spec, hp, state, q, m = setup
    opened, sel = tw.select(state, q, hp, spec)
    queries = (np.asarray(q, np.float64), q.astype(jnp.bfloat16), np.asarray(q, np.float16), np.asarray(q).tolist(),
               tw.Query(np.asarray(q, np.float64)), jnp.asarray(q, jnp.float16))
    with no_new_program():
        for query in queries:
            s, other = tw.select(state, query, hp, spec)
            assert other.scores.dtype == jnp.float32 and s.task.query.key.dtype == jnp.float32
            assert np.array_equal(np.asarray(other.slot), np.asarray(sel.slot))
    judged = tw.observe(opened, jnp.int32(1), hp, spec)
    rewards = (1, True, np.int64(1), np.uint8(1), jnp.asarray(1, jnp.int32))
    with no_new_program():
        for reward in rewards:
            assert same(tw.observe(opened, reward, hp, spec), judged)
    tw.offer(judged, m, jnp.int32(4), hp, spec)
    memories = ((m.astype(jnp.bfloat16), 4), (np.asarray(m, np.float64), np.int64(4)), (tw.MemoryText(m), 4))
    with no_new_program():
        for memory, mid in memories:
            _, dec = tw.offer(judged, memory, mid, hp, spec)
            assert dec.v_new.dtype == jnp.float32


def test_a_float64_input_under_x64_gives_float32_outputs_for_a_float32_spec():
    with precision("float64"):
        spec, hp = small_setup(jnp.float32)
        q = jnp.asarray(clustered_stream(seed=1, T=1, dim=spec.dim)[0][0])  # float64 under x64
        assert q.dtype == jnp.float64
        state = tw.init(spec, hp)
        tw.select(state, q.astype(jnp.float32), hp, spec)
        with no_new_program():
            s, sel = tw.select(state, q, hp, spec)
        assert sel.scores.dtype == sel.relevance.dtype == s.task.query.key.dtype == jnp.float32


def test_the_cast_is_a_convert_op_inside_a_users_own_jit_and_vmap(setup):
    spec, hp, state, q, m = setup
    _, sel = jax.jit(lambda s, x: tw.select(s, x, hp, spec))(state, q.astype(jnp.bfloat16))
    assert sel.scores.dtype == jnp.float32
    qs = jnp.stack([q, -q]).astype(jnp.bfloat16)
    _, sels = jax.vmap(lambda x: tw.select(state, x, hp, spec))(qs)
    assert sels.scores.dtype == jnp.float32 and sels.scores.shape == (2, spec.k_candidates)
    # eight tasks, as the setup fixture's stream: its tw.run program (cast before the jit boundary) runs these too
    events = tw.Event(jnp.concatenate([qs] * 4), jnp.asarray([True, False] * 4),
                      jnp.stack([m] * 8).astype(jnp.bfloat16), np.arange(8))
    _, out = tw.run(state, events, hp, spec)
    assert out.selection.scores.dtype == jnp.float32 and out.reward.dtype == jnp.int32
