"""Plugins: methods, benchmarks and backbones found through entry points, the built-ins among them.

Each kind has one entry-point group (:data:`GROUPS`). An entry is ``name = "module:attribute"``: for a
method, a :class:`~tokenworth_agent.policies.base.MemoryPolicy` subclass; for a benchmark, a
:class:`~tokenworth_agent.benchmarks.base.Benchmark`; for a backbone, a class with the
:class:`~tokenworth_agent.backbones.base.Backbone` interface. The harness registers its own in
``agent/pyproject.toml`` the same way, so a built-in and a plugin are found, listed, loaded and refused
alike (docs/plugins.md).

**Isolation.** Discovery reads the installed distributions' metadata (names, distributions, versions) and
imports nothing. An entry is imported only when it is asked for (``--env``, ``--methods``, ``--backbone``), or
to be listed (``--help``, ``tokenworth plugins``), where a broken one is left out with its one line (``--help``
offers among ``--env`` and ``--methods`` only what :func:`offered` finds usable): whatever a plugin is or does,
every other name keeps working. The built-in benchmarks are the exception that proves it:
their options and data folders are always known (they are the harness's own code).

**Checked when loaded** (:func:`load`), each failure one :class:`PluginError` line naming the entry, its
distribution and version, and what to change:

* the import (any exception, ``SystemExit`` included, is the plugin's);
* what the entry is: a method a ``MemoryPolicy`` subclass, a benchmark a ``Benchmark`` value whose fields pass
  :meth:`~tokenworth_agent.benchmarks.base.Benchmark.problems` and whose controller preset exists, a backbone
  something callable;
* its name: a method's class attribute ``name`` and a benchmark's ``Benchmark.name`` are the entry's name
  (the records, stream folders and tables carry that one name);
* its parameters (a method's): a tuple of ``Parameter``, each default of its type, as a benchmark's options;
* two plugins of one kind with one name make that name unusable: asking for it names both distributions. A plugin
  that reuses a built-in's name never takes the built-in's place: the built-in is used, the plugin's entry is
  refused (its row in ``tokenworth plugins`` says so). Other names keep working.

A plugin's code is digested (:func:`files_digest`) beside its version in each stream's identity
(:mod:`tokenworth_agent.experiment.releases`).

A load's result, the value or the refusal, is kept for the process (:func:`refresh` forgets it), and a warning
about a plugin is printed once per process (:func:`warn_once`).

Where the harness runs from a source tree that is not installed (its folder on ``PYTHONPATH``), the built-ins
are read from the ``agent/pyproject.toml`` beside the package instead, so they never depend on pip.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata as metadata
import inspect
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

GROUPS: dict[str, str] = {"method": "tokenworth.methods", "benchmark": "tokenworth.benchmarks",
                          "backbone": "tokenworth.backbones"}
HOME = "tokenworth-agent"  # the distribution whose entries are the built-ins

# What an entry of each kind must be: a class of the harness's interface, looked up in sys.modules and never
# imported from here (core sits below the interfaces, docs/layout.md). An instance or subclass of it can only
# exist once its module has been imported, so a class missing from sys.modules means the value is not one.
_INTERFACES: dict[str, tuple[str, str, str]] = {
    "method": ("tokenworth_agent.policies.base", "MemoryPolicy", "a subclass of tokenworth_agent.plugin.MemoryPolicy"),
    "benchmark": ("tokenworth_agent.benchmarks.base", "Benchmark", "a tokenworth_agent.plugin.Benchmark value"),
}

Warn = Callable[[str], None]


class PluginError(ValueError):
    """A plugin that cannot be used, in one line: a name two distributions register, an entry that fails to
    import, or one that is not what its kind must be. ``reason`` is the line without the entry's label (what
    ``tokenworth plugins`` shows beside the entry)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message


