"""The host :class:`Controller`: a thin stateful wrapper for agent loops.

It holds the device state and the memories' payloads, turns texts into the vectors the parts read,
and makes one pure call per protocol step, the protocol's deferred walk
(:mod:`tokenworth_jax.protocol`)::

    sel = ctl.select(question)            # tw.select, or tw.advance if the last task's feedback is pending
    ctl.observe(reward)                   # the reward recorded (host only); 0 or 1, once, after the grader
    dec = ctl.offer(memory_text, key_text=...)   # tw.finish_task: feedback + admission + end; after observe(1)
    ctl.end_task()                        # the task marked ended (host only, optional)

The open task's progress (phase, judged reward, offered) lives in the device state, which each call
advances; a judged task's feedback (credit, windows, refits) and its end run in the call that
closes it (``offer``, or the next ``select``), which is given the judged reward. So a task runs at
most two device calls: ``observe`` and ``end_task`` only move the host's copy of the progress (a
device call each would cost a dispatch per task for three scalars), and :attr:`Controller.state` and
:meth:`Controller.state_dict` write that copy into the state they return. The host validates every
call against its own copy of that progress and every input (vector shape and finiteness, reward in
{0, 1}, non-empty memory text) before touching anything, so a violation raises
(:class:`ProtocolError`, ``ValueError``) and leaves everything unchanged. The calls donate the state
(XLA updates it in place); :attr:`Controller.state` is a copy of it, nothing recomputed (its
progress, the host's, says whether a task's feedback is still pending). What crosses back is the typed
:class:`~tokenworth_jax.Selection` / :class:`~tokenworth_jax.Decision`, fetched once per call.

``key_text`` is the text whose hashed vector represents the memory (by default the memory text
itself); the agent harness passes the source task's query, so recall compares like with like.
A part that reads more declares it (a :class:`~tokenworth_jax.inputs.Feature`): the host hashes it
from the question at ``select`` and from the memory text at ``offer``, or from a keyword of the
feature's name (``select(question, <name>=...)``, ``offer(text, <name>=...)``: a text or a vector); a
keyword no part of this controller reads is ignored, so one caller serves every mode.
``payload`` (by default the memory text) is what :attr:`Controller.memories` keeps for the memory
and what :attr:`HostSelection.memory` returns when it is selected.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from . import host_program, inputs, protocol
from .bookkeeping import MemoryTable
from .config import HParams, flatten, hparams_from_arrays, validate_hparams
from .controller import Spec, State, controller, with_progress
from .featurize import featurize
from .inputs import Feature, MemoryText, Query, declared, host_id
from .lifecycle import ADMISSIBLE_RULE, Admission
from .presets import describe, preset, spec_from_dict
from .protocol import ProtocolError
from .pytree import fetch, from_numpy, to_numpy

# The checkpoint layout of :meth:`Controller.state_dict`; 3 = the open task's progress in the device
# state and the parts named in the spec (this release).
LAYOUT = 3

__all__ = ["Controller", "HostDecision", "HostSelection", "ProtocolError", "LAYOUT"]


@dataclasses.dataclass(frozen=True)
class HostSelection:
    """What :meth:`Controller.select` returns: the device's :class:`~tokenworth_jax.Selection` as Python values.

    The lists hold the valid candidates only (n <= K of them, recall order: highest cosine first);
    padding is dropped, and "none" is ``None`` rather than -1 or NaN.

    Attributes:
        memory_id: the id of the memory to inject, None when nothing is injected.
        memory_text: its text (the payload's ``text`` attribute for a non-string payload), None when none.
        candidate_ids: the n candidates' memory ids.
        scores: their scores s = s_base + eta f.
        base_scores: their base scores s_base.
        relevance: their recall cosines.
        chosen: the index into ``candidate_ids`` of the memory to inject, -1 when nothing is injected.
        memory: its payload (its text unless ``offer`` was given a ``payload``), None when none.
        p0: the mode's estimate of the success probability without a memory, None when it makes none.
        advantage: the mode's predicted gain from its best candidate, None when it makes none or the bank
            was empty.
        abstained: candidates existed but the mode injected nothing.
        scorers: the mode's own per-candidate scores by name (n each), None when it reports none.
    """

    memory_id: int | None
    memory_text: str | None
    candidate_ids: list[int]
    scores: list[float]
    base_scores: list[float]
    relevance: list[float]
    chosen: int
    memory: Any = None
    p0: float | None = None
    advantage: float | None = None
    abstained: bool = False
    scorers: dict[str, list[float]] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The selection as a decision log keeps it: the candidates and their scores, and the mode's own
        scorers where it has any.

        Returns:
            dict[str, Any]: ``memory_id``, ``candidate_ids``, ``scores``, ``base_scores``, ``relevance`` and
            ``chosen`` as plain Python values, and ``scorers`` where the mode reports any (the payload, the text
            and the mode's estimates are left out).
        """
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("memory_text", "memory", "p0", "advantage", "abstained", "scorers")}
        if self.scorers is not None:
            out["scorers"] = self.scorers
        return out


