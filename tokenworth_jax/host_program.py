"""The host :class:`~tokenworth_jax.Controller`'s one compiled program, and how it is compiled.

A host task makes at most two device calls: the next ``select`` (which first closes a judged task
whose feedback is pending: ``tw.advance``) and ``offer`` (``tw.finish_task``). Made through the
pure functions, those are three programs (``select``, ``advance``, ``finish_task``), each compiled
on first use, and ``advance`` holds all of ``finish_task`` and ``select`` again: on the 2-core CPU
of bench/results/compile_time/ they were over 90 % of a cold Controller's
compile before its 30th task. The ``step`` of :func:`programs` is the one program all three calls
run: it closes the open task if there is one (the feedback, the offer where ``offered``, the end)
and selects for the next query if ``select_next``. Its decisions and selections are those of the
pure functions, bit for bit: it is their composition, with the end masked off when no task is open
and the selection under a ``lax.cond`` (an ``offer`` selects nothing).

On the CPU it is compiled with XLA's classic loop emitters (:data:`FAST_COMPILE`): about 0.6x the
compile of the default fusion emitters, for the same results, bit for bit
(``tests/test_host_program.py``), at ~10 % more CPU per steady host task (3.8 against 3.4 ms here),
nothing beside an LLM call. Where a persistent compilation cache is configured the compile is paid
once per machine, so there the program keeps XLA's defaults (:func:`compile_options`). The pure
functions always keep XLA's defaults: a sweep runs them for many tasks, where their faster kernels
pay back the compile.
"""

from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from . import protocol
from .batching import gated
from .config import HParams
from .controller import Parts, Selection, Spec, State, _end_task, _init, _observe, _offer_if, _select, check_state
from .inputs import MemoryText, Query
from .lifecycle import Decision
from .pytree import tree_where

#: XLA options of the host's program: the classic elemental loop emitters instead of the fusion
#: emitters, and their module split into as many parts as this process may use cores (XLA's default
#: is 32 parts, each an LLVM module of its own). Same results; fewer, cheaper LLVM modules (with the
#: fusion emitters each fusion is its own module, and a module costs ~15-30 ms of LLVM however small
#: it is). CPU options: other backends ignore them.
FAST_COMPILE: dict[str, Any] = {"xla_cpu_use_fusion_emitters": False,
                                "xla_cpu_parallel_codegen_split_count": max(1, min(32, len(os.sched_getaffinity(0))
                                                                                  if hasattr(os, "sched_getaffinity")
                                                                                  else os.cpu_count() or 1))}


def _step(p: Parts, state: State, reward: jax.Array, memory: MemoryText, memory_id: jax.Array, offered: jax.Array,
          query: Query, select_next: jax.Array, hp: HParams, spec: Spec) -> tuple[State, Decision, Selection]:
    """Close the open task, if any (``finish_task``: its feedback with ``reward``, the offer of ``memory`` where
    ``offered``, its end), then ``select`` for ``query`` where ``select_next``.

    With no task open (phase idle) the observe and the offer are the pure functions' documented no-ops and
    the end is masked off, so the state is what ``select`` alone leaves."""
    check_state("Controller", state, spec)  # first: a spec changed under the controller is named as such
    closing = state.task.progress.phase != protocol.IDLE
    state = _observe(p, state, reward, hp, spec)
    state, decision = _offer_if(p, state, memory, memory_id, offered, hp, spec)
    # select(p, a, a) folds away in XLA: only the leaves end_task changes are picked
    state = tree_where(closing, _end_task(p, state, spec), state)
    shapes = jax.eval_shape(functools.partial(_select, p, spec=spec), state, query, hp)[1]

    def selected(s: State, q: Query, h: HParams) -> tuple[State, Selection]:
        return _select(p, s, q, h, spec)

    def nothing(s: State, q: Query, h: HParams) -> tuple[State, Selection]:
        return s, jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)

    state, selection = gated(select_next, selected, nothing, state, query, hp)
    return state, decision, selection


def compile_options() -> dict[str, Any] | None:
    """The XLA options of the host's programs: :func:`fast_compile_options` when every process compiles anew,
    None (XLA's defaults, whose kernels run ~10 % faster per host task here) when a persistent compilation
    cache is configured (``jax_compilation_cache_dir``), where the compile is paid once per machine. Read when
    a controller's programs are first built."""
    if _persistent_cache_dir():
        return None
    return fast_compile_options()


def _persistent_cache_dir() -> str | None:
    value = getattr(jax.config, "jax_compilation_cache_dir", None)  # not in jax's type stubs
    return str(value) if value else None


@functools.lru_cache(maxsize=None)
def fast_compile_options() -> dict[str, Any] | None:
    """The options of :data:`FAST_COMPILE` this jaxlib knows (each tried once, on a tiny program), or None
    where it knows none of them. XLA drops options between releases (jaxlib 0.11 has no
    ``xla_cpu_use_fusion_emitters``: its CPU backend has only the fusion emitters), and an unknown option
    fails the whole compile, so each is kept only where it compiles."""
    known = {name: value for name, value in FAST_COMPILE.items() if _compiles_with({name: value})}
    return known or None


def _compiles_with(options: dict[str, Any]) -> bool:
    try:
        jax.jit(lambda x: x + 1, compiler_options=options).lower(jnp.zeros((), jnp.float32)).compile()
    except Exception:  # an XLA without the option: its default (correct, only slower to compile)
        return False
    return True


class Programs(NamedTuple):
    """What a host Controller compiles: its fresh state and its one per-call program."""

    init: Any
    step: Any


@functools.lru_cache(maxsize=None)
def programs(scorer: Any, mode: Any) -> Programs:
    """The jitted ``init`` and :func:`_step` of the controller built from ``scorer`` and ``mode``
    (``spec`` static, the step donating its state), compiled with :func:`compile_options`. Built once per
    pair."""
    p = Parts(scorer=scorer, mode=mode)
    options = compile_options()
    init = functools.partial(_init, p)
    step = functools.partial(_step, p)
    init.__name__ = "host_init"  # type: ignore[attr-defined]
    step.__name__ = "host_step"  # type: ignore[attr-defined]
    return Programs(init=jax.jit(init, static_argnames=("spec",), compiler_options=options),
                    step=jax.jit(step, static_argnames=("spec",), donate_argnames=("state",),
                                 compiler_options=options))