@dataclasses.dataclass(frozen=True)
class Plugin:
    """One entry point: what it is, where it comes from."""

    kind: str  # "method", "benchmark" or "backbone"
    name: str
    value: str  # "module:attribute"
    distribution: str
    version: str
    source: Any = dataclasses.field(default=None, compare=False, repr=False)  # its importlib.metadata Distribution

    @property
    def builtin(self) -> bool:
        """Whether the entry is the harness's own (registered by ``tokenworth-agent``)."""
        return self.distribution == HOME

    @property
    def release(self) -> str:
        """``distribution version``: what a stream's identity and a Ray node check compare."""
        return f"{self.distribution} {self.version}"

    @property
    def label(self) -> str:
        """How a message names the entry: ``benchmark 'units' (units_pkg:BENCHMARK) of hp-units 0.3.1``."""
        return f"{self.kind} {self.name!r} ({self.value}) of {self.distribution} {self.version}"

    def refused(self, reason: str) -> PluginError:
        """The one-line error refusing this entry for ``reason``."""
        return PluginError(f"{self.label} {reason}", reason)

    def load(self) -> Any:
        """The object the entry names, imported now (unchecked: :func:`load` checks it)."""
        module, _, attribute = self.value.partition(":")
        try:
            found: Any = importlib.import_module(module)
            for part in attribute.split(".") if attribute else ():
                found = getattr(found, part)
        except (Exception, SystemExit) as exc:  # any failure of a foreign import is the plugin's, in one line
            problems = getattr(exc, "problems", None)  # a Benchmark refused as it was made (BenchmarkError)
            if self.kind == "benchmark" and problems:
                raise self.refused(f"is not a valid Benchmark: {'; '.join(problems)}; fix it in "
                                   f"{self.distribution}, or uninstall it") from None
            cause = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise self.refused(f"failed to import: {cause}; fix or reinstall {self.distribution}, or uninstall "
                               "it") from None
        return found


@dataclasses.dataclass(frozen=True)
class Found:
    """A kind's entries: the usable ones by name (built-ins first, each part sorted by name), the names two plugins
    claim (name -> one line naming both), every entry that claims one of those names, the built-ins by name, and
    the plugins refused for reusing a built-in's name (each with why: :meth:`Plugin.refused` makes its line)."""

    entries: dict[str, Plugin]
    clashes: dict[str, str]
    claimants: dict[str, tuple[Plugin, ...]] = dataclasses.field(default_factory=dict)
    builtins: dict[str, Plugin] = dataclasses.field(default_factory=dict)
    shadows: dict[Plugin, str] = dataclasses.field(default_factory=dict)


@functools.lru_cache(maxsize=None)
def _registered() -> tuple[tuple[metadata.Distribution, tuple[metadata.EntryPoint, ...]], ...]:
    """Every installed distribution that registers an entry of the harness's groups, with those entries: one pass
    over the installed distributions for all kinds, reading each one's entry_points.txt; only these few have their
    METADATA parsed (for the name and version), which in a venv of some 300 distributions would otherwise be most
    of a CLI process's start (cached: :func:`refresh` forgets it)."""
    groups = set(GROUPS.values())
    found = []
    for dist in metadata.distributions():
        entries = tuple(entry for entry in dist.entry_points if entry.group in groups)
        if entries:
            found.append((dist, entries))
    return tuple(found)


def _entry_points(group: str) -> list[Plugin]:
    kind = next(k for k, g in GROUPS.items() if g == group)
    plugins = []
    for dist, entries in _registered():
        name = dist.metadata["Name"] or "?"
        for entry in entries:
            if entry.group == group:
                plugins.append(Plugin(kind, entry.name, entry.value, name, dist.version, dist))
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
    """Every installed entry of ``kind``, from the metadata alone: nothing is imported (cached: call
    :func:`refresh` after installing a plugin in-process)."""
    if kind not in GROUPS:
        raise ValueError(f"unknown plugin kind {kind!r}; expected one of {', '.join(GROUPS)}")
    claims: dict[str, list[Plugin]] = {}
    for plugin in _entry_points(GROUPS[kind]):
        claims.setdefault(plugin.name, []).append(plugin)
    builtins = {p.name: p for found in claims.values() for p in found if p.builtin}
    # a built-in's name stays the built-in's: a plugin claiming it is the entry refused, never the built-in
    shadows = {p: _shadow_line(p, builtins[p.name]) for found in claims.values() for p in found
               if not p.builtin and p.name in builtins}
    claims = {name: [p for p in found if p not in shadows] for name, found in claims.items()}
    entries = {name: found[0] for name, found in claims.items() if len(found) == 1}
    claimants = {name: tuple(found) for name, found in claims.items() if len(found) > 1}
    clashes = {name: _clash_line(kind, name, found) for name, found in claimants.items()}
    return Found(entries, clashes, claimants, builtins, shadows)


