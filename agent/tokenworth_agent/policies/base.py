"""The one interface every memory policy implements, and what they share.

Per task the experiment engine (:func:`tokenworth_agent.experiment.task.task_steps`) runs, in order::

    retrieved = yield from policy.retrieve_steps(task)   # best first
    ... the injection block keeps the first K_max that fit L_max; the task runs with them ...
    yield from policy.update_steps(task, injected, outcome, trajectory)   # injected: what the block kept
    log = policy.take_log()                               # the decision log that goes into the record

``retrieve_steps`` / ``update_steps`` are coroutines (:mod:`tokenworth_agent.policies.auxiliary`): a method that
needs the model itself (a reflection, an extraction) yields an
:class:`~tokenworth_agent.policies.auxiliary.AuxRequest` and receives the reply, or ``None`` when the budget
skipped the call. By default they simply call ``retrieve`` / ``update``, so a method that
makes no model call implements only those two.

All policies share the budget (K_max, B_max, L_max), the stream and the memory
construction (:func:`tokenworth_agent.memory.build_memory`, through :meth:`MemoryPolicy.candidate`):
they differ only in what they keep, what they retrieve and how they learn. A failed task
never writes a memory (``candidate`` returns ``None``), nor, by default, a task that passed
without ending by its own answer/finish action (``HarnessOptions.memory_from``).

Every policy is built with the run's :class:`~tokenworth_agent.core.harness.HarnessOptions` (``harness=``, by
:func:`tokenworth_agent.policies.registry.make_policy`); it is fixed for the policy's life.

Parameters: a method declares its hyperparameters in :attr:`MemoryPolicy.parameters` (name, type, default, help:
the :class:`~tokenworth_agent.core.parameters.Parameter` a benchmark's options are), and takes each as a
constructor keyword with the same default. ``--grid METHOD.NAME=v1,v2`` runs one stream per value, the value
passed as that keyword (a value not set by a grid is not passed: the constructor's default holds).

Checkpointing: ``state_dict()`` returns plain Python data and NumPy arrays (picklable);
``load_state_dict`` restores a freshly constructed policy of the same kind and settings
so that every later decision, random draws included, is identical.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from tokenworth_agent.policies.auxiliary import AuxSteps
from tokenworth_agent.core.budget import Budget
from tokenworth_agent.tasks import Task
from tokenworth_agent.core.harness import DEFAULT_HARNESS, HarnessOptions
from tokenworth_agent.core.parameters import Parameter
from tokenworth_agent.memory import Memory, Turn, build_memory


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a task ended, as :meth:`MemoryPolicy.update` is told.

    Attributes:
        reward: the environment's judge, 0 or 1.
        status: why the episode ended: ``completed`` (its own answer or finish action), ``round_limit`` (J_max
            rounds), ``budget_exhausted`` (no output tokens left, per-task accounting), ``invalid_action`` or
            ``env_error`` (:data:`~tokenworth_agent.envs.base.Status`).
    """

    reward: int  # the environment grader's 0/1
    status: str  # completed, round_limit, budget_exhausted, invalid_action, env_error


