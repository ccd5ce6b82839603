"""The learned ranker of issue 24 (docs/ranking-research.md): an action model learned from memory
texts and a difficulty-offset lift model learned from rewards, as pure JAX functions."""
