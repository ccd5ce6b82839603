"""Batching is a transform: every controller function is written for one configuration, and
C configurations are ``jax.vmap`` of it (or ``jax.lax.map``, the CPU strategy).

A plain ``jax.vmap`` turns a ``lax.cond`` whose predicate differs per configuration into a
``select`` that runs both branches for everybody, so a refit or an admission would run at every
task. :func:`gated` is the one place that rule is written: a ``lax.cond`` for one
configuration, and, through :func:`jax.custom_batching.custom_vmap`, one ``lax.cond`` on "some
configuration needs it" followed by a per-configuration :func:`~tokenworth_jax.pytree.tree_where`
when vmapped. So ``jax.vmap(tw.step)`` is the batched controller, and stays cheap.

``"auto"`` picks ``"loop"`` when the states live on the CPU, whatever the default backend, and
``"vmap"`` elsewhere (the rule: :func:`resolve`; the measurements: the API docs' performance page and
bench/results/grid_sweep/). ``"loop"`` calls the one compiled program of
``tw.run`` once per configuration (:func:`loop`): each configuration keeps its own real branches and
small matmuls stay small, it compiles exactly what a Python loop of ``tw.run`` compiles (the same
executable, shared with ``tw.run``), and it is that loop, so it is never slower than it. ``"map"``
(``lax.map``, one program) runs the same per-configuration work inside one program: what ``"loop"``
becomes under a user's own ``jax.jit`` (a traced loop would unroll C copies of the stream), and an
option for long sweeps, where it saves the calls' dispatch but compiles a larger program. ``"loop"`` is
``tw.run`` bit for bit; ``"map"`` and ``"vmap"`` are other programs, whose floats XLA may round
differently, so their decisions are ``tw.run``'s up to a near tie (the exact statement:
:func:`tokenworth_jax.run_batched`).

What :func:`gated` guarantees, and where it stops (``tests/test_batching.py`` checks each):

* **One level of vmap is gated.** Under ``vmap`` of ``vmap`` the inner level gets the rule; the
  outer one batches the rule's own ``lax.cond`` as JAX always does, into a ``select`` that runs
  both branches. Same answer; only the innermost level saves work. Batch configurations on one
  axis (``stack_hparams``), not on two.
* **Differentiation.** ``custom_vmap`` has no transpose rule, so ``gated`` carries its own JVP
  (``jax.custom_jvp``): the JVP of the plain ``lax.cond``, or, when the derivative is taken of a
  vmapped function (``jax.grad(lambda x: f(jax.vmap(g)(x)))``), the gated rule applied to the
  primal and, apart, to the tangent. So ``jax.grad``, ``jax.jvp``, grad of vmap and vmap of grad
  all give the cond's derivative (vmap of grad batches the derived cond into a ``select``: no
  gating there). A derivative of a function vmapped twice is refused with a message: the outer
  vmap turns the inner rule's cond into a ``select`` whose transpose JAX lacks; differentiate
  inside the vmaps instead.
* **An all-unbatched predicate** (vmapped, but the same for every configuration) is broadcast:
  one ``lax.cond``, the answer of the single-configuration call for each.
* **Closed-over traced values.** ``custom_vmap`` cannot batch a value that ``fn`` or ``otherwise``
  closes over (JAX raises a bare ``AssertionError``). ``gated`` then traces the branches, hoists
  the traced values they close over into operands and runs again: the right answer. Passing every
  array as an operand (as the controller does) avoids the retrace.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, TypeVar, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching
from jax.extend.core import ClosedJaxpr, jaxpr_as_fun

from .pytree import platform, tree_where

Strategy = Literal["auto", "vmap", "map", "loop"]
Strategy.__doc__ = """How :func:`tokenworth_jax.run_batched` maps C configurations: ``"vmap"`` (``jax.vmap``: one
batched program), ``"loop"`` (``tw.run``'s program called once per configuration), ``"map"`` (``jax.lax.map``: one
program that runs one configuration after another), or ``"auto"`` (``"loop"`` when the states live on the CPU,
``"vmap"`` elsewhere: :func:`resolve`). A static argument: under your own ``jax.jit`` mark it
(``static_argnames=("strategy",)``). What each gives against separate ``tw.run`` calls:
:func:`tokenworth_jax.run_batched`."""
T = TypeVar("T")


def resolve(strategy: Strategy, like: Any = None) -> Literal["vmap", "map", "loop"]:
    """``"auto"`` -> ``"loop"`` where the configurations live on the CPU, ``"vmap"`` elsewhere; anything else
    must be a Strategy. ``"loop"`` needs concrete states: given tracers (``run_batched`` inside a user's own
    ``jax.jit``) it is ``"map"``, the same loop inside one program.

    Where they live is the platform of ``like``'s arrays (the stacked states; :func:`~tokenworth_jax.pytree.platform`),
    so a controller kept on the CPU beside a GPU that serves the model gets the CPU strategy. When that is
    unknown (no ``like``, NumPy values, or tracers) it is ``jax.default_backend()``, where JAX places
    uncommitted values. ``tw.run_batched`` resolves ``"auto"`` before its jitted program, on the states it is
    given.

    Args:
        strategy: ``"auto"``, ``"vmap"``, ``"map"`` or ``"loop"`` (:data:`~tokenworth_jax.Strategy`).
        like: the stacked states (any pytree of arrays) whose platform decides ``"auto"``; None: JAX's default
            backend.

    Returns:
        str: the strategy that runs, ``"vmap"``, ``"map"`` or ``"loop"``.

    Raises:
        ValueError: a strategy that is not one of these.
    """
    if strategy not in get_args(Strategy):
        raise ValueError(f"strategy must be one of {get_args(Strategy)}, got {strategy!r}")
    if strategy == "auto":
        strategy = "loop" if (platform(like) or jax.default_backend()) == "cpu" else "vmap"
    if strategy == "loop" and (like is None or _traced(like)):
        return "map"
    return strategy


def _traced(tree: Any) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


def over_configs(fn: Callable[..., T], strategy: Strategy = "auto") -> Callable[..., T]:
    """``fn`` of one configuration, applied to arguments stacked on axis 0 inside one program (vmap or lax.map;
    ``"loop"`` is :func:`loop`, outside any program, so here it is ``lax.map``)."""
    if resolve(strategy) in ("map", "loop"):
        return lambda *stacked: jax.lax.map(lambda args: fn(*args), stacked)
    return jax.vmap(fn)


def loop(fn: Callable[..., T], *stacked: Any) -> T:
    """``fn`` (a compiled function of one configuration) called once per configuration of ``stacked`` (pytrees
    whose leaves share a leading axis C), its results stacked on a new axis 0: what ``jax.lax.map`` computes,
    as C calls of one compiled program instead of one program holding the loop.

    The slicing and the stacking are NumPy on host memory (CPU arrays are read in place), so nothing but
    ``fn`` is compiled. Arrays committed to a device (``jax.device_put(x, device)``: a CPU-resident controller
    beside a GPU) stay there, configurations and results alike; uncommitted ones are handed over as NumPy, which
    ``fn`` places as it places an uncommitted array, so its compiled program is the one a ``tw.run`` of an
    uncommitted state already made (a committed argument would compile it again)."""
    leaves = jax.tree_util.tree_leaves(stacked)
    if not leaves:
        raise ValueError("loop: no stacked arrays to map over")
    n = int(np.shape(leaves[0])[0])
    device = next((next(iter(x.devices())) for x in leaves if isinstance(x, jax.Array) and x.committed), None)
    host = jax.tree_util.tree_map(np.asarray, stacked)

    def place(tree: Any) -> Any:
        return tree if device is None else jax.device_put(tree, device)

    outs = [fn(*place(jax.tree_util.tree_map(lambda x, i=i: x[i], host))) for i in range(n)]
    stacked_out = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *outs)
    return jax.device_put(stacked_out, device)


def gated(pred: jax.Array, fn: Callable[..., T], otherwise: Callable[..., T], *operands: Any) -> T:
    """``fn(*operands) if pred else otherwise(*operands)``; both return the same structure.

    Vmapped with a batched ``pred``, ``fn`` runs (vmapped) only when some configuration's ``pred``
    holds, and each configuration keeps ``otherwise``'s result where its own is false. Its limits
    (nested vmap, derivatives, unbatched predicates, closed-over tracers) are in the module docstring.

    Args:
        pred: () bool: which branch runs (batched under ``jax.vmap``: one per configuration).
        fn: the branch taken where ``pred`` holds.
        otherwise: the branch taken where it does not; the same output structure as ``fn``.
        *operands: the arguments of both branches.

    Returns:
        ``fn(*operands)`` where ``pred`` holds, ``otherwise(*operands)`` where it does not, configuration by
        configuration.
    """
    pred = jnp.asarray(pred, bool)
    try:
        return _gated(pred, fn, otherwise, operands)
    except AssertionError:  # custom_vmap met a batched value closed over by a branch
        return _gated(pred, *_hoisted(fn, otherwise, operands))


def _gated(pred: jax.Array, fn: Callable[..., T], otherwise: Callable[..., T], operands: tuple) -> T:
    def jvp_fn(ops: tuple, tangents: tuple) -> tuple[Any, Any]:
        return jax.jvp(lambda o: fn(*o), (ops,), (tangents,))

    def jvp_otherwise(ops: tuple, tangents: tuple) -> tuple[Any, Any]:
        return jax.jvp(lambda o: otherwise(*o), (ops,), (tangents,))

    @jax.custom_jvp
    def differentiable(p: jax.Array, ops: tuple) -> Any:
        return _branch(p, fn, otherwise, ops)

    @differentiable.defjvp
    def _jvp(primals: tuple, tangents: tuple) -> tuple[Any, Any]:
        p, ops = primals
        leaves = [t for t in jax.tree_util.tree_leaves(tangents[1]) if jnp.issubdtype(jnp.result_type(t), jnp.inexact)]
        levels = _vmap_levels(leaves[0]) if leaves else 0
        if levels > 1:
            raise NotImplementedError(
                "tokenworth_jax.batching.gated: a derivative (jax.grad, jax.jvp) of a function vmapped twice is not "
                "supported (the outer vmap turns the gated cond into a select, whose transpose JAX lacks): "
                "differentiate inside the vmaps, jax.vmap(jax.vmap(jax.grad(f))), or batch on one axis")
        if levels == 1:
            # vmapped: the gated rule for the primal and, apart (so the primal stays known to a linearisation),
            # for the tangent; its expansion is plain cond + select, which transposes
            return (_branch(p, fn, otherwise, ops),
                    _branch(p, lambda o, t: jvp_fn(o, t)[1], lambda o, t: jvp_otherwise(o, t)[1], (ops, tangents[1])))
        return jax.lax.cond(p, jvp_fn, jvp_otherwise, ops, tangents[1])

    return differentiable(pred, operands)


def _branch(p: jax.Array, fn: Callable[..., T], otherwise: Callable[..., T], ops: tuple) -> T:
    """``lax.cond(p, fn, otherwise, *ops)``, batched as "any configuration" then a per-configuration pick."""

    @custom_batching.custom_vmap
    def branch(p: jax.Array, ops: tuple) -> Any:
        return jax.lax.cond(p, fn, otherwise, *ops)

    @branch.def_vmap
    def _rule(axis_size: int, in_batched: list, p: jax.Array, ops: tuple) -> tuple[Any, Any]:
        axes = tuple(jax.tree_util.tree_map(lambda b: 0 if b else None, in_batched[1]))
        p = p if in_batched[0] else jnp.broadcast_to(p, (axis_size,))
        run_fn, run_otherwise = jax.vmap(fn, in_axes=axes), jax.vmap(otherwise, in_axes=axes)

        def some(args: tuple) -> Any:
            return tree_where(p, run_fn(*args), run_otherwise(*args))

        out = jax.lax.cond(jnp.any(p), some, lambda args: run_otherwise(*args), ops)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return branch(p, ops)


def _vmap_levels(x: jax.Array) -> int:
    """How many enclosing ``vmap``s batch ``x`` (read at trace time, through a custom_vmap rule that
    probes again from inside, one level further out each time)."""
    seen: list[bool] = []

    @custom_batching.custom_vmap
    def probe(v: jax.Array) -> jax.Array:
        return v

    @probe.def_vmap
    def _rule(axis_size: int, in_batched: list, v: jax.Array) -> tuple[jax.Array, bool]:
        seen.append(bool(in_batched[0]))
        return probe(v), in_batched[0]

    probe(x)
    return sum(seen)


def _hoisted(fn: Callable[..., T], otherwise: Callable[..., T],
             operands: tuple) -> tuple[Callable[..., T], Callable[..., T], tuple]:
    """``fn`` and ``otherwise`` taking the traced values they close over as leading operands."""
    flat, tree = jax.tree_util.tree_flatten(operands)
    hoisted = []
    for branch in (fn, otherwise):
        closed = jax.make_jaxpr(lambda *xs, b=branch: b(*jax.tree_util.tree_unflatten(tree, xs)), return_shape=True)
        jaxpr, out_shape = closed(*flat)
        traced = [i for i, c in enumerate(jaxpr.consts) if isinstance(c, jax.core.Tracer)]
        hoisted.append((jaxpr, out_shape, traced))

    def converted(k: int) -> Callable[..., Any]:
        jaxpr, out_shape, traced = hoisted[k]

        def run(consts: tuple, *ops: Any) -> Any:
            values = list(jaxpr.consts)
            for i, c in zip(traced, consts[k]):
                values[i] = c
            out = jaxpr_as_fun(ClosedJaxpr(jaxpr.jaxpr, values))(*jax.tree_util.tree_leaves(ops))
            return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), out)

        return run

    consts = tuple(tuple(h[0].consts[i] for i in h[2]) for h in hoisted)
    return converted(0), converted(1), (consts, *operands)
