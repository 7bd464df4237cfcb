"""Anomaly detectors (stragglers, IO starvation, memory leaks, idle waste), the demand forecaster and the scale
policy.

Each detector takes arrays of window features and returns scores; nothing here
knows about Kafka or ClickHouse. ``artifact.py`` holds the trained weights and
thresholds, ``train.py`` fits them on simulated fleets with labels, and
``evaluate.py`` scores alerts against ground truth. ``series.py`` reads demand series, ``forecast.py``
forecasts them, ``backtest.py`` scores forecasts against naive baselines, ``scaling.py`` turns them into
scale decisions.
"""
