"""tokenworth_jax: the TokenWorth memory controller as jit-compiled pure JAX functions.

Pure API (state in, state out; ``spec`` static, ``hp`` traced)::

    spec, hp = tokenworth_jax.presets.db()
    state = tokenworth_jax.init(spec, hp)
    state, sel = tokenworth_jax.select(state, q_vec, hp, spec)
    state = tokenworth_jax.observe(state, reward, hp, spec)
    state, dec = tokenworth_jax.offer(state, m_vec, memory_id, hp, spec)   # after a success
    state = tokenworth_jax.end_task(state, spec)
    state, dec = tokenworth_jax.finish_task(state, reward, m_vec, memory_id, offered, hp, spec)  # the last three fused
    state, dec, sel = tokenworth_jax.advance(state, reward, m_vec, memory_id, offered, next_q, hp, spec)
    state, out = tokenworth_jax.run(state, events, hp, spec)              # lax.scan of step

C configurations are ``jax.vmap`` of the same functions over stacked states and
hyperparameters (``stack_hparams``); refits and admissions stay gated on "some configuration
needs it". ``run_batched`` is that for a whole stream, with ``lax.map`` as the CPU strategy.

The state is one field per part (:mod:`.bank`, :mod:`.base_scorer`, :mod:`.residual`,
:mod:`.probes`, the pair :mod:`.scorers`, the :mod:`.modes`), each owning its ``NamedTuple``
state and pure functions. Host wrapper for agent loops: :class:`tokenworth_jax.Controller`; its
memory-id bookkeeping is :class:`tokenworth_jax.MemoryTable`. Checked (NaN-reporting) variants:
:mod:`tokenworth_jax.checked`.
"""

from . import checked, presets
from .bank import Bank
from .batching import Strategy, gated
from .bookkeeping import MemoryTable
from .config import HParams, PlusHParams, Spec, hparams, preset, stack_hparams
from .controller import (
                         Event,
                         Parts,
                         Selection,
                         State,
                         StepOutput,
                         advance,
                         end_task,
                         finish_task,
                         init,
                         observe,
                         offer,
                         parts,
                         run,
                         run_batched,
                         select,
                         step,
                         worth,
)
from .featurize import action_vectors, featurize, word_vectors
from .host import Controller, HostDecision, HostSelection, ProtocolError
from .inputs import MemoryText, Query
from .krr import Predictor
from .lifecycle import Admission, Decision, Worth
from .modes import Mode
from .modes import paper as paper_mode
from .plus.mode import plus as plus_mode
from .pytree import Empty, tree_where

__all__ = [
    "Admission", "Bank", "Controller", "Decision", "Empty", "Event", "HParams", "HostDecision", "HostSelection",
    "MemoryTable", "MemoryText", "Mode", "Parts", "PlusHParams", "Predictor", "ProtocolError", "Query", "Selection",
    "Spec", "State", "StepOutput", "Strategy", "Worth", "action_vectors", "advance", "checked", "end_task", "featurize",
    "finish_task", "gated", "hparams", "init", "observe", "offer", "paper_mode", "parts", "plus_mode", "preset",
    "presets", "run", "run_batched", "select", "stack_hparams", "step", "tree_where", "word_vectors", "worth",
]
