"""The LifelongAgentBench harness around the TokenWorth controller.

Layers, from the edges in: ``data`` (task records), ``envs`` (DB / OS / KG
environments behind one interface), ``budget`` (the joint resource budget),
``backbones`` (LLMs), ``policies`` (memory policies), ``runner`` and ``cli``.
"""
