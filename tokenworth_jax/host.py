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
from typing import Any, Callable, Literal, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import controller as C
from .bookkeeping import MemoryTable
from .config import HParams, Spec, hparams_from_arrays, preset, spec_from_dict, validate_hparams
from .featurize import featurize
from .lifecycle import Admission
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
        """The controller state as the unfused calls would have left it (runs pending device work)."""
        if self._device == "selected" and self._phase == "judged":
            self._state = C.observe(self._state, jnp.int32(self._reward), self.hp, self.spec)
            self._device = "observed"
        elif self._device != "ended" and self._phase == "idle":
            self._close()
            self._reward = None
        return self._state

    def _close(self) -> None:
        """Finish the device's open task without an offer."""
        if self._device == "selected":
            zero = jnp.zeros((self.spec.dim,), self.spec.float_dtype)
            self._state, _ = C.finish_task(self._state, jnp.int32(self._reward), zero, jnp.int32(-1),
                                           jnp.zeros((), bool), self.hp, self.spec)
        elif self._device == "observed":
            self._state = C.end_task(self._state, self.spec)
        self._device = "ended"

    @property
    def texts(self) -> dict[int, Optional[str]]:
        """``{memory id: text}`` of the memories in the bank."""
        return {k: _text_of(v) for k, v in self.memories.items.items()}

    # ----- inputs -------------------------------------------------------------------------
    def vector(self, text_or_vector: str | np.ndarray | Sequence[float], *, what: str = "query") -> jax.Array:
        """A validated (D,) device vector: hashed from text, or a given vector L2-normalised."""
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
        return jnp.asarray(vec, self.spec.float_dtype)

    # ----- protocol -----------------------------------------------------------------------
    @property
    def phase(self) -> str:
        return self._phase

    def select(self, query: str | np.ndarray) -> HostSelection:
        if self._phase == "selected":
            raise ProtocolError("a task is still open: call observe(reward) before the next select()")
        q = self.vector(query)
        if self._device == "selected":  # the previous task was judged, never offered: close it in this call
            zero = jnp.zeros((self.spec.dim,), self.spec.float_dtype)
            self._state, _, sel = C.close_and_select(self._state, jnp.int32(self._reward), zero, jnp.int32(-1),
                                                     jnp.zeros((), bool), q, self.hp, self.spec)
        else:
            if self._device == "observed":
                self._state = C.end_task(self._state, self.spec)
            self._state, sel = C.select(self._state, q, self.hp, self.spec)
        self._device = "selected"
        self._phase = "selected"
        self._reward = None
        self._offered = False
        sel = jax.device_get(sel)
        chosen = int(sel.chosen)
        ids = [int(i) for i in sel.candidate_ids if i >= 0]
        n = len(ids)
        mid = int(sel.memory_id) if chosen >= 0 else None
        payload = self.memories.get(mid)
        return HostSelection(
            memory_id=mid,
            memory_text=_text_of(payload),
            candidate_ids=ids,
            scores=[float(s) for s in sel.scores[:n]],
            base_scores=[float(s) for s in sel.base_scores[:n]],
            relevance=[float(s) for s in sel.relevance[:n]],
            chosen=chosen,
            memory=payload,
        )

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
            self._state, dec = C.finish_task(self._state, jnp.int32(self._reward), vec, jnp.int32(new_id),
                                             jnp.ones((), bool), self.hp, self.spec)
        else:  # the state was read after observe(): the device has observed already
            self._state, dec = C.offer(self._state, vec, jnp.int32(new_id), self.hp, self.spec)
            self._state = C.end_task(self._state, self.spec)
        self._device = "ended"
        dec = jax.device_get(dec)
        self._offered = True
        code = Admission(int(dec.code))
        written = int(dec.slot) >= 0
        evicted = int(dec.evicted_id)
        self.memories.apply(memory_text if payload is None else payload, written=written, evicted_id=evicted)
        return HostDecision(
            code=code.name,
            memory_id=new_id if written else None,
            evicted_id=evicted if evicted >= 0 else None,
            slot=int(dec.slot),
            novelty=float(dec.novelty),
            v_new=float(dec.v_new),
            v_max_bank=float(dec.v_max_bank),
            v_near=float(dec.v_near),
            rho_pos=float(dec.rho_pos),
        )

    def end_task(self) -> None:
        if self._phase == "selected":
            raise ProtocolError("the task is not judged yet: call observe(reward) first")
        self._phase = "idle"  # the device closes the task lazily (next select, or reading the state)
        self._offered = False  # _reward stays until the device has used it

    # ----- inspection and checkpoints -----------------------------------------------------
    def bank(self) -> list[dict[str, Any]]:
        """The valid memories with their statistics, in slot order."""
        b = jax.device_get(self.state.bank)
        out = []
        for slot in np.flatnonzero(b.valid):
            mid = int(b.ids[slot])
            out.append(dict(slot=int(slot), id=mid, text=_text_of(self.memories.get(mid)), u=float(b.u[slot]), h=float(b.h[slot]),
                            d=float(b.d[slot]), c=float(b.c[slot]), last=int(b.last[slot]), tau=int(b.tau[slot])))
        return out

    def state_dict(self, encode: Optional[Callable[[Any], Any]] = None) -> dict[str, Any]:
        """Everything needed to resume: arrays, memories (``encode``-d), counters and the protocol phase."""
        state = self.state  # brings the device up to date first
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
        ctl._state = state_from_numpy(ctl._state, data["state"])
        if "memories" in data:
            ctl.memories = MemoryTable.from_state_dict(data["memories"], decode)
        else:  # older checkpoints: texts + next_id
            ctl.memories = MemoryTable({int(k): v for k, v in data["texts"].items()}, int(data["next_id"]))
        ctl._phase = phase
        ctl._device = device
        ctl._reward = reward
        ctl._offered = bool(data["offered"])
        return ctl
