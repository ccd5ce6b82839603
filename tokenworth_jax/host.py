"""A thin stateful wrapper for agent loops: holds the state and the memory texts,
validates inputs and enforces the protocol. The device work is the jitted pure API.

Protocol per task (each violation raises :class:`ProtocolError` and leaves everything
unchanged)::

    sel = ctl.select(query_text)        # not while a task is open (selected, not yet judged)
    ctl.observe(reward)                  # exactly once, after the environment's own grader; 0 or 1
    dec = ctl.offer(memory_text, key_text=...)   # optional, only after observe(1), once
    ctl.end_task()                       # optional: the next select() ends the task

``key_text`` is the text whose hashed vector represents the memory (by default the memory
text itself); the agent harness passes the source task's query, so recall compares like
with like.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import controller as C
from .config import HParams, Spec, preset
from .featurize import featurize
from .lifecycle import Admission
from .state import State, state_from_numpy, state_to_numpy


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

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("memory_text")
        return d


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


class Controller:
    """Stateful host-side controller. Not thread-safe; one per task stream."""

    def __init__(self, spec: Spec, hp: HParams) -> None:
        self.spec = spec
        self.hp = hp
        self.state: State = C.init(spec, hp)
        self.texts: dict[int, str] = {}
        self._next_id = 0
        self._phase = "idle"  # idle -> selected -> judged -> (offered) -> idle
        self._reward: int | None = None
        self._offered = False

    @classmethod
    def from_preset(cls, name: str = "db", *, dtype: Any = jnp.float32, **overrides: Any) -> "Controller":
        spec, hp = preset(name, dtype=dtype, **overrides)
        return cls(spec, hp)

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
        if self._phase == "judged":
            self.end_task()
        self.state, sel = C.select(self.state, q, self.hp, self.spec)
        self._phase = "selected"
        self._reward = None
        self._offered = False
        sel = jax.device_get(sel)
        chosen = int(sel.chosen)
        ids = [int(i) for i in sel.candidate_ids if i >= 0]
        n = len(ids)
        mid = int(sel.memory_id) if chosen >= 0 else None
        return HostSelection(
            memory_id=mid,
            memory_text=self.texts.get(mid) if mid is not None else None,
            candidate_ids=ids,
            scores=[float(s) for s in sel.scores[:n]],
            base_scores=[float(s) for s in sel.base_scores[:n]],
            relevance=[float(s) for s in sel.relevance[:n]],
            chosen=chosen,
        )

    def observe(self, reward: int) -> None:
        if self._phase != "selected":
            raise ProtocolError("observe() needs an open task: call select() first (and observe only once)")
        r = _reward(reward)
        self.state = C.observe(self.state, jnp.int32(r), self.hp, self.spec)
        self._phase = "judged"
        self._reward = r

    def offer(self, memory_text: str, key_text: str | None = None) -> HostDecision:
        if self._phase != "judged":
            raise ProtocolError("offer() is only allowed after observe(reward) of the current task")
        if self._reward != 1:
            raise ProtocolError("a failed task never creates a memory: offer() needs observe(1)")
        if self._offered:
            raise ProtocolError("this task already offered its memory")
        if not isinstance(memory_text, str) or not memory_text.strip():
            raise ValueError("memory_text must be a non-empty string")
        vec = self.vector(key_text if key_text is not None else memory_text, what="memory")
        new_id = self._next_id
        self.state, dec = C.offer(self.state, vec, jnp.int32(new_id), self.hp, self.spec)
        dec = jax.device_get(dec)
        self._next_id += 1
        self._offered = True
        code = Admission(int(dec.code))
        written = int(dec.slot) >= 0
        if written:
            self.texts[new_id] = memory_text
        evicted = int(dec.evicted_id)
        if evicted >= 0:
            self.texts.pop(evicted, None)
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
        if self._phase == "judged":
            self.state = C.end_task(self.state, self.spec)
        self._phase = "idle"
        self._reward = None
        self._offered = False

    # ----- inspection and checkpoints -----------------------------------------------------
    def bank(self) -> list[dict[str, Any]]:
        """The valid memories with their statistics, in slot order."""
        b = jax.device_get(self.state.bank)
        out = []
        for slot in np.flatnonzero(b.valid):
            mid = int(b.ids[slot])
            out.append(dict(slot=int(slot), id=mid, text=self.texts.get(mid), u=float(b.u[slot]), h=float(b.h[slot]),
                            d=float(b.d[slot]), c=float(b.c[slot]), last=int(b.last[slot]), tau=int(b.tau[slot])))
        return out

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: arrays, texts, counters and the protocol phase."""
        return {
            "spec": self.spec._asdict(),
            "hparams": {k: np.asarray(v) for k, v in self.hp._asdict().items()},
            "state": state_to_numpy(self.state),
            "texts": dict(self.texts),
            "next_id": self._next_id,
            "phase": self._phase,
            "reward": self._reward,
            "offered": self._offered,
        }

    @classmethod
    def from_state_dict(cls, data: dict[str, Any]) -> "Controller":
        spec = Spec(**data["spec"])
        hp = HParams(**{k: jnp.asarray(v) for k, v in data["hparams"].items()})
        ctl = cls(spec, hp)
        ctl.state = state_from_numpy(ctl.state, data["state"])
        ctl.texts = {int(k): v for k, v in copy.deepcopy(data["texts"]).items()}
        ctl._next_id = int(data["next_id"])
        ctl._phase = str(data["phase"])
        ctl._reward = data["reward"]
        ctl._offered = bool(data["offered"])
        return ctl
