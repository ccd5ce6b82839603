"""Memory ids are guarded as rewards are (the ids' rules of the Sharp bits page), on the plain, checked and host
Controller paths.

* an id not of an integer dtype (3.7, True) is refused at trace time (TypeError): it was stored as 3 (or 1);
* a concrete id outside int32 (``np.int64(2**32)``, ``2**32 + 5``, ``np.int64(2**31)``, the Python int ``2**31``) is
  refused before the program runs, naming it (ValueError; ``tw.checked``: its JaxRuntimeError): it wrapped round
  to a valid id (0, 5), came back INVALID_MEMORY for the wrong reason, or raised a bare OverflowError;
* a traced id outside int32 becomes -1, answered INVALID_MEMORY (never a wrapped id), and ``tw.checked`` reports it;
* an id with a shape is refused naming the shape (it raised a TypeError about debug_check);
* the host Controller hands out its memory table's ``next_id``: the same rules hold for it;
* ids of another integer dtype that fit (uint8, int64, int16) are admitted with their value.
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

T = 6
RULE = r"must be an integer that fits int32 \(a memory id: 0 <= id <= 2\*\*31 - 1; one below 0 is never admitted\)"
BEYOND = {"np.int64(2**32)": (np.int64(2**32), 2**32), "2**32 + 5": (2**32 + 5, 2**32 + 5),
          "np.int64(2**31)": (np.int64(2**31), 2**31), "2**31": (2**31, 2**31),
          "np.uint32(2**32 - 1)": (np.uint32(2**32 - 1), 2**32 - 1), "-2**40": (-2**40, -2**40),
          "2**70": (2**70, 2**70)}
NOT_INTEGER = {"3.7": (3.7, "float64"), "np.float32(3)": (np.float32(3), "float32"), "True": (True, "bool"),
               "jnp 2.0": (jnp.asarray(2.0), "float32")}


@pytest.fixture(scope="module")
def setup():
    spec, hp = small_setup(jnp.float32)
    q, m, _ = clustered_stream(seed=7, T=T, dim=spec.dim)
    q, m = jnp.asarray(q, jnp.float32), jnp.asarray(m, jnp.float32)
    events = tw.Event(q, jnp.ones(T, jnp.int32), m, jnp.arange(T, dtype=jnp.int32))
    state, _ = tw.run(tw.init(spec, hp), events, hp, spec)
    judged = tw.observe(tw.select(state, q[0], hp, spec)[0], 1, hp, spec)  # may offer
    opened, _ = tw.select(state, q[0], hp, spec)
    return spec, hp, state, judged, opened, events


def per_task_calls(setup, memory_id):
    """Every pure function that takes one task's memory id, called with ``memory_id``."""
    spec, hp, state, judged, opened, events = setup
    m, q = events.memory[0], events.query[1]
    return {
        "offer": lambda fns: fns.offer(judged, m, memory_id, hp, spec),
        "finish_task": lambda fns: fns.finish_task(opened, 1, m, memory_id, True, hp, spec),
        "advance": lambda fns: fns.advance(opened, 1, m, memory_id, True, q, hp, spec),
        "step": lambda fns: fns.step(state, tw.Event(events.query[0], 1, m, memory_id), hp, spec),
    }


@pytest.mark.parametrize("name", list(BEYOND))
def test_a_concrete_id_beyond_int32_is_refused_naming_it(setup, name):
    memory_id, shown = BEYOND[name]
    for fn, call in per_task_calls(setup, memory_id).items():
        what = "event.memory_id" if fn == "step" else "memory_id"
        refused(ValueError, rf"^{fn}: input {what} {RULE}, got {shown}$", lambda: call(tw))
        refused(JaxRuntimeError, rf"^{fn}: input {what} {RULE}, got {shown} \(`check` failed\)$",
                lambda: call(tw.checked))


@pytest.mark.parametrize("name", list(NOT_INTEGER))
def test_an_id_that_is_not_an_integer_is_refused_naming_its_dtype(setup, name):
    memory_id, dtype = NOT_INTEGER[name]
    for fn, call in per_task_calls(setup, memory_id).items():
        refused(TypeError, rf"^{fn}: input (event\.)?memory_id {RULE}, got dtype {dtype}.*: a float or a bool is not "
                           r"an id$", lambda: call(tw))
        refused(TypeError, rf"got dtype {dtype}", lambda: call(tw.checked))
    spec, hp, state, judged, opened, events = setup
    refused(TypeError, r"got dtype (float32|bool): a float",  # traced too: the dtype is known when tracing
            lambda: jax.jit(lambda i: tw.offer(judged, events.memory[0], i, hp, spec))(jnp.asarray(memory_id)))


