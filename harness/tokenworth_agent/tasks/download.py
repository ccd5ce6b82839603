"""``tokenworth data fetch``: download the five benchmarks' task data into the data root, checked.

What comes from where (each URL's host can be replaced, for mirrors and for tests):

==============  ===============================================================  ===========================
env             source                                                           check
==============  ===============================================================  ===========================
db, os, kg      hub dataset ``csyq/LifelongAgentBench``, one parquet file each     sha256 of the file
kg (ontology)   ``vocab.json`` and ``fb_roles`` of THUDM/AgentBench at 578c5e9     sha256 of each file
bigcodebench    hub dataset ``bigcode/bigcodebench`` at b74c0d0, split v0.1.4     its published sha256, and
                (parquet), and ``bigcode/bigcodebench-hard`` at 298d2cc, split    the 1,140 tasks the loader
                v0.1.4                                                            reads from it; the Hard ids
alfworld        ALFWorld's release zip ``json_2.1.2_tw-pddl.zip`` (GitHub        the 574-episode manifest
                release 0.4.0: what ``alfworld-download`` of alfworld 0.4.2      the harness reads from its
                fetches), its game files unpacked as ``json_2.1.1/``             games (a digest)
==============  ===============================================================  ===========================

The hub's address is ``$HF_ENDPOINT`` (the variable the Hugging Face client reads; default
``https://huggingface.co``), the ontology's folder ``$TOKENWORTH_KG_ONTOLOGY_URL``, the folder the
ALFWorld zip is read from ``$TOKENWORTH_ALFWORLD_URL``.

**Pinned.** BigCodeBench's hub files are fetched at named commits (:data:`BCB_REVISION`,
:data:`BCB_HARD_REVISION`), never ``main``, and the ontology at AgentBench's full commit. A file whose
sha256 is published is checked by its bytes: LAB's three parquet files, the ontology's two files and
BigCodeBench's full split (:data:`BCB_SPLIT_SHA256`, the hub's LFS object id: 2,362,110 bytes,
1,140 rows), which is checked by its content too: the loader must read from it exactly the tasks
it reads from the shipped first release with the project's edits applied (:data:`BCB_TASKS_SHA256`,
a digest of those records). The Hard split has no digest recorded here, so it is checked by content
only: it must hold exactly the shipped Hard ids. LAB's files are asked for at the hub's ``main``
(:data:`LAB_REVISION`: the shared data names no commit), which their sha256 pins. A file is announced
as verified only once every check has passed. :func:`data_source` says which commit and digest a
run's data came from; the run's ``config.json`` keeps it (``data_source``). ALFWorld's zip has no published
checksum either: its game files are unpacked into a temporary folder beside ``alfworld/json_2.1.1``,
and renamed to it only when they give the manifest of the shipped ``json_2.1.1.tar.xz`` (the game
counts and :data:`~tokenworth_agent.tasks.alfworld.MANIFEST_SHA256`); the zip is then deleted. A
verified ``json_2.1.1/`` or the shipped archive already there means nothing is downloaded.

Every file is written as ``<name>.part`` in its own folder, checked, then renamed into place, so
the final name only ever holds a verified file. A ``.part`` left by an interrupted download is
continued with an HTTP ``Range`` request; one that fails its check is deleted. A file already in
place is checked again and not downloaded. Any failure to reach a server is one
:class:`~tokenworth_agent.tasks.base.DataError` line naming the URL and where to put the file by hand.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Sequence

from tokenworth_agent.tasks.base import Benchmark, DataError, benchmark_dir, file_sha256

FETCH_ENVS: tuple[str, ...] = ("db", "os", "kg", "bigcodebench", "alfworld")
HF_ENDPOINT_VARIABLE = "HF_ENDPOINT"
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
ALFWORLD_URL_VARIABLE = "TOKENWORTH_ALFWORLD_URL"
ONTOLOGY_URL_VARIABLE = "TOKENWORTH_KG_ONTOLOGY_URL"
ONTOLOGY_COMMIT = "578c5e9f706fc2dd96188ca6c8cf9095ca0c6528"  # THUDM/AgentBench, where both files' sha256 match
DEFAULT_ONTOLOGY_URL = (f"https://github.com/THUDM/AgentBench/raw/{ONTOLOGY_COMMIT}/src/server/tasks/knowledgegraph/"
                        "ontology")
# ALFWorld's game files as its release publishes them: the zip `alfworld-download` of alfworld 0.4.2 (the version
# requirements/alfworld.txt pins) fetches for them. Its other two zips (traj_data.json, initial_state.pddl) hold
# nothing the harness reads. $TOKENWORTH_ALFWORLD_URL replaces the folder (a mirror, a test server).
ALFWORLD_RELEASE_URL = "https://github.com/alfworld/alfworld/releases/download/0.4.0"
ALFWORLD_ZIP = "json_2.1.2_tw-pddl.zip"

LAB_REVISION = "main"  # the data folder's README names no hub commit for LAB; the sha256 below pins the bytes
LAB_SHA256 = {  # the LAB data folder's README.md (lifelongagentbench/ of the data root): the hub's files, byte for byte
    "db": "9559d085c4747ae5afb28d45155040af0743e4dfdb5759a3f13da84501c52f51",
    "os": "61795fd6a0231fad9a509f8dbb8863bb0cdde1daa1db05e1b2e6dbb077946b13",
    "kg": "204e8246c77d1e2e62cebf8bee0babfc87e1e83858d061b8328e2cade27f72a4",
}
ONTOLOGY_SHA256 = {  # the KG ontology folder's README (AgentBench 578c5e9)
    "vocab.json": "6a178fa7f348631d816e37a384a89039b6ef1903c8797c4a20fbe97074ba6453",
    "fb_roles": "052ec0a1083b5cf83cfbf7f56f5d864e363382e3210e9a482da6e52ca37392ba",
}
BCB_HUB_ID = "bigcode/bigcodebench"
BCB_HARD_HUB_ID = "bigcode/bigcodebench-hard"
BCB_HUB_FILE = "data/v0.1.4-00000-of-00001.parquet"  # the hub's parquet of split v0.1.4 (both datasets)
BCB_REVISION = "b74c0d0bf70d2c0bc459be537895cca163007f1a"  # the hub commit of bigcode/bigcodebench fetched
BCB_HARD_REVISION = "298d2cc7b96612e15e47313c3603ee124cee0c1f"  # and of bigcode/bigcodebench-hard
BCB_SPLIT_SHA256 = "d9a4965821c9507ebdfb551c288656b2d5fe553234f5183044333ca8a4018267"  # its LFS object id (published)
BCB_FIRST_RELEASE_SOURCE = "bigcode-project/bigcodebench-annotation@a3b8985:hf_data/BigCodeBench.jsonl.gz"
BCB_FIRST_RELEASE_SHA256 = "58142744edaf6036387f8761701f1b353432b0ed33f2edec1de8a59e7431ef7a"
# sha256 of tasks_digest(the 1,140 records the loader reads from the shipped v0.1.0_hf file)
BCB_TASKS_SHA256 = "bc885f775c1383345bf3a5f943ab560c624190d86f39cf4dc7380c287659bd5c"

CHUNK = 1 << 16
TIMEOUT_S = 60.0

Say = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Download:
    """One file to fetch: where from, where to, and how it is checked (a sha256, or ``check`` on the file)."""

    label: str  # for messages: "db", "bigcodebench (Hard ids)", ...
    url: str
    path: Path
    sha256: str | None = None
    check: Callable[[Path], None] | None = None  # raises DataError when the file is not the one wanted
    described: str = ""  # what the check is, for the by-hand message

    def verify(self, path: Path) -> None:
        if self.sha256 is not None:
            digest = file_sha256(path)
            if digest != self.sha256:
                raise DataError(f"sha256 {digest}, expected {self.sha256}")
        if self.check is not None:
            self.check(path)

    def by_hand(self, named: bool = False) -> str:
        """How to do this download by hand (``named``: the message has named the URL already)."""
        what = f"sha256 {self.sha256}" if self.sha256 else self.described
        source = "that file" if named else self.url
        return f"download {source} by hand and put it at {self.path}" + (f" ({what})" if what else "")


def hf_endpoint() -> str:
    return (os.environ.get(HF_ENDPOINT_VARIABLE) or DEFAULT_HF_ENDPOINT).rstrip("/")


def hub_url(repo: str, filename: str, revision: str) -> str:
    """The file at the hub commit ``revision`` (``main`` only where no commit is known: LAB)."""
    return f"{hf_endpoint()}/datasets/{repo}/resolve/{revision}/{filename}"


def hub_source(repo: str, filename: str, revision: str) -> str:
    """Where a hub file comes from, as a run's config records it (whatever mirror served it)."""
    return f"hf://datasets/{repo}@{revision}/{filename}"


