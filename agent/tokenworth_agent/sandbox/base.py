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

# Size of the sandbox's /dev/shm tmpfs (set in setup.sh); it counts against memory too.
_SHM_BYTES = 64 << 20

# The host tools the set-up itself needs (all from util-linux, iproute2, coreutils).
_HOST_TOOLS = ("unshare", "mount", "umount", "pivot_root", "setpriv", "hostname", "ip")


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource bounds of one sandbox. ``None`` leaves a bound off.

    The files a sandbox writes live in RAM (a tmpfs), so they count against
    ``memory_bytes`` too. ``tmpfs_bytes`` must therefore stay below it: a task that
    fills its disk then sees "No space left on device", as on a real disk, instead of
    the OOM killer. The difference (512 MiB by default) is left for processes.
    """

    pids_max: int | None = 512  # processes and threads; stops fork bombs
    memory_bytes: int | None = 1 << 30  # RAM, including what the sandbox writes to its tmpfs
    cpus: float | None = 1.0  # CPU time share, in cores
    tmpfs_bytes: int = 512 << 20  # all files the sandbox writes (overlay uppers, /tmp, /home, ...)
    # RLIMIT_NOFILE (soft, hard) of every process. With pids_max it bounds the files a
    # sandbox holds open (512 x 1024 = 524,288, about 120 MiB of kernel memory, which is
    # charged to its memory cgroup), well below a host's global file-max.
    open_files: tuple[int, int] = (1024, 1024)

    def __post_init__(self) -> None:
        if self.tmpfs_bytes < (1 << 20):
            raise ValueError(f"tmpfs_bytes={self.tmpfs_bytes} is too small for a root filesystem (at least 1 MiB)")
        if self.memory_bytes is not None and self.tmpfs_bytes + _SHM_BYTES >= self.memory_bytes:
            raise ValueError(
                f"tmpfs_bytes={self.tmpfs_bytes} plus /dev/shm ({_SHM_BYTES}) must stay below "
                f"memory_bytes={self.memory_bytes}: files live in RAM, so a full disk would "
                "otherwise end in the OOM killer instead of ENOSPC"
            )
        soft, hard = self.open_files
        if not 0 < soft <= hard:
            raise ValueError(f"open_files={self.open_files} must be (soft, hard) with 0 < soft <= hard")


@dataclasses.dataclass(frozen=True)
class ResourceUsage:
    """What a sandbox's cgroup recorded so far (:meth:`Sandbox.usage`); ``None`` where the host keeps no count."""

    memory_peak_bytes: int | None  # the most memory in use at once (files on its tmpfs included)
    oom_kills: int | None  # processes the OOM killer took inside the sandbox


@dataclasses.dataclass(frozen=True)
class CommandResult:
    exit_code: int | None  # None when the command timed out; 128+N when killed by signal N
    output: str  # stdout and stderr interleaved, as written
    timed_out: bool
    truncated: bool = False  # only past ``output_cap_bytes``, a host-memory guard