@dataclasses.dataclass(frozen=True)
class HostDecision:
    """What :meth:`Controller.offer` returns: the device's :class:`~tokenworth_jax.Decision` as Python values.

    Attributes:
        code: the :class:`~tokenworth_jax.Admission` name (``"ADMITTED_ROOM"``, ``"REJECTED"``, ...).
        memory_id: the id the offered memory got, if it is now in the bank; None when it was not written.
        evicted_id: the id of the memory that left the bank to make room, None when none did.
        slot: the bank slot written, -1 when none.
        novelty: 1 - the highest cosine to a memory in the bank (1 for an empty bank).
        v_new: the offered memory's worth V.
        v_max_bank: the highest worth in the bank (-inf for an empty bank).
        v_near: the nearest memory's worth.
        rho_pos: the fraction of probes on which the offered memory's worth is > 0.
    """

    code: str
    memory_id: int | None
    evicted_id: int | None
    slot: int
    novelty: float
    v_new: float
    v_max_bank: float
    v_near: float
    rho_pos: float

    @property
    def admitted(self) -> bool:
        """The offered memory is now in the bank."""
        return self.memory_id is not None

    def as_dict(self) -> dict[str, Any]:
        """The decision as a plain dict (for a decision log).

        Returns:
            dict[str, Any]: every field by name (``code``, ``memory_id``, ``evicted_id``, ``slot``, ``novelty``,
            ``v_new``, ``v_max_bank``, ``v_near``, ``rho_pos``), as plain Python values.
        """
        return dataclasses.asdict(self)


def _reward(value: Any) -> int:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value) in (0.0, 1.0):
        return int(value)
    raise ValueError(f"{protocol.REWARD_RULE}, got {value!r}")


def _check_id(memory_id: int) -> None:
    """The id the next offer gets is one the bank can hold (``lifecycle.admissible``): the device would answer
    INVALID_MEMORY after the task's feedback had run, so the host refuses first, with nothing changed. An id that
    is not an integer (a table's ``next_id`` set to 3.7 by other code) is refused too (TypeError), never cast."""
    memory_id = host_id(memory_id, "this controller's next memory id (its memory table's next_id)")
    if not 0 <= memory_id <= np.iinfo(np.int32).max:
        raise ValueError(f"{ADMISSIBLE_RULE}: this controller's next memory id is {memory_id}, outside [0, 2**31 - 1] "
                         "(its memory table's next_id)")


def _text_of(payload: Any) -> Optional[str]:
    return payload if isinstance(payload, str) or payload is None else getattr(payload, "text", None)


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


def _device_input(vector: np.ndarray) -> jax.Array:
    """A host vector where a Query or MemoryText holds an array: kept as NumPy on purpose (the jitted call
    transfers it once), typed as what the device sees."""
    return cast(jax.Array, vector)


