"""Names that record which harness process owns a sandbox resource, and the sweep of
resources whose owner is dead.

A harness killed with SIGKILL cannot clean up: its sandboxes die with it (PID 1 exits
when the host's end of its socket closes), but their empty cgroups and mount-point
folders stay. Each such resource is therefore named after its owner:
``<pid-namespace inode>-<pid>-<start time>``. The start time (field 22 of
``/proc/PID/stat``) tells a recycled pid from the owner. A resource is stale only when
its owner is provably gone: same PID namespace as ours, and no process with that pid
and start time. Resources of other PID namespaces, of live owners, and names of any
other shape (older versions of this code, other engineers' runs) are never touched.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import tempfile
import threading
import time
from pathlib import Path

TEMP_PREFIX = "tokenworth-sandbox-"
_TAG = r"(\d+)-(\d+)-(\d+)"
_TEMP_RE = re.compile(rf"^{re.escape(TEMP_PREFIX)}{_TAG}-[A-Za-z0-9_]+$")
_GROUP_RE = re.compile(rf"^sbx-{_TAG}-[0-9a-f]+$")


def proc_stat(pid: int) -> list[str] | None:
    """Fields 3, 4, ... of ``/proc/PID/stat`` (state, ppid, ...), or None if no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    return stat.rsplit(")", 1)[1].split()


def _start_time(pid: int) -> int | None:
    fields = proc_stat(pid)
    return None if fields is None else int(fields[19])  # field 22


def _pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def owner_tag(pid: int | None = None) -> str:
    """``<pidns>-<pid>-<start time>`` of this process (or of ``pid``)."""
    pid = os.getpid() if pid is None else pid
    return f"{_pid_namespace()}-{pid}-{_start_time(pid)}"


def owner_is_dead(pidns: int, pid: int, start: int) -> bool:
    """True only when the owner provably exited: same PID namespace, pid gone or reused."""
    if pidns != _pid_namespace():
        return False  # we cannot see that namespace's processes: leave it alone
    return _start_time(pid) != start


def _stale(regex: re.Pattern[str], name: str) -> bool:
    match = regex.match(name)
    return bool(match) and owner_is_dead(*(int(g) for g in match.groups()))


def sweep_temp_dirs(temp_dir: str | None = None) -> list[str]:
    """Remove the empty mount-point folders of dead owners; returns what was removed.

    Only ``rmdir``: a folder with anything in it is left as it is.
    """
    removed = []
    root = temp_dir or tempfile.gettempdir()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and _stale(_TEMP_RE, entry.name):
            try:
                os.rmdir(entry.path)
                removed.append(entry.path)
            except OSError:
                pass
    return removed


def sweep_cgroups(parents: list[Path], timeout: float = 2.0) -> list[Path]:
    """Kill what is left in the per-sandbox cgroups of dead owners and remove them,
    then each parent that is left empty; returns the removed groups."""
    removed = []
    for parent in parents:
        try:
            children = [p for p in parent.iterdir() if p.is_dir()]
        except OSError:
            continue
        for group in children:
            if not _stale(_GROUP_RE, group.name):
                continue
            if remove_group(group, timeout):
                removed.append(group)
        remove_if_empty(parent)
    return removed


def group_pids(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def remove_group(group: Path, timeout: float, clock=time.monotonic, sleep=time.sleep) -> bool:
    """SIGKILL everything in ``group``, then rmdir it (retrying while the kernel still
    reports it busy). False when it could not be removed in ``timeout`` seconds."""
    deadline = clock() + timeout
    while True:
        for pid in group_pids(group):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or clock() > deadline:
                return False
        sleep(0.01)


def remove_if_empty(parent: Path) -> None:
    """rmdir a ``tokenworth-sandboxes`` parent; fails harmlessly while it has groups."""
    try:
        parent.rmdir()
    except OSError:
        pass


_swept = False
_sweep_lock = threading.Lock()


def sweep_once(parents_of) -> None:
    """Sweep stale temp folders and cgroups the first time a process starts a sandbox.

    ``parents_of`` is called only then and returns the cgroup parents to look in.
    """
    global _swept
    with _sweep_lock:
        if _swept:
            return
        _swept = True
    sweep_temp_dirs()
    sweep_cgroups(parents_of())
