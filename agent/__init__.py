"""The LifelongAgentBench harness around the TokenWorth controller.

Layers, top first: ``cli``; the front ends ``runner``, ``sweep``, ``report``, ``show``;
``experiment``; ``episode``; ``policies``; ``auxiliary``; the backbone registry; ``envs``;
``sim`` (the simulated backbone); ``backbones``; the foundations (``data``, ``harness``,
``budget``, ``memory``, ...). A module imports only from layers below its own (docs/layout.md,
checked by tests/test_layers.py).
"""