# ------------------------------------------------------------------ one file
def fetch_file(item: Download, say: Say = print, timeout: float = TIMEOUT_S, *, checked_next: str = "") -> bool:
    """Put ``item`` at its path, verified; True if anything was downloaded, False if it was already there.

    ``checked_next``: what the caller checks after this (ALFWorld's zip: its CRCs, while unpacking); the file is
    then announced as downloaded, not verified, and the caller says "verified" once that check has passed.

    Raises :class:`DataError` (one line) when the server cannot be reached, answers an error, the
    transfer breaks off (the ``.part`` is kept: the same command resumes it) or the file fails its
    check (the ``.part`` is deleted; nothing is written under the final name).
    """
    if item.path.exists():
        try:
            item.verify(item.path)
        except DataError as exc:
            raise DataError(f"{item.label}: {item.path} is there but is not the expected file ({exc}); "
                            "move it away and fetch again") from None
        say(f"{item.label}: {item.path} already there" + (f"; {checked_next} next" if checked_next else
                                                            ", verified; nothing to download"))
        return False
    part = item.path.with_name(item.path.name + ".part")
    try:
        item.path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"{item.label}: cannot create {item.path.parent} ({exc.strerror or exc})") from None
    _transfer(item, part, say, timeout)
    try:
        item.verify(part)
    except DataError as exc:
        part.unlink(missing_ok=True)
        raise DataError(f"{item.label}: the file from {item.url} failed its check ({exc}); it was deleted and "
                        f"nothing was kept. If the source has changed, {item.by_hand()}") from None
    os.replace(part, item.path)
    _sync_folder(item.path.parent)
    say(f"{item.label}: {item.path} downloaded" + (f"; {checked_next} next" if checked_next else " and verified"))
    return True


