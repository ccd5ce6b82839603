"""The strategy follows where the state lives, not ``jax.default_backend()``.

A user who keeps the controller on the CPU while a model server holds the GPU must get the CPU strategy:
``run_batched(..., strategy="auto")`` runs ``tw.run``'s program once per configuration (``"loop"``) and ``pytree.fetch`` reads the
arrays in place, because the states' arrays live on the CPU.

This machine has no accelerator and jax 0.10.2 offers no second real platform on it (``jax_platforms``
can name only ``cpu`` here, and ``--xla_force_host_platform_device_count`` adds more CPU devices, all of
platform ``cpu``). So the tests make the *default backend* claim to be a GPU by monkeypatching
``jax.default_backend`` to return ``"gpu"``, while every array really lives on the CPU device: exactly
the situation of a CPU-resident controller beside a GPU default backend, as far as the strategy choice can
see. (On a machine with a GPU, ``jax.device_put(state, jax.devices("cpu")[0])`` gives the same case for real.)
"""

from __future__ import annotations

import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tokenworth_jax as tw
from tokenworth_jax import batching, pytree

from tests.controller_helpers import clustered_stream, small_setup


@pytest.fixture
def gpu_default(monkeypatch):
    """``jax.default_backend()`` says "gpu"; the arrays stay on the CPU device."""
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert jax.default_backend() == "gpu"


@pytest.fixture(scope="module")
def configs():
    spec, _ = small_setup(jnp.float32)
    hps = tw.stack_hparams([small_setup(jnp.float32, eta_max=e)[1] for e in (0.05, 0.2)])
    q, m, r = clustered_stream(seed=5, T=20, dim=spec.dim)
    events = tw.Event(jnp.asarray(q, jnp.float32), jnp.asarray(r), jnp.asarray(m, jnp.float32),
                      jnp.arange(20, dtype=jnp.int32))
    states = jax.vmap(functools.partial(tw.init, spec))(hps)
    return spec, hps, states, events


def test_the_state_lives_on_the_cpu():
    state = tw.init(*small_setup(jnp.float32))
    assert pytree.platform(state) == "cpu"
    assert pytree.platform({"a": np.zeros(3)}) is None  # NumPy: not placed yet


def test_auto_follows_the_states_platform_not_the_default_backend(configs, gpu_default):
    spec, hps, states, events = configs
    assert batching.resolve("auto") == "vmap"  # nothing to look at: the (patched) default backend
    assert batching.resolve("auto", states) == "loop"  # the states live on the CPU
    assert batching.resolve("vmap", states) == "vmap"  # an explicit strategy is kept
    from tokenworth_jax.controller import cast_arguments

    arguments = dict(states=states, events=events, hps=hps, spec=spec, reward_fn=None, strategy="auto")
    assert cast_arguments("run_batched", arguments)["strategy"] == "loop"  # what tw.run_batched runs


def test_auto_inside_a_users_jit_falls_back_to_the_default_backend(configs, gpu_default):
    spec, hps, states, events = configs
    seen = []

    def traced(s):
        seen.append(batching.resolve("auto", s))
        return s

    jax.jit(traced)(states)
    assert seen == ["vmap"]  # a tracer's placement is unknown while tracing: the default backend's strategy


def test_run_batched_on_cpu_states_takes_the_cpu_strategy_with_the_same_decisions(configs, gpu_default, monkeypatch):
    spec, hps, states, events = configs
    taken = []
    over_configs = batching.over_configs

    loop = batching.loop

    def spy(fn, strategy="auto"):
        taken.append(batching.resolve(strategy))
        return over_configs(fn, strategy)

    def loop_spy(fn, *stacked):
        taken.append("loop")
        return loop(fn, *stacked)

    module = sys.modules["tokenworth_jax.controller"]  # tw.controller is the function
    monkeypatch.setattr(module, "over_configs", spy)
    monkeypatch.setattr(module, "loop", loop_spy)
    jax.clear_caches()  # trace again, so the spy sees the strategy the program is built with
    _, auto = tw.run_batched(states, events, hps, spec)
    assert taken == ["loop"]
    _, vmapped = tw.run_batched(states, events, hps, spec, strategy="vmap")
    assert taken == ["loop", "vmap"]
    for name in ("chosen", "slot", "memory_id"):
        np.testing.assert_array_equal(np.asarray(getattr(auto.selection, name)),
                                      np.asarray(getattr(vmapped.selection, name)))
    np.testing.assert_array_equal(np.asarray(auto.decision.code), np.asarray(vmapped.decision.code))


def test_fetch_reads_cpu_arrays_in_place_whatever_the_default_backend(gpu_default, monkeypatch):
    calls = []
    device_get = jax.device_get
    monkeypatch.setattr(jax, "device_get", lambda tree: calls.append(1) or device_get(tree))
    tree = {"a": jnp.arange(3), "b": (jnp.ones(2),)}
    out = pytree.fetch(tree)
    assert calls == [] and isinstance(out["a"], np.ndarray) and isinstance(out["b"][0], np.ndarray)
    np.testing.assert_array_equal(out["a"], [0, 1, 2])
    pytree.fetch({"a": np.zeros(2)})  # nothing placed: the default backend's way (device_get)
    assert calls == [1]
