"""Releases in a stream's identity: which distribution, at which version, made its method, benchmark and backbone.

Each stream's release entry is ``{"method": "hp-recency 0.3.1", "benchmark": "tokenworth-agent 0.2.0",
"backbone": "tokenworth-agent 0.2.0"}`` (``None`` for something no installed distribution registers, such as a
method registered in-process), and, where a plugin is among them, ``"files": {"method": "3f2a..."}``: a digest of
the code each plugin's distribution installed (:func:`tokenworth_agent.core.plugins.files_digest`), so a plugin
reinstalled at the same version with other code is another release too (the built-ins have none: the harness's code
is its version, and an entry of the built-ins alone is what it was before digests were recorded). It is kept twice: in the run folder's ``config.json`` under ``releases`` (by stream
name; the plan checks it before anything is written) and in the stream's checkpoint identity (checked where the
stream runs, so a worker on a machine with another install is refused as well). The trackers log it
(``release.method``, ...). A Ray cluster's nodes are compared in the same form
(:func:`tokenworth_agent.experiment.distributed.ray_cluster.check_plugins`).

The rule: a stream with results is resumed only under the releases that made them. Another release (an upgraded
plugin, or the harness's own), or other code under the same version, is refused in one line naming what changed,
with the two ways on: reinstall the release that made the stream (the line names it, and does not say ``pip install``:
a plugin may be on no index), or start the stream anew under the new one (``--overwrite --methods M``: only M's
records go). A folder or checkpoint made before releases were recorded has no entry: it is taken as made by the
installed releases, resumed once, and its entry recorded from then on (its earlier records' release is unknown);
where only the config lacks the entry, the plan reads it from the stream's checkpoint. An entry made before the
digests were recorded has no ``files``: its releases are compared, and it resumes once under the installed code,
whose digest is recorded from then on.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

KINDS = ("method", "benchmark", "backbone")
KEY = "releases"  # in config.json (stream name -> entry) and in a checkpoint's identity (the entry)
FILES = "files"  # in an entry: kind -> the digest of that plugin's installed code (plugins only)


def _plugin(kind: str, name: str) -> Any:
    from tokenworth_agent.core.plugins import describe

    try:
        return describe(kind, name)
    except ValueError:  # unknown, or two distributions claim it (refused where it is loaded)
        return None


def release(kind: str, name: str) -> str | None:
    """``distribution version`` of the installed entry ``name`` of ``kind``; None when no distribution registers it
    (registered in-process, or a test's own backbone)."""
    plugin = _plugin(kind, name)
    return None if plugin is None else plugin.release


def stream_releases(method: str, env: str, backbone: str) -> dict[str, Any]:
    """The release entry of a stream of ``method`` on ``env`` answered by ``backbone`` (the module docstring)."""
    from tokenworth_agent.core.plugins import files_digest

    found = {"method": _plugin("method", method), "benchmark": _plugin("benchmark", env),
             "backbone": _plugin("backbone", backbone)}
    entry: dict[str, Any] = {kind: None if plugin is None else plugin.release for kind, plugin in found.items()}
    digests = {kind: files_digest(plugin) for kind, plugin in found.items() if plugin is not None}
    digests = {kind: value for kind, value in digests.items() if value is not None}
    if digests:
        entry[FILES] = digests
    return entry


def changed_line(stream: str, names: Mapping[str, str], recorded: Mapping[str, Any], now: Mapping[str, Any],
                 start_anew: str) -> str | None:
    """The one line that refuses resuming ``stream`` (its folder) under ``now`` when ``recorded`` made it, or None
    when nothing differs. ``names``: kind -> the stream's method, benchmark and backbone names; ``start_anew``:
    how to start the stream anew (a flag, said after "or start it anew under the new release with")."""
    kinds = [k for k in KINDS if recorded.get(k) != now.get(k)]
    if kinds:
        made = " and ".join(str(recorded.get(k)) for k in kinds if recorded.get(k))
        back = f"reinstall the release it was made with{f' ({made})' if made else ''} to resume it"
        was = " and ".join(f"{recorded.get(k) or 'an unregistered copy'} ({k} {names[k]})" for k in kinds)
        new = " and ".join(f"{now.get(k) or 'an unregistered copy'}" for k in kinds)
        return (f"{stream} was made with {was}, and this run has {new}: resuming it would mix two releases in one "
                f"stream; {back}, or start it anew under the new release with {start_anew}")
    # the same versions: their code is compared where the entry recorded it (an older entry has no digests)
    was_files, now_files = recorded.get(FILES) or {}, now.get(FILES) or {}
    kinds = [k for k in KINDS if k in was_files and was_files[k] != now_files.get(k)]
    if not kinds:
        return None
    changed = " and ".join(f"{recorded.get(k)} ({k} {names[k]}: files {was_files[k]} then, {now_files.get(k)} now)"
                           for k in kinds)
    made = " and ".join(str(recorded.get(k)) for k in kinds)
    return (f"{stream} was made with other code of {changed}, under the same version: resuming it would mix two "
            f"codes in one stream; reinstall the release it was made with ({made}, as it was installed then) to "
            f"resume it, or start it anew under the installed code with {start_anew}")


def folder_refusal(out: Any, recorded: Mapping[str, Any] | None, now: Mapping[str, Mapping[str, Any]],
                   streams: Sequence[Any], names: Sequence[str], backbone: str, *, fresh: Sequence[str],
                   start_anew: str) -> str | None:
    """The line refusing the first of this command's streams whose results another release made (None: all
    resume). ``recorded``: config.json's entries; ``now``: this run's, by stream name; ``fresh``: the streams this
    command deletes first (``--overwrite``), which resume nothing."""
    from tokenworth_agent.storage import runfolder

    recorded = recorded or {}
    for spec, name in zip(streams, names):
        if name in fresh or not runfolder.has_results(out, name):
            continue  # a new stream, or one started anew
        entry = recorded.get(name) or _checkpointed(out / name / runfolder.CHECKPOINT)
        if entry is None:
            continue  # made before releases were recorded: resumed once, recorded from now on
        line = changed_line(f"{out}/{name}", {"method": spec.method, "benchmark": spec.env, "backbone": backbone},
                            entry, now[name], start_anew.format(method=spec.method))
        if line is not None:
            return line
    return None


def _checkpointed(path: Any) -> Mapping[str, Any] | None:
    """The release entry a stream's checkpoint holds (a folder whose config.json has none: an older version's, or
    one a worker on another machine ran), None when it holds none or cannot be read (its stream says why)."""
    from tokenworth_agent.storage.checkpoint import CheckpointError, load_checkpoint

    try:
        state = load_checkpoint(path)
    except (CheckpointError, OSError):
        return None
    return (state or {}).get("identity", {}).get(KEY)


__all__ = ["KINDS", "KEY", "FILES", "release", "stream_releases", "changed_line", "folder_refusal"]
