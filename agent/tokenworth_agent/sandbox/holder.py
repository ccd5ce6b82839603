"""PID 1 of a sandbox. Python 3.11 stdlib only: it runs on the sandbox's own python3.

Shipped as package data; the set-up script (setup.sh) writes it into the sandbox's
private tmpfs, outside the new root, and runs it as ``python3 -I -S /dev/fd/P FD P
STAGE``. FD is the inherited SOCK_SEQPACKET socket to the host, P the descriptor
holding this program's text. Every message is one JSON object.

Stage ``enter`` (still real root of the host's user namespace, full capabilities):

1. host -> holder ``{"op": "init", "owner": uid, "nofile": [soft, hard], "caps": "+chown,..."}``.
2. PID 1 is exempted from the OOM killer (``oom_adj`` -17) where the host grants
   CAP_SYS_RESOURCE. The legacy file does not lower ``oom_score_adj_min``, so tasks
   (raised to 500 at spawn) cannot follow it below 0.
3. RLIMIT_NOFILE is set; nothing inside can raise the hard limit again.
4. It becomes ``owner``, a host uid that nothing else uses (keeping its capabilities
   for this one step), and unshares a user and a network namespace. The user namespace is owned by ``owner``, so every per-user
   kernel quota (inotify instances and watches, user namespaces, message queues...)
   that the sandbox uses is charged to ``owner`` on the host, never to host root.
5. holder -> host ``{"userns": true}``; the host writes the identity uid/gid maps
   (``0 0 4294967295``: files keep their owners, root inside is uid 0) and answers
   ``{"op": "mapped", "seccomp": <base64 BPF>}``. The filter is compiled on the host by
   libseccomp (see seccomp.py); here it is only loaded, with prctl, exactly as
   bubblewrap's ``--seccomp FD`` loads one.
6. It becomes root of the new namespace, brings up ``lo`` of the new network
   namespace, loads the filter (allowed without no_new_privs: it holds
   CAP_SYS_ADMIN in its own namespace, so setuid programs keep working, as in Docker),
   and execs ``setpriv``, which cuts the capability bounding set and execs stage ``serve``.

Stage ``serve``:
  host -> holder: ``{"op": "run", "id", "script", "cwd", "env"}`` + one fd (the output pipe)
  holder -> host: ``{"ready": true}`` | ``{"started": pid, "id": id}`` | ``{"exited": pid, "code": n}``
End of file on the socket means the host is gone: the holder exits, and with it (PID 1)
every process of the sandbox.
"""
import base64, json, os, select, signal, socket, sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_DUMPABLE = 4
PR_SET_KEEPCAPS = 8
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
# Tasks go before PID 1 (-1000 where the host allows it, else the harness's own value)
# and before host processes when memory runs out.
TASK_OOM_SCORE_ADJ = "500"


def send(sock, obj):
    try:
        sock.send(json.dumps(obj).encode())
    except OSError:
        os._exit(0)


def receive(sock):
    data = sock.recv(1 << 22)
    if not data:
        os._exit(0)
    return json.loads(data)


def die(message):
    os.write(2, ("sandbox init: %s\n" % message).encode())
    os._exit(1)


# --------------------------------------------------------------------------- stage enter


def libc():
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def unshare(flags):
    ctypes, c = libc()
    if c.unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "unshare: " + os.strerror(err))


def become_keeping_capabilities(uid):
    """setresuid(uid) but keep the capabilities, effective too. The user namespace made
    next is then owned by ``uid`` (quotas are charged to it) while its creation still
    counts as privileged, so hosts that forbid unprivileged user namespaces (Debian's
    ``unprivileged_userns_clone=0``, Ubuntu's AppArmor restriction) allow it."""
    ctypes, c = libc()

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    ulong = ctypes.c_ulong
    if c.prctl(ulong(PR_SET_KEEPCAPS), ulong(1), ulong(0), ulong(0), ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_KEEPCAPS)")
    os.setresuid(uid, uid, uid)
    header, data = Header(_LINUX_CAPABILITY_VERSION_3, 0), (Data * 2)()
    if c.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    for half in data:
        half.effective = half.permitted
    if c.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def load_seccomp(bpf):
    """Install a filter that libseccomp compiled (an array of struct sock_filter)."""
    ctypes, c = libc()

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    program = ctypes.create_string_buffer(bpf, len(bpf))
    fprog = SockFprog(len(bpf) // 8, ctypes.cast(program, ctypes.c_void_p))
    ulong = ctypes.c_ulong
    if c.prctl(ulong(PR_SET_SECCOMP), ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), ulong(0), ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "seccomp: " + os.strerror(err))


