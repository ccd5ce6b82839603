"""tokenworth_jax: the TokenWorth memory controller as jit-compiled pure JAX functions.

Pure API (state in, state out; ``spec`` static, ``hp`` traced)::

    spec, hp = tokenworth_jax.preset("db")              # the paper's method; method="tokenworth+" for TokenWorth+
    state = tokenworth_jax.init(spec, hp)
    state, sel = tokenworth_jax.select(state, q_vec, hp, spec)
    state = tokenworth_jax.observe(state, reward, hp, spec)
    state, dec = tokenworth_jax.offer(state, m_vec, memory_id, hp, spec)   # after a success
    state = tokenworth_jax.end_task(state, spec)
    state, dec = tokenworth_jax.finish_task(state, reward, m_vec, memory_id, offered, hp, spec)  # the last three fused
    state, out = tokenworth_jax.run(state, events, hp, spec)              # lax.scan of step

The controller is built from a scorer and a mode: ``tokenworth_jax.controller(scorer, mode)``
returns the NamedTuple of these functions (``spec.scorer`` and ``spec.mode`` name the pair the
module-level functions use). The preset table names the paper's pair and TokenWorth+'s
(:mod:`.presets`); your own mode is a :class:`Mode` value (``Spec(mode=...)``).

C configurations are ``jax.vmap`` of the same functions over stacked states and
hyperparameters (``stack_hparams``); refits and admissions stay gated on "some configuration
needs it". ``run_batched`` is the sweep's entry point: a grid over a stream, by the fastest strategy for
where the states live (on the CPU ``tw.run``'s program once per configuration).

Save and restore a pure state with its spec and hyperparameters: ``tokenworth_jax.save(path, state,
spec, hp)`` and ``state, spec, hp = tokenworth_jax.load(path)`` (a flat ``.npz`` with a JSON manifest:
:mod:`.checkpoint`).

Host wrapper for agent loops: :class:`Controller`; its memory-id bookkeeping is
:class:`MemoryTable`. Checked (NaN-reporting) variants: :mod:`.checked`.
"""

from . import checked, modes, presets, protocol, scorers
from ._version import __version__
from .bank import Bank
from .batching import Strategy, gated
from .bookkeeping import MemoryTable
from .checkpoint import Checkpoint, load, save
from .config import HParams, Schema, stack_hparams
from .controller import (
    ControllerFunctions,
    Event,
    OpenTask,
    Selection,
    Spec,
    State,
    StepOutput,
    advance,
    controller,
    end_task,
    finish_task,
    init,
    observe,
    offer,
    run,
    run_batched,
    select,
    step,
    worth,
)
from .featurize import featurize
from .host import Controller, HostDecision, HostSelection
from .inputs import Feature, MemoryText, Query
from .krr import Predictor
from .lifecycle import Admission, Decision, Worth
from .modes import Mode
from .modes import paper as paper_mode
from .plus.config import PlusHParams
from .plus.mode import plus as plus_mode
from .plus.text import action_vectors, word_vectors
from .presets import hparams, preset
from .protocol import ProtocolError
from .pytree import Empty, tree_where
from .scorers import Scorer

__all__ = [
    "__version__", "Admission", "Bank", "Checkpoint", "Controller", "ControllerFunctions", "Decision", "Empty", "Event", "Feature", "HParams",
    "HostDecision", "HostSelection", "MemoryTable", "MemoryText", "Mode", "OpenTask", "PlusHParams", "Predictor",
    "ProtocolError", "Query", "Schema", "Scorer", "Selection", "Spec", "State", "StepOutput", "Strategy", "Worth",
    "action_vectors", "advance", "checked", "controller", "end_task", "featurize", "finish_task", "gated", "hparams",
    "init", "load", "modes", "observe", "offer", "paper_mode", "plus_mode", "preset", "presets", "protocol", "run",
    "run_batched", "save", "scorers", "select", "stack_hparams", "step", "tree_where", "word_vectors", "worth",
]
