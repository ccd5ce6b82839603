"""Task orders: which permutation of a benchmark's stream a stream runs (``--orders``).

In a lifelong stream the order decides which memories exist when each task arrives, so it is an axis of the
experiment like the seed. **Order 0** is the benchmark's own order. **Order k > 0** is a permutation that keeps the
benchmark's structure: a benchmark may declare phases (:attr:`Benchmark.phase
<tokenworth_agent.benchmarks.base.Benchmark.phase>`: a label per task, e.g. BigCodeBench's ``full`` / ``hard``,
ALFWorld's three splits); each maximal run of consecutive tasks with the same label stays where it is and its tasks
are shuffled within it. A benchmark that declares none (LifelongAgentBench's db, os and kg) has its whole stream
permuted.

The permutation is a pure function of (benchmark name, data digest, k), stable across releases of every
dependency (no NumPy or ``random`` stream): within each phase the tasks are sorted by
``sha256(f"{benchmark}\\0{data_digest}\\0{k}\\0{task_id}")`` (hex, ties by the place in the benchmark's order,
which distinct task ids never need). ``data_digest`` is :func:`data_digest` of the benchmark's WHOLE stream (its task
ids in its own order, before ``--limit``), so a shortened run (``--limit N``) runs the same N tasks in every order,
in the order the full stream's order k puts them (sorting by a per-task key keeps any subset's relative order).
Every node of a distributed run computes the same permutation from the stream's spec and the plan's digest;
nothing is shipped as state. Task ids stay the benchmark's, so records pair across orders.

Cost: an order is a stream like a seed's: the same tasks, the same engine, nothing extra per task (the
permutation is computed once per stream, a few milliseconds for the largest benchmark). Measured on the simulated
backbone, ``--env db --limit 50 --methods standard,rag`` (200 stream-tasks, 2 shared cores): ``--orders 0,1``
4.1 s and ``--seeds 0,1`` 4.5 s of engine time, medians of 4 interleaved runs that each varied from 3.7 to 6.1 s:
the same within noise, about 20 ms per task (docs/running.md, "Task orders").
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")


class OrderError(ValueError):
    """Orders that cannot be run (negative, twice, not an integer, or not a distinct permutation); one line."""


def parse_orders(text: str) -> tuple[int, ...]:
    """``--orders``: ``N`` (one number, no comma) is the orders 0..N-1; ``a,b,c`` is those orders (``3,`` is order 3
    alone).

    Raises:
        OrderError: a value that is not an integer, a negative one, one listed twice, or ``N`` below 1.
    """
    raw = text.strip()
    items = [x.strip() for x in raw.split(",") if x.strip()]
    if not items:
        raise OrderError(f"--orders {text!r}: name at least one order, e.g. 0,1,2 or 3")
    try:
        values = [int(x) for x in items]
    except ValueError:
        raise OrderError(f"--orders {text!r}: expected integers like 0,1,2, or N for the orders 0..N-1") from None
    if "," not in raw:
        if values[0] < 1:
            raise OrderError(f"--orders {text!r}: N (the orders 0..N-1) must be at least 1")
        return tuple(range(values[0]))
    return check_orders(values)


def check_orders(orders: Sequence[Any]) -> tuple[int, ...]:
    """``orders`` as a tuple of distinct non-negative ints (bools and floats refused); OrderError otherwise."""
    if not orders:
        raise OrderError("--orders: name at least one order")
    for order in orders:
        if isinstance(order, bool) or not isinstance(order, int):
            raise OrderError(f"--orders: {order!r} is not an integer order")
        if order < 0:
            raise OrderError(f"--orders: {order} is negative; order 0 is the benchmark's own, 1, 2, ... permutations")
    if len(set(orders)) != len(orders):
        raise OrderError(f"--orders lists an order twice: {','.join(map(str, orders))}")
    return tuple(orders)


def data_digest(task_ids: Sequence[str]) -> str:
    """The digest of a benchmark's whole stream that its orders are keyed by: sha256 of its task ids in its own
    order, one per line (16 hex digits)."""
    return hashlib.sha256("\n".join(task_ids).encode()).hexdigest()[:16]


def sort_key(benchmark: str, digest: str, order: int, task_id: str) -> str:
    """A task's place in order ``order``: sha256 of the four, NUL-separated (see the module docstring)."""
    return hashlib.sha256(f"{benchmark}\0{digest}\0{order}\0{task_id}".encode()).hexdigest()


def phase_runs(labels: Sequence[Any]) -> list[tuple[int, int]]:
    """(start, stop) of each maximal run of equal consecutive labels; one run of everything when all are equal."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            runs.append((start, i))
            start = i
    return runs


def permutation(benchmark: str, digest: str, order: int, task_ids: Sequence[str],
                phases: Sequence[Any] | None = None) -> list[int]:
    """The indices of ``task_ids`` in order ``order`` (0: as given); ``phases`` a label per task (None: one phase)."""
    if order == 0:
        return list(range(len(task_ids)))
    labels = phases if phases is not None else [None] * len(task_ids)
    if len(labels) != len(task_ids):
        raise ValueError(f"{len(labels)} phase labels for {len(task_ids)} tasks")
    found: list[int] = []
    for start, stop in phase_runs(labels):
        found += sorted(range(start, stop), key=lambda i: (sort_key(benchmark, digest, order, task_ids[i]), i))
    return found


def phase_labels(env: str, tasks: Sequence[Any]) -> list[Any] | None:
    """The phase of each task as ``env``'s benchmark declares it (None: it declares none)."""
    from tokenworth_agent.core.plugins import benchmark

    phase: Callable[[Any], Any] | None = benchmark(env).phase
    return None if phase is None else [phase(t) for t in tasks]


def ordered(env: str, tasks: Sequence[T], digest: str, order: int) -> list[T]:
    """``tasks`` (the run's, benchmark order) in order ``order`` of ``env``'s stream."""
    if order == 0:
        return list(tasks)
    index = permutation(env, digest, order, [t.task_id for t in tasks], phase_labels(env, tasks))  # type: ignore[attr-defined]
    return [tasks[i] for i in index]


def check_distinct(env: str, tasks: Sequence[Any], digest: str, orders: Sequence[int]) -> None:
    """Refuse orders that ``env``'s (shortened) stream cannot tell apart: two of them giving the same permutation
    (a one-task stream has only order 0; with phases, each phase permutes alone). OrderError, one line."""
    ids = [t.task_id for t in tasks]
    labels = phase_labels(env, tasks)
    seen: dict[tuple[int, ...], int] = {}
    for order in orders:
        made = tuple(permutation(env, digest, order, ids, labels))
        if made in seen:
            raise OrderError(f"--orders: on {env}'s {len(ids)} tasks order {order} is the same permutation as order "
                             f"{seen[made]}; {env} cannot make {len(orders)} distinct orders of this stream (ask for "
                             "fewer orders with --orders or --max-orders, or more tasks with --limit)")
        seen[made] = order


__all__ = ["OrderError", "parse_orders", "check_orders", "data_digest", "sort_key", "phase_runs", "permutation",
           "phase_labels", "ordered", "check_distinct"]
