"""Benchmarks and evaluation material; `bench.evalfleet` is the held-out fleet generator."""
