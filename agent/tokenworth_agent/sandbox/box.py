"""The :class:`Sandbox` host class: launch, talk to PID 1, collect output, tear down."""

from __future__ import annotations

import base64
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Callable, Mapping, Sequence

from tokenworth_agent.sandbox.base import (
    _HOST_TOOLS, DEFAULT_PATH, KEPT_CAPABILITIES, CommandResult, ResourceUsage, SandboxError, SandboxLimits,
)
from tokenworth_agent.sandbox import leftovers, seccomp
from tokenworth_agent.sandbox.cgroups import Cgroup, sandbox_parents

# The set-up script (run as `sh -c <text>`, never by path: sh reads scripts lazily and
# the host tree is gone after pivot_root) and PID 1's program ship as package data.
_SETUP_SCRIPT = resources.files(__package__).joinpath("setup.sh").read_text()
_HOLDER_SOURCE = resources.files(__package__).joinpath("holder.py").read_text()


def sandbox_unavailable_reason() -> str | None:
    """Why sandboxes cannot run on this machine, or None when they can."""
    if os.geteuid() != 0:
        return "the OS sandbox needs root (namespaces, overlayfs, cgroups)"
    missing = [t for t in _HOST_TOOLS if not _which(t)]
    if missing:
        return f"host tools missing: {', '.join(missing)} (install util-linux and iproute2)"
    if not os.access("/usr/bin/python3", os.X_OK):
        return "/usr/bin/python3 is missing; the sandbox's init process runs on it"
    try:
        if int(Path("/proc/sys/user/max_user_namespaces").read_text()) < 1:
            return "user namespaces are disabled (sysctl user.max_user_namespaces=0); the sandbox needs one"
    except (OSError, ValueError):
        pass
    return seccomp.unavailable_reason()


def _which(tool: str) -> str | None:
    for d in DEFAULT_PATH.split(":"):
        if os.access(os.path.join(d, tool), os.X_OK):
            return os.path.join(d, tool)
    return None


# Joins the cgroups named by its arguments, then execs the rest (unshare ...), so
# everything the sandbox ever runs is counted from its first fork on.
_JOIN_CGROUPS = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 97; shift; n=$((n-1)); done; exec "$@"'

# The host uids that own the sandboxes' user namespaces: one fresh uid per sandbox, far
# above any real account or subordinate-id range, so no quota is shared with anything.
OWNER_UIDS = range(1_000_000_000, 2_000_000_000)
# Inside, uid n is host uid n: files keep their owners and root inside is uid 0.
_IDENTITY_MAP = "0 0 4294967295\n"

_UNSHARE = (
    "unshare", "--mount", "--pid", "--net", "--uts", "--ipc", "--cgroup",
    "--fork", "--kill-child", "--propagation", "private", "--",
)


