"""Recording what the detectors see: the stream's processors run over telemetry with a recorder, every window
each detector evaluates kept with its features (what ``models/train.py`` fits and tunes on, and what
``gpufleet model eval`` scores). It drives the pipeline, so it lives with the stream; the fitting does not."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from gpufleet.models.artifact import Model
from gpufleet.models.train import Recording, train

from .billing.prices import BillingConfig
from .config import StreamConfig
from .pipeline import Pipeline


def record(messages: Iterable, labels: list[dict], model: Model | None = None, cfg=None,
           progress: Callable[[int], None] | None = None) -> Recording:
    """Run the processors over messages (dicts, JSON lines or bytes) and keep every evaluated window."""
    rec = Recording()
    cfg = (cfg or StreamConfig()).model_copy(update={"raw_samples": False})
    pipeline = Pipeline(cfg, model=model or Model.untrained(), recorder=rec.record,
                        billing=BillingConfig(enabled=False))      # alerts only: no billing records
    samples = 0.0
    for i, m in enumerate(messages):
        msg = pipeline.submit(m, f"train:{i}")
        if msg is not None:
            samples += len(msg.gpus) * (msg.interval_s or cfg.default_interval_s)
        if i % 2048 == 0:
            rec.alerts += pipeline.out.events
            pipeline.out.rows, pipeline.out.events, pipeline.out.dead, pipeline.out.done = {}, [], [], []
            if progress is not None:
                progress(i)
    pipeline.flush()
    rec.alerts += pipeline.out.events
    rec.labels = list(labels)
    rec.gpu_hours = samples / 3600
    return rec



def record_simulation(spec) -> Recording:
    """Every window of one simulated fleet (``spec``: a FleetSpec), with its labels."""
    from gpufleet.collectors.simulator import Simulation
    sim = Simulation(spec)
    return record(sim.messages(), sim.labels())


def record_simulations(specs: list, progress: Callable[[str], None] | None = None) -> Recording:
    """The windows of several simulated fleets, recorded side by side on the machine's cores."""
    import os
    from concurrent.futures import ProcessPoolExecutor

    total = Recording()
    workers = max(1, min(len(specs), os.cpu_count() or 1))
    if progress is not None:
        for spec in specs:
            progress(f"recording seed {spec.seed}: {spec.nodes} nodes x {spec.gpus_per_node} GPUs, "
                     f"{spec.hours:g} h ({workers} at a time)")
    recordings: Iterable[Recording]
    if workers == 1:
        recordings = map(record_simulation, specs)
    else:
        pool = ProcessPoolExecutor(workers)
        recordings = pool.map(record_simulation, specs)
    try:
        for spec, rec in zip(specs, recordings):
            total.extend(rec)
            if progress is not None:
                progress(f"recorded seed {spec.seed}")
    finally:
        if workers > 1:
            pool.shutdown()
    return total


def train_on_simulations(specs: list, max_false_per_1000h: float = 0.3,
                         progress: Callable[[str], None] | None = None) -> Model:
    started = time.monotonic()
    total = record_simulations(specs, progress)
    describe = {"simulated": [{"seed": s.seed, "nodes": s.nodes, "gpus_per_node": s.gpus_per_node, "hours": s.hours,
                               "interval_s": s.interval_s, "faults_per_kind": s.faults_per_kind} for s in specs]}
    model = train(total, describe, max_false_per_1000h)
    model.metadata["trained_in_s"] = round(time.monotonic() - started, 1)
    return model
