"""Controller benchmarks: per-task cost, roofline, bank scaling, sweep throughput, sharding, speedups.

Run them all with ``python -m tokenworth_bench.controller.suite [--full] [--out DIR]``. Each benchmark
times the jitted JAX controller and (where it makes sense) the float64 NumPy reference in
``tokenworth_jax/reference_numpy.py`` in the same process, one after the other, and writes
``<name>.json`` and ``<name>.md`` under the output directory (default ``bench/results``).
"""
