"""The host Controller's one compiled program (``tokenworth_jax.host_program``): the same selections,
decisions and state as the pure functions' walk (select / advance / finish_task), bit for bit, from one
compile instead of three."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import monitoring

import tokenworth_jax as tw
from tokenworth_jax import host_program, protocol

from tests.controller_helpers import clustered_stream, precision, small_setup, with_default_emitters

pytestmark = pytest.mark.library

EVENT = "/jax/core/compile/backend_compile_duration"


def script(T: int, seed: int):
    """Per task: the reward, and whether a success offers its memory (else end_task, or nothing: the next
    select closes it)."""
    rng = np.random.default_rng(seed)
    return [(int(r), bool(o), bool(e)) for r, o, e in zip(rng.random(T) < 0.6, rng.random(T) < 0.8,
                                                          rng.random(T) < 0.5)]


@pytest.fixture
def fast_compile(monkeypatch):
    """The host's programs built with FAST_COMPILE, as in a process without a persistent cache (the test
    session has one: tests/conftest.py)."""
    monkeypatch.setattr(host_program, "_persistent_cache_dir", lambda: None)
    host_program.programs.cache_clear()
    yield
    host_program.programs.cache_clear()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_host_program_gives_the_pure_walks_results_bit_for_bit(fast_compile, dtype):
    assert host_program.compile_options() == host_program.fast_compile_options()
    with precision(dtype) as f:
        _compare_with_the_pure_walk(*small_setup(f), f)


def _compare_with_the_pure_walk(spec, hp, f):
    T = 40
    q, m, _ = clustered_stream(seed=3, T=T, dim=spec.dim)
    ctl = tw.Controller(spec, hp)
    pure = tw.controller(spec.scorer, spec.mode)
    # the pure functions compiled with XLA's default emitters, as a user's are (the host's program is not)
    fns = pure._replace(**{name: with_default_emitters(getattr(pure, name), static_argnames=("spec",))
                           for name in ("init", "select", "advance", "finish_task")})
    state = fns.init(spec, hp)
    pending = None  # the pure walk: the reward of a judged task not yet closed
    for t, (reward, offers, ends) in enumerate(script(T, seed=4)):
        host = ctl.select(q[t])
        qv = jnp.asarray(ctl.vector(q[t]))
        if pending is None:
            state, sel = fns.select(state, qv, hp, spec)
        else:
            state, _, sel = fns.advance(state, pending, jnp.zeros(spec.dim, f), -1, False, qv, hp, spec)
        n = int(np.sum(np.asarray(sel.candidate_ids) >= 0))
        assert host.candidate_ids == np.asarray(sel.candidate_ids)[:n].tolist()
        assert host.scores == np.asarray(sel.scores)[:n].tolist()
        assert host.chosen == int(sel.chosen)
        ctl.observe(reward)
        if reward and offers:
            new_id = ctl.memories.next_id
            dec = ctl.offer(f"memory {t}", key_text=m[t])
            state, pdec = fns.finish_task(state, reward, jnp.asarray(ctl.vector(m[t], what="memory")), new_id, True,
                                          hp, spec)
            assert dec.code == tw.Admission(int(pdec.code)).name
            assert (dec.v_new, dec.novelty) == (float(pdec.v_new), float(pdec.novelty))
            pending = None
        else:
            if ends:
                ctl.end_task()
            pending = reward
    # the live states agree leaf for leaf (the host's progress aside: the pure walk's is its own)
    host_state = ctl._state
    for a, b in zip(jax.tree.leaves(host_state._replace(task=host_state.task._replace(progress=None))),
                    jax.tree.leaves(state._replace(task=state.task._replace(progress=None)))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_cold_controller_compiles_one_program_for_all_its_calls(fast_compile):
    spec, hp = small_setup(jnp.float32)
    spec = spec._replace(capacity=spec.capacity + 3)  # shapes no other test compiled: a cold start
    names: list[str] = []
    listening = [True]

    def on(event: str, secs: float, **kw) -> None:
        if listening[0] and event == EVENT:
            names.append(str(kw.get("fun_name", "")))

    monitoring.register_event_duration_secs_listener(on)
    try:
        q, m, _ = clustered_stream(seed=8, T=12, dim=spec.dim)
        ctl = tw.Controller(spec, hp)
        for t, (reward, offers, ends) in enumerate(script(12, seed=9)):
            ctl.select(q[t])
            ctl.observe(reward)
            if reward and offers:
                ctl.offer(f"memory {t}", key_text=m[t])
            elif ends:
                ctl.end_task()
    finally:
        listening[0] = False
    big = [n for n in names if any(k in n for k in ("select", "advance", "finish_task", "host_step"))]
    assert big == ["jit(host_step)"], names  # select, advance and finish_task are one program, compiled once


def test_fast_compile_options_keep_what_this_xla_knows(monkeypatch):
    known = host_program.fast_compile_options()
    # the codegen split is in every jaxlib of the range; the emitter switch only up to jaxlib 0.10
    assert known is not None and "xla_cpu_parallel_codegen_split_count" in known
    assert set(known) <= set(host_program.FAST_COMPILE)
    host_program.fast_compile_options.cache_clear()
    monkeypatch.setattr(host_program, "FAST_COMPILE", {"xla_no_such_option_anywhere": True,
                                                      "xla_cpu_parallel_codegen_split_count": 1})
    try:
        # an unknown option is dropped alone: the others still apply
        assert host_program.fast_compile_options() == {"xla_cpu_parallel_codegen_split_count": 1}
        host_program.fast_compile_options.cache_clear()
        monkeypatch.setattr(host_program, "FAST_COMPILE", {"xla_no_such_option_anywhere": True})
        assert host_program.fast_compile_options() is None  # an XLA that knows none: its defaults
    finally:
        host_program.fast_compile_options.cache_clear()


def test_a_persistent_cache_keeps_xlas_default_emitters(monkeypatch):
    monkeypatch.setattr(host_program, "_persistent_cache_dir", lambda: None)
    assert host_program.compile_options() == host_program.fast_compile_options()  # every process compiles: compile fast
    assert host_program.compile_options() is not None
    monkeypatch.setattr(host_program, "_persistent_cache_dir", lambda: "/tmp/some-cache")
    assert host_program.compile_options() is None  # compiled once per machine: the faster kernels


def test_a_host_state_with_nothing_open_only_selects():
    spec, hp = small_setup(jnp.float32)
    state = tw.init(spec, hp)
    assert int(state.task.progress.phase) == protocol.IDLE
    step = host_program.programs(spec.scorer, spec.mode).step
    zero_m = tw.MemoryText(key=jnp.zeros(spec.dim, jnp.float32), features={})
    q = jnp.asarray(tw.featurize("count the orders", spec.dim))
    new, dec, sel = step(jax.tree.map(jnp.copy, state), jnp.int32(-1), zero_m, jnp.int32(-1), jnp.bool_(False),
                         tw.Query(key=q, features={}), jnp.bool_(True), hp, spec)
    ref, rsel = tw.select(state, q, hp, spec)
    assert int(new.clock.t) == 0 and tw.Admission(int(dec.code)).name == "NOT_OFFERED"
    for a, b in zip(jax.tree.leaves((new, sel)), jax.tree.leaves((ref, rsel))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
