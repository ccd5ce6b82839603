"""Whether a node sees the run folder as the driver does: one plain function, run on every node by the Ray
executor (``ray_cluster.check_storage``) and importable without Ray (its tests run it in the test process)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def storage_probe(out: str, config_digest: str, lock: str) -> str | None:
    """On one node: None when it sees the run folder as the driver does and the driver's lock is held
    for it too; else what is wrong."""
    import fcntl

    path = Path(out) / "config.json"
    try:
        seen = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        return f"does not see {path} ({exc.strerror})"
    if seen != config_digest:
        return f"sees another {path} than the driver (a local folder at the same path?)"
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError as exc:
        return f"cannot open {lock} ({exc.strerror})"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return None  # held by the driver, as it should be
    finally:
        os.close(fd)  # releases the lock if this probe got it
    return f"could lock {lock} while the driver holds it: its file locks are not shared with the driver's"


__all__ = ["storage_probe"]
