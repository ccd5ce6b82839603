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

T = TypeVar("T")


class MemoryTable(Generic[T]):
    """Payloads of the memories that are in the bank, keyed by the id given at offer time."""

    def __init__(self, items: Optional[dict[int, T]] = None, next_id: int = 0) -> None:
        self.items: dict[int, T] = dict(items or {})
        self.next_id = int(next_id)

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self.items

    def __iter__(self) -> Iterator[int]:
        return iter(self.items)

    def get(self, memory_id: Optional[int]) -> Optional[T]:
        """The payload of ``memory_id``, None for None, -1 or an id not in the bank."""
        return None if memory_id is None else self.items.get(int(memory_id))

    def apply(self, payload: T, *, written: bool, evicted_id: int) -> int:
        """Apply one offer's decision; returns the id the offer used (consumed either way)."""
        new_id = self.next_id
        self.next_id += 1
        if evicted_id >= 0:
            self.items.pop(int(evicted_id), None)
        if written:
            self.items[new_id] = payload
        return new_id

    def state_dict(self, encode: Optional[Callable[[T], Any]] = None) -> dict[str, Any]:
        """The table as plain data: ``{"items": {id: encode(payload)}, "next_id": n}`` (``encode``: identity)."""
        enc = encode or (lambda x: x)
        return {"items": {int(k): enc(v) for k, v in self.items.items()}, "next_id": self.next_id}

    @classmethod
    def from_state_dict(cls, data: dict[str, Any], decode: Optional[Callable[[Any], T]] = None) -> "MemoryTable[T]":
        """The table :meth:`state_dict` wrote, each payload ``decode``-d; a ValueError if its ids are inconsistent."""
        dec = decode or (lambda x: x)
        items = {int(k): dec(v) for k, v in data["items"].items()}
        next_id = int(data["next_id"])
        if items and max(items) >= next_id:
            raise ValueError(f"memory table: id {max(items)} is not below next_id {next_id}")
        return cls(items, next_id)
