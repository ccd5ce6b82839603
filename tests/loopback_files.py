"""A small file server on 127.0.0.1 for the download tests, standing in for the hub and the release hosts.

It serves bytes from a dict keyed by path, answers redirects with 302, honours open-ended Range requests
(206 with Content-Range) unless told to ignore them, can hang up partway through the next answer for a path,
and logs every request it sees so that a test can check exactly what the download code asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import re
import threading
import urllib.parse
from typing import Iterator


@dataclasses.dataclass(frozen=True)
class Request:
    """One request as the server saw it; ``headers`` has every request header, names in lower case."""

    method: str
    path: str
    range: str | None
    headers: dict[str, str]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        server: LoopbackFiles = self.server  # type: ignore[assignment]
        path = urllib.parse.urlsplit(self.path).path
        asked = self.headers.get("Range")
        server.log.append(Request("GET", path, asked, {k.lower(): v for k, v in self.headers.items()}))
        if path in server.redirect:  # as the hub, GitHub and aka.ms send a file's bytes from another host
            self.send_response(302)
            self.send_header("Location", server.url + server.redirect[path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = server.files.get(path)
        if body is None:
            self.send_error(404)
            return
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", asked or "")
        if match and server.ranges:
            start = int(match[1])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        rest = body[start:]
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        cut = server.cut.pop(path, None)
        self.wfile.write(rest if cut is None else rest[:cut])
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args) -> None:  # quiet
        pass


class LoopbackFiles(http.server.ThreadingHTTPServer):
    """``files[path]`` is served (GET, single open-ended ranges); ``redirect[path] = other`` answers 302 to
    ``other`` on this server; ``cut[path] = n`` sends n bytes of the next answer for path, then hangs up;
    ``ranges = False`` ignores Range headers (200 with the whole file); ``log`` holds every request."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.redirect: dict[str, str] = {}
        self.cut: dict[str, int] = {}
        self.ranges = True
        self.log: list[Request] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextlib.contextmanager
def serving() -> Iterator[LoopbackFiles]:
    """A LoopbackFiles running in a daemon thread for the block, shut down and closed after it."""
    server = LoopbackFiles()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
