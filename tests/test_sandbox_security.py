"""Hostile commands inside the sandbox leave the host exactly as it was.

Each test snapshots host state (checksums and listings of system files, the project
checkout and a canary directory) before and after, and compares. Destructive
commands are guarded in the same shell line by a check that the host is not
visible, so a broken sandbox fails the test instead of wiping the machine.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from agent.envs.sandbox import Sandbox, SandboxLimits, sandbox_unavailable_reason

pytestmark = pytest.mark.skipif(
    sandbox_unavailable_reason() is not None, reason=f"OS sandbox unavailable: {sandbox_unavailable_reason()}"
)

REPO = Path(__file__).resolve().parent.parent
WATCHED_FILES = ["/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/hosts", "/etc/hostname"]
# Names only: other processes on the host may legitimately touch these while we run.
WATCHED_LISTINGS = ["/usr/bin", "/usr/sbin", "/root", "/home", "/etc", "/var/log", str(REPO)]


def _digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return "absent"


def _listing(directory: str) -> list[str]:
    return sorted(os.listdir(directory))


def _tree_digest(directory: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        h.update(str(path.relative_to(directory)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture
def canary(tmp_path_factory):
    """A host directory with files the sandbox must neither see nor change."""
    root = tmp_path_factory.mktemp("tokenworth-canary")
    (root / "secret.txt").write_text("host secret\n")
    (root / "sub").mkdir()
    (root / "sub" / "data.bin").write_bytes(os.urandom(1024))
    return root


@pytest.fixture
def host_snapshot(canary):
    """Take a snapshot now; call the returned function to assert nothing changed."""

    def take():
        return {
            "files": {f: _digest(f) for f in WATCHED_FILES},
            "listings": {d: _listing(d) for d in WATCHED_LISTINGS if os.path.isdir(d)},
            "canary": _tree_digest(canary),
            "pyproject": _digest(str(REPO / "pyproject.toml")),
        }

    before = take()

    def assert_unchanged():
        assert take() == before

    return assert_unchanged


# Refuse to go on if any host path shows through: a sandbox that regressed must not
# get to run the destructive part.
def _guard(canary: Path) -> str:
    return f'[ ! -e "{canary}" ] && [ ! -e "{REPO}" ] && [ ! -e /work ] || {{ echo HOST-VISIBLE; exit 99; }}; '


@pytest.mark.parametrize("wipe", ["rm -rf --no-preserve-root /", "rm -rf / ; rm -rf /* /.[!.]*"])
def test_rm_rf_root_inside_leaves_host_intact(wipe, canary, host_snapshot):
    with Sandbox() as box:
        result = box.run(_guard(canary) + wipe + "; ls / ; echo wiped", timeout=60)
        assert "HOST-VISIBLE" not in result.output
        assert "wiped" in result.output
        # the sandbox's own files are gone; only mount points it cannot remove remain
        after = box.run("ls /usr/bin | head -1", timeout=10)
        assert after.exit_code != 0  # even bash is gone inside
    host_snapshot()
    assert Path("/usr/bin/bash").exists() and subprocess.run(["true"]).returncode == 0


def test_writes_to_host_paths_stay_inside(canary, host_snapshot):
    script = _guard(canary) + """
        echo 'evil:x:0:0::/root:/bin/bash' >> /etc/passwd
        echo 'evil::0:0:99999:7:::' >> /etc/shadow
        echo '#!/bin/sh' > /usr/bin/tw-evil && chmod +x /usr/bin/tw-evil
        rm -f /usr/bin/ls /usr/sbin/useradd
        echo pwned > /root/tw-evil
        mkdir -p /home/tw-evil /var/log/tw-evil
        mkdir -p /work/main && echo pwned > /work/main/pyproject.toml
        mkdir -p "CANARY/sub" && echo pwned > "CANARY/secret.txt" && rm -f "CANARY/sub/data.bin"
        echo pwned > /tmp/tw-evil
        grep -c evil /etc/passwd; test -x /usr/bin/tw-evil && echo written
    """.replace("CANARY", str(canary))
    with Sandbox() as box:
        result = box.run(script, timeout=30)
        assert "HOST-VISIBLE" not in result.output
        assert "written" in result.output  # the writes did happen, inside
    host_snapshot()
    assert not Path("/usr/bin/tw-evil").exists() and Path("/usr/bin/ls").exists()
    assert "evil" not in Path("/etc/passwd").read_text()


def test_host_files_are_invisible(canary):
    probe = (
        f'cat "{REPO}/pyproject.toml" 2>/dev/null && echo SEES-REPO; [ -e /work ] && echo SEES-WORK; '
        f'[ -e "{canary}" ] && echo SEES-CANARY; echo "home=$(ls -A /home) tmp=$(ls -A /tmp)"; ls -A /root; '
        "tr '\\0' ' ' < /proc/1/cmdline; echo; ps -e --no-headers | wc -l"
    )
    with Sandbox() as box:
        result = box.run(probe, timeout=10)
    assert "SEES-" not in result.output and "tokenworth-jax" not in result.output
    lines = result.output.splitlines()
    assert lines[0] == "home= tmp="  # fresh /home and /tmp
    assert lines[1:3] == [".bashrc", ".profile"]  # a fresh /root with the skeleton files only
    assert lines[3].startswith("/usr/bin/python3 -I -S /dev/fd/")  # PID 1 is the sandbox's init
    assert int(lines[4]) <= 4  # init, the shell, ps, wc: no host process is visible


def test_fork_bomb_is_bounded_and_cleaned_up(host_snapshot):
    limits = SandboxLimits(pids_max=64)
    box = Sandbox(limits).start()
    try:
        started = time.monotonic()
        result = box.run(":(){ :|:& };:", timeout=5)
        assert time.monotonic() - started < 6
        time.sleep(1)  # let the bomb press against the limit
        counts = [int((d / "pids.current").read_text()) for d in box._cgroup.dirs if (d / "pids.current").exists()]
        assert counts and max(counts) <= 64
        assert subprocess.run(["true"]).returncode == 0  # the host can still fork
        cgroup = box._cgroup
    finally:
        started = time.monotonic()
        box.close()
    assert time.monotonic() - started < 10
    assert all(not d.exists() for d in cgroup.dirs)
    assert result.timed_out or result.exit_code is not None
    host_snapshot()


def test_memory_is_bounded():
    with Sandbox(SandboxLimits(memory_bytes=128 << 20)) as box:
        hog = box.run("python3 -c \"x = b'x' * (512 << 20); print('allocated')\"", timeout=20)
        assert "allocated" not in hog.output and hog.exit_code != 0
        assert box.run("echo alive", timeout=10).output == "alive\n"


def test_no_network_beyond_own_loopback():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        with Sandbox() as box:
            links = box.run("ip -o link show | awk -F': ' '{print $2}'", timeout=10)
            assert links.output.split() == ["lo"]
            host_port = box.run(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED", timeout=10)
            assert "CONNECTED" not in host_port.output and host_port.exit_code != 0
            outside = box.run(
                "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\"", timeout=10
            )
            assert outside.exit_code != 0 and "unreachable" in outside.output.lower()
    finally:
        listener.close()


def test_privileged_operations_are_refused():
    script = (
        "mknod /tmp/disk b 254 0 && echo MKNOD-OK; "
        "mount -t tmpfs x /mnt && echo MOUNT-OK; "
        "echo 1 > /proc/sys/vm/drop_caches && echo SYSCTL-OK; "
        "ls /dev | tr '\\n' ' '"
    )
    with Sandbox() as box:
        result = box.run(script, timeout=10)
    for marker in ("MKNOD-OK", "MOUNT-OK", "SYSCTL-OK"):
        assert marker not in result.output
    assert "vda" not in result.output and "sda" not in result.output


def test_all_processes_are_gone_after_close():
    marker = "1234.5678"  # an argument no other process uses
    box = Sandbox().start()
    box.run(f"sleep {marker} >/dev/null 2>&1 & nohup setsid sleep {marker} >/dev/null 2>&1 & echo ok", timeout=10)
    seen = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split()
    assert len(seen) == 2  # the host does see them while the sandbox lives
    box.close()
    box.close()  # idempotent
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split()
    assert left == []
    assert box._mount_point is not None and not os.path.exists(box._mount_point)
