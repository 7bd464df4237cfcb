"""The processing halves of the worker's two stages, over the shared pipeline (see durable.py for the protocol).

- :class:`NodeStage`: telemetry messages (key = node) through the node processors; its state is each
  node's processor, saved in the ``nodes`` table under the node name.
- :class:`JobStage`: groups of job samples (partitioned by job) through the job processors; its state
  is each job's processor, saved in the ``jobs`` table under the job name (deleted once the job ends).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from .durable import Share
from .output import Output
from .pipeline import Pipeline

P = TypeVar("P")


def saved(table: Mapping[bytes, bytes], decode: Callable[[str, dict], P]) -> Callable[[str], P | None]:
    """A loader of saved processors from a state table: name -> processor or None."""
    def load(name: str) -> P | None:
        raw = table.get(name.encode())
        return decode(name, json.loads(raw)) if raw else None
    return load


class NodeStage:
    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline

    def process(self, inputs: list, out: Output) -> dict[bytes, int]:
        pipeline, touched = self.pipeline, {}
        pipeline.out = out
        for ev in inputs:
            m = ev.message
            msg = pipeline.submit(ev.value, f"{m.topic}/{m.partition}/{m.offset}", ref=ev,
                                  position=(m.partition, m.offset))
            if msg is not None:
                touched[msg.node.encode()] = m.partition
        return touched

    def save(self, key: bytes) -> bytes | None:
        return json.dumps(self.pipeline.nodes[key.decode()].to_state()).encode()

    def forget(self) -> None:
        self.pipeline.nodes.clear()


class JobStage:
    def __init__(self, pipeline: Pipeline, clock: Callable[[], float] = time.time):
        self.pipeline, self.clock = pipeline, clock

    def process(self, inputs: list, out: Output) -> dict[bytes, int]:
        pipeline, touched = self.pipeline, {}
        timeout = pipeline.cfg.job_node_timeout_s
        now = self.clock()
        for ev in inputs:
            samples = json.loads(ev.value)
            if not samples:
                out.done.append(ev)
                continue
            share = Share(ev, len(samples))
            for sample in samples:
                pipeline.job(sample["job"]).push(sample, out, ref=share, node_timeout_s=timeout,
                                                 detection=pipeline.detection, now=now)
                touched[sample["job"].encode()] = ev.message.partition
        return touched

    def save(self, key: bytes) -> bytes | None:
        name = key.decode()
        job = self.pipeline.jobs[name]
        if job.finished:
            del self.pipeline.jobs[name]
            return None
        return json.dumps(job.to_state()).encode()

    def forget(self) -> None:
        self.pipeline.jobs.clear()
