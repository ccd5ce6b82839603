"""LAB's KG ontology (``vocab.json``, ``fb_roles``): the KG benchmark's ``--kg-vocab`` option.

Relation and attribute listings are filtered through the vocabulary and a variable's type comes from
``fb_roles``, as LAB does (docs/kg.md). The files' sha256 enters a KG run's identity (``kg_vocab_sha256``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from tokenworth_agent.core.harness import HarnessError

KG_VOCAB_FILES = ("vocab.json", "fb_roles")  # what LAB reads from its ontology folder


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True)
class KGVocabulary:
    """LAB's KG ontology: the relation and attribute vocabularies and relation ranges."""

    relations: frozenset[str]
    attributes: frozenset[str]
    ranges: dict[str, str]


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


def vocab_digest(folder: str) -> str:
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



__all__ = ["KGVocabulary", "KG_VOCAB_FILES", "load_fb_roles", "load_kg_vocabulary", "vocab_digest"]