class MemoryPolicy(abc.ABC):
    """A memory method: what it keeps, what it injects, how it learns (the module docstring says in which order
    the engine calls it). A plugin subclasses it (or :class:`StoreBackedPolicy`) and registers the class under
    the entry-point group ``tokenworth.methods``.

    The engine builds one instance per stream, as ``cls(env, budget, seed, harness=harness, **parameters)``:

    * ``env``: the benchmark's name (``--env``), the stream's tasks' ``env``;
    * ``budget``: the stream's :class:`~tokenworth_agent.core.budget.Budget` (``max_memories`` is K_max,
      ``bank_capacity`` B_max, ``max_injected_chars`` L_max);
    * ``seed``: the stream's seed (``--seed``/``--seeds``); every random draw of the method must come from it;
    * ``harness``: the run's :class:`~tokenworth_agent.core.harness.HarnessOptions` (``memory_from``,
      ``memory_format``, the benchmarks' options), fixed for the instance's life;
    * ``parameters``: the values a grid sets for this stream of the hyperparameters the class declares in
      :attr:`parameters` (``--grid METHOD.NAME=v1,v2``), by keyword; one no grid sets is not passed, so the
      constructor's default (the declared one) holds.

    A subclass that takes settings of its own accepts them as keywords and passes the rest on:
    ``def __init__(self, env, budget, seed=0, *, k=3, **kwargs): super().__init__(env, budget, seed, **kwargs)``.
    The base stores ``self.env``, ``self.budget``, ``self.seed`` and ``self.harness``.

    Attributes:
        name: the class attribute naming the method: the name its entry point registers (``--methods NAME``, the
            stream folders, the records' ``method``); a class whose ``name`` differs is refused when loaded.
        first_task_note: shown on the progress bar while a stream's first task runs (e.g. "compiling"), or None.
        parameters: the hyperparameters a grid may set, a tuple of
            :class:`~tokenworth_agent.core.parameters.Parameter`, each a constructor keyword with the same default
            (``tokenworth plugins NAME`` lists them).
    """

    name: ClassVar[str]
    # shown on the progress bar while the first task of a (resumed) stream runs, e.g. while compiling
    first_task_note: ClassVar[str | None] = None
    # the hyperparameters a grid may set (--grid METHOD.NAME=v1,v2), each a keyword of __init__ with the same default
    parameters: ClassVar[tuple[Parameter, ...]] = ()

    def __init__(self, env: str, budget: Budget, seed: int = 0, *, harness: HarnessOptions = DEFAULT_HARNESS) -> None:
        self.env = env
        self.budget = budget
        self.seed = seed
        self.harness = harness
        self._log: dict[str, Any] = {}

    # ------------------------------------------------------------------ the interface
    @abc.abstractmethod
    def retrieve(self, task: Task) -> list[Memory]:
        """Memories to inject for ``task``, best first (the injection block keeps the first K_max that fit L_max)."""

    @abc.abstractmethod
    def update(self, task: Task, memories: Sequence[Memory], outcome: Outcome, trajectory: Sequence[Turn]) -> None:
        """Learn from the judged task and maybe write its memory."""

    def retrieve_steps(self, task: Task) -> AuxSteps[list[Memory]]:
        """``retrieve`` as a coroutine that may yield auxiliary model calls (default: none)."""
        return self.retrieve(task)
        yield  # noqa: unreachable: makes this a generator

    def update_steps(self, task: Task, memories: Sequence[Memory], outcome: Outcome,
                     trajectory: Sequence[Turn]) -> AuxSteps[None]:
        """``update`` as a coroutine that may yield auxiliary model calls (default: none)."""
        self.update(task, memories, outcome, trajectory)
        return
        yield  # noqa: unreachable: makes this a generator

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything the method has learned and stored, as plain Python data and NumPy arrays (picklable), after
        the task that was just recorded: the checkpoint a resumed stream (kill -9, ``--executor ray``, a Slurm
        requeue) restores with :meth:`load_state_dict`. Random generators included (:func:`rng_state`)."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned into a freshly constructed instance of the same class and
        settings, so that every later decision, random draws included, is what the uninterrupted instance would
        have made (resumed records must equal an uninterrupted run's)."""

    def bank_size(self) -> int:
        """How many memories the method holds now (recorded with each task; default 0)."""
        return 0

    # ------------------------------------------------------------------ shared helpers
    def candidate(self, task: Task, outcome: Outcome, trajectory: Sequence[Turn]) -> Memory | None:
        """The memory this task would write (same construction for every method), under the
        run's harness options: which successes count (``memory_from``) and the format."""
        return build_memory(self.env, task, trajectory, outcome.reward, self.budget, status=outcome.status,
                            memory_from=self.harness.memory_from, memory_format=self.harness.memory_format)

    def note(self, **entries: Any) -> None:
        """Add entries to this task's decision log."""
        self._log.update(entries)

    def take_log(self) -> dict[str, Any]:
        """This task's decision log, emptied (the engine calls it once per task and puts it in the record)."""
        log, self._log = self._log, {}
        return log


class StoreBackedPolicy(MemoryPolicy):
    """A policy whose whole bank is one :class:`MemoryStore` in ``self.store``."""

    store: "MemoryStore"

    def bank_size(self) -> int:
        """How many memories ``self.store`` holds."""
        return len(self.store)

    def write(self, memory: Memory, victim: Callable[[], int], **initial: float) -> tuple[int, int | None]:
        """Store ``memory``; at B_max first remove the store index ``victim()`` names.

        Returns (the new memory's id, the evicted memory's id or None).
        """
        evicted = None
        if len(self.store) >= self.budget.bank_capacity:
            evicted = self.store.remove_at(victim()).memory_id
        return self.store.add(memory, **initial).memory_id, evicted

    def state_dict(self) -> dict[str, Any]:
        """The store's state (a subclass with state of its own extends it)."""
        return {"store": self.store.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the store (a subclass with state of its own extends it)."""
        self.store.load_state_dict(state["store"])


def cosine_scores(query_vec: np.ndarray, key_vecs: np.ndarray) -> np.ndarray:
    """Cosine similarities of one unit vector against rows of unit vectors (zeros stay 0)."""
    if key_vecs.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    return key_vecs.astype(np.float64) @ query_vec.astype(np.float64)


def embed(texts: Sequence[str]) -> np.ndarray:
    """The hashed text vectors TokenWorth uses (spec §2), so every similarity-based method
    recalls with the same representation."""
    from tokenworth_jax.featurize import featurize

    return np.asarray(featurize(list(texts)), dtype=np.float32).reshape(len(texts), -1)


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A NumPy generator's state, for a :meth:`MemoryPolicy.state_dict`."""
    return rng.bit_generator.state


def rng_from_state(state: dict[str, Any]) -> np.random.Generator:
    """The generator :func:`rng_state` saved, for a :meth:`MemoryPolicy.load_state_dict`."""
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng


class MemoryStore:
    """An insertion-ordered bank of memories with per-memory numeric stats.

    ``stats`` maps a stat name to a list aligned with ``memories``; policies decide what
    they track. Ids are assigned here, sequentially from 0, and never reused.
    """

    def __init__(self, stat_names: Sequence[str] = ()) -> None:
        self.memories: list[Memory] = []
        self.stats: dict[str, list[float]] = {name: [] for name in stat_names}
        self.next_id = 0
        self._vectors: np.ndarray | None = None  # cache of embed(key_text), rebuilt lazily

    def __len__(self) -> int:
        return len(self.memories)

    def ids(self) -> list[int]:
        """The stored memories' ids, in store order."""
        return [m.memory_id for m in self.memories]

    def index_of(self, memory_id: int) -> int:
        """The store index of the memory with ``memory_id`` (KeyError if it is not stored)."""
        for i, memory in enumerate(self.memories):
            if memory.memory_id == memory_id:
                return i
        raise KeyError(f"memory {memory_id} is not in the bank")

    def add(self, memory: Memory, **initial: float) -> Memory:
        """Store ``memory`` with the next id (its stats at ``initial``, else 0); returns the stored memory."""
        stored = memory.with_id(self.next_id)
        self.next_id += 1
        self.memories.append(stored)
        for name, column in self.stats.items():
            column.append(float(initial.get(name, 0.0)))
        self._vectors = None
        return stored

    def replace_at(self, index: int, memory: Memory) -> Memory:
        """Put ``memory`` in place of the one at ``index``, keeping that one's id and stats."""
        stored = memory.with_id(self.memories[index].memory_id)
        self.memories[index] = stored
        self._vectors = None
        return stored

    def remove_at(self, index: int) -> Memory:
        """Remove and return the memory at store index ``index`` (with its stats)."""
        removed = self.memories.pop(index)
        for column in self.stats.values():
            column.pop(index)
        self._vectors = None
        return removed

    def vectors(self) -> np.ndarray:
        """The stored memories' ``key_text`` as :func:`embed` vectors, ``[n, d]`` (cached until the store changes)."""
        if self._vectors is None:
            self._vectors = embed([m.key_text for m in self.memories]) if self.memories else np.zeros((0, 1), np.float32)
        return self._vectors

    def state_dict(self) -> dict[str, Any]:
        """The memories, their stats and the next id, as plain data."""
        return {
            "memories": [m.as_dict() for m in self.memories],
            "stats": {k: list(v) for k, v in self.stats.items()},
            "next_id": self.next_id,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the stat names must be this store's)."""
        if set(state["stats"]) != set(self.stats):
            raise ValueError(f"bank stats {sorted(state['stats'])} do not match {sorted(self.stats)}")
        self.memories = [Memory.from_dict(m) for m in state["memories"]]
        self.stats = {k: [float(x) for x in v] for k, v in state["stats"].items()}
        self.next_id = int(state["next_id"])
        self._vectors = None