def _clash_line(kind: str, name: str, claimants: tuple[Plugin, ...]) -> str:
    both = " and ".join(f"{p.distribution} {p.version} ({p.value})" for p in claimants)
    return (f"{kind} {name!r} is registered by {len(claimants)} distributions, {both}; uninstall one of them, or "
            "register one under another name")


def _shadow_line(plugin: Plugin, builtin: Plugin) -> str:
    """Why ``plugin``, which registers the name of the built-in ``builtin``, is refused (the built-in is used)."""
    return (f"reuses the name of the built-in {plugin.kind} of {builtin.release}, which is the one used: a plugin "
            f"may not take a built-in's place; register it under another name in {plugin.distribution}, or uninstall "
            f"{plugin.distribution}")


def refresh() -> None:
    """Forget what :func:`installed` found and every load (after a distribution was installed or removed in this
    process)."""
    _registered.cache_clear()
    installed.cache_clear()
    _LOADED.clear()
    _WARNED.clear()
    _DIGESTS.clear()


def names(kind: str, *, clashing: bool = False) -> tuple[str, ...]:
    """The usable names of ``kind``, built-ins first (from the metadata: nothing is imported); ``clashing``: with the
    names two distributions register after them (asking for one is refused naming both, :func:`load`)."""
    found = installed(kind)
    return (*found.entries, *(found.clashes if clashing else ()))


def describe(kind: str, name: str) -> Plugin:
    """The entry of ``name`` (a clash or an unknown name: one-line :class:`PluginError` / ValueError)."""
    found = installed(kind)
    if name in found.clashes:
        raise PluginError(found.clashes[name])
    if name not in found.entries:
        raise ValueError(f"unknown {kind} {name!r}; expected one of {', '.join(found.entries)}")
    return found.entries[name]


# (kind, name, value, distribution, with the preset) -> the checked value, or the PluginError refusing it
_LOADED: dict[tuple[str, ...], Any] = {}
_WARNED: set[str] = set()


def load(kind: str, name: str) -> Any:
    """The object ``name`` of ``kind`` names, imported on first use and checked (module docstring); a refusal is
    one :class:`PluginError` line."""
    return check(describe(kind, name))


def check(plugin: Plugin, *, preset: bool = True) -> Any:
    """``plugin``'s object, imported and checked once per process; ``preset=False``: a benchmark's controller
    preset is not checked (that reads the controller library, which ``--help`` does not need)."""
    key = (plugin.kind, plugin.name, plugin.value, plugin.distribution, str(preset))
    if key not in _LOADED:
        try:
            value = plugin.load()
            _check_value(plugin, value, preset=preset)
            _LOADED[key] = value
        except PluginError as exc:
            _LOADED[key] = exc
    found = _LOADED[key]
    if isinstance(found, PluginError):
        raise PluginError(str(found), found.reason)
    return found


def _check_value(plugin: Plugin, value: Any, *, preset: bool) -> None:
    kind = plugin.kind
    if kind in _INTERFACES:
        module, cls_name, wanted = _INTERFACES[kind]
        interface = getattr(sys.modules.get(module), cls_name, None)
        ok = interface is not None and (issubclass(value, interface) if kind == "method" and isinstance(value, type)
                                        else kind != "method" and isinstance(value, interface))
        if not ok:
            raise plugin.refused(f"is {_shown(value)}, not {wanted}; its entry point must name one (fix it in "
                                 f"{plugin.distribution}, or uninstall it)")
    elif not callable(value):
        raise plugin.refused(f"is {_shown(value)}, not a backbone class; its entry point must name a class with the "
                             f"tokenworth_agent.plugin.Backbone interface (fix it in {plugin.distribution}, or uninstall it)")
    if kind == "method":
        _check_parameters(plugin, value)
    if kind == "benchmark":
        problems = value.problems()
        if problems:
            raise plugin.refused(f"is not a valid Benchmark: {'; '.join(problems)}; fix it in {plugin.distribution}, "
                                 "or uninstall it")
    own = getattr(value, "name", None)
    if kind in _INTERFACES and own != plugin.name:
        field = "its class attribute `name`" if kind == "method" else "its Benchmark's name"
        raise plugin.refused(f"names itself {own!r}: the name must be the one it is registered under (set {field} to "
                             f"{plugin.name!r}, or register it as {own!r})")
    if kind == "benchmark" and preset:
        try:
            value.check_preset()
        except ValueError as exc:
            raise plugin.refused(f"is not a valid Benchmark: {'; '.join(getattr(exc, 'problems', (str(exc),)))}")


