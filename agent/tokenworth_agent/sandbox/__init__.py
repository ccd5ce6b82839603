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
  urandom, tty, private ptys, shm; no disks). Host directories a caller names
  (``read_only_binds``, e.g. BigCodeBench's evaluation interpreter) appear at their own path,
  read-only, nosuid and nodev. ``pivot_root`` then detaches the host tree.
* **A user namespace of its own.** PID 1 unshares a user namespace with the identity
  map (uid n inside is uid n outside, so files keep their owners and root inside is
  uid 0, as ``useradd``/``chown``/``apt`` expect) but *owned* by a fresh host uid
  that nothing else uses. The kernel charges per-user quotas (inotify instances and
  watches, message queues, user namespaces ...) to that owner, never to host root,
  and capabilities inside count only for the sandbox's own namespaces.
* **Capabilities.** Root inside keeps only what file ownership and user management
  need (Docker's default set minus ``mknod``). It cannot mount, create device nodes,
  load modules, ptrace, do raw I/O or change the clock, and the kernel-wide knobs
  under ``/proc`` are read-only or hidden, so it cannot undo any of the above.
* **seccomp.** A filter compiled by libseccomp (``seccomp.py``), at least as strict as
  Docker's default profile: no keyrings, no new namespaces, no mounts, no kexec, bpf,
  perf_event_open, ptrace, io_uring and the like.
* **Secrets.** ``/etc/shadow`` and ``/etc/gshadow`` are rebuilt with locked passwords;
  everything else under ``/etc`` that is not world-readable is emptied in the view.
* **Resource bounds.** A cgroup per sandbox (v2, or the v1 ``pids``/``memory``/``cpu``
  hierarchies) caps processes (fork bombs), memory and CPU; the tmpfs size, below the
  memory limit, caps disk writes (a full disk is ENOSPC, not the OOM killer);
  RLIMIT_NOFILE caps open files per process. Tasks run at ``oom_score_adj`` 500, so
  the OOM killer takes them before PID 1. :meth:`Sandbox.usage` reads the peak memory and
  the OOM kills back from the cgroup (a :class:`ResourceUsage`).

Lifecycle. PID 1 of the sandbox is a small "holder" (``holder.py``, package data run
by the sandbox's ``/usr/bin/python3``; ``setup.sh`` builds the root before it). The host talks
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
and the cgroup and the empty mount-point directory are removed. Leftovers of a
harness that was SIGKILLed are swept by the next one (``leftovers.py``).

Modules: ``base`` (value types), ``box`` (:class:`Sandbox`), ``cgroups``, ``seccomp``,
``leftovers``; data: ``setup.sh``, ``holder.py``.
"""

from tokenworth_agent.sandbox.base import (
    DEFAULT_PATH,
    KEPT_CAPABILITIES,
    CommandResult,
    ResourceUsage,
    SandboxError,
    SandboxLimits,
)
from tokenworth_agent.sandbox.box import Sandbox, sandbox_unavailable_reason

__all__ = [
    "DEFAULT_PATH",
    "KEPT_CAPABILITIES",
    "CommandResult",
    "ResourceUsage",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "sandbox_unavailable_reason",
]
