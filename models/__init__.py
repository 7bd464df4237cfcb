"""Anomaly detectors: stragglers, IO starvation, memory leaks, idle waste.

Each detector takes arrays of window features and returns scores; nothing here
knows about Kafka or ClickHouse. ``artifact.py`` holds the trained weights and
thresholds, ``train.py`` fits them on simulated fleets with labels, and
``evaluate.py`` scores alerts against ground truth.
"""