def test_an_id_with_a_shape_is_refused_naming_the_shape(setup):
    """The issue's case: an id of shape (1,) raised a TypeError about debug_check."""
    for fn, call in per_task_calls(setup, np.zeros(1, np.int32)).items():
        for fns in (tw, tw.checked):
            refused(ValueError, r"^the offered memory_id must be one id \(a scalar integer\), got shape \(1,\): map a "
                                r"batch of tasks with jax\.vmap, or run a stream with tw\.run", lambda: call(fns))


def test_the_issues_cases_no_longer_wrap_round_into_the_bank(setup):
    spec, hp, state, judged, opened, events = setup
    m = events.memory[0]
    for memory_id in (np.int64(2**32), np.int64(2**32 + 5), 3.7, np.int64(2**31), 2**31):
        with pytest.raises((ValueError, TypeError)):
            tw.offer(judged, m, memory_id, hp, spec)
        with pytest.raises((JaxRuntimeError, TypeError)):
            tw.checked.offer(judged, m, memory_id, hp, spec)
    # what fits, of any integer dtype, is admitted with its value (into an empty bank: room)
    empty = tw.observe(tw.select(tw.init(spec, hp), events.query[0], hp, spec)[0], 1, hp, spec)
    for memory_id in (np.uint8(3), np.int64(2**31 - 1), jnp.int16(7), 0):
        after, dec = tw.offer(empty, m, memory_id, hp, spec)
        assert tw.Admission(int(dec.code)).name.startswith("ADMITTED"), dec.code
        assert int(after.bank.ids[int(dec.slot)]) == int(memory_id)
        checked_after, checked_dec = tw.checked.offer(empty, m, memory_id, hp, spec)
        assert same((checked_after, checked_dec), (after, dec))


def test_a_stream_of_ids_names_the_first_beyond_int32(setup):
    """tw.run's events: an int64 stream held 2**32 + 5, stored as 5."""
    spec, hp, state, judged, opened, events = setup
    ids = np.arange(T, dtype=np.int64)
    ids[3] = 2**32 + 5
    bad = events._replace(memory_id=ids)
    refused(ValueError, rf"^run: input events\.memory_id {RULE}, got {2**32 + 5} \(first at index 3\)$",
            lambda: tw.run(tw.init(spec, hp), bad, hp, spec))
    refused(JaxRuntimeError, rf"^run: input events\.memory_id {RULE}, got {2**32 + 5} \(first at index 3\)",
            lambda: tw.checked.run(tw.init(spec, hp), bad, hp, spec))
    hps = tw.stack_hparams([hp, hp])
    states = jax.vmap(functools.partial(tw.init, spec))(hps)
    refused(ValueError, r"^run_batched: input events\.memory_id .*\(first at index 3\)$",
            lambda: tw.run_batched(states, bad, hps, spec))
    refused(TypeError, r"^run: input events\.memory_id .*got dtype float32",
            lambda: tw.run(tw.init(spec, hp), events._replace(memory_id=jnp.arange(T, dtype=jnp.float32)), hp, spec))
    # a Python list of ids is a stream too
    final, out = tw.run(tw.init(spec, hp), events._replace(memory_id=list(range(10, 10 + T))), hp, spec)
    assert set(np.asarray(final.bank.ids)[np.asarray(final.bank.valid)].tolist()) <= set(range(10, 10 + T))


