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

A mode that reads more about a query or a memory than its recall vector declares the text
features it reads and how they are hashed (:class:`tokenworth_jax.inputs.Feature`); its featuriser
builds on :func:`hashed` and :func:`batch` here.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from typing import Callable, Iterable, Sequence

import numpy as np

DIM = 512  # D: the default width of the recall vectors (and so of Spec.dim)
WORD = re.compile(r"\w+")
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


def hashed(feats: Iterable[str], dim: int) -> np.ndarray:
    """The signed, L2-normalised bucket vector (float64, ``(dim,)``) of feature strings (steps 4-5 above)."""
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


def batch(texts: str | Sequence[str] | Iterable[str], dim: int, vector: Callable[[str, int], np.ndarray],
          dtype: type) -> np.ndarray:
    """``vector(text, dim)`` of one text ``(dim,)``, or of each text of a batch ``(n, dim)``, as ``dtype``."""
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if isinstance(texts, str):
        return vector(texts, dim).astype(dtype)
    rows = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
        rows.append(vector(text, dim))
    if not rows:
        return np.zeros((0, dim), dtype=dtype)
    return np.stack(rows).astype(dtype)


def featurize(texts: str | Sequence[str] | Iterable[str], dim: int = DIM, *, dtype: type = np.float32) -> np.ndarray:
    """Hashed recall vectors for a batch of texts: ``(n, dim)`` (or ``(dim,)`` for one string).

    Args:
        texts: one string, or a sequence (any iterable) of strings.
        dim: D, the width of the vectors (``spec.dim``).
        dtype: the NumPy dtype of the vectors (keyword-only; the pure functions cast them to the spec's dtype).

    Returns:
        np.ndarray: ``(n, dim)`` for n texts, ``(dim,)`` for one string; each row unit-norm or zero.

    Raises:
        ValueError: ``dim`` below 1.
        TypeError: an entry that is not a string.
    """
    return batch(texts, dim, lambda text, d: hashed(features(text), d), dtype)
