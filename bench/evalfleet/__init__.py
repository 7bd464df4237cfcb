"""A second, independent GPU fleet generator, for evaluation only ("held-out family").

It writes `gpufleet.telemetry.v1` messages and ground-truth fault labels from its own model of how GPU
fleets behave (NVML semantics, synchronous training, batch work, tidal inference, notebooks, rented GPUs
left idle) and shares no code, constant or assumption with the project's own simulator. Detectors are
never trained or tuned on it; it only scores them.

    python -m bench.evalfleet --seed 1 --nodes 16 --hours 12 -o telemetry.jsonl --labels labels.jsonl
"""
from __future__ import annotations

from .generate import Summary, generate
from .plan import FleetSpec

__all__ = ["FleetSpec", "Summary", "generate"]