def test_a_traced_id_beyond_int32_is_invalid_memory_never_a_wrapped_id(setup):
    spec, hp, state, judged, opened, events = setup
    m = events.memory[0]
    offer = jax.jit(lambda i: tw.offer(judged, m, i, hp, spec))
    after, dec = offer(jnp.uint32(2**32 - 1))  # would wrap to -1; 2**31 would wrap to -2**31
    assert tw.Admission(int(dec.code)) == tw.Admission.INVALID_MEMORY and same(after, judged)
    with pytest.raises(jax.errors.JaxRuntimeError, match=rf"offer: input memory_id {RULE}, got {2**32 - 1}"):
        jax.block_until_ready(jax.jit(lambda i: tw.checked.offer(judged, m, i, hp, spec))(jnp.uint32(2**32 - 1)))
    with precision("float64"):  # int64 under x64: 2**32 must not become id 0
        s64, h64 = small_setup(jnp.float32)
        opened64, _ = tw.select(tw.init(s64, h64), events.query[0], h64, s64)
        judged64 = tw.observe(opened64, 1, h64, s64)
        offer64 = jax.jit(lambda i: tw.offer(judged64, m, i, h64, s64))
        after, dec = offer64(jnp.asarray(2**32, jnp.int64))
        assert tw.Admission(int(dec.code)) == tw.Admission.INVALID_MEMORY and same(after, judged64)
        after, dec = offer64(jnp.asarray(5, jnp.int64))
        assert tw.Admission(int(dec.code)) == tw.Admission.ADMITTED_ROOM and int(after.bank.ids[int(dec.slot)]) == 5


# ----- the host Controller: the ids it hands out ------------------------------------------------------------------
@pytest.fixture()
def controller():
    ctl = tw.Controller(*tw.preset("db", spec_overrides=dict(dim=32, capacity=4)))
    ctl.select("count the rows")
    ctl.observe(1)
    return ctl


@pytest.mark.parametrize("next_id, error, pattern", [
    (3.7, TypeError, rf"^this controller's next memory id \(its memory table's next_id\) {RULE}, got 3\.7 \(float\)$"),
    (True, TypeError, r"got True \(bool\)$"),
    (np.zeros(1, np.int64), TypeError, r"got array\(\[0\]\) \(ndarray\)$"),
    (np.int64(2**31), ValueError, r"next memory id is 2147483648, outside \[0, 2\*\*31 - 1\]"),
    (2**32, ValueError, r"next memory id is 4294967296, outside \[0, 2\*\*31 - 1\]"),
    (-1, ValueError, r"memory id >= 0: this controller's next memory id is -1"),
])
def test_the_controller_refuses_an_id_it_could_not_store_with_nothing_changed(controller, next_id, error, pattern):
    before = jax.tree_util.tree_map(np.asarray, controller.state)
    controller.memories.next_id = next_id  # a memory table changed by other code
    refused(error, pattern, lambda: controller.offer("SELECT 1"))
    assert same(controller.state, before) and controller.phase == "judged" and len(controller.memories) == 0
    controller.memories.next_id = np.int64(7)  # a NumPy integer that fits is an id
    assert controller.offer("SELECT 1").memory_id == 7 and 7 in controller.memories


def test_a_memory_table_refuses_ids_it_could_not_hand_out():
    refused(TypeError, r"^memory table: next_id .*got 3\.7 \(float\)$", lambda: tw.MemoryTable(next_id=3.7))
    refused(ValueError, r"^memory table: next_id = 2147483649, outside \[0, 2\*\*31\]",
            lambda: tw.MemoryTable(next_id=2**31 + 1))
    assert tw.MemoryTable(next_id=2**31).next_id == 2**31  # every id used: the next offer is refused
    refused(TypeError, r"next_id .*got '5' \(str\)",
            lambda: tw.MemoryTable.from_state_dict({"items": {}, "next_id": "5"}))
    refused(ValueError, r"^memory table: id -2 is not in \[0, next_id = 3\)$",
            lambda: tw.MemoryTable.from_state_dict({"items": {"-2": "x"}, "next_id": 3}))
    table = tw.MemoryTable.from_state_dict({"items": {"1": "x"}, "next_id": np.int64(3)})  # JSON's keys are str
    assert table.items == {1: "x"} and table.next_id == 3


def test_a_controller_checkpoint_with_a_bad_next_id_is_refused(controller):
    data = controller.state_dict()
    data["memories"] = {"items": {}, "next_id": 2.5}
    refused(TypeError, r"next_id .*got 2\.5", lambda: tw.Controller.from_state_dict(data))
    data["memories"] = {"items": {}, "next_id": 2**33}
    refused(ValueError, r"next_id = 8589934592, outside", lambda: tw.Controller.from_state_dict(data))