def loopback_up():
    import fcntl, struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0)))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def enter(sock, text_fd):
    import resource

    init = receive(sock)
    if init.get("op") != "init":
        die("expected the init message, got %r" % (init,))
    owner = int(init["owner"])
    try:  # needs CAP_SYS_RESOURCE, which some hosts (containers, VMs) withhold even from root
        with open("/proc/self/oom_adj", "w") as f:
            f.write("-17")
    except OSError:
        pass  # tasks still run at a higher adj than PID 1 (see spawn)
    resource.setrlimit(resource.RLIMIT_NOFILE, tuple(init["nofile"]))
    os.setgroups([])
    os.setresgid(owner, owner, owner)
    become_keeping_capabilities(owner)
    unshare(CLONE_NEWUSER | CLONE_NEWNET)
    send(sock, {"userns": True})
    mapped = receive(sock)
    if mapped.get("op") != "mapped":
        die("expected the mapped message, got %r" % (mapped,))
    os.setresgid(0, 0, 0)
    os.setgroups([0])
    os.setresuid(0, 0, 0)
    loopback_up()
    if mapped.get("seccomp"):
        load_seccomp(base64.b64decode(mapped["seccomp"]))
    fd = str(sock.fileno())
    os.execv("/usr/bin/setpriv", [
        "setpriv", "--bounding-set", "-all," + init["caps"], "--inh-caps", "-all", "--",
        "/usr/bin/python3", "-I", "-S", "/dev/fd/%d" % text_fd, fd, str(text_fd), "serve",
    ])


# --------------------------------------------------------------------------- stage serve


def spawn(req, out_fd):
    pid = os.fork()
    if pid:
        return pid
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE; bash must not
        os.setsid()
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(TASK_OOM_SCORE_ADJ)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.closerange(3, 1 << 16)
        os.chdir(req["cwd"])
        os.execve("/bin/bash", ["bash", "-c", req["script"]], req["env"])
    except BaseException as exc:
        os.write(2, ("sandbox: cannot start bash: %s\n" % exc).encode())
    os._exit(127)


def reap(sock, ours):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in ours:
            ours.discard(pid)
            code = os.waitstatus_to_exitcode(status)
            send(sock, {"exited": pid, "code": code if code >= 0 else 128 - code})


def serve(sock, text_fd):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    try:
        os.close(text_fd)  # the program text
    except OSError:
        pass
    try:  # not ptrace-able, and /proc/1/environ etc. stay private
        ctypes, c = libc()
        c.prctl(ctypes.c_ulong(PR_SET_DUMPABLE), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    except Exception:
        pass
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    ours = set()
    send(sock, {"ready": True})
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
            reap(sock, ours)
        if sock in ready:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 22, 4)
            if not msg:
                os._exit(0)
            try:
                req = json.loads(msg)
                ok = req.get("op") == "run" and len(fds) == 1
            except ValueError:
                ok = False
            if ok:
                pid = spawn(req, fds[0])
                ours.add(pid)
                send(sock, {"started": pid, "id": req.get("id")})
            else:
                send(sock, {"error": "bad request"})
            for fd in fds:
                os.close(fd)
            reap(sock, ours)


def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    text_fd, stage = int(sys.argv[2]), sys.argv[3]
    if stage == "enter":
        try:
            enter(sock, text_fd)
        except Exception as exc:
            import traceback

            where = traceback.extract_tb(exc.__traceback__)[-1]
            die("%s: %s (line %d: %s)" % (type(exc).__name__, exc, where.lineno, where.line))
    else:
        serve(sock, text_fd)


if __name__ == "__main__":
    main()
