"""Hashed text vectors: deterministic across processes, normalised, batched."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tokenworth_jax.featurize import featurize, features


def test_tokenisation_is_words_then_char_ngrams():
    f = features("Hi  SQL")
    assert f[:2] == ["w:hi", "w:sql"]
    assert "c3: hi" in f and "c5:i sql" in f and "c3:ql " in f
    assert len(f) == 2 + sum(len(" hi sql ") - n + 1 for n in (3, 4, 5))


def test_vectors_are_unit_norm_and_empty_text_is_zero():
    v = featurize(["Insert a row", "", "   "], dim=512)
    assert v.shape == (3, 512) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v[0]), 1.0, rtol=1e-6)
    assert not v[1].any() and not v[2].any()


def test_batch_equals_single_and_normalisation_ignores_case_and_spaces():
    texts = ["Delete rows WHERE id = 3", "delete rows where id = 3", "List every user"]
    batch = featurize(texts, dim=256)
    np.testing.assert_array_equal(batch[0], featurize(texts[0], dim=256))
    np.testing.assert_array_equal(batch[0], batch[1])
    assert abs(float(batch[0] @ batch[2])) < 0.9


def test_same_vector_in_another_process_with_another_hash_seed():
    text = "Add user alice to group devs and set her shell to /bin/zsh"
    here = featurize(text).astype(np.float64)
    code = "import sys; from tokenworth_jax.featurize import featurize; print(repr(featurize(sys.argv[1]).tolist()))"
    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code, text], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"})
        np.testing.assert_array_equal(np.array(eval(out.stdout)), here)


def test_bad_input_is_named():
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        featurize(["ok", 3])
    with pytest.raises(ValueError, match="dim"):
        featurize("x", dim=0)
