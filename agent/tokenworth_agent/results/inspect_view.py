"""``tokenworth view RUN``: a run's Inspect logs in Inspect's own viewer, or as a static site to share.

Both first bring the run's logs up to date (:func:`tokenworth_agent.results.inspect_export.export_run`:
only streams whose records changed are rewritten), then

* :func:`serve` starts Inspect View (``inspect view start``, run as ``python -m inspect_ai``) on the logs
  folder, waits until it answers, says its address, and runs until Ctrl-C (or the viewer exits);
* :func:`bundle` writes the static site of ``inspect view bundle`` (:func:`inspect_ai.log.bundle_log_dir`)
  into a new folder. The site reads its logs with HTTP range requests, so serve it from a host that answers
  them (any web server or static host does; Python's ``http.server`` does not).

Decision: a bundle folder that exists is replaced only when it is a bundle this command wrote (it holds
:data:`BUNDLE_MARK`); any other existing folder is refused, since tokenworth never deletes what it did
not write.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from tokenworth_agent.results.inspect_export import INSTALL_HINT, ExportError, ExportResult, export_run

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7575  # Inspect View's own default
BUNDLE_MARK = ".tokenworth-bundle"
START_TIMEOUT_S = 120.0


def _logs(run: Path, out: Path | None, say: Callable[[str], None]) -> ExportResult:
    result = export_run(run, out, say=say)
    if result.kept and not result.written:
        say(f"{result.out}: {len(result.kept)} logs, up to date")
    return result


def bundle(run: str | Path, destination: str | Path, *, out: str | Path | None = None,
           say: Callable[[str], None] = print) -> Path:
    """Export ``run`` if needed, then write Inspect View's static site of its logs into ``destination``."""
    try:
        from inspect_ai.log import bundle_log_dir
    except ImportError:
        raise ExportError(f"the viewer needs inspect_ai; {INSTALL_HINT}") from None
    result = _logs(Path(run), None if out is None else Path(out), say)
    destination = Path(destination)
    logs = result.out.resolve()
    if destination.resolve() == logs or logs in destination.resolve().parents:
        raise ExportError(f"--bundle {destination} is inside the logs folder {result.out}; pass a folder outside it")
    if destination.exists():
        if not (destination / BUNDLE_MARK).is_file():
            raise ExportError(f"--bundle {destination} already exists and is not a bundle tokenworth wrote; pass a new "
                              "folder")
        shutil.rmtree(destination)
    bundle_log_dir(log_dir=logs.as_posix(), output_dir=destination.as_posix())
    (destination / BUNDLE_MARK).write_text(f"Inspect View bundle of {Path(run).resolve()}\n", encoding="utf-8")
    return destination


def _answering(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve(run: str | Path, *, out: str | Path | None = None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          say: Callable[[str], None] = print) -> int:
    """Export ``run`` if needed, start Inspect View on its logs, say the address, and wait; the viewer's exit code."""
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        raise ExportError(f"the viewer needs inspect_ai; {INSTALL_HINT}") from None
    result = _logs(Path(run), None if out is None else Path(out), say)
    if _answering(host, port):
        raise ExportError(f"port {port} on {host} is already in use; pass --port another port")
    command = [sys.executable, "-m", "inspect_ai", "view", "start", "--log-dir", str(result.out.resolve()),
               "--host", host, "--port", str(port), "--log-level", "warning"]
    viewer = subprocess.Popen(command, env={**os.environ, "INSPECT_LOG_DIR": str(result.out.resolve())})
    # a SIGTERM (a service manager, `timeout`) stops the viewer too, as Ctrl-C does, never leaving it behind
    main = threading.current_thread() is threading.main_thread()  # only the main thread may set a handler
    previous = signal.signal(signal.SIGTERM, _raise_interrupt) if main else None
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answering(host, port):
            if viewer.poll() is not None:
                raise ExportError(f"Inspect View stopped before it answered on {host}:{port} (exit code "
                                  f"{viewer.returncode}); its output is above")
            if time.monotonic() > deadline:
                raise ExportError(f"Inspect View did not answer on {host}:{port} within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.2)
        say(f"Inspect View of {run}: http://{host}:{port}/  (logs in {result.out}; Ctrl-C stops it)")
        return viewer.wait()
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        if viewer.poll() is None:
            viewer.terminate()
            try:
                viewer.wait(timeout=10)
            except subprocess.TimeoutExpired:
                viewer.kill()
                viewer.wait()


__all__ = ["bundle", "serve", "BUNDLE_MARK", "DEFAULT_HOST", "DEFAULT_PORT"]
