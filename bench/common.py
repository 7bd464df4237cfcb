"""Small helpers shared by the benchmarks: a fixed workload and a timer."""
from __future__ import annotations

import json
import os
import time

from gpufleet.collectors.simulator import FleetSpec, Simulation

RECENT = (time.time() // 86400 - 1) * 86400


def telemetry_lines(nodes: int = 8, gpus: int = 8, hours: float = 2.0, seed: int = 1) -> list[bytes]:
    sim = Simulation(FleetSpec(nodes=nodes, gpus_per_node=gpus, hours=hours, seed=seed, start=RECENT))
    return [json.dumps(m, separators=(",", ":")).encode() for m in sim.messages()]


def best_of(fn, repeat: int = 3) -> float:
    """Fastest wall time of ``repeat`` runs (the least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def machine() -> str:
    return f"{os.cpu_count()} CPUs, Python {'.'.join(map(str, __import__('sys').version_info[:3]))}"


def saved_states(pipeline) -> list[dict]:
    """Every node's and job's state as a worker saves it to its changelog (before ``pack``)."""
    return [n.to_state() for n in pipeline.nodes.values()] + [j.to_state() for j in pipeline.jobs.values()]
