"""Benchmarks and fidelity replays (results under harness/tokenworth_bench/results/)."""
