"""PID 1 of a sandbox. Python 3.11 stdlib only: it runs on the sandbox's own python3.

Shipped as package data and passed to the set-up script as text; see box.py.
"""
import json, os, select, signal, socket, sys


def send(sock, obj):
    try:
        sock.send(json.dumps(obj).encode())
    except OSError:
        os._exit(0)


def spawn(req, out_fd):
    pid = os.fork()
    if pid:
        return pid
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)  # Python ignores SIGPIPE; bash must not
        os.setsid()
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


def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    try:
        os.close(int(sys.argv[2]))  # the program text
    except OSError:
        pass
    try:  # not ptrace-able, and /proc/1/environ etc. stay private
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
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
                send(sock, {"started": pid})
            else:
                send(sock, {"error": "bad request"})
            for fd in fds:
                os.close(fd)
            reap(sock, ours)


if __name__ == "__main__":
    main()
