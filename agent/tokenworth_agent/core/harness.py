"""Run-level harness options: how faithfully the harness follows LifelongAgentBench (LAB).

One frozen value, :class:`HarnessOptions`, is threaded to every environment
(:func:`tokenworth_agent.envs.registry.make_environment`) and every policy
(:func:`tokenworth_agent.policies.registry.make_policy`), and its :meth:`~HarnessOptions.identity` is
part of each stream's identity, so a run made with other options never resumes into this one.

The options (``tokenworth run``/``sweep`` flags of the same names; docs/running.md):

* ``memory_from`` — which successes write a memory. ``"completed"`` (default, LAB's rule for
  previous-sample memories): reward 1 *and* the episode ended by its own answer/finish action.
  ``"reward"``: reward 1 alone (a DB write task that passed on the table hash after an invalid
  reply or the round limit also counts).
* ``memory_format`` — how a memory is written (:mod:`tokenworth_agent.memory`). ``"compact"`` (default):
  the actions exactly as the model must write them, short observations. ``"transcript"``: the
  raw question, replies and observations, as LAB's previous-sample utilisation shows them.
  ``"abstract"``: compact, with OS user/group names, home paths and PIDs replaced by
  placeholders (the paper's App. B.4 reading; such scripts cannot be run as written).
* ``kg_parser`` — ``"strict"`` (default): the KG reply parser accepts exactly what LAB's does;
  ``"lenient"``: the project's forgiving one (docs/kg.md has the case table).
* ``kg_vocab`` — a folder with LAB's KG ontology files (``vocab.json``, ``fb_roles``): relation
  and attribute listings are filtered through it and variable types come from ``fb_roles``.
* ``instructions`` — a folder holding ``<env>.txt``: that text replaces the environment's
  instructions (user turn 0); the memory block and the task go where they always go.
* ``bcb_venv`` — BigCodeBench's evaluation venv (:mod:`tokenworth_agent.core.bigcodebench_venv`; default
  ``$TOKENWORTH_BCB_VENV``, else the checkout's ``.venv-bcb``). Its evaluator version and a
  fingerprint of its libraries are part of a BigCodeBench run's identity; its path is not.
* ``bcb_verdicts`` — a JSON-lines file where BigCodeBench verdicts are kept and reused across
  streams and runs (:mod:`tokenworth_agent.envs.bigcodebench_verdicts`); ``None``: kept in memory for the run.
* ``bcb_time_limit`` — the BigCodeBench evaluator's limit for one task's tests, seconds (upstream's
  240 by default; part of the run's identity).

Files named by the options are read when an environment is made, and their sha256 is part of
:meth:`HarnessOptions.identity`; a missing or unreadable file is a :class:`HarnessError` with a
one-line message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from tokenworth_agent.core.bigcodebench_venv import VenvError, open_venv
from tokenworth_agent.core.alfworld_venv import EngineVenvError
from tokenworth_agent.core.alfworld_venv import open_venv as open_alfworld_venv

MEMORY_FROM = ("completed", "reward")  # which successes write a memory
MEMORY_FORMATS = ("compact", "transcript", "abstract")  # how a memory is rendered for injection
KG_PARSERS = ("strict", "lenient")
KG_VOCAB_FILES = ("vocab.json", "fb_roles")  # what LAB reads from its ontology folder
BCB_TIME_LIMIT = 240.0  # seconds: upstream's per-task limit (bigcodebench.eval.utils.TIMEOUT_LIMIT)


class HarnessError(ValueError):
    """A harness option names something unusable (a missing file, a bad folder, an unknown value)."""


@dataclasses.dataclass(frozen=True)
class KGVocabulary:
    """LAB's KG ontology: the relation and attribute vocabularies and relation ranges."""

    relations: frozenset[str]
    attributes: frozenset[str]
    ranges: dict[str, str]


