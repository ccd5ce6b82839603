"""The sandbox's public value types and constants."""

from __future__ import annotations

import dataclasses


class SandboxError(RuntimeError):
    """The sandbox could not be built, or broke while in use. The message says why."""


# Docker's default capability set minus mknod (no device cgroup guards it here).
KEPT_CAPABILITIES: tuple[str, ...] = (
    "chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
    "setfcap", "net_bind_service", "net_raw", "sys_chroot", "audit_write",
)

# What ``docker exec`` gives a command in an Ubuntu image, with our hostname.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The host tools the set-up itself needs (all from util-linux, iproute2, coreutils).
_HOST_TOOLS = ("unshare", "mount", "umount", "pivot_root", "setpriv", "hostname", "ip")


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource bounds of one sandbox. ``None`` leaves a bound off."""

    pids_max: int | None = 512  # processes and threads; stops fork bombs
    memory_bytes: int | None = 1 << 30  # RAM, including what the sandbox writes to its tmpfs
    cpus: float | None = 1.0  # CPU time share, in cores
    tmpfs_bytes: int = 1 << 30  # all files the sandbox writes (overlay uppers, /tmp, /home, ...)


@dataclasses.dataclass(frozen=True)
class CommandResult:
    exit_code: int | None  # None when the command timed out; 128+N when killed by signal N
    output: str  # stdout and stderr interleaved, as written
    timed_out: bool
    truncated: bool = False  # only past ``output_cap_bytes``, a host-memory guard
