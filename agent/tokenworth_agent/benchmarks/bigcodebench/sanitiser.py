"""The judge's sanitiser on the host: which solution a reply holds, without a sandbox.

A verdict is a function of the *sanitised* solution (:mod:`tokenworth_agent.benchmarks.bigcodebench.verdicts`), so a
reply whose solution has been tested for its task needs no new sandbox: only the sanitiser's answer.
Asking the sandboxed runner for it costs a sandbox and the evaluator's import (about 0.7 s on 2 cores),
which was most of a BigCodeBench run once its verdict file was warm (11 streams write the same few
solutions in different prose). :class:`Sanitiser` keeps one process of the evaluation venv that runs
the runner's own sanitising code (``sanitise_server.py``) for every reply.

**Why this may run outside the sandbox.** Sanitising is parsing: ``bigcodebench.sanitize`` reads the
reply with tree-sitter and ``ast`` and returns a substring of it; nothing of the reply runs, as when
the harness extracts SQL from a DB reply on the host. The solution itself still only ever runs in the
sandbox, which sanitises it again.

**Never a verdict of its own.** The host only uses the answer to look up a verdict already reached
for that task and solution. A server that cannot start, dies, answers late (:data:`TIMEOUT`) or
cannot sanitise a reply gives ``None``, and the judge takes the sandbox path as before; a dead or
late server is started again for the next reply.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from tokenworth_agent.benchmarks.bigcodebench.eval_venv import EvalVenv
from tokenworth_agent.sandbox import DEFAULT_PATH

SERVER = resources.files(__package__).joinpath("sanitise_server.py").read_text()
TIMEOUT = 20.0  # seconds for one answer (a cold start imports tree-sitter; a reply is a few ms)


class Sanitised(NamedTuple):
    solution: str
    defines_entry_point: bool


class Sanitiser:
    """One sanitiser process of ``venv`` (started on first use), answering one reply at a time. Thread-safe."""

    def __init__(self, venv: EvalVenv, runner: str, timeout: float = TIMEOUT) -> None:
        self.venv = venv
        self.runner = runner  # the runner's text: the server loads exactly the code the sandbox runs
        self.timeout = timeout
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._buffer = b""
        self.failures = 0  # starts or answers that failed (each fell back to the sandbox)

    def sanitise(self, reply: str, entry_point: str) -> Sanitised | None:
        """The solution the sandboxed runner would test for ``reply``, or None where this cannot say."""
        with self._lock:
            try:
                proc = self._ensure()
                assert proc.stdin is not None
                proc.stdin.write((json.dumps({"reply": reply, "entry_point": entry_point}) + "\n").encode())
                proc.stdin.flush()
                answer = self._answer(proc)
            except (OSError, ValueError, TimeoutError):
                self._stop()
                self.failures += 1
                return None
        if "solution" not in answer:
            return None
        return Sanitised(str(answer["solution"]), bool(answer.get("defines_entry_point")))

    def close(self) -> None:
        with self._lock:
            self._stop()

    # ------------------------------------------------------------------ internals
    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._stop()
        self._folder = tempfile.TemporaryDirectory(prefix="tokenworth-bcb-sanitise-")
        folder = Path(self._folder.name)
        (folder / "runner.py").write_text(self.runner, encoding="utf-8")
        (folder / "server.py").write_text(SERVER, encoding="utf-8")
        env = {"PATH": f"{self.venv.python.parent}:{DEFAULT_PATH}", "LC_ALL": "C.UTF-8", "HOME": str(folder)}
        self._proc = subprocess.Popen([str(self.venv.python), "-I", str(folder / "server.py"), str(folder / "runner.py")],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      cwd=folder, env=env, start_new_session=True)
        ready = self._answer(self._proc)
        if not ready.get("ready"):
            raise OSError(f"the sanitiser did not start: {ready.get('error')}")
        return self._proc

    def _answer(self, proc: subprocess.Popen[bytes]) -> dict:
        """The server's next line, within :attr:`timeout`."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], self.timeout)
            if not ready:
                raise TimeoutError("the sanitiser did not answer")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise OSError("the sanitiser exited")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _stop(self) -> None:
        proc, self._proc, self._buffer = self._proc, None, b""
        if proc is not None:
            proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None


__all__ = ["Sanitiser", "Sanitised", "SERVER", "TIMEOUT"]
