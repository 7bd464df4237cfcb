"""Anomaly detectors: stragglers, IO starvation, memory leaks, idle waste."""
