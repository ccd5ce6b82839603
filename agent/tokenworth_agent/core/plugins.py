"""Plugins: methods, benchmarks and backbones found through entry points, the built-ins among them.

Each kind has one entry-point group (:data:`GROUPS`). An entry is ``name = "module:attribute"``: for a
method, a :class:`~tokenworth_agent.policies.base.MemoryPolicy` subclass; for a benchmark, a
:class:`~tokenworth_agent.benchmarks.base.Benchmark`; for a backbone, a class with the
:class:`~tokenworth_agent.backbones.base.Backbone` interface. The harness registers its own in
``agent/pyproject.toml`` the same way, so a built-in and a plugin are found, listed, loaded and refused
alike (docs/plugins.md).

The rules, each a one-line error:

* Two entries of one kind with one name (from two distributions, or a plugin reusing a built-in's
  name) make that name unusable: asking for it names both distributions. Other names keep working.
* An entry whose import fails is named with its distribution, version and the cause when it is
  asked for; everything else keeps working (``tokenworth plugins`` lists it as broken).
* An unknown name lists the known ones.

Discovery reads the installed distributions' metadata once per process (:func:`installed`). Where the
harness runs from a source tree that is not installed (its folder on ``PYTHONPATH``), the built-ins
are read from the ``agent/pyproject.toml`` beside the package instead, so they never depend on pip.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata as metadata
from pathlib import Path
from typing import Any

GROUPS: dict[str, str] = {"method": "tokenworth.methods", "benchmark": "tokenworth.benchmarks",
                          "backbone": "tokenworth.backbones"}
HOME = "tokenworth-agent"  # the distribution whose entries are the built-ins


class PluginError(ValueError):
    """A plugin that cannot be used: a name two distributions register, or an entry that fails to import."""


@dataclasses.dataclass(frozen=True)
class Plugin:
    """One entry point: what it is, where it comes from."""

    kind: str  # "method", "benchmark" or "backbone"
    name: str
    value: str  # "module:attribute"
    distribution: str
    version: str

    @property
    def builtin(self) -> bool:
        return self.distribution == HOME

    @property
    def release(self) -> str:
        """``distribution version``: what a stream's identity and a Ray node check compare."""
        return f"{self.distribution} {self.version}"

    def load(self) -> Any:
        module, _, attribute = self.value.partition(":")
        try:
            found: Any = importlib.import_module(module)
            for part in attribute.split("."):
                found = getattr(found, part)
        except Exception as exc:  # any failure of a foreign import is the plugin's, named in one line
            cause = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise PluginError(f"{self.kind} plugin {self.name!r} ({self.value}) of {self.distribution} "
                              f"{self.version} failed to import: {cause}") from None
        return found


@dataclasses.dataclass(frozen=True)
class Found:
    """A kind's entries: the usable ones by name (built-ins first, each part sorted by name), and the
    names two distributions claim (name -> one line naming both)."""

    entries: dict[str, Plugin]
    clashes: dict[str, str]


def _entry_points(group: str) -> list[Plugin]:
    kind = next(k for k, g in GROUPS.items() if g == group)
    plugins = []
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or "?"
        for entry in dist.entry_points:
            if entry.group == group:
                plugins.append(Plugin(kind, entry.name, entry.value, name, dist.version))
    if not any(p.builtin for p in plugins):  # the harness's source tree, not installed: its pyproject.toml
        plugins = _source_tree_builtins(kind, group) + plugins
    # one distribution may be found twice (an editable install on sys.path twice): the same entry is one
    unique = {(p.name, p.value, p.distribution): p for p in plugins}
    # one order whatever the install (entry_points.txt is written sorted): built-ins first, each part by name
    return sorted(unique.values(), key=lambda p: (not p.builtin, p.name, p.distribution))


def _source_tree_builtins(kind: str, group: str) -> list[Plugin]:
    import tomllib

    from tokenworth_jax import __version__

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        return []
    table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("entry-points", {})
    return [Plugin(kind, name, value, HOME, __version__) for name, value in table.get(group, {}).items()]


