"""The sandbox's seccomp policy, compiled to BPF by libseccomp (through ``pyseccomp``).

The policy is an allow-list, like Docker's default profile: every system call that
libseccomp knows on this machine's architecture is allowed except those in
:data:`DENIED`, and a call libseccomp does not know (one newer than the library) fails
with EPERM, Docker's default answer. A few calls are allowed only with safe arguments:

* ``clone`` without any namespace flag (so no new user namespace through clone);
  ``clone3``, whose flags sit in memory where a filter cannot read them, fails with
  ENOSYS, so the C library falls back to ``clone``, as under Docker;
* ``socket`` for every family except AF_VSOCK (talks to the hypervisor);
* ``personality`` only with the harmless personas Docker allows.

:data:`DENIED` holds every call that Docker's default profile refuses to a container
without CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_SYS_MODULE, CAP_SYS_TIME, ... (the
capabilities the sandbox drops), plus io_uring, which containerd has refused by default
since 2023. The filter is for the native architecture only: a 32-bit or x32 system
call is killed (Docker would translate the policy to those ABIs; no task needs them).

The host compiles the filter once per process; PID 1 of the sandbox loads the bytes
(see holder.py), the same split as bubblewrap's ``--seccomp FD``.
"""

from __future__ import annotations

import functools
import tempfile

from tokenworth_agent.sandbox.base import SandboxError

DENIED: dict[str, tuple[str, ...]] = {
    "keyrings (shared with the host kernel)": ("add_key", "request_key", "keyctl"),
    "namespaces": ("unshare", "setns"),
    "mounts": (
        "mount", "umount", "umount2", "pivot_root", "mount_setattr", "move_mount", "open_tree",
        "fsopen", "fsconfig", "fsmount", "fspick",
    ),
    "the kernel itself": (
        "kexec_load", "kexec_file_load", "reboot", "init_module", "finit_module", "delete_module",
        "create_module", "query_module", "get_kernel_syms", "acct", "swapon", "swapoff", "quotactl",
        "quotactl_fd", "lookup_dcookie", "nfsservctl", "_sysctl", "sysfs", "ustat", "uselib",
        "syslog", "vhangup", "sethostname", "setdomainname",
    ),
    "tracing and other processes' memory": (
        "bpf", "perf_event_open", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
        "pidfd_getfd", "process_madvise", "fanotify_init", "userfaultfd", "open_by_handle_at",
    ),
    "clocks": ("settimeofday", "clock_settime", "stime"),
    "hardware": ("iopl", "ioperm", "vm86", "vm86old"),
    "NUMA memory placement": (
        "get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node", "move_pages", "migrate_pages",
    ),
    "io_uring": ("io_uring_setup", "io_uring_enter", "io_uring_register"),
    "never implemented": ("afs_syscall", "getpmsg", "putpmsg", "security", "tuxcall", "vserver"),
}

# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (Docker's mask).
CLONE_NAMESPACE_FLAGS = 0x7E020000
AF_VSOCK = 40
# PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32, and 0xffffffff (query only).
ALLOWED_PERSONAS = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
_CONDITIONAL = ("clone", "clone3", "socket", "personality")
_EPERM, _ENOSYS = 1, 38
_MAX_SYSCALL = 1024  # above every native syscall number on the architectures Linux has


def denied_names() -> frozenset[str]:
    return frozenset(name for names in DENIED.values() for name in names)


@functools.lru_cache(maxsize=1)
def compile_filter() -> bytes:
    """The policy as a BPF program (struct sock_filter[]) for this architecture."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError, RuntimeError) as exc:  # pyseccomp raises RuntimeError without libseccomp
        raise SandboxError(
            f"cannot load libseccomp ({exc}); install the libseccomp2 system package "
            "(make setup does) and the pyseccomp Python package"
        ) from exc
    denied = denied_names()
    flt = sc.SyscallFilter(sc.ERRNO(_EPERM))
    for number in range(_MAX_SYSCALL):
        try:
            name = sc.resolve_syscall(sc.Arch.NATIVE, number).decode()
        except ValueError:
            continue
        if name in denied or name in _CONDITIONAL:
            continue
        flt.add_rule(sc.ALLOW, number)
    flt.add_rule(sc.ALLOW, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_NAMESPACE_FLAGS, 0))
    flt.add_rule(sc.ERRNO(_ENOSYS), "clone3")
    flt.add_rule(sc.ALLOW, "socket", sc.Arg(0, sc.NE, AF_VSOCK))
    for persona in ALLOWED_PERSONAS:
        flt.add_rule(sc.ALLOW, "personality", sc.Arg(0, sc.EQ, persona))
    with tempfile.TemporaryFile() as out:
        flt.export_bpf(out)
        out.seek(0)
        program = out.read()
    if not program or len(program) % 8:
        raise SandboxError(f"libseccomp exported a malformed filter ({len(program)} bytes)")
    return program


def unavailable_reason() -> str | None:
    """Why the filter cannot be built here, or None."""
    try:
        compile_filter()
    except SandboxError as exc:
        return str(exc)
    return None