def _transfer(item: Download, part: Path, say: Say, timeout: float) -> None:
    """Bring ``part`` to the whole file: from where it stopped (a Range request) or from the start."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "tokenworth-agent data fetch"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        headers["x-ms-version"] = "2020-04-08"  # Azure's blob store (behind release hosts) honours Range only then
        say(f"{item.label}: resuming {part.name} at byte {offset}")
    else:
        say(f"{item.label}: downloading {item.url}")
    request = urllib.request.Request(item.url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # nothing after what we have: the part is whole (checked next)
            return
        raise DataError(f"{item.label}: {item.url} answered HTTP {exc.code} {exc.reason}; "
                        f"{item.by_hand(named=True)}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise DataError(f"{item.label}: cannot reach {item.url} ({reason}); {item.by_hand(named=True)}") from None
    with response:
        mode = "ab"
        if offset and response.status == 206:
            if not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
                raise DataError(f"{item.label}: {item.url} answered the range request with "
                                f"{response.headers.get('Content-Range')!r}; delete {part} and fetch again")
        else:  # a full answer (the server ignored the range, or there was nothing to resume)
            mode = "wb"
        length = response.headers.get("Content-Length")
        expected = int(length) if length and length.isdigit() else None
        received = 0
        try:
            with open(part, mode) as out:
                while True:
                    block = response.read(CHUNK)
                    if not block:
                        break
                    out.write(block)
                    received += len(block)
                out.flush()
                os.fsync(out.fileno())
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, OSError) and exc.filename:  # our disk, not the network
                raise DataError(f"{item.label}: cannot write {part} ({exc.strerror or exc})") from None
            raise DataError(f"{item.label}: the download from {item.url} broke off ({exc}); run the same command "
                            f"again to resume it from {part}") from None
    if expected is not None and received < expected:
        raise DataError(f"{item.label}: the download from {item.url} broke off after {received} of {expected} "
                        f"bytes; run the same command again to resume it from {part}")


def _sync_folder(folder: Path) -> None:
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


# ------------------------------------------------------------------ what each env needs
def tasks_digest(tasks: Sequence[object]) -> str:
    """sha256 of the records a loader returns (every field, in stream order): equal digests, equal tasks."""
    rows = [dataclasses.asdict(t) for t in tasks]  # type: ignore[call-overload]
    return hashlib.sha256(json.dumps(rows, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _check_bcb_split(path: Path) -> None:
    from tokenworth_agent.tasks.bigcodebench import load_release_split

    digest = tasks_digest(load_release_split(path))
    if digest != BCB_TASKS_SHA256:
        raise DataError(f"its tasks' digest is {digest[:16]}…, expected {BCB_TASKS_SHA256[:16]}… (the tasks of "
                        "v0.1.0_hf with the v0.1.4 edits)")


def _check_bcb_hard(path: Path) -> None:
    from tokenworth_agent.tasks.bigcodebench import hard_numbers, hard_split_numbers

    found = hard_split_numbers(path)
    if found != hard_numbers():
        extra = sorted(set(found) - set(hard_numbers()))[:5]
        missing = sorted(set(hard_numbers()) - set(found))[:5]
        raise DataError(f"its {len(found)} task ids are not the {len(hard_numbers())} shipped Hard ids "
                        f"(not in the list: {extra}; missing: {missing})")


def _lab(env: str, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[Benchmark]) -> list[Download]:
    from tokenworth_agent.tasks.lab import ENV_SUBDIR, HUB_ID, LAB, ONTOLOGY_DIR, PARQUET_NAME

    folder = benchmark_dir(LAB, data_dir, benchmarks)
    name = f"{ENV_SUBDIR[env]}/{PARQUET_NAME}"
    items = [Download(env, hub_url(HUB_ID, name, LAB_REVISION), folder / name, sha256=LAB_SHA256[env])]
    if env == "kg":
        base = (os.environ.get(ONTOLOGY_URL_VARIABLE) or DEFAULT_ONTOLOGY_URL).rstrip("/")
        items += [Download(f"kg (ontology {file})", f"{base}/{file}", folder / ONTOLOGY_DIR / file, sha256=digest)
                  for file, digest in ONTOLOGY_SHA256.items()]
    return items


def _bigcodebench(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[Benchmark]) -> list[Download]:
    from tokenworth_agent.tasks.bigcodebench import BCB, HARD_SPLIT_FILE, SPLIT_FILE

    folder = benchmark_dir(BCB, data_dir, benchmarks)
    return [Download("bigcodebench", hub_url(BCB_HUB_ID, BCB_HUB_FILE, BCB_REVISION), folder / SPLIT_FILE,
                     sha256=BCB_SPLIT_SHA256, check=_check_bcb_split),
            Download("bigcodebench (Hard ids)", hub_url(BCB_HARD_HUB_ID, BCB_HUB_FILE, BCB_HARD_REVISION),
                     folder / HARD_SPLIT_FILE, check=_check_bcb_hard,
                     described=f"the hub's parquet of split v0.1.4 at commit {BCB_HARD_REVISION}")]


def _check_alfworld_zip(path: Path) -> None:
    from tokenworth_agent.tasks.alfworld import EXPECTED_GAMES, zip_game_counts

    counts = zip_game_counts(path)
    if counts != EXPECTED_GAMES:
        raise DataError(f"it lists {counts} game files, expected {EXPECTED_GAMES}")


def _alfworld(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[Benchmark]) -> list[Download]:
    from tokenworth_agent.tasks.alfworld import ALFWORLD, RELEASE

    folder = benchmark_dir(ALFWORLD, data_dir, benchmarks)
    base = (os.environ.get(ALFWORLD_URL_VARIABLE) or ALFWORLD_RELEASE_URL).rstrip("/")
    return [Download("alfworld", f"{base}/{ALFWORLD_ZIP}", folder / ALFWORLD_ZIP, check=_check_alfworld_zip,
                     described=f"ALFWorld's release zip of the game files; its games are checked and unpacked "
                               f"to {folder / RELEASE}")]


def fetch_alfworld(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[Benchmark], say: Say = print,
                   timeout: float = TIMEOUT_S) -> bool:
    """Make ``alfworld/json_2.1.1`` from ALFWorld's release zip, checked by content (module docstring); True if
    anything was downloaded. Nothing is fetched when a verified ``json_2.1.1/`` or the shipped archive is there."""
    from tokenworth_agent.tasks.alfworld import (ALFWORLD, ARCHIVE, ARCHIVE_SHA256, RELEASE, check_release,
                                                 install_release_zip)

    folder = benchmark_dir(ALFWORLD, data_dir, benchmarks)
    target = folder / RELEASE
    [item] = _alfworld(data_dir, benchmarks)
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
    _sync_folder(folder)
    say(f"alfworld: {target} unpacked from {item.path.name} and verified (the zip was deleted)")
    return downloaded


def downloads(env: str, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[Benchmark]) -> list[Download]:
    """The files ``env`` needs under the data root, in the order they are fetched."""
    if env in ("db", "os", "kg"):
        return _lab(env, data_dir, benchmarks)
    if env == "bigcodebench":
        return _bigcodebench(data_dir, benchmarks)
    if env == "alfworld":
        return _alfworld(data_dir, benchmarks)
    raise DataError(f"unknown environment {env!r} for data fetch; expected some of {', '.join(FETCH_ENVS)}")


def data_source(env: str, data_dir: str | os.PathLike[str] | None,
                benchmarks: Sequence[Benchmark]) -> dict[str, str | None]:
    """Which source, at which commit, and which digest ``env``'s tasks come from: what a run's ``config.json``
    keeps as ``data_source``. The digest is of the file the loader reads, taken now (a few MB at most); for
    ALFWorld's games, the manifest digest the loader checks them against."""
    if env in ("db", "os", "kg"):
        from tokenworth_agent.tasks.lab import ENV_SUBDIR, HUB_ID, LAB, PARQUET_NAME

        name = f"{ENV_SUBDIR[env]}/{PARQUET_NAME}"
        return {"source": hub_source(HUB_ID, name, LAB_REVISION),
                "sha256": _digest(benchmark_dir(LAB, data_dir, benchmarks) / name)}
    if env == "bigcodebench":
        from tokenworth_agent.tasks.bigcodebench import BCB, FILE, SPLIT_FILE

        folder = benchmark_dir(BCB, data_dir, benchmarks)
        if (folder / FILE).is_file():  # the loader's first choice
            return {"source": BCB_FIRST_RELEASE_SOURCE, "sha256": _digest(folder / FILE)}
        return {"source": hub_source(BCB_HUB_ID, BCB_HUB_FILE, BCB_REVISION), "sha256": _digest(folder / SPLIT_FILE)}
    if env == "alfworld":
        from tokenworth_agent.tasks.alfworld import ALFWORLD, ARCHIVE, MANIFEST_SHA256, RELEASE

        folder = benchmark_dir(ALFWORLD, data_dir, benchmarks)
        source = (f"{ALFWORLD_RELEASE_URL}/{ALFWORLD_ZIP}" if (folder / RELEASE).is_dir() else
                  f"{ARCHIVE} (a third party's repack of the same games)")
        return {"source": source, "manifest_sha256": MANIFEST_SHA256}
    raise DataError(f"unknown environment {env!r}; expected some of {', '.join(FETCH_ENVS)}")