def _recall_vector(text: str, dim: int) -> np.ndarray:
    return featurize(text, dim, dtype=np.float64)


class Controller:
    """Stateful host-side controller for agent loops: texts in, typed Python values out.

    It keeps the device state, the memories' payloads (:attr:`memories`) and its own copy of the
    task protocol, and per task calls :meth:`select`, :meth:`observe`, then :meth:`offer` (after a
    success) or :meth:`end_task`. Every input and the protocol's order are checked before anything
    is touched: a violation raises (:class:`~tokenworth_jax.ProtocolError`, ``ValueError``) and
    leaves the controller unchanged. Not thread-safe; one per task stream.

    Args:
        spec: the static configuration (:func:`tokenworth_jax.preset` makes one).
        hp: its hyperparameters; validated against the spec's parts.
    """

    def __init__(self, spec: Spec, hp: HParams) -> None:
        if not isinstance(spec, Spec):
            raise TypeError(f"spec must be a tokenworth_jax.Spec, got {type(spec).__name__}")
        self.spec = spec
        self.hp = validate_hparams(hp, spec.parts)
        self.functions = controller(spec.scorer, spec.mode)
        # the compiled programs: select, advance and finish_task are one (host_program.step)
        self._init, self._program = host_program.programs(spec.scorer, spec.mode)
        self._state: State = self._init(spec, self.hp)
        self._progress = protocol.START  # the host's copy of state.task.progress
        self._features = {side: declared(spec.parts.values(), side) for side in ("query", "memory")}
        self._nothing = inputs.zeros(spec.dim, self._features["memory"], spec.float_dtype, MemoryText)
        self._no_query = inputs.zeros(spec.dim, self._features["query"], spec.float_dtype, Query)
        self.memories: MemoryTable[Any] = MemoryTable()

    @classmethod
    def from_preset(cls, env: str = "db", *, method: str = "tokenworth", scorer: Any = None,
                    dtype: DTypeLike = jnp.float32, spec_overrides: dict[str, Any] | None = None,
                    **overrides: Any) -> "Controller":
        """The controller of ``tw.preset(env, method=..., ...)``.

        Args:
            env: the environment whose preset sizes the bank (``"db"``, ``"os"``, ``"kg"``, ...).
            method: a method :func:`tokenworth_jax.preset` knows, by name (``"tokenworth"``, the paper's, unless
                told; keyword-only, as all that follow).
            scorer: the scorer, by name or value (None: the method's own).
            dtype: the float dtype of the state and the hyperparameters.
            spec_overrides: :class:`~tokenworth_jax.Spec` fields to change (``dict(capacity=32)``).
            **overrides: hyperparameters to change, by their flat names (``eta_max=0.3``).

        Returns:
            Controller: a fresh controller of that spec and those hyperparameters (validated as
            :func:`tokenworth_jax.preset` validates them).
        """
        return cls(*preset(env, method=method, scorer=scorer, dtype=dtype, spec_overrides=spec_overrides,
                           **overrides))

    @property
    def state(self) -> State:
        """A copy of the controller state (the calls donate the live state's buffers to XLA), with the open
        task's progress as the protocol stands (observe and end_task move only the host's copy)."""
        state: State = jax.tree_util.tree_map(jnp.copy, self._current())
        return state

    def _current(self) -> State:
        """The live state with the host's progress written in (the buffers are the live ones: no copy)."""
        return with_progress(self._state, protocol.on_device(self._progress))

    @property
    def phase(self) -> str:
        """Where the protocol stands: ``"idle"``, ``"selected"``, ``"judged"`` or ``"ended"``."""
        return protocol.PHASES[self._progress.phase]

    @property
    def texts(self) -> dict[int, Optional[str]]:
        """``{memory id: text}`` of the memories in the bank."""
        return {k: _text_of(v) for k, v in self.memories.items.items()}

    # ----- inputs -------------------------------------------------------------------------
    def vector(self, text_or_vector: str | np.ndarray | Sequence[float], *, what: str = "query") -> np.ndarray:
        """A validated (D,) recall vector of the spec's dtype: hashed from text, or a given vector L2-normalised.

        Args:
            text_or_vector: a text (hashed with :func:`~tokenworth_jax.featurize`), or a (D,) vector of finite
                numbers.
            what: what the vector is, for the message of a refusal (keyword-only; ``"query"`` or ``"memory"``).

        Returns:
            np.ndarray: the (D,) unit vector (zeros stay zeros), of the spec's dtype.

        Raises:
            ValueError: a vector of another shape, or with a non-finite entry.
        """
        return self._unit(text_or_vector, self.spec.dim, _recall_vector, what)

    def _unit(self, text_or_vector: str | np.ndarray | Sequence[float], dim: int,
              hashing: Callable[[str, int], np.ndarray], what: str) -> np.ndarray:
        """A validated (dim,) vector: ``hashing(text, dim)``, or a given vector L2-normalised."""
        if isinstance(text_or_vector, str):
            vec = hashing(text_or_vector, dim)
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

    def _read(self, features: Sequence[Feature], text: str | None, given: Mapping[str, Any],
              call: str) -> dict[str, jax.Array]:
        """The declared ``features``: each from its keyword, else hashed from ``text``."""
        out = {}
        for f in features:
            value = given.get(f.name, text)
            if value is None:
                raise ValueError(f"this controller reads {f.what}: give {call} text, or {f.name}= (a text or a "
                                 "vector)")
            out[f.name] = _device_input(self._unit(value, f.size, f.featurize, f.name))
        return out

    def query(self, query: str | np.ndarray, **features: Any) -> Query:
        """The device's view of a question: its recall vector, and the features the parts read.

        Args:
            query: the question's text, or its (D,) recall vector.
            **features: the query-side features the parts declare, by name (a text or a vector); each one not
                given is hashed from ``query``'s text.

        Returns:
            Query: what :meth:`select` hands the device for ``query``.

        Raises:
            ValueError: a bad vector, or a declared feature that is neither given nor has a text to hash.
        """
        return Query(key=_device_input(self.vector(query)), features=self._read(
            self._features["query"], query if isinstance(query, str) else None, features, "select() the question's"))

    def memory(self, memory_text: str, key_text: str | np.ndarray | None = None, **features: Any) -> MemoryText:
        """The device's view of a memory: the recall vector of its key text, and the features the parts read.

        Args:
            memory_text: the memory (non-empty).
            key_text: the text (or (D,) vector) whose recall vector represents the memory (default:
                ``memory_text``).
            **features: the memory-side features the parts declare, by name; each one not given is hashed from
                ``memory_text``.

        Returns:
            MemoryText: what :meth:`offer` hands the device for this memory.

        Raises:
            ValueError: an empty ``memory_text``, or a bad vector.
        """
        if not isinstance(memory_text, str) or not memory_text.strip():
            raise ValueError("memory_text must be a non-empty string")
        key = self.vector(key_text if key_text is not None else memory_text, what="memory")
        return MemoryText(key=_device_input(key), features=self._read(self._features["memory"], memory_text, features,
                                                       "offer() the memory's"))

    # ----- protocol -----------------------------------------------------------------------
    def select(self, query: str | np.ndarray, **features: Any) -> HostSelection:
        """Open a task: recall candidates for ``query`` and choose the memory to inject, if any.

        Args:
            query: the question's text (hashed with :func:`~tokenworth_jax.featurize`), or its (D,) vector.
            **features: the features the parts declare, by name (a text or a vector); a name no part of this
                controller reads is ignored.

        Returns:
            The candidates and the choice; ``memory_id`` is None when nothing is injected.

        Raises:
            ProtocolError: the previous task is still open (not yet observed).
        """
        protocol.check(self._progress, "select")
        q = self.query(query, **features)
        # one program (host_program.step): the last task's feedback and end first, when pending, then the selection
        reward = self._progress.reward if protocol.pending(self._progress) else -1
        self._state, _, sel = self._program(self._state, np.int32(reward), self._nothing, np.int32(-1), np.bool_(False),
                                            q, np.bool_(True), self.hp, self.spec)
        self._progress = protocol.after(self._progress, "select")
        sel = fetch(sel)
        ids = sel.candidate_ids
        n = int(np.sum(ids >= 0))  # the valid candidates come first (recall order)
        chosen = int(sel.chosen)
        mid = int(sel.memory_id) if chosen >= 0 else None
        payload = self.memories.get(mid)
        return HostSelection(
            memory_id=mid, memory_text=_text_of(payload), candidate_ids=ids[:n].tolist(), scores=sel.scores[:n].tolist(),
            base_scores=sel.base_scores[:n].tolist(), relevance=sel.relevance[:n].tolist(), chosen=chosen,
            memory=payload, p0=_finite(float(sel.p0)), advantage=_finite(float(sel.advantage)) if n else None,
            abstained=bool(sel.abstained),
            scorers={k: v[:n].tolist() for k, v in sel.mode_scores.items()} if sel.mode_scores else None)

    def observe(self, reward: int) -> None:
        """Record the open task's judged reward, 0 or 1 (``True``/``False`` and ``0.0``/``1.0`` are accepted).

        Args:
            reward: the task's outcome, 0 (it failed) or 1 (it succeeded).

        Returns:
            None. The reward is recorded on the device by the call that closes the task (:meth:`offer`, or the
            next :meth:`select`).

        Raises:
            ProtocolError: no task is open, or it was observed already.
            ValueError: ``reward`` is not 0 or 1.
        """
        protocol.check(self._progress, "observe")
        # Host only: the call that closes the task (offer, or the next select) is given the reward and
        # records it on the device itself.
        self._progress = protocol.after(self._progress, "observe", _reward(reward))

    def offer(self, memory_text: str, key_text: str | np.ndarray | None = None, *, payload: Any = None,
              **features: Any) -> HostDecision:
        """Offer the memory a successful task produced; the bank's lifecycle decides whether it is kept.

        This also closes the task (no :meth:`end_task` is needed after it).

        Args:
            memory_text: the memory (non-empty).
            key_text: the text whose vector represents the memory in recall (default: ``memory_text``); the
                agent harness passes the task's question, so that recall compares questions with questions.
                A (D,) vector is accepted too.
            payload: what :attr:`memories` keeps for the memory and a later selection returns as ``memory``
                (default: ``memory_text``).
            **features: the memory-side features the parts declare, by name.

        Returns:
            The admission decision; ``memory_id`` is the id the memory got, or None when it was not kept.

        Raises:
            ProtocolError: the task is not judged, failed (observe(0)), or has offered already.
            ValueError: the memory could never be admitted (``INVALID_MEMORY``: a non-finite vector, or no
                int32 memory id >= 0 left to give it); nothing is changed.
            TypeError: the memory table's ``next_id`` is not an integer (set by other code); nothing is changed.
        """
        protocol.check(self._progress, "offer")
        m = self.memory(memory_text, key_text, **features)  # its vectors: finite (refused here if not)
        new_id = self.memories.next_id
        _check_id(new_id)
        self._state, dec, _ = self._program(self._state, np.int32(self._progress.reward), m, np.int32(new_id),
                                            np.bool_(True), self._no_query, np.bool_(False), self.hp,
                                            self.spec)  # feedback + admission + end, no selection
        self._progress = protocol.START
        dec = fetch(dec)
        slot, evicted = int(dec.slot), int(dec.evicted_id)
        written = slot >= 0
        self.memories.apply(memory_text if payload is None else payload, written=written, evicted_id=evicted)
        return HostDecision(code=Admission(int(dec.code)).name, memory_id=new_id if written else None,
                            evicted_id=evicted if evicted >= 0 else None, slot=slot, novelty=float(dec.novelty),
                            v_new=float(dec.v_new), v_max_bank=float(dec.v_max_bank), v_near=float(dec.v_near),
                            rho_pos=float(dec.rho_pos))

    def end_task(self) -> None:
        """Close a judged task that offers nothing (optional: the next :meth:`select` closes it too).

        Returns:
            None. The task's feedback and end reach the device with the next :meth:`select`.

        Raises:
            ProtocolError: the open task is not judged yet.
        """
        protocol.check(self._progress, "end_task")
        if self._progress.phase == protocol.JUDGED:  # host only, as observe
            self._progress = protocol.deferred_end(self._progress)

    # ----- inspection and checkpoints -----------------------------------------------------
    def bank(self) -> list[dict[str, Any]]:
        """The valid memories with their statistics, in slot order.

        Returns:
            list[dict[str, Any]]: one dict per memory in the bank: ``slot``, ``id``, ``text`` (None for a payload
            without one), the utility ``u``, the statistics ``h``, ``d``, ``c``, the task it was last used
            (``last``) and the task it was written (``tau``).
        """
        b = fetch(self.state.bank)
        out = []
        for slot in np.flatnonzero(b.valid):
            mid = int(b.ids[slot])
            out.append(dict(slot=int(slot), id=mid, text=_text_of(self.memories.get(mid)), u=float(b.u[slot]),
                            h=float(b.h[slot]), d=float(b.d[slot]), c=float(b.c[slot]), last=int(b.last[slot]),
                            tau=int(b.tau[slot])))
        return out

    def state_dict(self, encode: Optional[Callable[[Any], Any]] = None) -> dict[str, Any]:
        """Everything needed to resume: the spec (its parts by name), hyperparameters, the state (the open
        task's progress included) and the memories (``encode``-d).

        Args:
            encode: applied to each memory's payload to make it plain data (default: kept as it is).

        Returns:
            dict[str, Any]: ``layout``, ``spec``, ``hparams`` and ``state`` (NumPy arrays by name) and
            ``memories`` (:meth:`tokenworth_jax.MemoryTable.state_dict`), what :meth:`from_state_dict` reads.
        """
        return {
            "layout": LAYOUT,
            "spec": describe(self.spec),
            "hparams": {k: np.asarray(v) for k, v in flatten(self.hp, self.spec.parts).items()},
            "state": to_numpy(self._current()),
            "memories": self.memories.state_dict(encode),
        }

    @classmethod
    def from_state_dict(cls, data: dict[str, Any], decode: Optional[Callable[[Any], Any]] = None, *,
                        parts: Mapping[str, Any] | None = None) -> "Controller":
        """Rebuild from :meth:`state_dict`, validating layout, spec, hyperparameters, arrays and the open task.

        Args:
            data: what :meth:`state_dict` returned (or its plain-data copy).
            decode: applied to each stored payload, the inverse of ``state_dict``'s ``encode`` (default: kept as
                it is).
            parts: ``{name: value}``, the scorers and modes the preset table does not know (keyword-only).

        Returns:
            Controller: the controller as it was when ``data`` was made, its open task included.

        Raises:
            ValueError: another layout, or a spec, hyperparameters, array or progress that does not validate
                (one line naming it).
        """
        layout = data.get("layout", 1)
        if layout != LAYOUT:
            raise ValueError(f"this controller checkpoint has layout {layout}; this version reads layout {LAYOUT} "
                             "(the open task in the device state, the parts named in the spec). Finish that run with "
                             "the release that wrote it, or start the method again (--overwrite)")
        spec = spec_from_dict(data["spec"], parts)
        ctl = cls(spec, hparams_from_arrays(data["hparams"], spec.parts))
        ctl._state = from_numpy(ctl._state, data["state"])  # fresh buffers (the calls donate them)
        ctl._progress = protocol.validate(fetch(ctl._state.task.progress))
        ctl.memories = MemoryTable.from_state_dict(data["memories"], decode)  # its ids checked
        return ctl

