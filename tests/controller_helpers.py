"""Shared helpers for the controller tests: small specs, dtype switching, random streams."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tokenworth_jax as tw

SMALL_SPEC = dict(dim=24, capacity=6, base_window=24, fast_window=12, slow_window=20, k_candidates=4, n_probes=3)
# The start of JAX's log record of a failed host callback (jax._src.debugging / jax._src.callback), which repeated a
# failed check's traceback on stderr; tokenworth_jax.checked drops it.
CALLBACK_LOG = ("jax.debug.callback failed", "jax.pure_callback failed", "jax.io_callback failed")


def assert_no_callback_log(err: str) -> None:
    """Nothing of JAX's log of a failed callback in ``err`` (a test's captured stderr). Other lines may be there:
    jax 0.10.0's XLA warns on stderr when it loads a program from the tests' compilation cache."""
    assert not any(line in err for line in CALLBACK_LOG) and "Traceback" not in err, err


# make test compiles with XLA:CPU's older elemental emitters where the jaxlib has them (scripts/xla-test-flags.sh:
# a JAX test's compile takes about a fifth of the default time). A test whose claim is about the programs a user
# compiles, bit for bit (the host Controller's program against the pure functions, "map" against tw.run, a checked
# function against its plain twin), compiles its programs with XLA's default fusion emitters again: this option
# undoes that flag, and nothing else. (Under the older emitters such pairs can differ in a last bit: at jax 0.10.0,
# checked and plain tw.run did in 4 of 29 metric entries.)
DEFAULT_EMITTERS = {"xla_cpu_use_fusion_emitters": True}


def with_default_emitters(fn, **jit_options):
    """``fn`` (a controller function, jitted or not) under a ``jax.jit`` of its own (``jit_options``: its static
    arguments) that compiles with XLA's default CPU emitters where this process's XLA_FLAGS turned them off;
    ``fn`` itself elsewhere. A jitted function inside it is inlined into that one program."""
    if "--xla_cpu_use_fusion_emitters=false" not in os.environ.get("XLA_FLAGS", ""):
        return fn
    return jax.jit(fn, compiler_options=DEFAULT_EMITTERS, **jit_options)


# Short intervals so that every refit kind happens many times in a short stream.
FAST_SCHEDULE = dict(base_interval=5, krr_interval=3, agop_interval=7, warmup=2)


@contextlib.contextmanager
def precision(dtype: str) -> Iterator[jnp.dtype]:
    """float32 with x64 off, or float64 with x64 switched on for this block only."""
    if dtype == "float64":
        with jax.enable_x64(True):
            yield jnp.dtype("float64")
    else:
        yield jnp.dtype("float32")


def tolerance(dtype: jnp.dtype) -> float:
    # float64: the reference Newton stops at decrement 1e-12, so w agrees to ~1e-7
    return 1e-8 if jnp.dtype(dtype) == jnp.float64 else 2e-4


def small_setup(dtype: jnp.dtype, **overrides):
    spec = tw.Spec(**SMALL_SPEC, dtype=jnp.dtype(dtype).name)
    hp = tw.hparams("db", dtype=dtype, **{**FAST_SCHEDULE, **overrides})
    return spec, hp


def made_for(spec: tw.Spec, hp: tw.HParams) -> tw.State:
    """A state of the structure, shapes and dtypes ``tw.init(spec, hp)`` makes (all that a check of a state against
    its spec reads), of NumPy zeros: nothing compiled."""
    return jax.tree_util.tree_map(lambda x: np.zeros(x.shape, x.dtype), jax.eval_shape(tw.init, spec, hp))


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.normal(size=(n, dim))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def clustered_stream(seed: int, T: int, dim: int, n_clusters: int = 5, noise: float = 0.35):
    """Queries and memories drawn around a few centres (so novelty is sometimes low),
    rewards that depend on the cluster (so learning has something to find)."""
    rng = np.random.default_rng(seed)
    centres = unit(rng, n_clusters, dim)
    labels = rng.integers(0, n_clusters, size=T)
    q = centres[labels] + noise * rng.normal(size=(T, dim)) / np.sqrt(dim)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    m = centres[labels] + noise * rng.normal(size=(T, dim)) / np.sqrt(dim)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    p = np.linspace(0.3, 0.8, n_clusters)[labels]
    rewards = (rng.random(T) < p).astype(np.int32)
    return q, m, rewards


def same(a, b) -> bool:
    """Two pytrees bit for bit: the same number of leaves, equal values, NaN equal to NaN."""
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
                                      for x, y in zip(la, lb))


def refused(error: type[Exception], pattern: str, call) -> Exception:
    """``call()`` raises ``error`` with a one-line message matching ``pattern``; the error, to read further."""
    with pytest.raises(error, match=pattern) as info:
        call()
    assert "\n" not in str(info.value), str(info.value)
    return info.value
