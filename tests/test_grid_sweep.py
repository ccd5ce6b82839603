"""``tw.run_batched``, the sweep's entry point: the strategy it takes on each backend, its results (those of a
Python loop of ``tw.run``, bit for bit) and its compiles (run's program, once; none for a new grid)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import monitoring

import tokenworth_jax as tw
from tokenworth_jax import batching

from tests.controller_helpers import clustered_stream, small_setup

pytestmark = pytest.mark.library

T = 24


def reward_fn(event: tw.Event, sel: tw.Selection) -> jax.Array:
    """A success that depends on the memory chosen (one from an even-numbered task helps)."""
    return jnp.where((sel.memory_id >= 0) & (sel.memory_id % 2 == 0), jnp.int32(1), event.reward)


@pytest.fixture(scope="module")
def sweep():
    spec, _ = small_setup(jnp.float32)
    q, m, r = clustered_stream(seed=11, T=T, dim=spec.dim)
    events = tw.Event(jnp.asarray(q, jnp.float32), jnp.asarray(r), jnp.asarray(m, jnp.float32),
                      jnp.arange(T, dtype=jnp.int32))

    def grid(etas, lambdas):
        cfgs = [small_setup(jnp.float32, eta_max=e, lambda_krr=lam)[1] for e in etas for lam in lambdas]
        hps = tw.stack_hparams(cfgs)
        return cfgs, hps, jax.vmap(functools.partial(tw.init, spec))(hps)

    return spec, events, grid


class CompileCounter:
    """Counts XLA backend compiles (jax.monitoring's backend-compile duration events) while active."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self) -> None:
        self.names: list[str] = []
        self.active = False
        monitoring.register_event_duration_secs_listener(self._on)

    def _on(self, event: str, secs: float, **kw) -> None:
        if self.active and event == self.EVENT:
            self.names.append(str(kw.get("fun_name", "")))


@pytest.fixture(scope="module")
def counter():
    return CompileCounter()


def test_auto_takes_the_documented_strategy_for_each_backend(sweep, monkeypatch):
    spec, events, grid = sweep
    _, hps, states = grid((0.05, 0.2), (0.1,))
    assert batching.resolve("auto", states) == "loop"  # states on the CPU: run's program per configuration
    seen = []
    jax.jit(lambda s: seen.append(batching.resolve("auto", s)) or s)(states)
    assert seen == ["map"]  # under a user's jit: the same loop inside one program (a traced loop would unroll)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert batching.resolve("auto") == "vmap"  # an accelerator: one batched program
    assert batching.resolve("auto", states) == "loop"  # CPU-resident states beside a GPU default backend
    with pytest.raises(ValueError, match="strategy must be one of"):
        batching.resolve("scan", states)


def test_the_entry_point_equals_a_python_loop_of_run_bit_for_bit(sweep):
    spec, events, grid = sweep
    cfgs, hps, states = grid((0.05, 0.3), (0.1, 3.0))
    finals, outs = tw.run_batched(states, events, hps, spec, reward_fn)
    assert outs.reward.shape == (4, T)
    for c, h in enumerate(cfgs):
        final, out = tw.run(tw.init(spec, h), events, h, spec, reward_fn)
        for a, b in zip(jax.tree.leaves((final, out)), jax.tree.leaves((finals, outs))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[c])
    # the other strategies make the same decisions
    for strategy in ("map", "vmap"):
        _, other = tw.run_batched(states, events, hps, spec, reward_fn, strategy=strategy)
        np.testing.assert_array_equal(np.asarray(other.reward), np.asarray(outs.reward))
        np.testing.assert_array_equal(np.asarray(other.selection.memory_id), np.asarray(outs.selection.memory_id))


def test_the_entry_point_compiles_runs_program_once_and_nothing_for_a_new_grid(sweep, counter):
    spec, events, grid = sweep
    reward = functools.partial(reward_fn)  # a reward_fn of its own: no program of the other tests is reused
    cfgs, hps, states = grid((0.1, 0.2), (0.5, 1.0))
    counter.active = True
    try:
        tw.run(tw.init(spec, cfgs[0]), events, cfgs[0], spec, reward)  # a user's tw.run: compiles run's program
        compiled = list(counter.names)
        assert any("run" in n for n in compiled)
        counter.names.clear()
        jax.block_until_ready(tw.run_batched(states, events, hps, spec, reward))
        assert counter.names == []  # the CPU strategy is run's program: nothing more to compile
        cfgs, hps, states = grid((0.07, 0.4), (0.03, 30.0))  # a new grid: other values, same shapes
        counter.names.clear()
        jax.block_until_ready(tw.run_batched(states, events, hps, spec, reward))
        assert counter.names == []
    finally:
        counter.active = False
