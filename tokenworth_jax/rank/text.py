"""Host-side hashed vectors for the learned ranker: words and word bigrams, not characters.

The controller's recall vector (:mod:`tokenworth_jax.featurize`) mixes words with character
3–5-grams, which is right for near-duplicate detection. The learned part wants units that mean
something on their own: the words of a question ("grouped", "average", "insert") and the tokens
of a memory's actions (``GROUP``, ``BY``, ``JOIN``, ``chmod``, ``>=``). Tokenisation, exactly:

1. :func:`tokenworth_jax.featurize.normalise` (NFKC, lower case, one space per whitespace run);
2. tokens: ``\\w+`` runs, and for actions also runs of other non-space characters (operators
   such as ``>=``, ``*``, ``(``); features are ``"w:" + token`` and ``"b:" + t1 + " " + t2`` for
   each adjacent pair;
3. each *distinct* feature adds its signed bucket (BLAKE2b, as :mod:`~tokenworth_jax.featurize`:
   bucket ``h mod dim``, sign from bit 63); presence, not counts, so a long observation or a
   repeated column name does not outweigh the keywords;
4. L2-normalised; an empty text gives the zero vector.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..featurize import _hash, normalise

WORDS = re.compile(r"\w+")
ACTION_TOKENS = re.compile(r"\w+|[^\w\s]+")


def text_features(text: str, *, actions: bool = False, bigrams: bool = True) -> list[str]:
    """The distinct feature strings of ``text`` in first-seen order (words, then bigrams)."""
    tokens = (ACTION_TOKENS if actions else WORDS).findall(normalise(text))
    feats = [f"w:{t}" for t in tokens] + ([f"b:{a} {b}" for a, b in zip(tokens, tokens[1:])] if bigrams else [])
    return list(dict.fromkeys(feats))


def _vector(text: str, dim: int, actions: bool, bigrams: bool) -> np.ndarray:
    vec = np.zeros(dim, np.float64)
    hashes = np.fromiter((_hash(f) for f in text_features(text, actions=actions, bigrams=bigrams)), dtype=np.uint64)
    if hashes.size:
        np.add.at(vec, (hashes % np.uint64(dim)).astype(np.int64), np.where(hashes >> np.uint64(63), -1.0, 1.0))
        norm = np.linalg.norm(vec)
        if norm > 0:
            vec /= norm
    return vec


def hashed(texts: str | Sequence[str], dim: int, *, actions: bool = False, bigrams: bool = True,
           dtype: type = np.float32) -> np.ndarray:
    """``(n, dim)`` vectors of a batch of texts (``(dim,)`` for one string)."""
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if isinstance(texts, str):
        return _vector(texts, dim, actions, bigrams).astype(dtype)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
    if not len(texts):
        return np.zeros((0, dim), dtype)
    return np.stack([_vector(t, dim, actions, bigrams) for t in texts]).astype(dtype)


def query_vectors(texts: str | Sequence[str], dim: int = 512) -> np.ndarray:
    """The learned part's query vectors: words and word bigrams of the question."""
    return hashed(texts, dim)


def action_vectors(texts: str | Sequence[str], dim: int = 256) -> np.ndarray:
    """The learned part's memory-action vectors: tokens and token bigrams of the memory's actions."""
    return hashed(texts, dim, actions=True)
