"""Kill a real CLI process with SIGKILL once a stream's checkpoint reaches given task counts."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence


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


class _Seen:
    """:func:`checkpointed_tasks`, read again only when the checkpoint's file changed (another inode, size or time):
    unpickling a checkpoint takes a few milliseconds, about as long as :func:`kill_at`'s poll interval, and the file
    changes once per task. Its replacement is atomic (a new file renamed over it), so every write is seen."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint, self.stamp, self.count = checkpoint, None, 0

    def tasks(self) -> int:
        try:
            st = os.stat(self.checkpoint)
            stamp: tuple[int, ...] | None = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except FileNotFoundError:
            stamp = None
        if stamp is None or stamp != self.stamp:
            self.count = checkpointed_tasks(self.checkpoint)
            self.stamp = stamp if self.count >= 0 else None  # caught mid-replacement: read again next time
        return self.count


def kill_at(cmd: Sequence[str], checkpoint: Path, points: Sequence[int], deadline_s: float = 240) -> None:
    """Start ``cmd`` once per point and SIGKILL it when ``checkpoint`` covers that many tasks."""
    for at in points:
        proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + deadline_s
        seen = _Seen(checkpoint)
        while seen.tasks() < at:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "kill point not reached in time"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
