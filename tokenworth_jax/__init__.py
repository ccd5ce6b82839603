"""tokenworth_jax: the TokenWorth memory controller as jit-compiled pure JAX functions.

Pure API (state in, state out; ``spec`` static, ``hp`` traced)::

    spec, hp = tokenworth_jax.presets.db()
    state = tokenworth_jax.init(spec, hp)
    state, sel = tokenworth_jax.select(state, q_vec, hp, spec)
    state = tokenworth_jax.observe(state, reward, hp, spec)
    state, dec = tokenworth_jax.offer(state, m_vec, memory_id, hp, spec)   # after a success
    state = tokenworth_jax.end_task(state, spec)
    state, dec = tokenworth_jax.finish_task(state, reward, m_vec, memory_id, offered, hp, spec)  # the last three fused
    state, out = tokenworth_jax.run(state, events, hp, spec)              # lax.scan of step

C configurations stacked on axis 0 (``init_batched``, ``select_batched``, ``observe_batched``,
``offer_batched``, ``end_task_batched``, ``finish_task_batched``, ``step_batched``,
``run_batched``) run the same per-configuration code, with optional (C,) masks.

Host wrapper for agent loops: :class:`tokenworth_jax.Controller`; its memory-id bookkeeping
is :class:`tokenworth_jax.MemoryTable`. Checked (NaN-reporting) variants: :mod:`tokenworth_jax.checked`.
"""

from . import checked, presets
from .batching import Strategy, map_configs, tree_where
from .bookkeeping import MemoryTable
from .config import HParams, Spec, hparams, preset, stack_hparams
from .controller import (Event, Selection, StepOutput, close_and_select, end_task, end_task_batched, finish_task,
                         finish_task_batched, init, init_batched, observe, observe_batched, offer, offer_batched, run,
                         run_batched, select, select_batched, step, step_batched)
from .featurize import featurize
from .host import Controller, HostDecision, HostSelection, ProtocolError
from .krr import Predictor
from .lifecycle import Admission, Decision, Worth, worth
from .refit import agop_update, fit_base, fit_krr, refit
from .state import State

__all__ = [
    "Admission", "Controller", "Decision", "Event", "HParams", "HostDecision", "HostSelection", "MemoryTable",
    "Predictor", "ProtocolError", "Selection", "Spec", "State", "StepOutput", "Strategy", "Worth",
    "agop_update", "checked", "close_and_select", "end_task", "end_task_batched", "featurize", "finish_task",
    "finish_task_batched", "fit_base", "fit_krr", "hparams", "init", "init_batched", "map_configs", "observe",
    "observe_batched", "offer", "offer_batched", "preset", "presets", "refit", "run", "run_batched", "select",
    "select_batched", "stack_hparams", "step", "step_batched", "tree_where", "worth",
]
