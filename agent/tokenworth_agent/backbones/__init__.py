"""LLM backbones behind one batched interface (see ``base``)."""
