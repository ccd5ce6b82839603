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
with like. ``payload`` (by default the memory text) is what :attr:`Controller.memories`
keeps for the memory and what :attr:`HostSelection.memory` returns when it is selected.

One device call per task. ``observe`` and ``end_task`` only record on the host; the device
catches up lazily, fused with the next call that needs it: ``offer`` runs observe + offer +
end_task as one jitted call (:func:`tokenworth_jax.finish_task`); a task without an offer is
closed inside the next ``select`` (:func:`tokenworth_jax.close_and_select`). Reading
:attr:`Controller.state` (or ``bank()``, ``state_dict()``) first brings the device up to date
with the host protocol. The decisions are those of the unfused calls.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Literal, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import controller as C
from .bookkeeping import MemoryTable
from .config import HParams, Spec, hparams_from_arrays, preset, spec_from_dict, validate_hparams
from .featurize import featurize
from .controller import Selection
from .lifecycle import Admission, Decision
from .state import State, state_from_numpy, state_to_numpy

Phase = Literal["idle", "selected", "judged"]
PHASES: tuple[str, ...] = ("idle", "selected", "judged")
# How far the device state has followed the host protocol for the current task.
DevicePhase = Literal["selected", "observed", "ended"]


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

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("memory_text", "memory")}


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


# ----- the host's device calls: one jitted call each, outputs packed into two arrays -------------
# Fetching a Selection field by field costs a device-to-host transfer per field (~20 us each on
# CPU), and building jnp scalars on the host costs a dispatched op each; so the host passes
# NumPy scalars and fetches two packed arrays per call. The state is donated: the Controller
# owns it, and XLA can then update the windows and the cache in place instead of copying them.
def _pack_selection(sel: Selection) -> tuple[jax.Array, jax.Array]:
    ints = jnp.concatenate([sel.candidate_ids, jnp.stack([sel.chosen, sel.slot, sel.memory_id])])
    return ints, jnp.stack([sel.scores, sel.base_scores, sel.relevance])


def _pack_decision(dec: Decision) -> tuple[jax.Array, jax.Array]:
    ints = jnp.stack([dec.code, dec.slot, dec.evicted_id, dec.near_slot])
    return ints, jnp.stack([dec.novelty, dec.v_new, dec.v_max_bank, dec.v_near, dec.rho_pos])


def _no_memory(spec: Spec) -> tuple[jax.Array, jax.Array, jax.Array]:
    return jnp.zeros((spec.dim,), spec.float_dtype), jnp.int32(-1), jnp.zeros((), bool)


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("state",))
def _host_select(state: State, query: jax.Array, hp: HParams, spec: Spec) -> tuple[State, Any]:
    state, sel = C._select(state, query, hp, spec)
    return state, _pack_selection(sel)


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("state",))
def _host_close_and_select(state: State, reward: jax.Array, query: jax.Array, hp: HParams,
                           spec: Spec) -> tuple[State, Any]:
    state, _, sel = C._close_and_select(state, reward, *_no_memory(spec), query, hp, spec)
    return state, _pack_selection(sel)


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("state",))
def _host_close(state: State, reward: jax.Array, hp: HParams, spec: Spec) -> State:
    return C._finish_task(state, reward, *_no_memory(spec), hp, spec)[0]


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("state",))
def _host_finish(state: State, reward: jax.Array, memory: jax.Array, memory_id: jax.Array, hp: HParams,
                 spec: Spec) -> tuple[State, Any]:
    state, dec = C._finish_task(state, reward, memory, memory_id, jnp.ones((), bool), hp, spec)
    return state, _pack_decision(dec)


@functools.partial(jax.jit, static_argnames=("spec",), donate_argnames=("state",))
def _host_offer_end(state: State, memory: jax.Array, memory_id: jax.Array, hp: HParams,
                    spec: Spec) -> tuple[State, Any]:
    state, dec = C._offer(state, memory, memory_id, hp, spec)
    return C._end_task(state, spec), _pack_decision(dec)


def _text_of(payload: Any) -> Optional[str]:
    return payload if isinstance(payload, str) or payload is None else getattr(payload, "text", None)


