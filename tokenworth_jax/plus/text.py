"""The two text features TokenWorth+'s learned ranker reads, hashed on the host.

The recall vector (``tokenworth_jax.featurize``) hashes character n-grams, which suit
near-duplicate recall. The action model needs units that mean something on their own:

* :func:`word_vectors`: a question's words and word bigrams (the query side, ``words``);
* :func:`action_vectors`: a memory's action tokens and bigrams (SQL, scripts, tool calls; the
  memory side, ``actions``).

Tokenisation, exactly: ``featurize.normalise``; tokens are ``\\w+`` runs, and for actions also
runs of other non-space characters (operators such as ``>=``, ``*``, ``(``); features are
``"w:" + token`` and ``"b:" + t1 + " " + t2`` for each adjacent pair; each *distinct* feature
adds its signed bucket (presence, not counts, so a long observation or a repeated column name
does not outweigh the keywords); L2-normalised (``featurize.hashed``). Words beat character
n-grams here by 2-3 points of the chosen memory's skill overlap (docs/ranking-research.md).
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np

from ..featurize import WORD, batch, hashed, normalise

WORD_DIM = 512
ACTION_DIM = 256
ACTION_TOKEN = re.compile(r"\w+|[^\w\s]+")


def unit_features(text: str, *, actions: bool = False) -> list[str]:
    """The distinct word (or action-token) and bigram features of ``text``, first-seen order."""
    tokens = (ACTION_TOKEN if actions else WORD).findall(normalise(text))
    feats = [f"w:{t}" for t in tokens] + [f"b:{a} {b}" for a, b in zip(tokens, tokens[1:])]
    return list(dict.fromkeys(feats))


def word_vector(text: str, dim: int) -> np.ndarray:
    """One question's word vector, float64 ``(dim,)`` (the host's featuriser of ``words``)."""
    return hashed(unit_features(text), dim)


def action_vector(text: str, dim: int) -> np.ndarray:
    """One memory's action vector, float64 ``(dim,)`` (the host's featuriser of ``actions``)."""
    return hashed(unit_features(text, actions=True), dim)


def word_vectors(texts: str | Sequence[str] | Iterable[str], dim: int = WORD_DIM, *,
                 dtype: type = np.float32) -> np.ndarray:
    """A question's words and word bigrams, ``(n, dim)`` or ``(dim,)``.

    Args:
        texts: one string, or a sequence (any iterable) of strings.
        dim: the width of the vectors (TokenWorth+'s ``word_dim``).
        dtype: the NumPy dtype of the vectors (keyword-only; the pure functions cast them to the spec's dtype).

    Returns:
        np.ndarray: ``(n, dim)`` for n texts, ``(dim,)`` for one string.
    """
    return batch(texts, dim, word_vector, dtype)


def action_vectors(texts: str | Sequence[str] | Iterable[str], dim: int = ACTION_DIM, *,
                   dtype: type = np.float32) -> np.ndarray:
    """A memory's action tokens and bigrams (SQL, scripts, tool calls), ``(n, dim)`` or ``(dim,)``.

    Args:
        texts: one string, or a sequence (any iterable) of strings.
        dim: the width of the vectors (TokenWorth+'s ``action_dim``).
        dtype: the NumPy dtype of the vectors (keyword-only; the pure functions cast them to the spec's dtype).

    Returns:
        np.ndarray: ``(n, dim)`` for n texts, ``(dim,)`` for one string.
    """
    return batch(texts, dim, action_vector, dtype)
