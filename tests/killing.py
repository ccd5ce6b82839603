"""Kill a real CLI process with SIGKILL once a stream's checkpoint reaches given task counts."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Sequence


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not), from ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def checkpointed_tasks(checkpoint: Path) -> int:
    """Tasks the checkpoint covers (0 before the first; -1 while it is being replaced)."""
    from tokenworth_agent.storage.checkpoint import load_checkpoint

    try:
        state = load_checkpoint(checkpoint)
    except Exception:  # being replaced right now: look again
        return -1
    return state["next_index"] if state else 0


class Watched:
    """A value read from a file (``read(path)``), read again only when the file changed (another inode, size or
    time; a missing file always reads again), or when ``valid`` refused the last value (caught mid-write). For
    polls every few milliseconds: a stat takes microseconds, reading a records file or unpickling a checkpoint
    about as long as the poll interval, and the file changes once per task (an append, or a new file renamed
    over it), so every change is seen."""

    def __init__(self, path: Path, read: Callable[[Path], Any], valid: Callable[[Any], bool] = lambda _: True):
        self.path, self.read, self.valid, self.stamp, self.value = path, read, valid, None, None

    def get(self) -> Any:
        try:
            st = os.stat(self.path)
            stamp: tuple[int, ...] | None = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except FileNotFoundError:
            stamp = None
        if stamp is None or stamp != self.stamp:
            self.value = self.read(self.path)
            self.stamp = stamp if self.valid(self.value) else None
        return self.value


def kill_at(cmd: Sequence[str], checkpoint: Path, points: Sequence[int], deadline_s: float = 240) -> None:
    """Start ``cmd`` once per point and SIGKILL it when ``checkpoint`` covers that many tasks."""
    for at in points:
        proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + deadline_s
        seen = Watched(checkpoint, checkpointed_tasks, valid=lambda tasks: tasks >= 0)
        while seen.get() < at:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "kill point not reached in time"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