@dataclasses.dataclass(frozen=True)
class HarnessOptions:
    memory_from: str = "completed"
    memory_format: str = "compact"
    kg_parser: str = "strict"
    kg_vocab: str | None = None  # a folder of LAB's KG vocabulary files
    instructions: str | None = None  # a folder holding <env>.txt instruction texts
    bcb_venv: str | None = None  # BigCodeBench's evaluation venv (None: $TOKENWORTH_BCB_VENV, else .venv-bcb)
    bcb_verdicts: str | None = None  # a file of BigCodeBench verdicts reused across streams and runs
    bcb_time_limit: float = BCB_TIME_LIMIT  # the BigCodeBench evaluator's limit per task, seconds

    def __post_init__(self) -> None:
        for field, allowed in (("memory_from", MEMORY_FROM), ("memory_format", MEMORY_FORMATS),
                               ("kg_parser", KG_PARSERS)):
            if getattr(self, field) not in allowed:
                flag = "--" + field.replace("_", "-")
                raise HarnessError(f"{flag} must be one of {', '.join(allowed)}, got {getattr(self, field)!r}")
        if not 0 < self.bcb_time_limit < float("inf"):
            raise HarnessError(f"--bcb-time-limit must be a positive number of seconds, got {self.bcb_time_limit}")

    # ------------------------------------------------------------------ files the options name
    def instructions_path(self, env: str) -> Path | None:
        return None if self.instructions is None else Path(self.instructions) / f"{env}.txt"

    def instruction_text(self, env: str) -> str | None:
        """The text of ``DIR/<env>.txt``, or ``None`` when the environment's own text is used."""
        path = self.instructions_path(env)
        if path is None:
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise HarnessError(f"--instructions {self.instructions}: no {env}.txt there (one file per "
                               f"environment, named <env>.txt)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise HarnessError(f"--instructions: cannot read {path}: {exc}") from None
        if not text.strip():
            raise HarnessError(f"--instructions: {path} is empty")
        return text

    def kg_vocabulary(self) -> KGVocabulary | None:
        """LAB's ontology from ``kg_vocab`` (``None`` without it); see :func:`load_kg_vocabulary`."""
        return None if self.kg_vocab is None else load_kg_vocabulary(self.kg_vocab)

    def validate(self, env: str) -> None:
        """Read every file the options name for ``env`` now, so a bad path fails before any task runs."""
        self.instruction_text(env)
        if env == "kg":
            self.kg_vocabulary()
        if env == "bigcodebench":
            self.bcb_evaluator()
        if env == "alfworld":
            alfworld_engine()

    def bcb_evaluator(self) -> dict[str, str]:
        """The BigCodeBench evaluator's identity (version, library fingerprint); HarnessError without a venv."""
        try:
            return open_venv(self.bcb_venv).identity()
        except VenvError as exc:
            raise HarnessError(str(exc)) from None

    def identity(self, env: str) -> dict[str, Any]:
        """What of these options changes ``env``'s results (JSON-ready).

        File contents enter by their sha256, so editing an instruction file or a vocabulary
        makes a different run even under the same path.
        """
        identity: dict[str, Any] = {"memory_from": self.memory_from, "memory_format": self.memory_format}
        text = self.instruction_text(env)
        identity["instructions_sha256"] = None if text is None else _sha256(text.encode("utf-8"))
        if env == "kg":
            identity["kg_parser"] = self.kg_parser
            identity["kg_vocab_sha256"] = None if self.kg_vocab is None else _vocab_digest(self.kg_vocab)
        if env == "bigcodebench":
            identity["bcb_evaluator"] = self.bcb_evaluator()
            identity["bcb_time_limit"] = self.bcb_time_limit
        if env == "alfworld":
            identity["alfworld_engine"] = alfworld_engine()
        return identity


def alfworld_engine() -> dict[str, str]:
    """ALFWorld's engine packages and versions (part of a run's identity); HarnessError without its venv."""
    try:
        return open_alfworld_venv().identity()
    except EngineVenvError as exc:
        raise HarnessError(str(exc)) from None


DEFAULT_HARNESS = HarnessOptions()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _vocab_file(folder: str, name: str) -> Path:
    path = Path(folder)
    if not path.is_dir():
        raise HarnessError(f"--kg-vocab {folder}: not a readable folder")
    return path / name


def _read_vocab_bytes(folder: str, name: str) -> bytes:
    path = _vocab_file(folder, name)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise HarnessError(f"--kg-vocab {folder}: no {name} there (LAB's ontology folder holds "
                           f"{' and '.join(KG_VOCAB_FILES)})") from None
    except OSError as exc:
        raise HarnessError(f"--kg-vocab: cannot read {path}: {exc.strerror or exc}") from None


def _vocab_digest(folder: str) -> str:
    return _sha256(b"".join(_sha256(_read_vocab_bytes(folder, name)).encode() for name in KG_VOCAB_FILES))


def load_fb_roles(path: str) -> dict[str, str]:
    """Relation -> range from a GrailQA/AgentBench ``fb_roles`` file (``domain relation range`` lines).

    A line is read by its first three fields, as splitting it and indexing does: the shipped file has
    one line (5608) where two entries lost the newline between them, and that line gives its first
    relation the glued range ``type.intbase.litcentral.financial_support_provider`` (docs/kg.md).
    A line with fewer than three fields is refused."""
    ranges: dict[str, str] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 3:
                raise ValueError(f"{path}:{number}: expected 'domain relation range', got {line.strip()!r}")
            ranges[fields[1]] = fields[2]
    return ranges


def load_kg_vocabulary(folder: str) -> KGVocabulary:
    """``vocab.json`` (``{"relations": [...], "attributes": [...]}``) and ``fb_roles``
    (``domain relation range`` lines) from LAB's ontology folder."""
    try:
        vocab = json.loads(_read_vocab_bytes(folder, "vocab.json").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HarnessError(f"--kg-vocab {folder}: vocab.json is not JSON ({exc})") from None
    lists = {key: vocab.get(key) if isinstance(vocab, dict) else None for key in ("relations", "attributes")}
    for key, value in lists.items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise HarnessError(f"--kg-vocab {folder}: vocab.json needs a list of strings under {key!r}")
    _read_vocab_bytes(folder, "fb_roles")  # the clear error for a missing or unreadable file
    try:
        ranges = load_fb_roles(str(_vocab_file(folder, "fb_roles")))
    except (ValueError, UnicodeDecodeError) as exc:
        raise HarnessError(f"--kg-vocab {folder}: {exc}") from None
    return KGVocabulary(frozenset(lists["relations"]), frozenset(lists["attributes"]), ranges)


def harness_from_cli(env: str, *, memory_from: str = DEFAULT_HARNESS.memory_from,
                     memory_format: str = DEFAULT_HARNESS.memory_format,
                     kg_parser: str = DEFAULT_HARNESS.kg_parser, kg_vocab: str | Path | None = None,
                     instructions: str | Path | None = None, bcb_venv: str | Path | None = None,
                     bcb_verdicts: str | Path | None = None, bcb_time_limit: float = BCB_TIME_LIMIT) -> HarnessOptions:
    """The run's :class:`HarnessOptions` from the CLI flags, every named file checked for ``env``.

    Raises :class:`HarnessError` (one line, naming the flag) on any bad value.
    """
    if kg_vocab is not None and str(kg_vocab).strip().lower() == "none":  # --kg-vocab none: no ontology
        kg_vocab = None
    options = HarnessOptions(memory_from=memory_from.strip().lower(), memory_format=memory_format.strip().lower(),
                             kg_parser=kg_parser.strip().lower(),
                             kg_vocab=None if kg_vocab is None else str(kg_vocab),
                             instructions=None if instructions is None else str(instructions),
                             bcb_venv=None if bcb_venv is None else str(bcb_venv),
                             bcb_verdicts=None if bcb_verdicts is None else str(bcb_verdicts),
                             bcb_time_limit=float(bcb_time_limit))
    if options.bcb_verdicts is not None and Path(options.bcb_verdicts).is_dir():
        raise HarnessError(f"--bcb-verdicts {options.bcb_verdicts}: a folder; name the file the verdicts go in")
    if options.instructions is not None and not Path(options.instructions).is_dir():
        raise HarnessError(f"--instructions {options.instructions}: not a folder (it must hold <env>.txt files)")
    options.validate(env)
    return options


__all__ = ["HarnessOptions", "HarnessError", "KGVocabulary", "DEFAULT_HARNESS", "MEMORY_FROM", "MEMORY_FORMATS",
           "KG_PARSERS", "KG_VOCAB_FILES", "BCB_TIME_LIMIT", "harness_from_cli", "load_fb_roles", "load_kg_vocabulary"]
