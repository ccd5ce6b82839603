"""tokenworth_jax: the TokenWorth memory controller as jit-compiled pure JAX functions.

Pure API (state in, state out; ``spec`` static, ``hp`` traced)::

    spec, hp = tokenworth_jax.presets.db()
    state = tokenworth_jax.init(spec, hp)
    state, sel = tokenworth_jax.select(state, q_vec, hp, spec)
    state = tokenworth_jax.observe(state, reward, hp, spec)
    state, dec = tokenworth_jax.offer(state, m_vec, memory_id, hp, spec)   # after a success
    state = tokenworth_jax.end_task(state, spec)
    state, out = tokenworth_jax.run(state, events, hp, spec)              # lax.scan of step
    states, out = tokenworth_jax.run_batched(init_batched(spec, hps), events, hps, spec)  # C configs

Host wrapper for agent loops: :class:`tokenworth_jax.Controller`.
"""

from . import presets
from .config import HParams, Spec, hparams, preset, stack_hparams
from .controller import (Event, Selection, StepOutput, end_task, init, init_batched, map_configs, observe, observe_batched,
                         offer,
                         raw, run, run_batched, select, step, step_batched)
from .featurize import featurize
from .host import Controller, HostDecision, HostSelection, ProtocolError
from .lifecycle import Admission, Decision, Worth, worth
from .state import State

__all__ = [
    "Admission", "Controller", "Decision", "HostDecision", "HostSelection", "ProtocolError", "Event", "HParams", "Selection", "Spec", "State", "StepOutput", "Worth",
    "end_task", "featurize", "init_batched", "map_configs", "observe_batched", "run_batched", "step_batched", "hparams", "init", "observe", "offer", "preset", "presets", "raw", "run",
    "select", "stack_hparams", "step", "worth",
]
