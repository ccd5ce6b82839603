"""Test-wide JAX settings: catch silent dtype promotion and rank broadcasting."""

import os

import jax
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.environ.get(
    "TOKENWORTH_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data", "lifelongagentbench")
)


@pytest.fixture(scope="session")
def data_dir() -> str:
    return DATA_DIR
