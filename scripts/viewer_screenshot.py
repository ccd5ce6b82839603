"""The screenshot of docs/viewing.md: one task of a run opened in Inspect View, its injected memory in view.

    python scripts/viewer_screenshot.py RUN docs/inspect-view-db.png [--stream tokenworth] [--task I]

Exports RUN's logs and bundles the static site into a temporary folder (RUN itself is only read), serves
it on loopback, opens the task in Debian's Chromium through Playwright (tests/browser.py), unfolds the
first user turn and scrolls its injected block to the top, then saves the page. Without ``--task``: the
stream's first solved task that had a memory injected.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.browser

from tests import browser  # noqa: E402
from tokenworth_agent.results.inspect_view import bundle  # noqa: E402
from tokenworth_agent.results.runs import read_stream  # noqa: E402

BLOCK_START = "Here are experiences from earlier tasks"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--stream", default="tokenworth")
    parser.add_argument("--task", type=int)
    args = parser.parse_args(argv)
    reason = browser.missing()
    if reason:
        raise SystemExit(f"error: {reason}")
    records = read_stream(args.run, args.stream).records
    task = args.task if args.task is not None else next(
        r.index for r in records if r.injection_text and r.reward == 1 and r.rounds > 1)
    with tempfile.TemporaryDirectory() as scratch:
        site = bundle(args.run, Path(scratch) / "site", out=Path(scratch) / "logs", say=lambda line: None)
        log = "/".join(urllib.parse.quote(p, safe="") for p in f"{args.stream}.eval".split("/"))
        with browser.static_site(site) as url, browser.chromium_page(1400, 1000) as page:
            page.goto(f"{url}#/tasks/{log}/samples/sample/{task}/1/")
            page.get_by_text("more...", exact=True).first.click()  # unfold the long first user turn
            block = page.get_by_text(BLOCK_START).first
            block.wait_for()
            block.evaluate("element => element.scrollIntoView({block: 'start'})")
            page.mouse.wheel(0, -160)  # the message's header and the instructions' last lines above the block
            page.wait_for_timeout(300)  # let the scroll settle before the picture
            page.screenshot(path=str(args.out))
    print(f"{args.out}: {args.stream} task {task}")


if __name__ == "__main__":
    main()
