"""A run's Inspect View static site (`tokenworth view RUN --bundle DIR`) in a real browser.

The bundle of a small experiment (two methods, two seeds, one grid point: nested log names with ``@`` and
``=``) is served on loopback and opened by Debian's Chromium through Playwright (tests/browser.py). The test
waits for what it checks to render (Playwright's expect), never for a fixed time: the stream's sample list,
one row per record with its task, the accuracy and stderr the export wrote, then one task opened with the
injected memory's text in its first user turn.

Without Chromium or Playwright the test is skipped, except under `make test` (TOKENWORTH_BROWSER=required),
where it fails, naming the set-up step.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser  # Chromium (make test-quick leaves it out)
from typer.testing import CliRunner

from tests import browser

TASKS = 10


@pytest.fixture(scope="module")
def site(tmp_path_factory, data_dir) -> tuple[Path, Path]:
    reason = browser.missing()
    if reason:
        if os.environ.get("TOKENWORTH_BROWSER") == "required":
            pytest.fail(reason)
        pytest.skip(reason)
    from tokenworth_agent.cli import app

    root = tmp_path_factory.mktemp("viewer")
    run, bundle = root / "run", root / "site"
    for args in (["run", "--methods", "standard,rag", "--seeds", "0,1", "--grid", "o_max=128", "--limit", str(TASKS),
                  "--out", str(run), "--no-progress", "--data-dir", data_dir],
                 ["view", str(run), "--bundle", str(bundle)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    return run, bundle


def test_the_bundled_site_shows_the_streams_samples_in_chromium(site) -> None:
    from inspect_ai.log import read_eval_log
    from playwright.sync_api import expect

    from tokenworth_agent.results.record import read_records

    run, bundle = site
    stream = next(s for s in ("seed0/rag@o_max=128", "seed1/rag@o_max=128")
                  if any(r.injection_text for r in read_records(run / s / "records.jsonl")))
    records = read_records(run / stream / "records.jsonl")
    log = read_eval_log(str(bundle / "logs" / f"{stream}.eval"))  # the bundle's copy of the exported log
    metrics = log.results.scores[0].metrics
    address = "#/tasks/" + "/".join(urllib.parse.quote(part, safe="") for part in f"{stream}.eval".split("/"))
    with browser.static_site(bundle) as url, browser.chromium_page() as page:
        page.goto(url + address)
        rows = page.locator('a[href*="/samples/sample/"]')
        expect(rows).to_have_count(len(records), timeout=120_000)  # the rendered sample list, one row per record
        for record in records:
            expect(rows.nth(record.index)).to_contain_text(record.task_prompt.splitlines()[0][:60])
        shown = {}
        for name in ("accuracy", "stderr"):  # the header's metrics, as the viewer rounds them (0.2, 0.133)
            expect(page.locator("body")).to_contain_text(re.compile(rf"{name}\s*[0-9.]+", re.I))
            shown[name] = float(re.search(rf"{name}\s*([0-9.]+)", page.locator("body").inner_text(), re.I)[1])
            assert shown[name] == pytest.approx(metrics[name].value, abs=5e-4), (name, shown)
        injected = next(r for r in records if r.injection_text)
        rows.nth(injected.index).click()  # open the task: its conversation, the injected block in the first user turn
        first_user = page.locator("text=I will ask you a question about a table").first
        expect(first_user).to_be_visible(timeout=60_000)
        more = page.get_by_text("more...", exact=True)
        if more.count():
            more.first.click()  # the long first turn is folded; unfold it
        memory_line = next(line for line in injected.injection_text.splitlines() if line.startswith("Question: "))
        expect(page.get_by_text(memory_line[:80]).first).to_be_visible()