class Controller:
    """Stateful host-side controller. Not thread-safe; one per task stream."""

    def __init__(self, spec: Spec, hp: HParams) -> None:
        if not isinstance(spec, Spec):
            raise TypeError(f"spec must be a tokenworth_jax.Spec, got {type(spec).__name__}")
        self.spec = spec
        self.hp = validate_hparams(hp)
        self._state: State = C.init(spec, hp)
        self.memories: MemoryTable[Any] = MemoryTable()
        self._phase: Phase = "idle"  # idle -> selected -> judged -> (offered) -> idle
        self._device: DevicePhase = "ended"
        self._reward: int | None = None
        self._offered = False

    @classmethod
    def from_preset(cls, name: str = "db", *, dtype: Any = jnp.float32, **overrides: Any) -> "Controller":
        spec, hp = preset(name, dtype=dtype, **overrides)
        return cls(spec, hp)

    # ----- the device state, brought up to date with the protocol ---------------------------
    @property
    def state(self) -> State:
        """A copy of the controller state as the unfused calls would have left it (runs pending device work).

        A copy, because the protocol calls donate the live state's buffers to XLA (in-place updates).
        """
        return jax.tree_util.tree_map(jnp.copy, self._synced())

    def _synced(self) -> State:
        """The live state, brought up to date with the host protocol."""
        if self._device == "selected" and self._phase == "judged":
            self._state = C.observe(self._state, np.int32(self._reward), self.hp, self.spec)
            self._device = "observed"
        elif self._device != "ended" and self._phase == "idle":
            self._close()
            self._reward = None
        return self._state

    def _close(self) -> None:
        """Finish the device's open task without an offer."""
        if self._device == "selected":
            self._state = _host_close(self._state, np.int32(self._reward), self.hp, self.spec)
        elif self._device == "observed":
            self._state = C.end_task(self._state, self.spec)
        self._device = "ended"

    @property
    def texts(self) -> dict[int, Optional[str]]:
        """``{memory id: text}`` of the memories in the bank."""
        return {k: _text_of(v) for k, v in self.memories.items.items()}

    # ----- inputs -------------------------------------------------------------------------
    def vector(self, text_or_vector: str | np.ndarray | Sequence[float], *, what: str = "query") -> np.ndarray:
        """A validated (D,) vector of the spec's dtype: hashed from text, or a given vector L2-normalised."""
        if isinstance(text_or_vector, str):
            vec = featurize(text_or_vector, self.spec.dim, dtype=np.float64)
        else:
            vec = np.asarray(text_or_vector, dtype=np.float64)
            if vec.shape != (self.spec.dim,):
                raise ValueError(f"{what} vector must have shape ({self.spec.dim},), got {vec.shape}")
            if not np.all(np.isfinite(vec)):
                raise ValueError(f"{what} vector has non-finite entries")
            norm = np.linalg.norm(vec)
            if norm > 0:
                vec = vec / norm
        return np.asarray(vec, self.spec.float_dtype)  # NumPy: the jitted call transfers it

    # ----- protocol -----------------------------------------------------------------------
    @property
    def phase(self) -> str:
        return self._phase

    def select(self, query: str | np.ndarray) -> HostSelection:
        if self._phase == "selected":
            raise ProtocolError("a task is still open: call observe(reward) before the next select()")
        q = self.vector(query)
        if self._device == "selected":  # the previous task was judged, never offered: close it in this call
            self._state, packed = _host_close_and_select(self._state, np.int32(self._reward), q, self.hp, self.spec)
        else:
            if self._device == "observed":
                self._state = C.end_task(self._state, self.spec)
            self._state, packed = _host_select(self._state, q, self.hp, self.spec)
        self._device = "selected"
        self._phase = "selected"
        self._reward = None
        self._offered = False
        ints, floats = (np.asarray(x) for x in packed)
        cand, (chosen, _, memory_id) = ints[:-3], ints[-3:].tolist()
        ids = cand[cand >= 0].tolist()
        n = len(ids)
        mid = memory_id if chosen >= 0 else None
        payload = self.memories.get(mid)
        scores, base, rel = floats[:, :n].tolist()
        return HostSelection(memory_id=mid, memory_text=_text_of(payload), candidate_ids=ids, scores=scores,
                             base_scores=base, relevance=rel, chosen=chosen, memory=payload)

    def observe(self, reward: int) -> None:
        if self._phase != "selected":
            raise ProtocolError("observe() needs an open task: call select() first (and observe only once)")
        r = _reward(reward)
        self._phase = "judged"  # the device observes lazily, fused with the next call
        self._reward = r

    def offer(self, memory_text: str, key_text: str | None = None, *, payload: Any = None) -> HostDecision:
        if self._phase != "judged":
            raise ProtocolError("offer() is only allowed after observe(reward) of the current task")
        if self._reward != 1:
            raise ProtocolError("a failed task never creates a memory: offer() needs observe(1)")
        if self._offered:
            raise ProtocolError("this task already offered its memory")
        if not isinstance(memory_text, str) or not memory_text.strip():
            raise ValueError("memory_text must be a non-empty string")
        vec = self.vector(key_text if key_text is not None else memory_text, what="memory")
        new_id = self.memories.next_id
        if self._device == "selected":  # observe + offer + end_task: one device call
            self._state, packed = _host_finish(self._state, np.int32(self._reward), vec, np.int32(new_id), self.hp,
                                               self.spec)
        else:  # the state was read after observe(): the device has observed already
            self._state, packed = _host_offer_end(self._state, vec, np.int32(new_id), self.hp, self.spec)
        self._device = "ended"
        ints, floats = (np.asarray(x).tolist() for x in packed)
        code, slot, evicted, _ = ints
        self._offered = True
        written = slot >= 0
        self.memories.apply(memory_text if payload is None else payload, written=written, evicted_id=evicted)
        novelty, v_new, v_max_bank, v_near, rho_pos = floats
        return HostDecision(code=Admission(code).name, memory_id=new_id if written else None,
                            evicted_id=evicted if evicted >= 0 else None, slot=slot, novelty=novelty, v_new=v_new,
                            v_max_bank=v_max_bank, v_near=v_near, rho_pos=rho_pos)

    def end_task(self) -> None:
        if self._phase == "selected":
            raise ProtocolError("the task is not judged yet: call observe(reward) first")
        self._phase = "idle"  # the device closes the task lazily (next select, or reading the state)
        self._offered = False  # _reward stays until the device has used it

    # ----- inspection and checkpoints -----------------------------------------------------
    def bank(self) -> list[dict[str, Any]]:
        """The valid memories with their statistics, in slot order."""
        b = jax.device_get(self._synced().bank)
        out = []
        for slot in np.flatnonzero(b.valid):
            mid = int(b.ids[slot])
            out.append(dict(slot=int(slot), id=mid, text=_text_of(self.memories.get(mid)), u=float(b.u[slot]), h=float(b.h[slot]),
                            d=float(b.d[slot]), c=float(b.c[slot]), last=int(b.last[slot]), tau=int(b.tau[slot])))
        return out

    def state_dict(self, encode: Optional[Callable[[Any], Any]] = None) -> dict[str, Any]:
        """Everything needed to resume: arrays, memories (``encode``-d), counters and the protocol phase."""
        state = self._synced()  # brings the device up to date first
        return {
            "spec": self.spec._asdict(),
            "hparams": {k: np.asarray(v) for k, v in self.hp._asdict().items()},
            "state": state_to_numpy(state),
            "memories": self.memories.state_dict(encode),
            "phase": self._phase,
            "device_phase": self._device,
            "reward": self._reward,
            "offered": self._offered,
        }

    @classmethod
    def from_state_dict(cls, data: dict[str, Any], decode: Optional[Callable[[Any], Any]] = None) -> "Controller":
        """Rebuild from :meth:`state_dict`, validating spec, hyperparameters, arrays and phase."""
        spec = spec_from_dict(data["spec"])
        hp = hparams_from_arrays(data["hparams"])
        phase = data.get("phase")
        if phase not in PHASES:
            raise ValueError(f"checkpoint phase must be one of {PHASES}, got {phase!r}")
        reward = data.get("reward")
        if phase == "judged" and reward not in (0, 1):
            raise ValueError(f"checkpoint in phase 'judged' needs reward 0 or 1, got {reward!r}")
        default_device = {"idle": "ended", "selected": "selected", "judged": "observed"}[phase]
        device = data.get("device_phase", default_device)  # checkpoints before fusing: device followed the host
        if device not in ("selected", "observed", "ended"):
            raise ValueError(f"checkpoint device_phase must be selected, observed or ended, got {device!r}")
        ctl = cls(spec, hp)
        ctl._state = state_from_numpy(ctl._state, data["state"])  # fresh buffers (the host donates them)
        if "memories" in data:
            ctl.memories = MemoryTable.from_state_dict(data["memories"], decode)
        else:  # older checkpoints: texts + next_id
            ctl.memories = MemoryTable({int(k): v for k, v in data["texts"].items()}, int(data["next_id"]))
        ctl._phase = phase
        ctl._device = device
        ctl._reward = reward
        ctl._offered = bool(data["offered"])
        return ctl
