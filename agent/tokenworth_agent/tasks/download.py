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
counts and :data:`~tokenworth_agent.benchmarks.alfworld.tasks.MANIFEST_SHA256`); the zip is then deleted. A
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

from tokenworth_agent.tasks.base import DataFolder, DataError, benchmark_dir, file_sha256

HF_ENDPOINT_VARIABLE = "HF_ENDPOINT"
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
CHUNK = 1 << 16
TIMEOUT_S = 60.0

Say = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Download:
    """One file to fetch: where from, where to, and how it is checked (a sha256, or ``check`` on the file); a
    benchmark's ``downloads(data_dir, folders)`` lists them for ``tokenworth data fetch``.

    Attributes:
        label: how messages name it: "db", "bigcodebench (Hard ids)", ...
        url: where it is downloaded from.
        path: where it goes (under the benchmark's folder: ``benchmark_dir(...) / name``).
        sha256: its digest, or None (then ``check``).
        check: ``check(path)`` raises DataError when the file is not the one wanted, or None.
        described: what ``check`` checks, for the by-hand message.
    """

    label: str  # for messages: "db", "bigcodebench (Hard ids)", ...
    url: str
    path: Path
    sha256: str | None = None
    check: Callable[[Path], None] | None = None  # raises DataError when the file is not the one wanted
    described: str = ""  # what the check is, for the by-hand message

    def verify(self, path: Path) -> None:
        """Check the file at ``path`` (its sha256, then ``check``); a DataError says what differs."""
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
    sync_folder(item.path.parent)
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


def sync_folder(folder: Path) -> None:
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


def downloads(env: str, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder]) -> list[Download]:
    """The files ``env`` needs under the data root, in the order they are fetched (its benchmark's ``downloads``)."""
    from tokenworth_agent.core.plugins import benchmark

    listed = getattr(benchmark(env), "downloads", None)
    if listed is None:
        raise DataError(f"{env}: its benchmark names no files to fetch; put its data in place by hand")
    return listed(data_dir, benchmarks)


def file_digest(path: Path) -> str | None:
    """The file's sha256; None where there is no file (tasks handed to the plan another way, as tests do)."""
    return file_sha256(path) if path.is_file() else None


def data_source(env: str, data_dir: str | os.PathLike[str] | None,
                benchmarks: Sequence[DataFolder]) -> dict[str, str | None]:
    """Which source, at which commit, and which digest ``env``'s tasks come from: what a run's ``config.json``
    keeps as ``data_source`` (its benchmark's ``data_source``; ``{}`` where it says none)."""
    from tokenworth_agent.core.plugins import benchmark

    source = benchmark(env).data_source
    return {} if source is None else dict(source(data_dir, benchmarks))


__all__ = ["Download", "fetch_file", "downloads", "hub_url", "hub_source", "data_source", "hf_endpoint", "tasks_digest",
           "file_sha256", "file_digest", "HF_ENDPOINT_VARIABLE", "Say", "sync_folder"]