def _check_parameters(plugin: Plugin, cls: type) -> None:
    """A method's declared parameters, as a benchmark's options are checked: a tuple of ``Parameter``, each default
    of its type. Read without running the class's code: a ``parameters`` that is computed (TokenWorth's, which reads
    the controller's table) is checked where a run plans the method
    (:func:`tokenworth_agent.policies.registry.method_parameters`)."""
    from tokenworth_agent.core.parameters import check_declared

    declared = inspect.getattr_static(cls, "parameters", ())
    if not isinstance(declared, (tuple, list)) and hasattr(declared, "__get__"):
        return
    try:
        check_declared(declared, f"{cls.__qualname__}.parameters", defaults=True)
    except ValueError as exc:
        raise plugin.refused(f"declares parameters that cannot work: {exc}; fix it in {plugin.distribution}, or "
                             "uninstall it") from None


def _shown(value: Any) -> str:
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__}"
    text = repr(value)
    return f"a {type(value).__name__}" + (f" ({text})" if len(text) <= 30 else "")


def warn_once(warn: Warn | None, line: str) -> None:
    """Give ``line`` to ``warn``, unless this process already gave it (each warning is printed once)."""
    if warn is not None and line not in _WARNED:
        _WARNED.add(line)
        warn(line)


def loadable(kind: str, *, warn: Warn | None = None) -> dict[str, Any]:
    """Every usable entry of ``kind``, loaded and checked; one that is refused (or a clash) is left out, its one
    line given to ``warn`` once, so the others keep working. Only for what must list every plugin (``--help``,
    ``tokenworth data fetch`` of every benchmark): a run loads what it asks for (:func:`load`)."""
    loaded = {}
    found = installed(kind)
    for line in _refused_lines(found):
        warn_once(warn, line)
    for name in found.entries:
        try:
            loaded[name] = load(kind, name)
        except PluginError as exc:
            warn_once(warn, str(exc))
    return loaded


def offered(kind: str) -> tuple[str, ...]:
    """The names ``--help`` offers for ``kind``: the usable built-ins, and each plugin that loads and passes every
    check (:func:`check`); a broken or clashing one is left out (``tokenworth plugins`` says why). Imports every
    plugin of ``kind``: only for what lists them."""
    found = installed(kind)
    usable = []
    for name, plugin in found.entries.items():
        try:
            if not plugin.builtin:  # the built-ins are the harness's own: loaded only when asked for
                check(plugin)
        except PluginError:
            continue
        usable.append(name)
    return tuple(usable)


def benchmark(name: str) -> Any:
    """The :class:`~tokenworth_agent.benchmarks.base.Benchmark` registered as ``name``, loaded and checked."""
    return load("benchmark", name)


def benchmarks(asked: Iterable[str] | None = (), *, warn: Warn | None = None, preset: bool = False) -> dict[str, Any]:
    """The benchmarks whose options and data folders a command must know: the built-ins (the harness's own code;
    a built-in name a plugin also claims included), then the plugins of ``asked`` (None: every installed one),
    each checked (``preset``: its controller preset too). A plugin that is refused, or a name two plugins claim,
    is left out, its one line given to ``warn`` once: asking for it fails where the run asks (:func:`load`)."""
    found = installed("benchmark")
    wanted = list(found.entries) if asked is None else [n for n in dict.fromkeys(asked) if n not in found.builtins]
    chosen: dict[str, Any] = {}
    if asked is None:  # every plugin is listed: those refused by name alone are named too
        for line in _refused_lines(found):
            warn_once(warn, line)
    for plugin in found.builtins.values():
        chosen[plugin.name] = check(plugin, preset=preset)
    for name in wanted:
        if name in found.builtins:
            continue
        try:
            chosen[name] = check(describe("benchmark", name), preset=preset)
        except ValueError as exc:  # PluginError, or an unknown name (the run's own check says which)
            if name in found.entries or name in found.clashes:
                warn_once(warn, str(exc))
    return chosen


def _refused_lines(found: Found) -> list[str]:
    """The lines of the entries refused by their names alone: a name two plugins claim, a built-in's name reused."""
    return [*found.clashes.values(), *(str(plugin.refused(reason)) for plugin, reason in found.shadows.items())]