class Sandbox:
    """One isolated root shell session; see the module docstring.

    ``Sandbox(...).start()`` builds it; :meth:`run` runs one script in a new
    ``bash -c``; :meth:`close` destroys it (idempotent). Usable as a context manager.
    ``limits=None`` skips the cgroup (no fork-bomb or memory bound): only for
    machines without cgroups, never for untrusted code in production.

    ``read_only_binds``: host directories shown inside at the same path, read-only,
    ``nosuid`` and ``nodev`` (e.g. an interpreter and its libraries the task runs on); nothing
    else of the host tree is visible. Each must be an existing directory named by its
    canonical absolute path, outside the trees the sandbox builds itself (``/proc``,
    ``/sys``, ``/dev``). Only that directory is bound, not the mounts below it.

    ``teardown_timeout``: how long :meth:`close` keeps killing what is left in the cgroup
    before it gives up (a fork bomb's hundreds of processes can take seconds to die on a
    loaded machine).
    """

    def __init__(
        self,
        limits: SandboxLimits | None = SandboxLimits(),
        *,
        hostname: str = "sandbox",
        output_cap_bytes: int = 8 << 20,
        start_timeout: float = 20.0,
        teardown_timeout: float = 30.0,
        read_only_binds: Sequence[str | os.PathLike[str]] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read_only_binds = checked_binds(read_only_binds)
        self.teardown_timeout = teardown_timeout
        self.limits = limits
        self.hostname = hostname
        self.output_cap_bytes = output_cap_bytes
        self.start_timeout = start_timeout
        self.clock = clock  # seconds; every deadline (start-up, commands) is measured on it
        self._requests = 0
        self.env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOSTNAME": hostname, "HOME": "/root"}
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._cgroup: Cgroup | None = None
        self._mount_point: str | None = None
        self._holder_pid: int | None = None
        self._holder_fd: int | None = None  # a pidfd: readable once PID 1 has exited
        self._seccomp = b""
        self.owner_uid = OWNER_UIDS.start + secrets.randbelow(len(OWNER_UIDS))
        self._log = None
        self._drains: list[threading.Thread] = []
        self._closed = False

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> "Sandbox":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> "Sandbox":
        if self._proc is not None or self._closed:
            raise SandboxError("a Sandbox can be started once; make a new one per task")
        reason = sandbox_unavailable_reason()
        if reason:
            raise SandboxError(reason)
        try:
            self._launch()
            self._await_ready()
        except BaseException:
            self.close()
            raise
        return self

    def _launch(self) -> None:
        leftovers.sweep_once(sandbox_parents)
        limits = self.limits or SandboxLimits()
        self._seccomp = seccomp.compile_filter()
        self._mount_point = tempfile.mkdtemp(prefix=f"{leftovers.TEMP_PREFIX}{leftovers.owner_tag()}-")
        self._cgroup = Cgroup.create(self.limits) if self.limits is not None else None
        procs = self._cgroup.procs_files if self._cgroup else []
        host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        host_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
        self._sock = host_end
        self._log = tempfile.TemporaryFile(prefix="tokenworth-sandbox-log-")
        command = [
            "/bin/sh", "-c", _JOIN_CGROUPS, "sh", str(len(procs)), *procs, *_UNSHARE,
            "/bin/sh", "-c", _SETUP_SCRIPT, "sandbox-setup", self._mount_point,
            str(limits.tmpfs_bytes), self.hostname, str(sandbox_end.fileno()), _HOLDER_SOURCE,
            "\n".join(self.read_only_binds),
        ]
        try:
            self._proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                pass_fds=(sandbox_end.fileno(),), env={"PATH": DEFAULT_PATH, "LC_ALL": "C"},
                start_new_session=True,
            )
        finally:
            sandbox_end.close()
        self._send({
            "op": "init", "owner": self.owner_uid, "nofile": list(limits.open_files),
            "caps": ",".join(f"+{c}" for c in KEPT_CAPABILITIES),
        })

    def _await_ready(self) -> None:
        """Answer PID 1's user-namespace hand-shake (see holder.py), then wait for ready."""
        deadline = self.clock() + self.start_timeout
        message = self._receive(deadline)
        if message != {"userns": True}:
            raise SandboxError(f"the sandbox did not start: {self._setup_log() or message}")
        self._holder_pid = self._find_holder()
        self._holder_fd = os.pidfd_open(self._holder_pid)
        if _parent_pid(self._holder_pid) != self._proc.pid:  # the pid was recycled before pidfd_open
            raise SandboxError("the sandbox's init process exited during start-up")
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{self._holder_pid}/{name}").write_text(_IDENTITY_MAP)
        self._send({"op": "mapped", "seccomp": base64.b64encode(self._seccomp).decode()})
        message = self._receive(deadline)
        if message != {"ready": True}:
            raise SandboxError(f"the sandbox did not start: {self._setup_log() or message}")

    def _send(self, message: dict) -> None:
        assert self._sock is not None
        try:
            self._sock.send(json.dumps(message).encode())
        except OSError as exc:
            raise SandboxError(f"cannot reach the sandbox's init process: {exc}. {self._setup_log()}".strip()) from exc

    def _setup_log(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace").strip()

    def _find_holder(self) -> int:
        """Host pid of the sandbox's PID 1: the one child of the unshare process."""
        assert self._proc is not None
        candidates = self._cgroup.pids() if self._cgroup else [int(p) for p in os.listdir("/proc") if p.isdigit()]
        for pid in candidates:
            if _parent_pid(pid) == self._proc.pid:
                return pid
        raise SandboxError("the sandbox started but its init process cannot be found")

    def close(self) -> None:
        """Kill every process of the sandbox and remove all it left. Safe to repeat."""
        if self._closed:
            return
        self._closed = True
        errors = []
        proc = self._proc
        if proc is not None:
            # Killing PID 1 makes the kernel kill the whole PID namespace. The pidfd
            # names exactly that process, even if its pid were recycled.
            if self._holder_fd is not None:
                try:
                    signal.pidfd_send_signal(self._holder_fd, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()  # --kill-child takes the namespace with it
                proc.wait()
        if self._sock is not None:
            self._sock.close()
        if self._holder_fd is not None:
            os.close(self._holder_fd)
        if self._cgroup is not None:
            try:
                self._cgroup.remove(self.teardown_timeout)
            except SandboxError as exc:
                errors.append(str(exc))
        for drain in self._drains:
            drain.join(timeout=2)
        if self._mount_point is not None:
            try:
                os.rmdir(self._mount_point)  # the tmpfs on it lived in the namespace only
            except OSError as exc:
                errors.append(f"cannot remove {self._mount_point}: {exc}")
        if self._log is not None:
            self._log.close()
        if errors:
            raise SandboxError("; ".join(errors))

    def usage(self) -> ResourceUsage:
        """Peak memory and OOM kills so far, from the sandbox's cgroup (read it before :meth:`close`,
        which removes the cgroup); all ``None`` without a cgroup."""
        if self._cgroup is None:
            return ResourceUsage(memory_peak_bytes=None, oom_kills=None)
        return self._cgroup.usage()

    @property
    def alive(self) -> bool:
        """True while PID 1 runs (False once it died, e.g. killed, even before close)."""
        if self._proc is None or self._closed or self._holder_fd is None:
            return False
        exited, _, _ = select.select([self._holder_fd], [], [], 0)
        return not exited and self._proc.poll() is None

    # ---------------------------------------------------------------- commands
    def run(self, script: str, timeout: float = 20.0, *, cwd: str = "/", env: Mapping[str, str] | None = None) -> CommandResult:
        """Run ``script`` with ``bash -c`` as root in the sandbox; wait for the shell.

        Returns when the shell exits or after ``timeout`` seconds, whichever comes
        first; a timed-out command keeps running (see the module docstring).
        """
        if not self.alive or self._sock is None:
            raise SandboxError("the sandbox is not running (not started, closed, or its init died)")
        if "\0" in script:
            raise SandboxError("the script contains a NUL byte, which bash -c cannot take")
        self._requests += 1
        request = {"op": "run", "id": self._requests, "script": script, "cwd": cwd, "env": dict(env or self.env)}
        read_end, write_end = os.pipe()
        try:
            socket.send_fds(self._sock, [json.dumps(request).encode()], [write_end])
        except OSError as exc:
            os.close(read_end)
            raise SandboxError(f"cannot reach the sandbox's init process: {exc}") from exc
        finally:
            os.close(write_end)
        return self._collect(read_end, self._requests, self.clock() + timeout)

    def _collect(self, read_end: int, request_id: int, deadline: float) -> CommandResult:
        """Read output until the shell exits; then take what is buffered and return."""
        output = _Capture(self.output_cap_bytes)
        pid: int | None = None
        code: int | None = None
        pipe_open = True
        assert self._sock is not None
        while code is None:
            remaining = deadline - self.clock()
            if remaining <= 0:
                break
            ready, _, _ = select.select([self._sock] + ([read_end] if pipe_open else []), [], [], remaining)
            if read_end in ready:
                pipe_open = output.read_from(read_end)
            if self._sock in ready:
                message = self._receive(deadline)
                if "started" in message and message.get("id") == request_id:
                    pid = message["started"]
                elif message.get("exited") == pid and pid is not None:
                    code = int(message["code"])
                elif "error" in message:
                    raise SandboxError(f"the sandbox refused the command: {message['error']}")
                # other "exited" messages belong to earlier, timed-out commands
        if code is not None and pipe_open:
            # Everything the shell wrote is in the pipe by now; take what is buffered.
            os.set_blocking(read_end, False)
            try:
                pipe_open = output.read_all_available(read_end)
            finally:
                os.set_blocking(read_end, True)
        if pipe_open:
            self._drain_in_background(read_end)
        else:
            os.close(read_end)
        return CommandResult(exit_code=code, output=output.text(), timed_out=code is None, truncated=output.truncated)

    def _receive(self, deadline: float) -> dict:
        assert self._sock is not None
        remaining = max(0.0, deadline - self.clock())
        ready, _, _ = select.select([self._sock], [], [], remaining)
        if not ready:
            raise SandboxError(f"no answer from the sandbox's init process in time. {self._setup_log()}".strip())
        try:
            data = self._sock.recv(1 << 16)
        except ConnectionResetError:  # PID 1 died with our message unread
            data = b""
        if not data:
            raise SandboxError(f"the sandbox's init process exited. {self._setup_log()}".strip())
        return json.loads(data)

    def _drain_in_background(self, read_end: int) -> None:
        """Keep reading output that background processes still write, and drop it.

        Closing the pipe instead would kill them with SIGPIPE at their next write,
        which the original (whose abandoned reader thread kept reading) never did.
        """
        def drain() -> None:
            try:
                while os.read(read_end, 1 << 16):
                    pass
            except OSError:
                pass
            finally:
                os.close(read_end)

        thread = threading.Thread(target=drain, name="sandbox-output-drain", daemon=True)
        thread.start()
        self._drains = [t for t in self._drains if t.is_alive()] + [thread]


class _Capture:
    """Output bytes up to a cap; past it, reads continue (so writers never block) but are dropped."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        self.data += chunk

    def read_from(self, fd: int) -> bool:
        """One read; False at end of file."""
        chunk = os.read(fd, 1 << 16)
        self.add(chunk)
        return bool(chunk)

    def read_all_available(self, fd: int) -> bool:
        """Read until the pipe is empty; False at end of file."""
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self.add(chunk)

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


# Trees the set-up builds itself: a bind below them would be hidden or would hide them.
_BUILT_TREES = ("/proc", "/sys", "/dev")


def checked_binds(paths: Sequence[str | os.PathLike[str]]) -> tuple[str, ...]:
    """``paths`` as the set-up script takes them, each refused with a message saying why."""
    checked = []
    for given in paths:
        path = os.fspath(given)
        if not os.path.isabs(path) or "\n" in path:
            raise SandboxError(f"read-only bind {path!r}: name a directory by its absolute path")
        if os.path.realpath(path) != path:
            raise SandboxError(f"read-only bind {path!r}: name it by its canonical path, {os.path.realpath(path)!r}")
        if not os.path.isdir(path):
            raise SandboxError(f"read-only bind {path!r}: no such directory on the host")
        if path == "/" or any(path == tree or path.startswith(tree + "/") for tree in _BUILT_TREES):
            raise SandboxError(f"read-only bind {path!r}: the sandbox builds / and {', '.join(_BUILT_TREES)} itself")
        checked.append(path)
    return tuple(checked)


def _parent_pid(pid: int) -> int | None:
    fields = leftovers.proc_stat(pid)
    return None if fields is None else int(fields[1])  # field 4
