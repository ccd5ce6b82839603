"""What a user of the library alone gets: `import tokenworth_jax` loads nothing of the harness, the
version is the installed distribution's, and the README's vmap sweep runs as it reads.

`make test` also runs this file (with the library's other tests) in fresh venvs that hold only the
library's wheel, at both ends of the jax range (scripts/wheels.sh)."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tokenworth_jax as tw
from tests.controller_helpers import SMALL_SPEC, clustered_stream

pytestmark = pytest.mark.library


def test_importing_the_library_loads_nothing_of_the_harness() -> None:
    code = ("import sys, json, tokenworth_jax as tw; spec, hp = tw.preset('db'); tw.init(spec, hp); "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert not loaded & {"tokenworth_agent", "tokenworth_bench", "agent", "bench"}
    # nothing beyond the library's own dependencies (and the standard library) is imported
    heavy = {"pyarrow", "matplotlib", "typer", "rich", "tokenizers", "tiktoken", "sqlglot", "pyoxigraph", "pandas",
             "torch", "vllm", "transformers", "httpx", "requests"}
    assert not loaded & heavy, loaded & heavy


def test_the_version_is_the_installed_distributions() -> None:
    assert tw.__version__ == importlib.metadata.version("tokenworth-jax")
    assert "__version__" in tw.__all__


def test_the_readmes_vmap_sweep_runs_and_each_configuration_is_its_own_run() -> None:
    """The sweep the README's controller example describes: C configurations as one vmap of tw.run,
    each equal to the same configuration run alone."""
    spec = tw.Spec(**SMALL_SPEC)
    q, m, r = clustered_stream(3, 40, spec.dim)
    events = tw.Event(jnp.asarray(q, jnp.float32), jnp.asarray(r), jnp.asarray(m, jnp.float32),
                      jnp.arange(40, dtype=jnp.int32))
    etas = (0.05, 0.1, 0.2)
    hps = tw.stack_hparams([tw.hparams("db", eta_max=e) for e in etas])
    states = jax.vmap(functools.partial(tw.init, spec))(hps)
    states, out = jax.vmap(lambda s, h: tw.run(s, events, h, spec))(states, hps)
    assert out.selection.chosen.shape == (len(etas), 40)
    assert not np.allclose(np.asarray(out.selection.scores[0]), np.asarray(out.selection.scores[2]))  # η matters
    for c, eta in enumerate(etas):
        hp = tw.hparams("db", eta_max=eta)
        _, alone = tw.run(tw.init(spec, hp), events, hp, spec)
        np.testing.assert_array_equal(np.asarray(out.selection.memory_id[c]), np.asarray(alone.selection.memory_id))
        np.testing.assert_allclose(np.asarray(out.selection.scores[c]), np.asarray(alone.selection.scores),
                                   rtol=1e-5, atol=1e-5)
