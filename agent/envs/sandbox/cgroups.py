"""One sandbox's cgroup(s): created with limits, emptied and removed at the end."""

from __future__ import annotations

import errno
import os
import signal
import time
import uuid
from pathlib import Path

from agent.envs.sandbox.base import SandboxError, SandboxLimits

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_GROUP_DIR = "tokenworth-sandboxes"  # parent of all per-sandbox cgroups


def _cgroup_mounts() -> list[tuple[str, Path, set[str]]]:
    """(fstype, mount point, controllers) of every cgroup mount, from mountinfo."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(rfields) < 3 or rfields[0] not in ("cgroup", "cgroup2"):
            continue
        point = Path(fields[4].replace("\\040", " "))
        if rfields[0] == "cgroup2":
            try:
                ctrls = set((point / "cgroup.controllers").read_text().split())
            except OSError:
                ctrls = set()
        else:
            ctrls = set(rfields[2].split(","))
        found.append((rfields[0], point, ctrls))
    return found


def _own_cgroup(controller: str | None) -> str:
    """This process's cgroup path in the v1 hierarchy of ``controller`` (None: v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if (controller is None and ctrls == "") or (controller and controller in ctrls.split(",")):
            return path
    return "/"


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class Cgroup:
    """One sandbox's cgroup(s): created with limits, emptied and removed at the end.

    cgroup v2 is used when its ``pids`` controller is available, else the v1 ``pids``
    hierarchy (plus ``memory`` and ``cpu`` where mounted). New groups go under
    ``tokenworth-sandboxes`` below this process's own cgroup, so the sandbox stays
    inside whatever bounds the caller already has (v2 instead uses the hierarchy's
    root, because v2 forbids controllers below a group that holds processes).
    """

    def __init__(self, dirs: list[Path], version: int) -> None:
        self.dirs = dirs
        self.version = version

    @classmethod
    def create(cls, limits: SandboxLimits) -> "Cgroup":
        mounts = _cgroup_mounts()
        name = f"sbx-{uuid.uuid4().hex[:12]}"
        v2 = [m for m in mounts if m[0] == "cgroup2" and "pids" in m[2]]
        if v2:
            return cls._create_v2(v2[0][1], v2[0][2], name, limits)
        v1 = {c: point for kind, point, ctrls in mounts if kind == "cgroup" for c in ctrls}
        if "pids" not in v1:
            raise SandboxError(
                "no cgroup 'pids' controller is mounted (neither cgroup v2 with pids nor v1 "
                "/sys/fs/cgroup/pids); without it a fork bomb inside the sandbox could exhaust the "
                "host. Mount cgroups, or pass limits=None to run unbounded."
            )
        dirs = []
        try:
            for ctrl in ("pids", "memory", "cpu"):
                if ctrl not in v1:
                    continue
                base = v1[ctrl] / _own_cgroup(ctrl).lstrip("/") / _GROUP_DIR
                base.mkdir(exist_ok=True)
                group = base / name
                group.mkdir()
                dirs.append(group)
                cls._limit_v1(ctrl, group, limits)
        except OSError as exc:
            cls(dirs, 1).remove()
            raise SandboxError(f"cannot create a cgroup for the sandbox: {exc}") from exc
        return cls(dirs, 1)

    @staticmethod
    def _limit_v1(ctrl: str, group: Path, limits: SandboxLimits) -> None:
        if ctrl == "pids" and limits.pids_max:
            _write(group / "pids.max", str(limits.pids_max))
        elif ctrl == "memory" and limits.memory_bytes:
            _write(group / "memory.limit_in_bytes", str(limits.memory_bytes))
            if (group / "memory.memsw.limit_in_bytes").exists():  # no swapping around it
                _write(group / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        elif ctrl == "cpu" and limits.cpus:
            _write(group / "cpu.cfs_period_us", "100000")
            _write(group / "cpu.cfs_quota_us", str(max(1000, int(limits.cpus * 100000))))

    @classmethod
    def _create_v2(cls, root: Path, available: set[str], name: str, limits: SandboxLimits) -> "Cgroup":
        wanted = [c for c in ("pids", "memory", "cpu") if c in available]
        base = root / _GROUP_DIR
        try:
            enable = " ".join(f"+{c}" for c in wanted)
            _write(root / "cgroup.subtree_control", enable)
            base.mkdir(exist_ok=True)
            _write(base / "cgroup.subtree_control", enable)
            group = base / name
            group.mkdir()
        except OSError as exc:
            raise SandboxError(
                f"cannot set up a cgroup v2 group under {root} with {wanted} ({exc}); the sandbox "
                "needs a writable cgroup with the pids controller to contain fork bombs"
            ) from exc
        made = cls([group], 2)
        try:
            if limits.pids_max:
                _write(group / "pids.max", str(limits.pids_max))
            if limits.memory_bytes and "memory" in wanted:
                _write(group / "memory.max", str(limits.memory_bytes))
                if (group / "memory.swap.max").exists():
                    _write(group / "memory.swap.max", "0")
            if limits.cpus and "cpu" in wanted:
                _write(group / "cpu.max", f"{max(1000, int(limits.cpus * 100000))} 100000")
        except OSError as exc:
            made.remove()
            raise SandboxError(f"cannot set the sandbox's cgroup limits: {exc}") from exc
        return made

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> list[int]:
        found: set[int] = set()
        for d in self.dirs:
            try:
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return sorted(found)

    def kill_all(self, timeout: float = 5.0) -> None:
        """SIGKILL whatever is still in the group, until it is empty."""
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)

    def remove(self, timeout: float = 5.0) -> None:
        # rmdir fails with EBUSY for a moment after the last process has exited.
        deadline = time.monotonic() + timeout
        for d in self.dirs:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise SandboxError(f"cannot remove cgroup {d}: {exc}") from exc
                    time.sleep(0.01)
