"""A throw-away Linux sandbox for running untrusted Bash as root: one per task.

Why not Docker: there is no container daemon here, and none is needed. The kernel
features a container runtime uses are driven directly:

* **Namespaces.** ``unshare`` gives the sandbox its own mount, PID, network, UTS, IPC
  and cgroup namespaces. The network namespace holds only ``lo``.
* **Copy-on-write root.** A private tmpfs (it exists only inside the mount namespace)
  holds overlayfs upper layers over the host's ``/usr`` and ``/etc`` (``/bin``,
  ``/lib``… follow the host: merged-/usr symlinks or overlays). So ``useradd``,
  ``chown`` and ``chage`` work as root inside, and every change dies with the
  namespace. ``/root``, ``/home``, ``/tmp``, ``/opt``, ``/mnt`` and ``/srv`` start empty;
  ``/var`` is an Ubuntu-like skeleton whose only content is the copy-on-write package
  databases (``/var/lib/dpkg``, ``/var/lib/apt``, ``/var/cache/apt``), so ``dpkg -l``
  and a no-op ``apt-get install`` of an installed tool behave. Fresh ``/proc`` for the
  PID namespace, read-only ``/sys``, and a minimal ``/dev`` (null, zero, full, random,
  urandom, tty, private ptys, shm; no disks). ``pivot_root`` then detaches the host tree.
* **Capabilities.** Root inside keeps only what file ownership and user management
  need (Docker's default set minus ``mknod``). It cannot mount, create device nodes,
  load modules, ptrace, do raw I/O or change the clock, and the kernel-wide knobs
  under ``/proc`` are read-only or hidden, so it cannot undo any of the above. Root
  is real root (uid 0, no user namespace) because the tasks need many real uids and
  root-owned system files; the capability bounding set is what contains it.
* **Resource bounds.** A cgroup per sandbox (v2, or the v1 ``pids``/``memory``/``cpu``
  hierarchies) caps processes (fork bombs), memory and CPU; the tmpfs size caps disk
  writes. RLIMIT_NPROC is no substitute: the kernel never applies it to uid 0.

Lifecycle. PID 1 of the sandbox is a small "holder" (``holder.py``, run by the
sandbox's ``/usr/bin/python3`` after the capabilities are dropped). The host talks
to it over an inherited socket pair: each :meth:`Sandbox.run` sends a script plus
the write end of a fresh pipe; the holder forks ``bash -c <script>`` in a new
session with that pipe as stdout and stderr, working directory ``/`` and a fixed
environment, and reports the shell's exit. So background processes outlive the
action that started them, while the working directory and variables do not carry
over. Nothing privileged ever enters the sandbox after start-up (no ``nsenter``):
any binary it could run there might have been replaced by the sandbox's root.

A command finishes when its shell exits, as a ``docker exec`` does; output that its
background jobs write later is drained and dropped. (Waiting for the output to close
instead was tried: reference solution 73 then fails, since its evaluation expects
the job it backgrounded to be still running.) A command that runs past its timeout
is reported as timed out and left running, as in the original (a ``docker exec`` in
a thread that is abandoned on timeout). :meth:`Sandbox.close` kills the holder; the kernel then
kills every process of the PID namespace, the mount namespace and its tmpfs vanish,
and the cgroup and the empty mount-point directory are removed.
"""

from agent.envs.sandbox.base import (
    DEFAULT_PATH,
    KEPT_CAPABILITIES,
    CommandResult,
    SandboxError,
    SandboxLimits,
)
from agent.envs.sandbox.box import Sandbox, sandbox_unavailable_reason

__all__ = [
    "DEFAULT_PATH",
    "KEPT_CAPABILITIES",
    "CommandResult",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "sandbox_unavailable_reason",
]
