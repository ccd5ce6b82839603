"""tw.checked where a JAX user puts it (its page's promise): inside their own ``jax.jit``, ``jax.vmap`` and
``lax.scan``, as written, with no ``checkify.checkify`` of their own.

A clean call gives the plain functions' results; a bad traced reward, a non-finite query, a protocol violation
and a memory id beyond int32 are each reported when the program runs, as ``jax.errors.JaxRuntimeError`` whose
message ends with the line the eager call raises (under vmap, prefixed with the failing element's index, as
checkify words a batch). Each transform compiles one program of a whole checked task, and every case is an input
of it (same shapes and dtypes: nothing recompiles between cases).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import checkify

import tokenworth_jax as tw

from tests.controller_helpers import assert_no_callback_log, clustered_stream, same, small_setup

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too

BIG_ID = 2**32 - 1  # a uint32 id beyond int32 (traced: the plain offer answers INVALID_MEMORY)
CASES = ("nan query", "reward 2", "select twice", "id beyond int32")
# each case's report: the line the eager call raises (checkify.JaxRuntimeError)
REPORTED = {
    "nan query": r"select: input query has a non-finite entry \(`check` failed\)",
    "reward 2": r"observe: input reward must be 0 or 1 \(0: the task failed, 1: it succeeded\), got 2 "
                r"\(`check` failed\)",
    "select twice": r"select\(\): a task is still open: call observe\(reward\) before the next select\(\) "
                    r"\(`check` failed\)",
    "id beyond int32": rf"offer: input memory_id must be an integer that fits int32 .*, got {BIG_ID} "
                       r"\(`check` failed\)",
}


@pytest.fixture(scope="module")
def setup():
    spec, hp = small_setup(jnp.float32)
    q, m, _ = clustered_stream(seed=5, T=6, dim=spec.dim)
    q, m = jnp.asarray(q, jnp.float32), jnp.asarray(m, jnp.float32)
    events = tw.Event(q, jnp.ones(6, jnp.int32), m, jnp.arange(6, dtype=jnp.int32))
    state, _ = tw.run(tw.init(spec, hp), events, hp, spec)  # a bank with memories, idle
    opened, _ = tw.select(state, q[1], hp, spec)  # a task open: the next select violates the protocol
    return spec, hp, state, opened, q, m


def task(fns, hp, spec):
    """One whole task through ``fns`` (``tw`` or ``tw.checked``), every input an array."""

    def one(state, q, reward, m, memory_id):
        state, sel = fns.select(state, q, hp, spec)
        state = fns.observe(state, reward, hp, spec)
        state, dec = fns.offer(state, m, memory_id, hp, spec)
        return fns.end_task(state, spec), sel.chosen, dec.code

    return one


def inputs(setup, case):
    """(state, query, reward, memory, memory_id) of one case ("clean": none of the problems)."""
    spec, hp, state, opened, q, m = setup
    return (opened if case == "select twice" else state, q[0].at[2].set(jnp.nan) if case == "nan query" else q[0],
            jnp.int32(2 if case == "reward 2" else 1), m[0], jnp.uint32(BIG_ID if case == "id beyond int32" else 40))


def stacked(*trees):
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *trees)


CLOCK = 6  # the setup's states have ended 6 tasks (state.clock.t): a staged report names the task it failed in
FIRST_LINE = "INTERNAL: CpuCallback error calling callback: Traceback (most recent call last):"  # XLA's, on the CPU


def reported(capfd, call, case, prefix=f"task {CLOCK} (state.clock.t): "):
    """``call()`` raises at run time (a host callback) an error whose first line is XLA's (JAX offers no way to
    put the check's own line first: docs/api/sharp_bits.rst), whose last line is the eager call's report after
    ``prefix`` (the failing element and task), and nothing is written to stderr (JAX's log of the failed callback
    repeated the traceback there)."""
    capfd.readouterr()
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(call())
    lines = str(info.value).strip().splitlines()
    assert lines[0] == FIRST_LINE or jax.default_backend() != "cpu", lines[0]
    assert re.fullmatch(rf"JaxRuntimeError: {re.escape(prefix)}{REPORTED[case]}", lines[-1]), lines[-1]
    assert_no_callback_log(capfd.readouterr().err)  # JAX's log of the failed callback is not repeated


def test_checked_functions_work_as_written_inside_jit(setup, capfd):
    """The issue's two cases: jax.jit(tw.checked.select) and a jitted function calling tw.checked.observe raised
    'Cannot abstractly evaluate a checkify.check which was not functionalized'."""
    spec, hp, state, opened, q, m = setup
    assert same(jax.jit(tw.checked.select)(state, q[0], hp, spec), tw.select(state, q[0], hp, spec))
    observe = jax.jit(lambda s, r: tw.checked.observe(s, r, hp, spec))
    assert same(observe(opened, jnp.int32(1)), tw.observe(opened, 1, hp, spec))
    reported(capfd, lambda: observe(opened, jnp.int32(2)), "reward 2")
    # checkify's own pattern still reports (now at run time, whatever wraps it)
    with pytest.raises(jax.errors.JaxRuntimeError, match="got 2"):
        err, out = checkify.checkify(jax.jit(lambda s, r: tw.checked.observe(s, r, hp, spec)))(opened, jnp.int32(2))
        jax.block_until_ready(out)


def test_inside_jit_every_problem_is_reported_when_the_program_runs(setup, capfd):
    spec, hp = setup[:2]
    checked = jax.jit(task(tw.checked, hp, spec))
    assert same(checked(*inputs(setup, "clean")), task(tw, hp, spec)(*inputs(setup, "clean")))
    for case in CASES:
        reported(capfd, lambda: checked(*inputs(setup, case)), case)
        with pytest.raises(checkify.JaxRuntimeError, match=REPORTED[case]):  # eagerly: the same line, at once
            task(tw.checked, hp, spec)(*inputs(setup, case))
    assert checked._cache_size() == 1


def test_inside_vmap_the_failing_element_is_named(setup, capfd):
    spec, hp = setup[:2]
    checked = jax.jit(jax.vmap(task(tw.checked, hp, spec)))  # vmap inside the user's jit: one condition, one callback
    clean = stacked(inputs(setup, "clean"), inputs(setup, "clean"))
    assert same(checked(*clean), jax.vmap(task(tw, hp, spec))(*clean))
    for case in CASES:
        reported(capfd, lambda: checked(*stacked(inputs(setup, "clean"), inputs(setup, case))), case,
                 f"at mapped index 1, task {CLOCK} (state.clock.t): ")
    assert checked._cache_size() == 1
    opened = setup[3]
    eager = jax.vmap(lambda r: tw.checked.observe(opened, r, hp, spec))  # a vmap of its own, outside any jit
    reported(capfd, lambda: eager(jnp.asarray([1, 1, 2], jnp.int32)), "reward 2",
             f"at mapped index 2, task {CLOCK} (state.clock.t): ")


def test_inside_scan_the_failing_step_is_reported(setup, capfd):
    spec, hp = setup[:2]
    one = task(tw.checked, hp, spec)

    @jax.jit
    def stream(state, qs, rewards, ms, ids):  # the checked task as a lax.scan body over tasks
        return jax.lax.scan(lambda s, x: (lambda out: (out[0], out[1:]))(one(s, *x)), state, (qs, rewards, ms, ids))

    clean = inputs(setup, "clean")
    for case in CASES:  # the second task is bad (for "select twice", the first: the carried state has a task open)
        bad = inputs(setup, case)
        step = 0 if case == "select twice" else 1  # named by the state's task index: the scan began at CLOCK
        reported(capfd, lambda: stream(bad[0], *stacked(clean[1:], bad[1:])), case,
                 f"task {CLOCK + step} (state.clock.t): ")
    xs = stacked(clean[1:], clean[1:])
    final, (chosen, codes) = stream(clean[0], *xs)
    plain = jax.lax.scan(lambda s, x: (lambda out: (out[0], out[1:]))(task(tw, hp, spec)(s, *x)), clean[0], xs)
    assert same((final, chosen, codes), (plain[0], *plain[1]))


def test_grad_through_a_checked_select_equals_the_plain_ones(setup):
    """The staged report (a custom_vmap condition around a host callback) does not stop differentiation."""
    spec, hp, state, opened, q, m = setup
    scores = lambda query: jnp.sum(jnp.where(jnp.isfinite(s := tw.checked.select(state, query, hp, spec)[1].scores),
                                             s, 0.0))
    plain = lambda query: jnp.sum(jnp.where(jnp.isfinite(s := tw.select(state, query, hp, spec)[1].scores), s, 0.0))
    np.testing.assert_allclose(np.asarray(jax.grad(scores)(q[0])), np.asarray(jax.grad(plain)(q[0])), rtol=1e-6)
