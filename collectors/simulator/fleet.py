"""The simulated fleet's hardware: GPU models, pools and nodes."""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field

GIB = 1 << 30


@dataclass(frozen=True)
class GpuModel:
    name: str
    mem_total_bytes: int
    power_limit_w: float
    idle_power_w: float
    sm_clock_max_mhz: float


H100 = GpuModel("NVIDIA H100 80GB HBM3", 80 * GIB, 700.0, 70.0, 1980.0)
A100 = GpuModel("NVIDIA A100-SXM4-80GB", 80 * GIB, 400.0, 55.0, 1410.0)
L40S = GpuModel("NVIDIA L40S", 48 * GIB, 350.0, 35.0, 2520.0)

# (pool, model, share of the fleet's nodes)
POOLS = (
    ("h100-sxm-east", H100, 0.5),
    ("a100-sxm-west", A100, 0.3),
    ("l40s-pcie-central", L40S, 0.2),
)

TENANTS = ("acme-ai", "globex", "initech", "umbrella-labs", "hooli", "stark-research", "wayne-ml", "tyrell")


def gpu_uuid(seed: int, node: str, index: int) -> str:
    digest = hashlib.blake2b(f"{seed}/{node}/{index}".encode(), digest_size=16).digest()
    return f"GPU-{uuid.UUID(bytes=digest)}"


@dataclass
class Node:
    name: str
    pool: str
    model: GpuModel
    uuids: list[str]
    phase_s: float                       # this node's collector ticks at start + k*interval + phase
    mem_total_bytes: int = 2048 * GIB
    training: bool = False               # reserved for multi-GPU training clusters
    slots: list[list[int]] = field(default_factory=list)  # GPU index groups rented together


def layout(nodes: int, gpus_per_node: int, seed: int, interval_s: float, rng) -> list[Node]:
    """Spread nodes over pools by share; every pool gets at least one node when there are enough."""
    counts = [max(1, round(nodes * share)) if nodes >= len(POOLS) else 0 for _, _, share in POOLS]
    if nodes < len(POOLS):
        counts = [nodes] + [0] * (len(POOLS) - 1)
    while sum(counts) > nodes:
        counts[counts.index(max(counts))] -= 1
    while sum(counts) < nodes:
        counts[0] += 1
    fleet: list[Node] = []
    for (pool, model, _), count in zip(POOLS, counts):
        for _ in range(count):
            name = f"node-{len(fleet):03d}"
            fleet.append(Node(
                name=name, pool=pool, model=model,
                uuids=[gpu_uuid(seed, name, i) for i in range(gpus_per_node)],
                phase_s=round(rng.uniform(0, interval_s), 3),
            ))
    return fleet
