"""A thin stateful wrapper for agent loops: holds the state and the memories' payloads,
validates inputs and enforces the protocol. The device work is the jitted pure API.

Protocol per task (each violation raises :class:`ProtocolError` and leaves everything
unchanged)::

    sel = ctl.select(query_text)        # not while a task is open (selected, not yet judged)
    ctl.observe(reward)                  # exactly once, after the environment's own grader; 0 or 1
    dec = ctl.offer(memory_text, key_text=...)   # optional, only after observe(1), once
    ctl.end_task()                       # optional: the next select() ends the task

``key_text`` is the text whose hashed vector represents the memory (by default the memory
text itself); the agent harness passes the source task's query, so recall compares like
with like. In TokenWorth+ mode (``Spec.plus``) the controller also hashes the question's words
at ``select`` and the memory's ``action_text`` at ``offer`` (by default the memory text). ``payload`` (by default the memory text) is what :attr:`Controller.memories`
keeps for the memory and what :attr:`HostSelection.memory` returns when it is selected.

One device call per task, made of the public pure functions (jitted here with the state
donated, so XLA updates it in place): ``observe`` and ``end_task`` only record on the host;
``offer`` is :func:`tokenworth_jax.finish_task` (observe + offer + end), and a task without an
offer is closed inside the next ``select``, which is then :func:`tokenworth_jax.advance`. The
decisions are those of the unfused calls; :attr:`Controller.state` shows the state as they
would have left it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Literal, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from .bookkeeping import MemoryTable
from .config import HParams, Spec, check_matches, flatten, hparams_from_arrays, preset, spec_from_dict, validate_hparams
from .controller import Selection, State, advance, finish_task, init, observe, select
from .featurize import action_vectors, featurize, word_vectors
from .inputs import MemoryText, Query
from .lifecycle import Admission, Decision
from .pytree import Empty, from_numpy, to_numpy

# The checkpoint layout of :meth:`Controller.state_dict`; 2 = one state field per part (this release).
LAYOUT = 2

Phase = Literal["idle", "selected", "judged"]
PHASES: tuple[str, ...] = ("idle", "selected", "judged")


class ProtocolError(RuntimeError):
    """A call out of order (e.g. selecting while a task is open). State is unchanged."""


@dataclasses.dataclass(frozen=True)
class HostSelection:
    memory_id: int | None  # the selected memory, None when the bank was empty
    memory_text: str | None
    candidate_ids: list[int]  # recall order
    scores: list[float]
    base_scores: list[float]
    relevance: list[float]
    chosen: int  # index into candidate_ids, -1 if nothing was selected
    memory: Any = None  # the selected memory's payload (its text unless offer() was given one)
    # the mode's estimates (None in paper mode): success probability without a memory, the
    # chosen candidate's predicted gain (None when the bank was empty), and abstention
    p0: float | None = None
    advantage: float | None = None
    abstained: bool = False
    # per candidate (recall order), the mode's predicted gain and learned affinity (None in paper mode)
    gains: list[float] | None = None
    affinity: list[float] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The selection as a decision log keeps it: the candidates and their scores, and where the
        mode scores them too, its scorers (``{"gain": [...], "action model": [...]}``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("memory_text", "memory", "p0", "advantage", "abstained", "gains", "affinity")}
        if self.gains is not None:
            out["scorers"] = {"gain": self.gains, "action model": self.affinity}
        return out


@dataclasses.dataclass(frozen=True)
class HostDecision:
    code: str  # an :class:`Admission` name
    memory_id: int | None  # the offered memory's id if it is now in the bank
    evicted_id: int | None
    slot: int
    novelty: float
    v_new: float
    v_max_bank: float
    v_near: float
    rho_pos: float

    @property
    def admitted(self) -> bool:
        return self.memory_id is not None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _reward(value: Any) -> int:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value) in (0.0, 1.0):
        return int(value)
    raise ValueError(f"reward must be 0 or 1, got {value!r}")


# ----- the host's device calls: public functions jitted with the state donated --------------------
# Fetching a Selection field by field costs a device-to-host transfer per field (~20 us each on
# CPU), and building jnp scalars on the host costs a dispatched op each; so the host passes
# NumPy scalars and fetches two packed arrays per call.
def _pack_selection(sel: Selection) -> tuple[jax.Array, jax.Array]:
    ints = jnp.concatenate([sel.candidate_ids, jnp.stack([sel.chosen, sel.slot, sel.memory_id,
                                                          sel.abstained.astype(jnp.int32)])])
    return ints, jnp.concatenate([sel.scores, sel.base_scores, sel.relevance, sel.gains, sel.affinity,
                                  jnp.stack([sel.p0, sel.advantage])])


def _pack_decision(dec: Decision) -> tuple[jax.Array, jax.Array]:
    ints = jnp.stack([dec.code, dec.slot, dec.evicted_id, dec.near_slot])
    return ints, jnp.stack([dec.novelty, dec.v_new, dec.v_max_bank, dec.v_near, dec.rho_pos])


def _no_memory(spec: Spec) -> tuple[MemoryText, jax.Array, jax.Array]:
    f = spec.float_dtype
    memory = MemoryText(key=jnp.zeros((spec.dim,), f),
                        actions=jnp.zeros((spec.action_dim,), f) if spec.plus else Empty())
    return memory, jnp.int32(-1), jnp.zeros((), bool)


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("state",))
def _select(state: State, query: Query, hp: HParams, spec: Spec) -> tuple[State, Any]:
    state, sel = select(state, query, hp, spec)
    return state, _pack_selection(sel)


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("state",))
def _advance(state: State, reward: jax.Array, query: Query, hp: HParams, spec: Spec) -> tuple[State, Any]:
    state, _, sel = advance(state, reward, *_no_memory(spec), query, hp, spec)
    return state, _pack_selection(sel)


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("state",))
def _finish(state: State, reward: jax.Array, memory: MemoryText, memory_id: jax.Array, hp: HParams,
            spec: Spec) -> tuple[State, Any]:
    state, dec = finish_task(state, reward, memory, memory_id, jnp.ones((), bool), hp, spec)
    return state, _pack_decision(dec)


def _text_of(payload: Any) -> Optional[str]:
    return payload if isinstance(payload, str) or payload is None else getattr(payload, "text", None)


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


class Controller:
    """Stateful host-side controller. Not thread-safe; one per task stream.

    One phase machine: ``idle -> selected -> judged -> idle`` on the host, plus whether the
    device still has the judged task open (it is closed by the next device call).
    """

    def __init__(self, spec: Spec, hp: HParams) -> None:
        if not isinstance(spec, Spec):
            raise TypeError(f"spec must be a tokenworth_jax.Spec, got {type(spec).__name__}")
        self.spec = spec
        self.hp = validate_hparams(hp)
        check_matches(spec, self.hp)
        self._state: State = init(spec, self.hp)
        self.memories: MemoryTable[Any] = MemoryTable()
        self._phase: Phase = "idle"
        self._reward: int | None = None  # the last judged reward, until the device has used it
        self._open = False  # the device's task is selected but not finished (no offer yet)
        self._offered = False

    @classmethod
    def from_preset(cls, name: str = "db", *, plus: bool = False, dtype: DTypeLike = jnp.float32,
                    spec_overrides: dict[str, Any] | None = None, **overrides: Any) -> "Controller":
        spec, hp = preset(name, plus=plus, dtype=dtype, spec_overrides=spec_overrides, **overrides)
        return cls(spec, hp)

    # ----- the device state as the unfused calls would have left it ------------------------
    @property
    def state(self) -> State:
        """A copy of the controller state as the unfused calls would have left it.

        A copy, because the protocol calls donate the live state's buffers to XLA (in-place
        updates); the live state itself stays where the fused calls need it.
        """
        state = self._state
        if self._open and self._phase == "judged":
            state = observe(state, np.int32(self._reward), self.hp, self.spec)
        elif self._open and self._phase == "idle":
            state = finish_task(state, np.int32(self._reward), *_no_memory(self.spec), self.hp, self.spec)[0]
        return jax.tree_util.tree_map(jnp.copy, state)

    @property
    def texts(self) -> dict[int, Optional[str]]:
        """``{memory id: text}`` of the memories in the bank."""
        return {k: _text_of(v) for k, v in self.memories.items.items()}

    # ----- inputs -------------------------------------------------------------------------
    def vector(self, text_or_vector: str | np.ndarray | Sequence[float], *, what: str = "query") -> np.ndarray:
        """A validated (D,) recall vector of the spec's dtype: hashed from text, or a given vector L2-normalised."""
        return self._unit(text_or_vector, self.spec.dim, featurize, what)

    # ----- protocol -----------------------------------------------------------------------
    @property
    def phase(self) -> str:
        return self._phase

    def _unit(self, text_or_vector: str | np.ndarray | Sequence[float] | None, dim: int, hashing: Any,
              what: str) -> np.ndarray:
        """A validated (dim,) vector: ``hashing(text, dim)``, or a given vector L2-normalised."""
        if isinstance(text_or_vector, str):
            vec = hashing(text_or_vector, dim, dtype=np.float64)
        else:
            vec = np.asarray(text_or_vector, dtype=np.float64)
            if vec.shape != (dim,):
                raise ValueError(f"{what} vector must have shape ({dim},), got {vec.shape}")
            if not np.all(np.isfinite(vec)):
                raise ValueError(f"{what} vector has non-finite entries")
            norm = np.linalg.norm(vec)
            if norm > 0:
                vec = vec / norm
        return np.asarray(vec, self.spec.float_dtype)  # NumPy: the jitted call transfers it

    def query(self, query: str | np.ndarray, words: str | np.ndarray | None = None) -> Query:
        """The device's view of a question: its recall vector, and in TokenWorth+ mode its words
        (hashed from the question, or ``words``: a text or a vector)."""
        key = self.vector(query)
        if not self.spec.plus:
            return Query(key=key)
        if words is None:
            if not isinstance(query, str):
                raise ValueError("TokenWorth+ reads the question's words: give select() the question's text, or "
                                 "words= (its text or its word vector)")
            words = query
        return Query(key=key, words=self._unit(words, self.spec.word_dim, word_vectors, "word"))

    def select(self, query: str | np.ndarray, *, words: str | np.ndarray | None = None) -> HostSelection:
        if self._phase == "selected":
            raise ProtocolError("a task is still open: call observe(reward) before the next select()")
        q = self.query(query, words)
        if self._open:  # the previous task was judged and never offered: close it in this call
            self._state, packed = _advance(self._state, np.int32(self._reward), q, self.hp, self.spec)
        else:
            self._state, packed = _select(self._state, q, self.hp, self.spec)
        self._open = True
        self._phase = "selected"
        self._reward = None
        self._offered = False
        ints, floats = (np.asarray(x) for x in packed)
        k = (ints.shape[0] - 4)
        cand, (chosen, _, memory_id, abstained) = ints[:k], ints[k:].tolist()
        ids = cand[cand >= 0].tolist()
        n = len(ids)
        mid = memory_id if chosen >= 0 else None
        payload = self.memories.get(mid)
        scores, base, rel, gains, affinity = (floats[i * k:i * k + n].tolist() for i in range(5))
        p0, advantage = floats[5 * k:].tolist()
        return HostSelection(memory_id=mid, memory_text=_text_of(payload), candidate_ids=ids, scores=scores,
                             base_scores=base, relevance=rel, chosen=chosen, memory=payload, p0=_finite(p0),
                             advantage=_finite(advantage) if n else None, abstained=bool(abstained),
                             gains=gains if self.spec.plus else None, affinity=affinity if self.spec.plus else None)

    def observe(self, reward: int) -> None:
        if self._phase != "selected":
            raise ProtocolError("observe() needs an open task: call select() first (and observe only once)")
        self._reward = _reward(reward)  # the device observes lazily, fused with the next call
        self._phase = "judged"

    def offer(self, memory_text: str, key_text: str | None = None, *, payload: Any = None,
              action_text: str | np.ndarray | None = None) -> HostDecision:
        if self._phase != "judged":
            raise ProtocolError("offer() is only allowed after observe(reward) of the current task")
        if self._reward != 1:
            raise ProtocolError("a failed task never creates a memory: offer() needs observe(1)")
        if self._offered:
            raise ProtocolError("this task already offered its memory")
        if not isinstance(memory_text, str) or not memory_text.strip():
            raise ValueError("memory_text must be a non-empty string")
        key = self.vector(key_text if key_text is not None else memory_text, what="memory")
        vec = MemoryText(key=key)
        if self.spec.plus:  # the memory's actions: its action text (a text or a vector), else its whole text
            source = action_text if action_text is not None else memory_text
            vec = MemoryText(key=key, actions=self._unit(source, self.spec.action_dim, action_vectors, "action"))
        new_id = self.memories.next_id
        self._state, packed = _finish(self._state, np.int32(self._reward), vec, np.int32(new_id), self.hp, self.spec)
        self._open = False
        self._offered = True
        ints, floats = (np.asarray(x).tolist() for x in packed)
        code, slot, evicted, _ = ints
        written = slot >= 0
        self.memories.apply(memory_text if payload is None else payload, written=written, evicted_id=evicted)
        novelty, v_new, v_max_bank, v_near, rho_pos = floats
        return HostDecision(code=Admission(code).name, memory_id=new_id if written else None,
                            evicted_id=evicted if evicted >= 0 else None, slot=slot, novelty=novelty, v_new=v_new,
                            v_max_bank=v_max_bank, v_near=v_near, rho_pos=rho_pos)

    def end_task(self) -> None:
        if self._phase == "selected":
            raise ProtocolError("the task is not judged yet: call observe(reward) first")
        self._phase = "idle"  # an open device task is closed by the next select (or seen through .state)
        self._offered = False

    # ----- inspection and checkpoints -----------------------------------------------------
    def bank(self) -> list[dict[str, Any]]:
        """The valid memories with their statistics, in slot order."""
        b = jax.device_get(self.state.bank)
        out = []
        for slot in np.flatnonzero(b.valid):
            mid = int(b.ids[slot])
            out.append(dict(slot=int(slot), id=mid, text=_text_of(self.memories.get(mid)), u=float(b.u[slot]),
                            h=float(b.h[slot]), d=float(b.d[slot]), c=float(b.c[slot]), last=int(b.last[slot]),
                            tau=int(b.tau[slot])))
        return out

    def state_dict(self, encode: Optional[Callable[[Any], Any]] = None) -> dict[str, Any]:
        """Everything needed to resume: arrays, memories (``encode``-d), and the protocol phase."""
        return {
            "layout": LAYOUT,
            "spec": self.spec._asdict(),
            "hparams": {k: np.asarray(v) for k, v in flatten(self.hp).items()},
            "state": to_numpy(self._state),
            "memories": self.memories.state_dict(encode),
            "phase": self._phase,
            "open": self._open,
            "reward": self._reward,
            "offered": self._offered,
        }

    @classmethod
    def from_state_dict(cls, data: dict[str, Any], decode: Optional[Callable[[Any], Any]] = None) -> "Controller":
        """Rebuild from :meth:`state_dict`, validating layout, spec, hyperparameters, arrays and phase."""
        layout = data.get("layout", 1)
        if layout != LAYOUT:
            raise ValueError(f"this controller checkpoint has layout {layout}; this version reads layout {LAYOUT} "
                             "(one state field per part). Finish that run with the release that wrote it, or "
                             "start the method again (--overwrite)")
        spec = spec_from_dict(data["spec"])
        hp = hparams_from_arrays(data["hparams"])
        phase = data.get("phase")
        if phase not in PHASES:
            raise ValueError(f"checkpoint phase must be one of {PHASES}, got {phase!r}")
        reward, is_open = data.get("reward"), data.get("open")
        if not isinstance(is_open, bool):
            raise ValueError(f"checkpoint 'open' must be true or false, got {is_open!r}")
        if phase == "judged" and reward not in (0, 1):
            raise ValueError(f"checkpoint in phase 'judged' needs reward 0 or 1, got {reward!r}")
        if is_open and phase != "selected" and reward not in (0, 1):
            raise ValueError(f"checkpoint with an open judged task needs reward 0 or 1, got {reward!r}")
        ctl = cls(spec, hp)
        ctl._state = from_numpy(ctl._state, data["state"])  # fresh buffers (the host donates them)
        ctl.memories = MemoryTable.from_state_dict(data["memories"], decode)
        ctl._phase = phase
        ctl._open = is_open
        ctl._reward = reward
        ctl._offered = bool(data["offered"])
        return ctl
