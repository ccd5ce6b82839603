"""Real Ray nodes on this machine for the distributed tests, owned by a helper process.

``RayNodes(cpus=(1, 1))`` starts ``python tests/ray_nodes.py`` which starts a head and one node
per further entry with :class:`ray.cluster_utils.Cluster` (each a real raylet with its own node
id, object store and workers), prints the address and node ids, and then obeys lines on stdin
(``add CPUS``: one more node; ``remove I``: take node I away at once, as a crash would, its
workers with it; the head is node 0). When stdin closes (``close()``, or the test process
dying), it shuts the cluster down.
The constructor returns at once; :meth:`RayNodes.ready` waits for the cluster (so a test can do
other work while it starts). ``node_args`` (optional) are further keyword arguments for every node
(``ray._private.parameter.RayParams``), e.g. ``{"include_log_monitor": False, "no_monitor": True}``
for a test that needs neither Ray's log monitor nor its autoscaler monitor; without it, the nodes
are started exactly as before.

Why a helper process: it makes itself a child subreaper, so the processes a removed node leaves
behind (Ray's agents survive their raylet) are re-parented to it rather than to PID 1, and it
ends every one of its descendants at the end, so nothing outlives the test. It never calls
``ray stop``, which would stop every Ray process on the machine (other users' too). Everything
goes under its own ``RAY_TMPDIR`` (a short path: unix socket paths are limited to 107 bytes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]


class RayNodes:
    """The test's handle on a helper-owned cluster (see the module docstring)."""

    def __init__(self, cpus: Sequence[int] = (1, 1), env: dict[str, str] | None = None,
                 node_args: dict[str, Any] | None = None) -> None:
        env = {**(os.environ if env is None else env), "RAY_USAGE_STATS_ENABLED": "0",
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        # the nodes' workers inherit ``env`` (they import this checkout)
        argv = [sys.executable, __file__, ",".join(map(str, cpus)), json.dumps(node_args or {})]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, cwd=REPO)
        self.address = ""
        self.node_ids: list[str] = []

    def ready(self, timeout_s: float = 180.0) -> "RayNodes":
        """Wait until every node is up (once)."""
        if not self.address:
            info: dict[str, Any] = json.loads(_readline(self.proc, timeout_s))
            self.address, self.node_ids, self.started_s = info["address"], info["node_ids"], info["seconds"]
            self.tmp = Path(info["tmp"])
        return self

    def _say(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.ready()
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return _readline(self.proc, 120).strip()

    def add(self, cpus: int = 1) -> int:
        """One more node; its index."""
        self.node_ids.append(self._say(f"add {cpus}"))
        return len(self.node_ids) - 1

    def remove(self, index: int) -> None:
        assert self._say(f"remove {index}") == "removed"

    def driver_log(self, pid: int, chars: int = 3000) -> str:
        """The end of the Ray core log of the driver process ``pid`` (where Ray's C++ core writes a crash's
        stack), or "" if it has none: for a failed test's message, before ``close`` removes the folder."""
        if not self.address:
            return ""
        found = sorted({path.resolve() for path in self.tmp.glob(f"ray/session_*/logs/python-core-driver-*_{pid}.log")})
        return "".join(f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}" for path in found)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        raise RuntimeError(f"the Ray helper did not answer in {timeout_s:.0f} s (exit {proc.poll()})")
    return line


# ------------------------------------------------------------------------- the helper process
def _descendants(*roots: int) -> list[int]:
    """Every process below ``roots`` (this helper by default)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, frontier = [], list(roots or (os.getpid(),))
    while frontier:
        frontier = [c for f in frontier for c in children.get(f, [])]
        found += frontier
    return found


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _end_descendants(grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, every descendant of this helper; reap them all."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal_all(_descendants(), sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            except ChildProcessError:
                return
            time.sleep(0.1)


def _serve(cpus: list[int], node_args: dict[str, Any]) -> None:
    import ctypes
    import shutil
    import tempfile

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    tmp = tempfile.mkdtemp(prefix="twr", dir="/tmp")
    os.environ["RAY_TMPDIR"] = tmp
    try:
        from ray.cluster_utils import Cluster

        started = time.perf_counter()
        cluster = Cluster(initialize_head=True, connect=False,
                          head_node_args={"num_cpus": cpus[0], "include_dashboard": False, **node_args})
        nodes = [cluster.head_node, *(cluster.add_node(num_cpus=n, **node_args) for n in cpus[1:])]
        cluster.wait_for_nodes()
        print(json.dumps({"address": cluster.address, "node_ids": [n.node_id for n in nodes], "tmp": tmp,
                          "seconds": round(time.perf_counter() - started, 1)}), flush=True)
        for line in sys.stdin:
            command, _, argument = line.strip().partition(" ")
            if command == "add":
                nodes.append(cluster.add_node(num_cpus=int(argument), **node_args))
                cluster.wait_for_nodes()
                print(nodes[-1].node_id, flush=True)
            elif command == "remove":
                node = nodes[int(argument)]
                # A crash takes the whole machine: the node's workers too, which outlive a killed raylet
                # (they notice it only at their next call into Ray, and may finish a stream first).
                own = [info.process.pid for infos in node.all_processes.values() for info in infos]
                doomed = own + _descendants(*own)
                cluster.remove_node(node, allow_graceful=False)
                _signal_all(doomed, signal.SIGKILL)
                print("removed", flush=True)
        try:
            cluster.shutdown()
        except Exception:  # noqa: BLE001 - a removed head: the processes are ended below anyway
            pass
    finally:
        _end_descendants()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _serve([int(c) for c in sys.argv[1].split(",")], json.loads(sys.argv[2]))
