"""Benchmarks and fidelity replays (results under bench/results/)."""
