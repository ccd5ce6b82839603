"""A static site on loopback and Debian's Chromium driven by Playwright, for the viewer's browser test and the
docs' screenshot (scripts/viewer_screenshot.py).

The site is served by Starlette's ``StaticFiles`` (installed with inspect_ai) because Inspect View's static
bundle reads its ``.eval`` logs with HTTP range requests, which Python's ``http.server`` does not answer.
Chromium is the system's (apt ``chromium``, ``/usr/bin/chromium``, installed by scripts/install-system-deps.sh);
Playwright never downloads a browser build here.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterator

CHROMIUM = "/usr/bin/chromium"
# The launch flags that work on this machine (DEVELOPERS.md): no sandbox, GPU, QUIC or background traffic.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def missing() -> str | None:
    """Why the browser cannot run here (None when it can)."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return f"Debian's Chromium ({CHROMIUM}) is not installed: run `make system-deps` (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed: pip install -e './agent[dev]'"
    return None


@contextlib.contextmanager
def static_site(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on 127.0.0.1 (a free port) for the block; yields its URL."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.staticfiles import StaticFiles

    app = Starlette()
    app.mount("/", StaticFiles(directory=str(folder), html=True))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the static server for {folder} did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


@contextlib.contextmanager
def chromium_page(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A page of a fresh headless Chromium (the system's), closed after the block."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()
