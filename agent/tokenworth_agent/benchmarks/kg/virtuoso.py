"""A local Freebase SPARQL endpoint: OpenLink Virtuoso 7.2.5, as AgentBench's KG task used.

LAB's KG task descends from AgentBench's, whose Freebase is a Virtuoso 7.2.5 server
(dki-lab/Freebase-Setup). Debian ships that version (``virtuoso-opensource``, 7.2.5.1), so
this module drives the packaged binaries (``virtuoso-t``, ``isql-vt``): it writes a
``virtuoso.ini`` into a folder of its own, starts the server on loopback ports, bulk-loads
N-Triples/Turtle files with Virtuoso's bulk loader (``ld_add`` + ``rdf_loader_run``), and
stops it. ``tokenworth kg serve`` / ``tokenworth kg stop`` (cli.py) are thin wrappers over
:func:`serve` and :func:`stop_folder`; the tests (tests/test_kg_virtuoso.py) use
:class:`VirtuosoServer` directly.

Decisions:

* Both ports listen on 127.0.0.1 only (``ServerPort = 127.0.0.1:PORT``); nothing is exposed.
* A served folder is resumable: ``tokenworth-kg.json`` records the ports, the process, the
  dump that was loaded (path, size, mtime) and whether the load finished. A second ``serve``
  with the same folder does not reload; a different dump for a loaded folder is an error.
* ``serve`` leaves the server running in the background (its own session, so it survives
  the command) unless asked to stay in the foreground; ``stop`` shuts it down cleanly
  (ISQL ``-K``, then SIGTERM, then SIGKILL) and keeps the database for the next ``serve``.
* The DBA password of a served folder is replaced by a random one kept in the state file
  (mode 0600); a test server keeps Virtuoso's default, it lives for one pytest session.
* Everything the user can get wrong (no Virtuoso, a missing or unloadable dump, a busy
  port, a folder loaded with another dump) raises :class:`VirtuosoError` with one line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, Iterable, Sequence

DEFAULT_HTTP_PORT = 8890  # Virtuoso's own default SPARQL/HTTP port
FREEBASE_GRAPH = "http://freebase.com"  # the graph IRI of dki-lab/Freebase-Setup's load (ld_dir(..., 'http://freebase.com'))
STATE_FILE = "tokenworth-kg.json"
INI_FILE = "virtuoso.ini"
LOG_FILE = "virtuoso.log"
OUT_FILE = "virtuoso.out"
DUMP_SUFFIXES = (".nt", ".nt.gz", ".ttl", ".ttl.gz")
INSTALL_COMMAND = "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y virtuoso-opensource"
SYSTEM_SERVICE = "virtuoso-opensource-7"  # the Debian package's init script
DEFAULT_PASSWORD = "dba"


class VirtuosoError(RuntimeError):
    """Virtuoso could not be installed, started, loaded or stopped; the message is one line."""


# ----------------------------------------------------------------------------- installation


def binaries() -> tuple[str, str] | None:
    """(virtuoso-t, isql) paths, or None when Virtuoso is not installed.

    Debian names the ISQL client ``isql-vt`` (``isql`` is unixODBC's); an upstream build in
    PATH names it ``isql``, which is used only when ``isql-vt`` is absent.
    """
    server = shutil.which("virtuoso-t")
    client = shutil.which("isql-vt")
    if server and not client:
        sibling = Path(server).parent / "isql"
        client = str(sibling) if sibling.exists() else None
    return (server, client) if server and client else None


def ensure_installed(install: bool = True, echo: Callable[[str], None] = print) -> tuple[str, str]:
    """The binaries, installing Debian's package first when allowed and possible."""
    found = binaries()
    if found:
        return found
    if not install or os.geteuid() != 0 or not shutil.which("apt-get"):
        why = "not root" if os.geteuid() != 0 else ("no apt-get" if not shutil.which("apt-get") else "install disabled")
        raise VirtuosoError(f"Virtuoso is not installed ({why}); install it with: {INSTALL_COMMAND}")
    echo(f"installing Virtuoso: {INSTALL_COMMAND}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # The package's postinst starts a system-wide server unless policy-rc.d says no: say no for the
    # install (Docker images already do), then make sure it is stopped and disabled.
    policy = Path("/usr/sbin/policy-rc.d")
    temporary_policy = not policy.exists()
    if temporary_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        for command in (["apt-get", "update", "-qq"],
                        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "virtuoso-opensource"]):
            done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if done.returncode != 0:
                tail = done.stdout.strip().splitlines()[-1:] or ["no output"]
                raise VirtuosoError(f"{' '.join(command)} failed (exit {done.returncode}): {tail[0]}")
    finally:
        if temporary_policy:
            policy.unlink(missing_ok=True)
    quiet_system_service()
    found = binaries()
    if not found:
        raise VirtuosoError("virtuoso-opensource installed, but virtuoso-t/isql-vt are not in PATH")
    return found


def quiet_system_service() -> None:
    """Stop and disable the system-wide service the Debian package may have started.

    The package's postinst starts ``/etc/init.d/virtuoso-opensource-7`` on ports 1111/8890
    unless policy-rc.d forbids it; this harness runs its own servers, so the host's stays off.
    """
    if not Path(f"/etc/init.d/{SYSTEM_SERVICE}").exists():
        return
    commands = [[f"/etc/init.d/{SYSTEM_SERVICE}", "stop"]]
    if shutil.which("systemctl") and Path("/run/systemd/system").is_dir():
        commands.insert(0, ["systemctl", "disable", "--now", SYSTEM_SERVICE])
    if shutil.which("update-rc.d"):
        commands.append(["update-rc.d", SYSTEM_SERVICE, "disable"])
    for command in commands:
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


# ----------------------------------------------------------------------------- ports and processes


def port_is_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:port (and nobody listens on any address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _alive(pid: int) -> bool:
    """A running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _is_our_server(pid: int, ini: Path) -> bool:
    """The pid is a virtuoso-t started on this folder's ini (not a recycled pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and argv[0].endswith(b"virtuoso-t") and str(ini).encode() in argv


# ----------------------------------------------------------------------------- the server


def ini_text(folder: Path, http_port: int, isql_port: int, memory_mb: int, dirs_allowed: Iterable[Path]) -> str:
    """A virtuoso.ini for one folder: loopback ports, a buffer pool of ``memory_mb``.

    NumberOfBuffers counts 8 KiB pages (OpenLink's tuning guide); MaxDirtyBuffers is 3/4 of
    it, the ratio of OpenLink's sample ini. The SPARQL result cap is raised far above what a
    KG listing returns, so no answer set is cut short (the client treats a cut one as an error).
    """
    buffers = max(1000, memory_mb * 1024 // 8)
    dirs = ", ".join(dict.fromkeys([".", str(folder), *(str(d) for d in dirs_allowed)]))
    return f"""; written by tokenworth (agent/tokenworth_agent/benchmarks/kg/virtuoso.py); rewritten on every start
[Database]
DatabaseFile       = {folder}/virtuoso.db
ErrorLogFile       = {folder}/{LOG_FILE}
LockFile           = {folder}/virtuoso.lck
TransactionFile    = {folder}/virtuoso.trx
xa_persistent_file = {folder}/virtuoso.pxa
ErrorLogLevel      = 7
FileExtend         = 200
MaxCheckpointRemap = 2000
Striping           = 0
TempStorage        = TempDatabase

[TempDatabase]
DatabaseFile       = {folder}/virtuoso-temp.db
TransactionFile    = {folder}/virtuoso-temp.trx
MaxCheckpointRemap = 2000
Striping           = 0

[Parameters]
ServerPort         = 127.0.0.1:{isql_port}
DisableUnixSocket  = 1
DisableTcpSocket   = 0
ServerThreads      = 20
CheckpointInterval = 60
CaseMode           = 2
AllowOSCalls       = 0
DirsAllowed        = {dirs}
NumberOfBuffers    = {buffers}
MaxDirtyBuffers    = {buffers * 3 // 4}
MaxQueryMem        = {max(64, memory_mb // 2)}M
ThreadsPerQuery    = 2

[HTTPServer]
ServerPort           = 127.0.0.1:{http_port}
ServerThreads        = 8
MaxClientConnections = 8
Charset              = UTF-8
EnabledDavVSP        = 0

[SPARQL]
ResultSetMaxRows           = 10000000
MaxQueryCostEstimationTime = 600
MaxQueryExecutionTime      = 180
"""


@dataclasses.dataclass
class VirtuosoServer:
    """One Virtuoso process on a folder of its own, listening on 127.0.0.1 only."""

    folder: Path
    http_port: int
    isql_port: int
    password: str = DEFAULT_PASSWORD
    pid: int | None = None
    process: subprocess.Popen | None = dataclasses.field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The SPARQL endpoint, what ``--kg-endpoint`` takes."""
        return f"http://127.0.0.1:{self.http_port}/sparql"

    @property
    def ini(self) -> Path:
        return self.folder / INI_FILE

    def running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return self.pid is not None and _alive(self.pid) and _is_our_server(self.pid, self.ini)

    def start(self, memory_mb: int = 256, dirs_allowed: Sequence[Path] = (), timeout: float = 120.0,
              detach: bool = False) -> float:
        """Write the ini, start ``virtuoso-t`` and wait until SPARQL answers; returns the seconds taken.

        ``detach``: the server gets its own session and outlives this Python process.
        """
        found = binaries()
        if not found:
            raise VirtuosoError(f"Virtuoso is not installed; install it with: {INSTALL_COMMAND}")
        for port, what in ((self.http_port, "HTTP/SPARQL"), (self.isql_port, "ISQL")):
            if not port_is_free(port):
                flag = "--port" if what == "HTTP/SPARQL" else "--isql-port"
                raise VirtuosoError(f"port {port} on 127.0.0.1 (Virtuoso's {what} port) is in use; "
                                    f"choose another with {flag}")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.ini.write_text(ini_text(self.folder, self.http_port, self.isql_port, memory_mb, dirs_allowed))
        started = time.monotonic()
        with open(self.folder / OUT_FILE, "ab") as out:
            self.process = subprocess.Popen(
                [found[0], "+foreground", "+configfile", str(self.ini)], cwd=self.folder,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=detach)
        self.pid = self.process.pid
        try:
            self.wait_ready(timeout)
        except BaseException:  # not ready (or interrupted): leave no server behind
            self.process.kill()
            self.process.wait()
            raise
        return time.monotonic() - started

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        probe = self.url + "?" + urllib.parse.urlencode({"query": "ASK {}"})
        while True:
            if not self.running():
                raise VirtuosoError(f"virtuoso-t exited during start-up: {self.log_tail()}")
            try:
                with urllib.request.urlopen(probe, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise VirtuosoError(f"Virtuoso did not answer on {self.url} within {timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self) -> str:
        """The last meaningful line of the server's log (for one-line errors)."""
        for name in (LOG_FILE, OUT_FILE):
            try:
                lines = [l.strip() for l in (self.folder / name).read_text(errors="replace").splitlines() if l.strip()]
            except OSError:
                continue
            errors = [l for l in lines if "error" in l.lower() or "fatal" in l.lower() or "unable" in l.lower()]
            if errors or lines:
                return (errors or lines)[-1]
        return "no log written"

    def _isql_command(self) -> list[str]:
        found = binaries()
        if not found:
            raise VirtuosoError(f"Virtuoso is not installed; install it with: {INSTALL_COMMAND}")
        return [found[1], f"127.0.0.1:{self.isql_port}", "dba", self.password,
                "VERBOSE=OFF", "BANNER=OFF", "PROMPT=OFF", "ECHO=OFF", "ERRORS=STDOUT"]

    @staticmethod
    def _check_isql(returncode: int, output: str) -> None:
        errors = [l for l in output.splitlines() if l.startswith("*** Error")]
        if returncode != 0 or errors:
            detail = errors[0] if errors else (output.strip().splitlines() or [f"exit {returncode}"])[-1]
            raise VirtuosoError(f"Virtuoso ISQL failed: {detail.removeprefix('*** Error ')}")

    def isql(self, statements: str, timeout: float | None = None) -> str:
        """Run SQL through the ISQL client; any ``*** Error`` becomes a :class:`VirtuosoError`."""
        try:
            done = subprocess.run(self._isql_command(), input=statements, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise VirtuosoError(f"ISQL did not finish within {timeout:.0f} s") from None
        self._check_isql(done.returncode, done.stdout)
        return done.stdout

    def load(self, files: Sequence[Path], graph: str = FREEBASE_GRAPH, loaders: int = 1) -> float:
        """Bulk-load RDF files into ``graph``; returns the seconds taken. A file the loader
        rejects (bad syntax, unreadable) raises with Virtuoso's message.

        ``loaders``: how many ``rdf_loader_run()`` work at once, each on its own files (one file
        is read by one loader; OpenLink's guide splits a big dump and runs about one loader
        per 2.5 cores).
        """
        if "'" in graph:
            raise VirtuosoError(f"graph IRI {graph!r} may not contain a quote")
        started = time.monotonic()
        names = ", ".join(f"'{_sql_path(f)}'" for f in files)
        adds = "".join(f"ld_add('{_sql_path(f)}', '{graph}');\n" for f in files)
        # A load that was interrupted left its files in the list: queue them again (quads are a set,
        # so what had gone in before is not doubled).
        self.isql(f"DELETE FROM DB.DBA.LOAD_LIST WHERE ll_file IN ({names});\n{adds}")
        # OpenLink's bulk-load recipe: no periodic checkpoints while the loaders run, one at the end.
        self.isql("checkpoint_interval(0);\n")
        try:
            workers = [subprocess.Popen(self._isql_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
                       for _ in range(max(1, min(loaders, len(files))))]
            outputs = [worker.communicate("rdf_loader_run();\n")[0] for worker in workers]
            for worker, output in zip(workers, outputs):
                self._check_isql(worker.returncode, output)
        finally:
            self.isql("checkpoint;\ncheckpoint_interval(60);\n")
        report = self.isql(f"SELECT concat('LOADERROR ', ll_file, ' :: ', ll_error) FROM DB.DBA.LOAD_LIST "
                           f"WHERE ll_file IN ({names}) AND ll_error IS NOT NULL;\n"
                           f"SELECT concat('NOTLOADED ', ll_file) FROM DB.DBA.LOAD_LIST "
                           f"WHERE ll_file IN ({names}) AND ll_state <> 2;\n")
        for line in report.splitlines():
            if line.startswith("LOADERROR "):
                where, _, why = line[len("LOADERROR "):].partition(" :: ")
                raise VirtuosoError(f"Virtuoso could not load {where}: {' '.join(why.split())}")
            if line.startswith("NOTLOADED "):
                raise VirtuosoError(f"Virtuoso's bulk loader left {line[len('NOTLOADED '):].strip()} unloaded")
        return time.monotonic() - started

    def set_password(self, new: str) -> None:
        self.isql(f"SET PASSWORD {self.password} {new};\ncheckpoint;\n")
        self.password = new

    def stop(self, timeout: float = 60.0) -> None:
        """Clean shutdown (checkpoint, then exit); SIGTERM and SIGKILL if it does not go."""
        if not self.running():
            return
        try:
            self.isql("checkpoint;\nshutdown;\n", timeout=timeout)
        except VirtuosoError:
            pass  # "shutdown" drops the connection; whether it went is checked below
        if self._wait_exit(timeout):
            return
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            if self.pid is not None:
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    return
            if self._wait_exit(grace):
                return
        raise VirtuosoError(f"Virtuoso (pid {self.pid}) did not stop")

    def _wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None:
                try:
                    self.process.wait(timeout=0.2)
                    return True
                except subprocess.TimeoutExpired:
                    continue
            if not self.running():
                return True
            time.sleep(0.2)
        return not self.running()


def _sql_path(path: Path) -> str:
    text = str(path)
    if "'" in text:
        raise VirtuosoError(f"dump path {text!r} may not contain a quote (Virtuoso's loader takes it in SQL)")
    return text


# ----------------------------------------------------------------------------- dumps and served folders


def dump_files(dump: Path) -> list[Path]:
    """The RDF files of a dump: the file itself, or every .nt/.nt.gz/.ttl/.ttl.gz file in a folder."""
    dump = dump.expanduser().resolve()
    if not dump.exists():
        raise VirtuosoError(f"dump {dump} does not exist; pass the Freebase N-Triples file (.nt, .nt.gz, .ttl) with --dump")
    if dump.is_dir():
        files = sorted(p for p in dump.iterdir() if p.is_file() and p.name.endswith(DUMP_SUFFIXES))
        if not files:
            raise VirtuosoError(f"dump folder {dump} holds no {', '.join(DUMP_SUFFIXES)} file")
        return files
    if not dump.name.endswith(DUMP_SUFFIXES):
        raise VirtuosoError(f"dump {dump} is not N-Triples or Turtle: its name must end in {', '.join(DUMP_SUFFIXES)}")
    if not os.access(dump, os.R_OK):
        raise VirtuosoError(f"dump {dump} is not readable")
    return [dump]


def _fingerprint(files: Sequence[Path]) -> list[dict]:
    return [{"path": str(f), "size": f.stat().st_size, "mtime": int(f.stat().st_mtime)} for f in files]


def read_state(folder: Path) -> dict | None:
    path = folder / STATE_FILE
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise VirtuosoError(f"{path} is unreadable ({exc}); remove the folder to start over") from None
    if not isinstance(state, dict) or not {"http_port", "isql_port", "password"} <= set(state):
        raise VirtuosoError(f"{path} is not a tokenworth KG state file; use another --dir")
    return state


def _write_state(folder: Path, state: dict) -> None:
    path = folder / STATE_FILE
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the DBA password
    with os.fdopen(descriptor, "w") as handle:
        json.dump(state, handle, indent=1)
    os.replace(temporary, path)


def _server_of(folder: Path, state: dict) -> VirtuosoServer:
    return VirtuosoServer(folder, int(state["http_port"]), int(state["isql_port"]), str(state["password"]),
                          pid=state.get("pid"))


@dataclasses.dataclass(frozen=True)
class Served:
    url: str
    folder: Path
    server: VirtuosoServer
    loaded_now: bool
    start_seconds: float
    load_seconds: float | None
    already_running: bool = False


def default_memory_mb() -> int:
    """15 % of physical memory, dki-lab/Freebase-Setup's rule (``MemTotal * 0.15`` in 8 KiB buffers)."""
    try:
        total_kb = int(next(l.split()[1] for l in open("/proc/meminfo", encoding="utf-8") if l.startswith("MemTotal:")))
    except (OSError, StopIteration, ValueError):
        return 1024
    return max(256, int(total_kb * 0.15 / 1024))


def serve(dump: Path, folder: Path, port: int = DEFAULT_HTTP_PORT, isql_port: int | None = None,
          memory_mb: int | None = None, install: bool = True, graph: str = FREEBASE_GRAPH,
          echo: Callable[[str], None] = print, timeout: float = 600.0) -> Served:
    """Stand a Freebase endpoint up in ``folder``: load ``dump`` once, start in the background.

    The ISQL port defaults to ``port + 10000`` (dki-lab/Freebase-Setup's convention) when
    that is a valid port, else to a free one.
    """
    files = dump_files(dump)
    folder = folder.expanduser().resolve()
    state = read_state(folder)
    fingerprint = _fingerprint(files)
    if state is not None and state.get("loaded") and state.get("dump") != fingerprint:
        was = ", ".join(d["path"] for d in state.get("dump") or []) or "another dump"
        raise VirtuosoError(f"{folder} already holds {was} (or that file changed since); "
                            f"use a new --dir for {dump}, or remove {folder} to reload")
    if state is not None:
        server = _server_of(folder, state)
        if server.running():
            if server.http_port != port:
                raise VirtuosoError(f"{folder} is already served on port {server.http_port}, not {port}; "
                                    f"stop it first: tokenworth kg stop --dir {folder}")
            if state.get("loaded"):
                return Served(server.url, folder, server, False, 0.0, None, already_running=True)
            server.stop()  # a load that was interrupted: start over below
    ensure_installed(install, echo)
    if isql_port is None and state is not None and port_is_free(int(state["isql_port"])):
        isql_port = int(state["isql_port"])
    if isql_port is None:
        isql_port = port + 10000 if port + 10000 <= 65535 and port_is_free(port + 10000) else free_port()
    if isql_port == port:
        raise VirtuosoError(f"the ISQL port and the SPARQL port must differ (both {port})")
    fresh = state is None or not (folder / "virtuoso.db").exists()
    password = DEFAULT_PASSWORD if fresh else str(state["password"])  # type: ignore[index]
    server = VirtuosoServer(folder, port, isql_port, password)
    dirs = sorted({f.parent for f in files})
    memory = memory_mb or default_memory_mb()
    start_seconds = server.start(memory, dirs, timeout=timeout, detach=True)
    try:
        if fresh:
            server.set_password("tw" + secrets.token_hex(16))
        state = {"http_port": port, "isql_port": isql_port, "password": server.password, "pid": server.pid,
                 "graph": graph, "memory_mb": memory, "dump": fingerprint,
                 "loaded": bool(state and state.get("loaded")), "load_seconds": (state or {}).get("load_seconds")}
        _write_state(folder, state)
        load_seconds = None
        if not state["loaded"]:
            echo(f"loading {len(files)} file(s) into graph <{graph}> (a full Freebase takes hours) ...")
            load_seconds = server.load(files, graph, loaders=max(1, int((os.cpu_count() or 1) / 2.5)))
            state.update(loaded=True, load_seconds=round(load_seconds, 3))
            _write_state(folder, state)
    except BaseException:
        server.stop()
        raise
    return Served(server.url, folder, server, load_seconds is not None, start_seconds, load_seconds)


def stop_folder(folder: Path, timeout: float = 120.0) -> bool:
    """Stop the server serving ``folder``; False when none was running. The database stays."""
    folder = folder.expanduser().resolve()
    state = read_state(folder)
    if state is None:
        raise VirtuosoError(f"{folder} is not a folder that `tokenworth kg serve` made (no {STATE_FILE})")
    server = _server_of(folder, state)
    if not server.running():
        return False
    server.stop(timeout)
    return True


__all__ = ["DEFAULT_HTTP_PORT", "FREEBASE_GRAPH", "INSTALL_COMMAND", "VirtuosoError", "VirtuosoServer", "Served",
           "binaries", "ensure_installed", "quiet_system_service", "dump_files", "free_port", "port_is_free",
           "read_state", "serve", "stop_folder", "default_memory_mb", "ini_text"]
