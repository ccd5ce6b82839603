"""The benchmarks, one folder each: ``db``, ``os_env`` (registered as ``os``), ``kg``, ``bigcodebench``, ``alfworld``.

Each folder holds everything of its benchmark (task loader and data, environment and judge, memory
rendering, simulated replies, budget, options, set-up check) and exports one
:class:`~tokenworth_agent.benchmarks.base.Benchmark` as ``BENCHMARK``, registered in ``agent/pyproject.toml``
under the entry-point group ``tokenworth.benchmarks`` (docs/plugins.md, "Add a benchmark"). No module
outside a folder imports from it (tests/test_benchmark_folders.py); :mod:`.base` is the interface they share.
"""
