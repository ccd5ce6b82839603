"""Host-side bookkeeping: the controller's int32 memory ids <-> the caller's payloads.

The device bank stores only vectors and ids; what a memory *is* (its text, or the agent's
``Memory`` object) stays on the host in a :class:`MemoryTable`. The table hands out ids,
and applies each admission decision: the evicted id leaves, the offered id enters when the
decision wrote it to the bank. The host :class:`~tokenworth_jax.Controller` keeps one (the
agent's TokenWorth policies store their ``Memory`` objects in it); a caller of the pure API
that keeps payloads can use it the same way.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Iterator, Optional, TypeVar

from .inputs import host_id

T = TypeVar("T")
ID_END = 2**31  # ids are int32 >= 0: a table whose next_id is 2**31 has handed out every one


class MemoryTable(Generic[T]):
    """Payloads of the memories that are in the bank, keyed by the id given at offer time.

    ``next_id`` (the id the next offer gets) must be an integer in [0, 2**31] (the bank's ids are int32 >= 0; at
    2**31 every id is used, and the host ``Controller`` refuses the next offer): anything else is refused here,
    and again by the ``Controller`` when it hands the id out (the attribute may be set directly)."""

    def __init__(self, items: Optional[dict[int, T]] = None, next_id: int = 0) -> None:
        self.items: dict[int, T] = dict(items or {})
        self.next_id = host_id(next_id, "memory table: next_id")
        if not 0 <= self.next_id <= ID_END:
            raise ValueError(f"memory table: next_id = {self.next_id}, outside [0, 2**31] (memory ids are int32 >= 0; "
                             "2**31: every id is used)")

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self.items

    def __iter__(self) -> Iterator[int]:
        return iter(self.items)

    def get(self, memory_id: Optional[int]) -> Optional[T]:
        """The payload of ``memory_id``, None for None, -1 or an id not in the bank.

        Args:
            memory_id: a memory id (as :class:`~tokenworth_jax.Selection` reports it), or None.

        Returns:
            The payload kept for it, or None.
        """
        return None if memory_id is None else self.items.get(int(memory_id))

    def apply(self, payload: T, *, written: bool, evicted_id: int) -> int:
        """Apply one offer's decision; returns the id the offer used (consumed either way).

        Args:
            payload: what to keep for the offered memory.
            written: whether the decision wrote it to the bank (keyword-only).
            evicted_id: the id of the memory the decision evicted, -1 when none (keyword-only).

        Returns:
            int: the id the offer used (``next_id`` before the call; ``next_id`` moves on).
        """
        new_id = self.next_id
        self.next_id += 1
        if evicted_id >= 0:
            self.items.pop(int(evicted_id), None)
        if written:
            self.items[new_id] = payload
        return new_id

    def state_dict(self, encode: Optional[Callable[[T], Any]] = None) -> dict[str, Any]:
        """The table as plain data: ``{"items": {id: encode(payload)}, "next_id": n}``.

        Args:
            encode: applied to each payload (default: kept as it is).

        Returns:
            dict[str, Any]: ``{"items": {id: encode(payload)}, "next_id": n}``.
        """
        enc = encode or (lambda x: x)
        return {"items": {int(k): enc(v) for k, v in self.items.items()}, "next_id": self.next_id}

    @classmethod
    def from_state_dict(cls, data: dict[str, Any], decode: Optional[Callable[[Any], T]] = None) -> "MemoryTable[T]":
        """The table :meth:`state_dict` wrote, each payload ``decode``-d.

        Args:
            data: what :meth:`state_dict` returned.
            decode: applied to each stored payload (default: kept as it is).

        Returns:
            MemoryTable: the table, its ``next_id`` checked.

        Raises:
            ValueError: a ``next_id`` outside [0, 2**31], or an id not in [0, next_id).
        """
        dec = decode or (lambda x: x)
        items = {int(k): dec(v) for k, v in data["items"].items()}
        table = cls(items, data["next_id"])  # next_id checked
        if items and (max(items) >= table.next_id or min(items) < 0):
            raise ValueError(f"memory table: id {max(items) if max(items) >= table.next_id else min(items)} is not in "
                             f"[0, next_id = {table.next_id})")
        return table
