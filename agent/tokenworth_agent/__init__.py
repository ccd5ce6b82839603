"""The LifelongAgentBench harness around the TokenWorth controller.

One package per layer, top first (docs/layout.md, checked by tests/test_layers.py): ``cli``;
``experiment`` (the application: ``RunConfig``, ``launch``, executors, the engine); ``results``
(the per-task record, summaries, ``show``); ``plugin`` (the public interface a plugin imports); ``policies``; the backbone registry; ``envs``; ``sim``
(the simulated backbone); ``backbones``; ``memory``; ``tasks``; ``storage``; ``core``; and two
standalone products, ``sandbox`` and ``sqlite_mysql``. A module imports only from layers below
its own.
"""
