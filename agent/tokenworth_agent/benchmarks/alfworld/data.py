"""ALFWorld's data: the release zip of its game files, unpacked as ``json_2.1.1/`` once its games give the manifest."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Sequence

from tokenworth_agent.tasks.base import DataError, DataFolder, benchmark_dir, file_sha256
from tokenworth_agent.tasks.download import TIMEOUT_S, Download, Say, fetch_file, hub_source, hub_url, sync_folder, tasks_digest

ALFWORLD_URL_VARIABLE = "TOKENWORTH_ALFWORLD_URL"
# ALFWorld's game files as its release publishes them: the zip `alfworld-download` of alfworld 0.4.2 (the version
# requirements/alfworld.txt pins) fetches for them. Its other two zips (traj_data.json, initial_state.pddl) hold
# nothing the harness reads. $TOKENWORTH_ALFWORLD_URL replaces the folder (a mirror, a test server).
ALFWORLD_RELEASE_URL = "https://github.com/alfworld/alfworld/releases/download/0.4.0"
ALFWORLD_ZIP = "json_2.1.2_tw-pddl.zip"


def _check_alfworld_zip(path: Path) -> None:
    from tokenworth_agent.benchmarks.alfworld.tasks import EXPECTED_GAMES, zip_game_counts

    counts = zip_game_counts(path)
    if counts != EXPECTED_GAMES:
        raise DataError(f"it lists {counts} game files, expected {EXPECTED_GAMES}")


def downloads(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder]) -> list[Download]:
    from tokenworth_agent.benchmarks.alfworld.tasks import ALFWORLD, RELEASE

    folder = benchmark_dir(ALFWORLD, data_dir, benchmarks)
    base = (os.environ.get(ALFWORLD_URL_VARIABLE) or ALFWORLD_RELEASE_URL).rstrip("/")
    return [Download("alfworld", f"{base}/{ALFWORLD_ZIP}", folder / ALFWORLD_ZIP, check=_check_alfworld_zip,
                     described=f"ALFWorld's release zip of the game files; its games are checked and unpacked "
                               f"to {folder / RELEASE}")]


def fetch(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder], say: Say = print,
                   timeout: float = TIMEOUT_S) -> bool:
    """Make ``alfworld/json_2.1.1`` from ALFWorld's release zip, checked by content (module docstring); True if
    anything was downloaded. Nothing is fetched when a verified ``json_2.1.1/`` or the shipped archive is there."""
    from tokenworth_agent.benchmarks.alfworld.tasks import (ALFWORLD, ARCHIVE, ARCHIVE_SHA256, RELEASE, check_release,
                                                 install_release_zip)

    folder = benchmark_dir(ALFWORLD, data_dir, benchmarks)
    target = folder / RELEASE
    [item] = downloads(data_dir, benchmarks)
    if target.exists():
        try:
            check_release(target)
        except DataError as exc:
            raise DataError(f"alfworld: {target} is there but is not the release the harness reads ({exc}); "
                            "move it away and fetch again") from None
        say(f"alfworld: {target} already there, verified; nothing to download")
        return False
    if (folder / ARCHIVE).exists():  # the shipped repack: its sha256 pins it
        return fetch_file(dataclasses.replace(item, path=folder / ARCHIVE, sha256=ARCHIVE_SHA256, check=None), say)
    downloaded = fetch_file(item, say, timeout, checked_next="its games' CRCs and digests are checked while unpacking")
    try:
        install_release_zip(item.path, folder)
    except DataError as exc:
        if not downloaded:  # put there by hand: left alone
            raise DataError(f"alfworld: {item.path} is there but its games are not the release the harness reads "
                            f"({exc}); move it away and fetch again") from None
        item.path.unlink(missing_ok=True)
        raise DataError(f"alfworld: the games in {item.url} are not the release the harness reads ({exc}); the "
                        f"zip was deleted and nothing was kept. If the source has changed, {item.by_hand()}") from None
    item.path.unlink()
    sync_folder(folder)
    say(f"alfworld: {target} unpacked from {item.path.name} and verified (the zip was deleted)")
    return downloaded


def data_source(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder]) -> dict[str, str]:
    """The release the games came from, and the manifest digest the loader checks them against."""
    from tokenworth_agent.benchmarks.alfworld.tasks import ALFWORLD, ARCHIVE, MANIFEST_SHA256, RELEASE

    folder = benchmark_dir(ALFWORLD, data_dir, benchmarks)
    source = (f"{ALFWORLD_RELEASE_URL}/{ALFWORLD_ZIP}" if (folder / RELEASE).is_dir() else
              f"{ARCHIVE} (a third party's repack of the same games)")
    return {"source": source, "manifest_sha256": MANIFEST_SHA256}


__all__ = ["ALFWORLD_URL_VARIABLE", "ALFWORLD_RELEASE_URL", "ALFWORLD_ZIP", "downloads", "fetch", "data_source"]
