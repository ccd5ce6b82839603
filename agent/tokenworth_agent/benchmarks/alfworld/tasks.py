"""ALFWorld's games, the paper's 574-episode manifest (Appendix C) and the task record.

**Data.** The data root's ``alfworld/`` folder holds ALFWorld's ``json_2.1.1`` games, either as
``json_2.1.1.tar.xz`` (the shared copy: a third party's repack of the games, not a file ALFWorld
publishes) or unpacked as ``json_2.1.1/`` (what ``tokenworth data fetch --env alfworld`` makes from the
official release zip, :func:`install_release_zip`, checked by what the harness reads from it:
:data:`MANIFEST_SHA256`). An archive is unpacked once,
sha256-checked, into a cache outside the repository (``$TOKENWORTH_ALFWORLD_CACHE``, default
``~/.cache/tokenworth/alfworld``), with a ``.complete`` marker so a killed unpack is redone; tar's
``data`` filter refuses links and paths that leave the cache. A game is named by its path relative
to the release root (``valid_seen/<task folder>/<trial>/game.tw-pddl``), so a manifest does not depend
on where the data was unpacked.

**The manifest** (:func:`build_manifest`): 300 train games, then all 140 valid_seen, then all 134
valid_unseen, with phase seeds 42, 43, 44. In each phase:

1. sort the phase's game paths (plain ``str`` order);
2. group them by task type (from the folder name), each group keeping the sorted order;
3. shuffle the groups with ONE ``random.Random(seed)``, in sorted task-type order (:data:`TASK_TYPES`);
4. deal by round-robin over the task types in the same order, skipping exhausted types, until the
   phase has its games.

Decisions where the paper is silent (docs/alfworld.md): Python's ``random.Random(seed).shuffle``
(MT19937; stable across Python versions for an int seed); one RNG per phase shared by the six groups
in sorted type order; the round-robin in sorted type order (the order in which types first appear in
the sorted paths, NOT ALFWorld's own ids 1-6); "task-type-stratified" = equal allocation, 50 train
games per type (every type has at least 308). The paper's exact list cannot be recovered without its
code: results are comparable in protocol, not game for game. Consequence: the first six episodes of
every phase are one game of each type, so ``--limit 6`` plays one game per type.

**The record** (:class:`ALFWorldTask`): the manifest entry (index, game, split, type, the game
file's sha256), the goal read from the game's grammar (what similarity-based methods index), skills
= the task type alone (see :mod:`tokenworth_agent.benchmarks.alfworld.replies`), and the walkthrough, which ONLY the
simulated backbone and the gold replay read: the environment reads the game file itself and never
passes the walkthrough to the engine, a prompt or a memory.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import json
import os
import random
import re
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from tokenworth_agent.tasks.base import DataFolder, DataError, Task, benchmark_dir, data_error, file_sha256

ENV = "alfworld"
RELEASE = "json_2.1.1"
ARCHIVE = "json_2.1.1.tar.xz"
ARCHIVE_SHA256 = "106c9127f8588944e4647ad22a2d62eb5e1d329437ee74727337f2f2f79c7bd4"
# What the harness reads from a release, as one digest: sha256 of manifest_text(build_manifest(root)), i.e. each
# of the 574 episodes' game path, split, type, seed, rank and the sha256 of its game file, in stream order (an
# order that depends on every game path of the three splits). Computed from the shared json_2.1.1.tar.xz; a
# release fetched from ALFWorld's zip must give the same (check_release).
MANIFEST_SHA256 = "bd84b9686c5b8e275cc5b70a7e684d5d391cc038029a1ab57b647254471ac855"
GAME_FILE = "game.tw-pddl"
SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen")
EXPECTED_GAMES = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
# The six task types in sorted order: the manifest's shuffle and round-robin order.
TASK_TYPES: tuple[str, ...] = (
    "look_at_obj_in_light",
    "pick_and_place_simple",
    "pick_clean_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_two_obj_and_place",
)
# (split, seed, games taken; None = all), in stream order
PHASES: tuple[tuple[str, int, int | None], ...] = (("train", 42, 300), ("valid_seen", 43, None),
                                                   ("valid_unseen", 44, None))
EPISODES = 574
MANIFEST_NAME = "alfworld_manifest.jsonl"
CACHE_VARIABLE = "TOKENWORTH_ALFWORLD_CACHE"
DEFAULT_CACHE = Path("~/.cache/tokenworth/alfworld")

ALFWORLD = DataFolder(
    "alfworld", markers=(ARCHIVE, RELEASE),
    how_to_get=(f"{{folder}} must hold the unpacked {RELEASE}/ folder (`tokenworth data fetch --env alfworld` "
                f"makes it from ALFWorld's release zip) or {ARCHIVE} (sha256 {ARCHIVE_SHA256[:12]}…, a third "
                f"party's repack of the same games, not a file ALFWorld publishes)."))

_TASK_DIR = re.compile(r"^(?P<type>[a-z_]+)-(?P<object>[A-Za-z]+)-(?P<mrecep>[A-Za-z]+)-(?P<parent>[A-Za-z]+)"
                       r"-(?P<scene>\d+)$")
_GOAL = re.compile(r'"task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*"Your task is to: (.*?)"\s*\}', re.DOTALL)


# ------------------------------------------------------------------ games
@dataclasses.dataclass(frozen=True)
class GameRef:
    """One game as the manifest names it (from its path alone)."""

    relpath: str  # relative to the release root, '/'-separated
    split: str
    task_type: str
    object_class: str  # ALFRED's object type from the folder name ("AlarmClock")
    parent: str  # the target receptacle (or the lamp, for look_at_obj_in_light)


def parse_relpath(relpath: str) -> GameRef:
    parts = relpath.split("/")
    if len(parts) != 4 or parts[0] not in SPLITS or parts[3] != GAME_FILE:
        raise DataError(f"{relpath}: not <split>/<task folder>/<trial>/{GAME_FILE}")
    match = _TASK_DIR.match(parts[1])
    if match is None or match["type"] not in TASK_TYPES:
        raise DataError(f"{relpath}: task folder {parts[1]!r} does not name one of the six task types")
    return GameRef(relpath, parts[0], match["type"], match["object"], match["parent"])


def discover(root: Path, split: str) -> list[GameRef]:
    """Every game of ``split``, sorted by relative path (the manifest's first step)."""
    base = root / split
    if not base.is_dir():
        raise DataError(f"{base}: no such folder; the {RELEASE} release is incomplete")
    rels = sorted(f"{split}/{p.parent.parent.name}/{p.parent.name}/{GAME_FILE}" for p in base.glob(f"*/*/{GAME_FILE}"))
    return [parse_relpath(r) for r in rels]


def read_game(path: Path) -> dict[str, Any]:
    """A game file's JSON, checked (the three PDDL/grammar texts, a list of commands, not unsolvable).

    Raises :class:`DataError` naming the file; the game is never half-read.
    """
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError as exc:
        raise DataError(f"{path}: game file missing") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a JSON game file ({exc}); the file looks corrupt") from exc
    if not isinstance(data, dict):
        raise DataError(f"{path}: holds a {type(data).__name__}, expected a JSON object; the file looks corrupt")
    for key in ("pddl_domain", "grammar", "pddl_problem"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise DataError(f"{path}: key {key!r} missing or not text; the file looks corrupt")
    walk = data.get("walkthrough")
    if not isinstance(walk, list) or not walk or not all(isinstance(c, str) and c.strip() for c in walk):
        raise DataError(f"{path}: 'walkthrough' missing or not a list of commands; the file looks corrupt")
    if data.get("solvable") is False:
        raise DataError(f"{path}: marked unsolvable")
    return data


def goal_of(grammar: str, path: Path) -> str:
    """The goal sentence from the game's grammar ("look at alarmclock under the desklamp.")."""
    match = _GOAL.search(grammar)
    if match is None:
        raise DataError(f"{path}: the grammar has no 'Your task is to: ...' rule; the file looks corrupt")
    return match.group(1).strip()


def cache_folder() -> Path:
    return Path(os.environ.get(CACHE_VARIABLE) or DEFAULT_CACHE).expanduser()


def unpack_release(archive: Path, cache: Path) -> Path:
    """Unpack ``archive`` once into ``cache``; returns ``cache/json_2.1.1`` (see the module docstring)."""
    root = cache / RELEASE
    if (root / ".complete").exists():
        return root
    digest = file_sha256(archive)
    if digest != ARCHIVE_SHA256:
        raise DataError(f"{archive}: sha256 {digest}, expected {ARCHIVE_SHA256}; the archive is corrupt or "
                        f"another release")
    cache.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        tar.extractall(cache, filter="data")
    counts = game_counts(root)
    if counts != EXPECTED_GAMES:
        raise DataError(f"{archive}: unpacked {counts}, expected {EXPECTED_GAMES}")
    (root / ".complete").write_text(digest + "\n")
    return root


def game_counts(root: Path) -> dict[str, int]:
    return {s: len(list((root / s).glob(f"*/*/{GAME_FILE}"))) for s in SPLITS}


def check_release(root: Path) -> None:
    """Refuse (DataError) a release whose games are not the ones the harness reads from the shipped archive:
    other game counts, or another manifest (:data:`MANIFEST_SHA256`)."""
    _check_games(game_counts(root), lambda: build_manifest(root))


def _check_games(counts: dict[str, int], episodes: Callable[[], list[dict[str, Any]]]) -> None:
    if counts != EXPECTED_GAMES:
        raise DataError(f"it holds {counts} games, expected {EXPECTED_GAMES}")
    digest = hashlib.sha256(manifest_text(episodes()).encode("utf-8")).hexdigest()
    if digest != MANIFEST_SHA256:
        raise DataError(f"its manifest's digest is {digest[:16]}…, expected {MANIFEST_SHA256[:16]}… (the games of "
                        f"the shipped {ARCHIVE})")


# A game file inside ALFWorld's release zips: json_2.1.1/<split>/<task folder>/<trial>/game.tw-pddl (no dots in
# the folder names, so no member can leave the folder it is unpacked into). Every other member is skipped.
_ZIP_GAME = re.compile(rf"{re.escape(RELEASE)}/({'|'.join(SPLITS)})/([\w-]+)/([\w-]+)/{re.escape(GAME_FILE)}",
                       re.ASCII)


def _zip_games(zipped: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """relpath -> member, for the game files of the three splits a release zip lists."""
    found = {}
    for info in zipped.infolist():
        match = _ZIP_GAME.fullmatch(info.filename)
        if match and not info.is_dir():
            found[info.filename[len(RELEASE) + 1:]] = info
    return found


def zip_game_counts(archive: Path) -> dict[str, int]:
    """The game files per split a release zip lists (its directory only); DataError if it is not a zip."""
    try:
        with zipfile.ZipFile(archive) as zipped:
            games = _zip_games(zipped)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise DataError(f"not a readable zip ({exc})") from None
    return {s: sum(1 for rel in games if rel.startswith(s + "/")) for s in SPLITS}


def install_release_zip(archive: Path, folder: Path) -> Path:
    """Unpack the game files of ALFWorld's release zip ``archive`` as ``folder/json_2.1.1``, checked.

    The games are checked twice: in the zip, before anything is written (the game paths and the manifest's
    games, read from the zip), then unpacked into a temporary folder beside the target and checked there
    (:func:`check_release`); only then is that folder renamed to ``json_2.1.1``. On any failure the folder
    is removed and DataError says why, so the target name only ever holds a checked release. Other members
    of the zip (``traj_data.json``, other splits) are not unpacked: the harness reads the game files alone."""
    target = folder / RELEASE
    if target.exists():
        raise DataError(f"{target} is there already; move it away first")
    for stale in folder.glob(f".{RELEASE}.*.unpack"):  # left by a killed install
        shutil.rmtree(stale, ignore_errors=True)
    temp: Path | None = None
    try:
        with zipfile.ZipFile(archive) as zipped:
            games = _zip_games(zipped)
            listing = {s: [parse_relpath(rel) for rel in sorted(games) if rel.startswith(s + "/")] for s in SPLITS}
            _check_games({s: len(refs) for s, refs in listing.items()},
                         lambda: manifest_of(listing.__getitem__,
                                             lambda rel: hashlib.sha256(zipped.read(games[rel])).hexdigest()))
            temp = Path(tempfile.mkdtemp(prefix=f".{RELEASE}.", suffix=".unpack", dir=folder))
            for relpath, info in games.items():
                out = temp / relpath
                out.parent.mkdir(parents=True, exist_ok=True)
                with zipped.open(info) as source, open(out, "wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
        check_release(temp)
        os.replace(temp, target)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
        raise DataError(f"cannot unpack it ({exc})") from None
    except BaseException:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
        raise
    return target


def release_root(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder] = ()) -> Path:
    """The unpacked release: ``alfworld/json_2.1.1/`` under the data root, else the archive unpacked into the
    cache. DataError (saying how to get the data) when neither is there."""
    folder = benchmark_dir(ALFWORLD, data_dir, benchmarks)
    unpacked = folder / RELEASE
    if all((unpacked / s).is_dir() for s in SPLITS):
        return unpacked
    archive = folder / ARCHIVE
    if archive.is_file():
        return unpack_release(archive, cache_folder())
    raise data_error(f"no ALFWorld games at {folder}", ALFWORLD, data_dir, folder)


# ------------------------------------------------------------------ the manifest
def phase_order(games: Sequence[GameRef], seed: int, take: int | None) -> list[GameRef]:
    """Sort, shuffle within each task type with ``random.Random(seed)``, deal round-robin (module docstring)."""
    groups: dict[str, list[GameRef]] = {t: [] for t in TASK_TYPES}
    for game in sorted(games, key=lambda g: g.relpath):
        groups[game.task_type].append(game)
    rng = random.Random(seed)
    for task_type in TASK_TYPES:
        rng.shuffle(groups[task_type])
    total = sum(len(g) for g in groups.values())
    take = total if take is None else take
    if take > total:
        raise DataError(f"a manifest phase asks for {take} games but its split has {total}")
    queues = {t: collections.deque(groups[t]) for t in TASK_TYPES}
    dealt: list[GameRef] = []
    while len(dealt) < take:
        for task_type in TASK_TYPES:
            if queues[task_type] and len(dealt) < take:
                dealt.append(queues[task_type].popleft())
    return dealt


def build_manifest(root: Path, phases: Iterable[tuple[str, int, int | None]] = PHASES) -> list[dict[str, Any]]:
    """The ordered episodes: index, phase, split, seed, rank in phase, task type, game, the game file's sha256."""
    return manifest_of(lambda split: discover(root, split), lambda relpath: file_sha256(root / relpath), phases)


def manifest_of(games: Callable[[str], Sequence[GameRef]], sha256_of: Callable[[str], str],
                phases: Iterable[tuple[str, int, int | None]] = PHASES) -> list[dict[str, Any]]:
    """:func:`build_manifest` over any listing: ``games(split)`` and ``sha256_of(relpath)`` (a folder, a zip)."""
    episodes: list[dict[str, Any]] = []
    for phase, (split, seed, take) in enumerate(phases):
        for rank, game in enumerate(phase_order(games(split), seed, take)):
            episodes.append({"index": len(episodes), "phase": phase, "split": split, "seed": seed,
                             "rank_in_phase": rank, "task_type": game.task_type, "game": game.relpath,
                             "sha256": sha256_of(game.relpath)})
    return episodes


def manifest_text(episodes: Sequence[dict[str, Any]]) -> str:
    """The manifest file's bytes: one JSON object per line, keys sorted (byte-identical across runs)."""
    return "".join(json.dumps(e, sort_keys=True) + "\n" for e in episodes)


def read_manifest(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a readable manifest ({exc})") from exc


# ------------------------------------------------------------------ the repair turn
# The environment writes it (agent/tokenworth_agent/benchmarks/alfworld/env.py); the simulator, like a model, reads it from the
# conversation. Kept here, below both, so there is one copy.
REPAIR_NO_ACTION = 'Your reply has no "Action:" line.'
REPAIR_INADMISSIBLE = '"{command}" is not a command you can use now.'
REPAIR_LIST = "The commands you can use now are:"
REPAIR_END = 'Reply with one line of the form "Action: <command>", choosing exactly one command from this list.'


def repair_prompt(command: str | None, admissible: Sequence[str]) -> str:
    """The repair turn: what was wrong, the admissible commands, the format asked for."""
    head = REPAIR_NO_ACTION if command is None else REPAIR_INADMISSIBLE.format(command=command)
    return f"{head}\n{REPAIR_LIST}\n" + "\n".join(admissible) + f"\n\n{REPAIR_END}"


def is_repair_turn(text: str) -> bool:
    return text.endswith(REPAIR_END) and f"\n{REPAIR_LIST}\n" in text


# ------------------------------------------------------------------ the record
@dataclasses.dataclass(frozen=True)
class ALFWorldTask:
    sample_index: int  # the manifest index
    game: str  # relative to the release root
    root: str  # the release root this run reads (the environment opens root/game)
    sha256: str  # the game file's digest, from the manifest: the environment plays this very file
    split: str
    task_type: str
    object_class: str
    parent: str
    goal: str  # "look at alarmclock under the desklamp."
    skill_list: tuple[str, ...]  # (task type,): see agent/tokenworth_agent/benchmarks/alfworld/replies.py
    walkthrough: tuple[str, ...]  # the expert plan: the simulated backbone and the gold replay ONLY
    env: str = ENV

    @property
    def task_id(self) -> str:
        return f"alfworld-{self.sample_index}"

    @property
    def query_text(self) -> str:
        return self.goal

    @property
    def path(self) -> Path:
        return Path(self.root) / self.game


def make_task(root: Path, entry: dict[str, Any]) -> ALFWorldTask:
    """The record of one manifest entry; reads and checks the game file (DataError names it)."""
    ref = parse_relpath(entry["game"])
    path = root / ref.relpath
    game = read_game(path)
    return ALFWorldTask(int(entry["index"]), ref.relpath, str(root), str(entry["sha256"]), ref.split, ref.task_type,
                        ref.object_class, ref.parent, goal_of(game["grammar"], path), (ref.task_type,),
                        tuple(game["walkthrough"]))


@functools.lru_cache(maxsize=4)
def _stream(root: str) -> tuple[tuple[dict[str, Any], ...], tuple[ALFWorldTask, ...]]:
    episodes = build_manifest(Path(root))
    if len(episodes) != EPISODES:
        raise DataError(f"{root}: the manifest has {len(episodes)} episodes, expected {EPISODES}")
    return tuple(episodes), tuple(make_task(Path(root), e) for e in episodes)


def manifest(data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder] = ()) -> list[dict[str, Any]]:
    """The whole 574-episode manifest of the data root's release (whatever ``--limit`` a run has)."""
    return [dict(e) for e in _stream(str(release_root(data_dir, benchmarks)))[0]]


def check_follows(tasks: Sequence[Task], episodes: Sequence[dict[str, Any]]) -> None:
    """Refuse a stream that is not the manifest's order (each task's index, game and digest)."""
    for position, task in enumerate(tasks):
        entry = episodes[position] if position < len(episodes) else None
        if (entry is None or entry["index"] != position or getattr(task, "sample_index", None) != position
                or getattr(task, "game", None) != entry["game"] or getattr(task, "sha256", None) != entry["sha256"]):
            raise DataError(f"ALFWorld episode {position} ({getattr(task, 'game', task)}) is not the manifest's "
                            f"{entry['game'] if entry else 'end'}: the stream does not follow the manifest")


@dataclasses.dataclass(frozen=True)
class ALFWorldSource:
    """The stream's task source (``tokenworth_agent.tasks.registry.TASK_SOURCES``)."""

    env: str = ENV
    benchmark: DataFolder = ALFWORLD

    def load(self, data_dir: str | os.PathLike[str] | None, benchmarks: Sequence[DataFolder] = ()) -> list[Task]:
        """The 574 episodes in manifest order; DataError for missing data, a corrupt game file (named) or a
        release with other game counts."""
        episodes, tasks = _stream(str(release_root(data_dir, benchmarks)))
        check_follows(tasks, episodes)
        return list(tasks)

    def run_files(self, data_dir: str | os.PathLike[str] | None,
                  benchmarks: Sequence[DataFolder] = ()) -> dict[str, str]:
        """Files a run folder keeps beside its records: the whole manifest (also under ``--limit``)."""
        return {MANIFEST_NAME: manifest_text(manifest(data_dir, benchmarks))}


SOURCE = ALFWorldSource()

__all__ = ["REPAIR_END", "REPAIR_INADMISSIBLE", "REPAIR_LIST", "REPAIR_NO_ACTION", "is_repair_turn",
           "repair_prompt", "ALFWorldTask", "ALFWORLD", "ENV", "EPISODES", "MANIFEST_NAME", "PHASES", "SOURCE", "TASK_TYPES",
           "GameRef", "MANIFEST_SHA256", "build_manifest", "check_follows", "check_release", "discover",
           "file_sha256", "game_counts", "goal_of", "install_release_zip", "make_task", "manifest_of",
           "zip_game_counts",
           "manifest", "manifest_text", "parse_relpath", "phase_order", "read_game", "read_manifest",
           "release_root", "unpack_release"]
