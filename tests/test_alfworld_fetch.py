"""`tokenworth data fetch --env alfworld` from ALFWorld's release zip, against a loopback release host.

The zip is built here in the release's layout (``json_2.1.1/<split>/<task folder>/<trial>/game.tw-pddl``,
plus members the harness does not read) from the shared ``json_2.1.1.tar.xz``: the 574 games of the
manifest with their real bytes, every other game file of the three splits as a stand-in (the harness reads
only their paths, which order the manifest). The host (127.0.0.1 only) answers the release address with a
redirect, as GitHub and aka.ms do, and serves the zip with open-ended ranges.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tokenworth_agent.benchmarks.alfworld.tasks as alf
from tokenworth_agent.cli import app
from tokenworth_agent.tasks import load_tasks
from tokenworth_agent.tasks.base import benchmark_dir
from tokenworth_agent.benchmarks.alfworld.data import ALFWORLD_RELEASE_URL, ALFWORLD_URL_VARIABLE, ALFWORLD_ZIP
from tokenworth_agent.tasks.download import downloads, tasks_digest
from tokenworth_agent.tasks.registry import benchmarks
from tests.loopback_files import LoopbackFiles, serving

runner = CliRunner()
RELEASE_PATH = f"/alfworld/{ALFWORLD_ZIP}"  # what the release address names
BLOB_PATH = f"/blob/{ALFWORLD_ZIP}"  # where it redirects to


@pytest.fixture
def host(monkeypatch):
    with serving() as srv:
        srv.redirect[RELEASE_PATH] = BLOB_PATH
        monkeypatch.setenv(ALFWORLD_URL_VARIABLE, f"{srv.url}/alfworld/")
        yield srv


@pytest.fixture
def root(tmp_path):
    """The data root a test fetches into, removed afterwards: on tmpfs where there is one, since a release
    unpacked is 6,000 folders and removing them from a disk mounted with ``discard`` takes many seconds."""
    base = Path("/dev/shm")
    if not (base.is_dir() and os.access(base, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="alfworld-fetch-", dir=base))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def shared(data_dir) -> Path:
    return Path(data_dir).parent  # the data root


@pytest.fixture(scope="module")
def members(shared) -> dict[str, bytes]:
    """The release zip's members (name -> bytes): the manifest's games real, the other game files stand-ins."""
    with tarfile.open(shared / "alfworld" / alf.ARCHIVE, "r:xz") as tar:
        games = [m for m in tar.getmembers() if m.isfile() and m.name.endswith("/" + alf.GAME_FILE)]
        prefix = alf.RELEASE + "/"
        refs = {split: [alf.parse_relpath(m.name[len(prefix):]) for m in games
                        if m.name.startswith(f"{prefix}{split}/")] for split in alf.SPLITS}
        wanted = {g.relpath for split, seed, take in alf.PHASES for g in alf.phase_order(refs[split], seed, take)}
        out = {f"{alf.RELEASE}/": b""}
        for m in games:
            rel = m.name[len(prefix):]
            out[m.name] = tar.extractfile(m).read() if rel in wanted else b'{"stand-in": true}'
    assert len(wanted) == alf.EPISODES and len(out) == 1 + sum(alf.EXPECTED_GAMES.values())
    # members the harness does not read, as the release's other files and splits
    some = next(iter(sorted(wanted)))
    out[f"{alf.RELEASE}/{some.rsplit('/', 1)[0]}/traj_data.json"] = b"{}"
    out[f"{alf.RELEASE}/valid_train/look_at_obj_in_light-Book-None-DeskLamp-302/trial_T1/{alf.GAME_FILE}"] = b"{}"
    return out


def zipped(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        for name, data in files.items():
            out.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def release_zip(members) -> bytes:
    return zipped(members)


@pytest.fixture(scope="module")
def shipped_tasks(shared) -> list:
    return load_tasks("alfworld", shared)


def fetch(root: Path):
    return runner.invoke(app, ["data", "fetch", "--env", "alfworld", "--data-dir", str(root)])


def asked(host: LoopbackFiles) -> list[tuple[str, str | None, str | None]]:
    """The requests the host saw, as (path, Range header, x-ms-version header)."""
    return [(r.path, r.range, r.header("x-ms-version")) for r in host.log]


def errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def leftovers(root: Path) -> list[str]:
    """Anything under alfworld/ besides a finished json_2.1.1/."""
    folder = root / "alfworld"
    return sorted(p.name for p in folder.iterdir() if p.name != alf.RELEASE) if folder.is_dir() else []


def without_root(tasks: list) -> list:
    return [dataclasses.replace(t, root="") for t in tasks]


# ------------------------------------------------------------------ the release zip, end to end
def test_the_release_zip_gives_the_shipped_records_and_a_second_fetch_downloads_nothing(
        host, shared, release_zip, shipped_tasks, root) -> None:
    host.files[BLOB_PATH] = release_zip
    first = fetch(root)
    assert first.exit_code == 0, first.output
    assert asked(host) == [(RELEASE_PATH, None, None), (BLOB_PATH, None, None)]  # one download, via the redirect
    target = root / "alfworld" / alf.RELEASE
    assert sorted(p.name for p in target.iterdir()) == sorted(alf.SPLITS)  # valid_train was not unpacked
    assert not list(target.rglob("traj_data.json")) and leftovers(root) == []  # the zip was deleted
    fetched = load_tasks("alfworld", root)
    assert len(fetched) == alf.EPISODES and {t.root for t in fetched} == {str(target)}
    assert without_root(fetched) == without_root(shipped_tasks)  # field for field, in stream order
    assert tasks_digest(without_root(fetched)) == tasks_digest(without_root(shipped_tasks))
    assert alf.manifest(root, benchmarks()) == alf.manifest(shared, benchmarks())
    again = fetch(root)
    assert again.exit_code == 0, again.output
    assert len(host.log) == 2 and "already there, verified; nothing to download" in again.output


def test_an_interrupted_download_resumes_with_a_range_request(host, release_zip, root) -> None:
    host.files[BLOB_PATH] = release_zip
    third = len(release_zip) // 3
    host.cut[BLOB_PATH] = third
    broken = fetch(root)
    assert broken.exit_code == 2 and "broke off" in errors(broken.output)[0]
    part = root / "alfworld" / (ALFWORLD_ZIP + ".part")
    assert part.stat().st_size == third and not (root / "alfworld" / alf.RELEASE).exists()
    resumed = fetch(root)
    assert resumed.exit_code == 0, resumed.output
    resume = (f"bytes={third}-", "2020-04-08")  # the Range, with the header Azure's blob store needs for it
    assert asked(host)[2:] == [(RELEASE_PATH, *resume), (BLOB_PATH, *resume)]
    assert len(host.log) == 4 and leftovers(root) == []
    assert alf.check_release(root / "alfworld" / alf.RELEASE) is None


# ------------------------------------------------------------------ refusals: nothing is kept
@pytest.fixture
def unpacks(monkeypatch) -> list:
    """The temporary folders install_release_zip makes (none when the zip is refused before unpacking)."""
    made: list = []
    real = tempfile.mkdtemp
    monkeypatch.setattr(alf.tempfile, "mkdtemp", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    return made


def test_a_zip_whose_games_differ_is_refused_before_anything_is_written(host, members, root, unpacks) -> None:
    files = dict(members)
    name = next(n for n, data in files.items() if data.startswith(b'{"pddl_domain"') and "/valid_unseen/" in n)
    game = json.loads(files[name])
    game["walkthrough"] = game["walkthrough"][:-1]  # still a playable-looking game, valid zip and CRCs
    files[name] = json.dumps(game).encode()
    host.files[BLOB_PATH] = zipped(files)
    result = fetch(root)
    assert result.exit_code == 2
    [line] = errors(result.output)
    assert "not the release the harness reads" in line and "nothing was kept" in line and "digest" in line
    assert not (root / "alfworld" / alf.RELEASE).exists() and leftovers(root) == []
    assert unpacks == []  # refused from the zip itself: no folder was ever made


def flipped(body: bytes, name: str) -> bytes:
    """``body`` with one byte inside member ``name``'s data flipped (its CRC no longer matches)."""
    with zipfile.ZipFile(io.BytesIO(body)) as listing:
        info = listing.getinfo(name)
    data = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)  # after the local header
    damaged = bytearray(body)
    damaged[data + info.compress_size // 2] ^= 0xFF
    return bytes(damaged)


@pytest.mark.parametrize("which", ["a manifest game", "another game file"])
def test_a_damaged_zip_is_refused_and_nothing_is_kept(host, members, release_zip, root, unpacks, which) -> None:
    real = which == "a manifest game"  # read in the zip before unpacking; the others only while unpacking
    name = next(n for n, data in members.items() if n.endswith(alf.GAME_FILE) and data.startswith(b"{\"pddl") == real)
    host.files[BLOB_PATH] = flipped(release_zip, name)
    result = fetch(root)
    assert result.exit_code == 2
    [line] = errors(result.output)
    assert "cannot unpack it" in line and "nothing was kept" in line
    assert "verified" not in result.output  # never announced before every check has passed
    assert not (root / "alfworld" / alf.RELEASE).exists() and leftovers(root) == []
    assert len(unpacks) == (0 if real else 1) and not any(Path(u).exists() for u in unpacks)


def test_a_zip_without_the_games_fails_its_check(host, members, root) -> None:
    host.files[BLOB_PATH] = zipped({n: d for n, d in members.items() if "/valid_seen/" not in n})
    result = fetch(root)
    assert result.exit_code == 2
    [line] = errors(result.output)
    assert "failed its check" in line and "'valid_seen': 0" in line and "nothing was kept" in line
    assert leftovers(root) == []


def test_a_folder_already_there_that_is_not_the_release_is_left_alone(host, root) -> None:
    target = root / "alfworld" / alf.RELEASE
    for split in alf.SPLITS:
        (target / split).mkdir(parents=True)
    result = fetch(root)
    assert result.exit_code == 2 and "move it away" in errors(result.output)[0]
    assert asked(host) == [] and sorted(p.name for p in target.iterdir()) == sorted(alf.SPLITS)


# ------------------------------------------------------------------ where from, offline
def test_the_default_address_is_alfworlds_release(monkeypatch, root) -> None:
    monkeypatch.delenv(ALFWORLD_URL_VARIABLE, raising=False)
    [item] = downloads("alfworld", root, benchmarks())
    assert item.url == f"{ALFWORLD_RELEASE_URL}/{ALFWORLD_ZIP}"
    assert item.url == "https://github.com/alfworld/alfworld/releases/download/0.4.0/json_2.1.2_tw-pddl.zip"
    assert item.path == benchmark_dir(alf.ALFWORLD, root, benchmarks()) / ALFWORLD_ZIP


def test_offline_it_says_in_one_line_what_to_download_and_where(monkeypatch, root) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(ALFWORLD_URL_VARIABLE, f"http://127.0.0.1:{port}/rel")
    result = fetch(root)
    assert result.exit_code == 2 and result.output.count("error:") == 1
    [line] = errors(result.output)
    assert f"http://127.0.0.1:{port}/rel/{ALFWORLD_ZIP}" in line and "by hand" in line
    assert str(root / "alfworld" / ALFWORLD_ZIP) in line and str(root / "alfworld" / alf.RELEASE) in line
    assert leftovers(root) == []


def test_a_zip_put_there_by_hand_is_checked_and_left_alone_when_its_games_differ(host, members, root) -> None:
    files = dict(members)
    name = next(n for n, data in files.items() if data.startswith(b'{"pddl_domain"') and "/train/" in n)
    files[name] = files[name].replace(b'"solvable": true', b'"solvable": true ', 1)  # one byte more
    placed = root / "alfworld" / ALFWORLD_ZIP
    placed.parent.mkdir()
    placed.write_bytes(zipped(files))
    result = fetch(root)
    assert result.exit_code == 2
    [line] = errors(result.output)
    assert str(placed) in line and "move it away" in line and "digest" in line
    assert asked(host) == [] and placed.is_file() and leftovers(root) == [ALFWORLD_ZIP]  # no request, no unpack