def _digest(path: Path) -> str | None:
    """The file's sha256; None where there is no file (tasks handed to the plan another way, as tests do)."""
    return file_sha256(path) if path.is_file() else None


def present_first_release(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[Benchmark]) -> Path | None:
    """The shipped BigCodeBench.jsonl.gz when it is there and is v0.1.0_hf (then nothing is fetched for BCB)."""
    from tokenworth_agent.tasks.bigcodebench import BCB, FILE

    path = benchmark_dir(BCB, data_dir, benchmarks) / FILE
    return path if path.is_file() and file_sha256(path) == BCB_FIRST_RELEASE_SHA256 else None


__all__ = ["FETCH_ENVS", "Download", "fetch_file", "downloads", "hub_url", "hub_source", "data_source", "hf_endpoint", "tasks_digest",
           "file_sha256", "present_first_release", "LAB_SHA256", "ONTOLOGY_SHA256", "BCB_TASKS_SHA256",
           "HF_ENDPOINT_VARIABLE", "ALFWORLD_URL_VARIABLE", "ONTOLOGY_URL_VARIABLE", "ALFWORLD_RELEASE_URL",
           "ALFWORLD_ZIP", "fetch_alfworld", "BCB_REVISION", "BCB_HARD_REVISION", "BCB_SPLIT_SHA256", "LAB_REVISION",
           "ONTOLOGY_COMMIT"]
