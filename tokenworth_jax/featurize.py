"""Deterministic hashed text vectors (host side: strings cannot enter jit).

Tokenisation, exactly:

1. ``unicodedata.normalize("NFKC", text).lower()``; every whitespace run becomes one space;
   leading/trailing spaces are stripped.
2. Word features: every match of the regex ``\\w+``, prefixed ``"w:"``.
3. Character n-grams for n = 3, 4, 5 over ``" " + text + " "`` (the padding marks word
   edges at the ends), every window position, prefixed ``"c3:"``, ``"c4:"``, ``"c5:"``.
4. Each feature string (UTF-8) is hashed with BLAKE2b, 8-byte digest read as a little-endian
   unsigned integer ``h``. Bucket ``h mod dim``; sign ``+1`` if bit 63 of ``h`` is clear, else
   ``-1`` (signed feature hashing keeps collisions unbiased). Every occurrence adds its sign.
5. The vector is L2-normalised; an empty text gives the zero vector.

BLAKE2b is part of the standard library and independent of ``PYTHONHASHSEED``, so the same
text gives the same vector in every process and on every machine.

TokenWorth+'s learned ranker reads two more vectors (:func:`word_vectors`, :func:`action_vectors`):
units that mean something on their own, not character n-grams, which suit near-duplicate recall.
Tokenisation, exactly: :func:`normalise`; tokens are ``\\w+`` runs, and for actions also runs of
other non-space characters (operators such as ``>=``, ``*``, ``(``); features are ``"w:" + token``
and ``"b:" + t1 + " " + t2`` for each adjacent pair; each *distinct* feature adds its signed
bucket as above (presence, not counts, so a long observation or a repeated column name does not
outweigh the keywords); L2-normalised. Words beat character n-grams there by 2-3 points of the
chosen memory's skill overlap (docs/ranking-research.md).
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from typing import Iterable, Sequence

import numpy as np

WORD = re.compile(r"\w+")
ACTION_TOKEN = re.compile(r"\w+|[^\w\s]+")
SPACES = re.compile(r"\s+")
NGRAM_SIZES = (3, 4, 5)


def normalise(text: str) -> str:
    return SPACES.sub(" ", unicodedata.normalize("NFKC", text).lower()).strip()


def features(text: str) -> list[str]:
    """The feature strings of ``text``, in a fixed order (words, then 3-, 4-, 5-grams)."""
    norm = normalise(text)
    out = [f"w:{tok}" for tok in WORD.findall(norm)]
    if norm:
        padded = f" {norm} "
        for n in NGRAM_SIZES:
            out.extend(f"c{n}:{padded[i:i + n]}" for i in range(len(padded) - n + 1))
    return out


@functools.lru_cache(maxsize=1 << 18)
def _hash(feature: str) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")


def unit_features(text: str, *, actions: bool = False) -> list[str]:
    """The distinct word (or action-token) and bigram features of ``text``, first-seen order."""
    tokens = (ACTION_TOKEN if actions else WORD).findall(normalise(text))
    feats = [f"w:{t}" for t in tokens] + [f"b:{a} {b}" for a, b in zip(tokens, tokens[1:])]
    return list(dict.fromkeys(feats))


def _vector(text: str, dim: int, kind: str = "recall") -> np.ndarray:
    feats = features(text) if kind == "recall" else unit_features(text, actions=kind == "actions")
    hashes = np.fromiter((_hash(f) for f in feats), dtype=np.uint64)
    vec = np.zeros(dim, dtype=np.float64)
    if hashes.size:
        buckets = (hashes % np.uint64(dim)).astype(np.int64)
        signs = np.where(hashes >> np.uint64(63), -1.0, 1.0)
        np.add.at(vec, buckets, signs)
        norm = np.linalg.norm(vec)
        if norm > 0:
            vec /= norm
    return vec


def _batch(texts: str | Sequence[str] | Iterable[str], dim: int, kind: str, dtype: type) -> np.ndarray:
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if isinstance(texts, str):
        return _vector(texts, dim, kind).astype(dtype)
    rows = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
        rows.append(_vector(text, dim, kind))
    if not rows:
        return np.zeros((0, dim), dtype=dtype)
    return np.stack(rows).astype(dtype)


def featurize(texts: str | Sequence[str] | Iterable[str], dim: int = 512, *, dtype: type = np.float32) -> np.ndarray:
    """Hashed recall vectors for a batch of texts: ``(n, dim)`` (or ``(dim,)`` for one string)."""
    return _batch(texts, dim, "recall", dtype)


def word_vectors(texts: str | Sequence[str] | Iterable[str], dim: int = 512, *,
                 dtype: type = np.float32) -> np.ndarray:
    """A question's words and word bigrams (TokenWorth+'s query side), ``(n, dim)`` or ``(dim,)``."""
    return _batch(texts, dim, "words", dtype)


def action_vectors(texts: str | Sequence[str] | Iterable[str], dim: int = 256, *,
                   dtype: type = np.float32) -> np.ndarray:
    """A memory's action tokens and bigrams (SQL, scripts, tool calls), ``(n, dim)`` or ``(dim,)``."""
    return _batch(texts, dim, "actions", dtype)