@functools.lru_cache(maxsize=None)
def installed(kind: str) -> Found:
    """Every installed entry of ``kind`` (cached: call :func:`refresh` after installing a plugin in-process)."""
    if kind not in GROUPS:
        raise ValueError(f"unknown plugin kind {kind!r}; expected one of {', '.join(GROUPS)}")
    entries: dict[str, Plugin] = {}
    clashes: dict[str, str] = {}
    for plugin in _entry_points(GROUPS[kind]):
        first = entries.get(plugin.name)
        if first is None and plugin.name not in clashes:
            entries[plugin.name] = plugin
            continue
        if first is not None:
            del entries[plugin.name]
            clashes[plugin.name] = (f"{kind} {plugin.name!r} is registered by two distributions, {first.distribution} "
                                    f"{first.version} ({first.value}) and {plugin.distribution} {plugin.version} "
                                    f"({plugin.value}); uninstall one of them")
    return Found(entries, clashes)


def refresh() -> None:
    """Forget what :func:`installed` found (after a distribution was installed or removed in this process)."""
    installed.cache_clear()
    load.cache_clear()


def names(kind: str) -> tuple[str, ...]:
    """The usable names of ``kind``, built-ins first."""
    return tuple(installed(kind).entries)


def describe(kind: str, name: str) -> Plugin:
    """The entry of ``name`` (a clash or an unknown name: one-line :class:`PluginError` / ValueError)."""
    found = installed(kind)
    if name in found.clashes:
        raise PluginError(found.clashes[name])
    if name not in found.entries:
        raise ValueError(f"unknown {kind} {name!r}; expected one of {', '.join(found.entries)}")
    return found.entries[name]


@functools.lru_cache(maxsize=None)
def load(kind: str, name: str) -> Any:
    """The object ``name`` of ``kind`` names, imported on first use."""
    return describe(kind, name).load()


def loadable(kind: str, *, warn: Any = None) -> dict[str, Any]:
    """Every usable entry of ``kind``, loaded; one that fails to import (or a clash) is left out, its
    one line given to ``warn`` (e.g. printed by the CLI), so the others keep working."""
    loaded = {}
    found = installed(kind)
    for line in found.clashes.values():
        if warn is not None:
            warn(line)
    for name in found.entries:
        try:
            loaded[name] = load(kind, name)
        except PluginError as exc:
            if warn is not None:
                warn(str(exc))
    return loaded


def benchmark(name: str) -> Any:
    """The :class:`~tokenworth_agent.benchmarks.base.Benchmark` registered as ``name`` (one whose own ``name``
    differs is refused: its records would carry another)."""
    found = load("benchmark", name)
    if getattr(found, "name", None) != name:
        plugin = describe("benchmark", name)
        raise PluginError(f"benchmark {name!r} ({plugin.value}) of {plugin.distribution} {plugin.version} names itself "
                          f"{getattr(found, 'name', None)!r}; its Benchmark's name must be the name it is registered under")
    return found


def listing() -> list[dict[str, str]]:
    """What is installed, one row per entry: name, kind, distribution, version, status (ok, broken: ..., clash: ...)."""
    rows = []
    for kind in GROUPS:
        found = installed(kind)
        for plugin in found.entries.values():
            try:
                load(kind, plugin.name)
                status = "ok"
            except PluginError as exc:
                status = f"broken: {str(exc).split(' failed to import: ', 1)[-1]}"
            rows.append({"name": plugin.name, "kind": kind, "distribution": plugin.distribution,
                         "version": plugin.version, "status": status})
        for name, line in found.clashes.items():
            rows.append({"name": name, "kind": kind, "distribution": "(two)", "version": "", "status": f"clash: {line}"})
    return rows


__all__ = ["GROUPS", "HOME", "Plugin", "PluginError", "Found", "installed", "refresh", "names", "describe", "load",
           "loadable", "benchmark", "listing"]
