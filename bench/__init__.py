"""Benchmarks (`make bench`): each `bench/bench_*.py` exposes `main() -> dict`."""