def listing() -> list[dict[str, str]]:
    """What is installed, one row per entry: name, kind, distribution, version, status (``ok``, ``broken``: it is
    refused when asked for, or ``clash``: its name is claimed twice, by two plugins, both refused, or by a plugin and a
    built-in, the plugin's entry refused and the built-in used) and detail (a benchmark's description, or why it is
    refused).

    Every entry is loaded and checked here, each on its own: one that fails is its row, never the listing's end."""
    rows = []
    for kind in GROUPS:
        found = installed(kind)
        plugins = [*found.entries.values(), *(p for claimants in found.claimants.values() for p in claimants),
                   *found.shadows]
        for plugin in sorted(plugins, key=lambda p: (not p.builtin, p.name, p.distribution)):
            if plugin in found.shadows:
                status, detail = "clash", found.shadows[plugin]
            elif plugin.name in found.clashes:
                others = [p for p in found.claimants[plugin.name] if p is not plugin]
                status = "clash"
                detail = (f"{kind} {plugin.name!r} is also registered by "
                          f"{', '.join(f'{p.distribution} {p.version}' for p in others)}; asking for it is refused "
                          f"({found.clashes[plugin.name].rsplit('; ', 1)[-1]})")
            else:
                try:
                    detail = _described(check(plugin))
                    status = "ok"
                except PluginError as exc:
                    status, detail = "broken", exc.reason
            rows.append({"name": plugin.name, "kind": kind, "distribution": plugin.distribution,
                         "version": plugin.version, "status": status, "detail": detail})
    return rows


# files that say how or from where a distribution was installed, not what it runs: left out of its digest
_INSTALL_NOTES = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})
_DIGESTS: dict[Plugin, str | None] = {}


def files_digest(plugin: Plugin) -> str | None:
    """A digest (16 hex digits of sha256) of the code ``plugin`` runs, taken once per process: of its distribution's
    RECORD (each installed file's path and hash, but the install's own notes and compiled ``.pyc``), or, for an
    editable install or one whose RECORD lists no hashes, of the files themselves (every file of the package or
    module its entry names, read now). None for a built-in: the harness's code is its version (a digest of an
    editable harness would refuse every resume while it is being developed)."""
    if plugin.builtin:
        return None
    if plugin not in _DIGESTS:
        _DIGESTS[plugin] = _recorded_digest(plugin.source) or _module_digest(plugin.value)
    return _DIGESTS[plugin]


def _recorded_digest(dist: Any) -> str | None:
    if dist is None or _editable(dist):
        return None
    hashed = sorted((str(f), f.hash.value) for f in dist.files or () if f.hash is not None and f.name not in
                    _INSTALL_NOTES and f.suffix != ".pyc")
    return _sha256("\n".join(f"{path} {value}" for path, value in hashed).encode()) if hashed else None


def _editable(dist: Any) -> bool:
    import json

    try:
        return bool(json.loads(dist.read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable"))
    except (ValueError, AttributeError):
        return False


def _module_digest(value: str) -> str | None:
    """The digest of the files of the top-level module or package ``value`` ("module:attribute") names, found as
    an import would find it (without importing it); None when none is found."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(value.partition(":")[0].split(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    roots = [Path(p) for p in spec.submodule_search_locations or ()]
    files = [(f.relative_to(root).as_posix(), f) for root in roots for f in sorted(root.rglob("*"))
             if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"]
    if not roots and spec.origin and Path(spec.origin).is_file():
        files = [(Path(spec.origin).name, Path(spec.origin))]
    if not files:
        return None
    return _sha256(b"".join(name.encode() + b"\0" + _sha256(path.read_bytes()).encode() + b"\n"
                            for name, path in sorted(files)))


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()[:16]


def _described(value: Any) -> str:
    """One line of what an entry is: a benchmark's ``description`` ("" for the other kinds)."""
    text = getattr(value, "description", None) if not isinstance(value, type) else None
    return " ".join(text.split()) if isinstance(text, str) else ""


__all__ = ["GROUPS", "HOME", "Plugin", "PluginError", "Found", "installed", "refresh", "names", "describe", "load",
           "check", "loadable", "offered", "files_digest", "benchmark", "benchmarks", "listing", "warn_once"]
