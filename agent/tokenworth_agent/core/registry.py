"""One registry pattern for every pluggable part: policies, environments, backbones.

A :class:`Registry` maps a name to a *lazy* factory, written as ``"module:attribute"``, so
that asking for one entry never imports another's heavy dependencies (vLLM, the OpenAI
client, the JAX controller). ``make(name, *args, **kwargs)`` imports the factory on first
use and calls it; an unknown name raises ``ValueError`` listing the known ones.

The harness's registries are made from the installed plugins (:meth:`Registry.from_plugins`: the
entry points of :mod:`tokenworth_agent.core.plugins`, the built-ins among them); a test or a script may
still add an entry in process::

    POLICIES.register("mine", "my_package.policy:MyPolicy")   # or a callable
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, Iterator, TypeVar, Union

T = TypeVar("T")
Factory = Union[str, Callable[..., T]]


class Registry(Generic[T]):
    """Name → lazily imported factory. Iteration yields the names in registration order."""

    def __init__(self, kind: str, entries: dict[str, Factory[T]] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, Factory[T]] = {}
        for name, factory in (entries or {}).items():
            self.register(name, factory)

    def register(self, name: str, factory: Factory[T]) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        if isinstance(factory, str) and ":" not in factory:
            raise ValueError(f"{self.kind} {name!r}: factory path {factory!r} must look like 'module:attribute'")
        self._entries[name] = factory

    @classmethod
    def from_plugins(cls, kind: str, order: tuple[str, ...] = ()) -> "Registry[T]":
        """The installed entries of ``kind``: the names of ``order`` first, in that order (how tables and --help show
        the built-ins), then the others (built-ins, then plugins, by name). A name two distributions claim is refused
        when asked for, an entry that fails to import is named with its distribution when asked for (one line each)."""
        from tokenworth_agent.core.plugins import installed

        registry: Registry[T] = cls(kind)
        found = installed(kind)
        rank = {name: i for i, name in enumerate(order)}
        ordered = sorted(found.entries.items(), key=lambda item: rank.get(item[0], len(rank)))
        for name, plugin in ordered:
            registry._entries[name] = _Lazy(plugin)
        for name, line in found.clashes.items():
            registry._entries[name] = _Lazy(None, line)
        return registry

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def factory(self, name: str) -> Callable[..., T]:
        """The factory for ``name`` (imported now if it was given as a path)."""
        try:
            entry = self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; expected one of {', '.join(self._entries)}") from None
        if isinstance(entry, _Lazy):
            return entry.load()
        if isinstance(entry, str):
            module, _, attribute = entry.partition(":")
            entry = getattr(importlib.import_module(module), attribute)
        return entry

    def make(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.factory(name)(*args, **kwargs)


class _Lazy:
    """An installed plugin's entry, imported on first use (or the one line that refuses a clashing name)."""

    def __init__(self, plugin: Any, clash: str | None = None) -> None:
        self.plugin, self.clash = plugin, clash

    def load(self) -> Any:
        from tokenworth_agent.core.plugins import PluginError, load

        if self.clash is not None:
            raise PluginError(self.clash)
        return load(self.plugin.kind, self.plugin.name)
