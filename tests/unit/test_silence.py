"""A node that stops reporting resolves its alerts as "no telemetry since" its last message, in both modes:
by stream time in the embedded mode (replay, demo), by wall clock in the distributed worker, so a dead node
never holds an alert open; the fleet page lists it as silent."""
import json
from collections import namedtuple
from dataclasses import dataclass

from helpers import gpu, message, paged

from gpufleet.contracts.output import Output
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.embedded import dict_source
from gpufleet.streams.embedded import run as run_embedded
from gpufleet.streams.pipeline import Driver, Pipeline
from gpufleet.streams.sink import Sink
from gpufleet.streams.stages import NodeStage

T0 = 1.8e9
CFG = StreamConfig()                      # silent after 600 s, idle after 600 s below 5%


def fleet(n2_until: float, n2_back: float | None = None, end: float = 5400.0) -> list[dict]:
    """Two nodes of one idle rented GPU each, every 5 s; n2 stops at ``n2_until`` (and is back at ``n2_back``)."""
    out = []
    for k in range(int(end // 5)):
        t = T0 + 5 * k
        out.append(message(t, "n1", [gpu(0, "GPU-1", util_pct=0.0, job="j1")]))
        if t - T0 < n2_until or (n2_back is not None and t - T0 >= n2_back):
            out.append(message(t, "n2", [gpu(0, "GPU-2", util_pct=0.0, job="j2")]))
    return out


def idle_events(events, uuid, updates=False):
    found = [e for e in events if e.get("kind") == "idle" and e["gpu_uuid"] == uuid]
    return found if updates else paged(found)


def test_embedded_a_silent_node_resolves_by_stream_time_and_comes_back():
    pipeline = Pipeline(CFG, detect=False)
    seen_by = {}
    for i, m in enumerate(fleet(1800, n2_back=4000)):
        pipeline.submit(m, f"f:{i}")
        for e in pipeline.out.events:
            seen_by.setdefault(id(e), m["ts"])
    pipeline.flush()
    n2 = idle_events(pipeline.out.events, "GPU-2")
    assert [e["status"] for e in n2] == ["firing", "resolved", "firing"]
    gone = n2[1]
    assert gone["evidence"]["resolution"] == "no_telemetry" and "no telemetry since" in gone["summary"]
    assert gone["resolved_at"] <= T0 + 1800                   # its last message, not when it was noticed
    assert seen_by[id(gone)] <= T0 + 1800 + 600 + 60 + 5      # told while the stream went on, not at its end
    n1 = idle_events(pipeline.out.events, "GPU-1")
    assert [e["status"] for e in n1] == ["firing"]            # the node that kept reporting is still idle
    assert pipeline.out.counts["silent_nodes"] == 1
    # ... and its numbers are told again every half hour of stream time, under the same incident
    told = idle_events(pipeline.out.events, "GPU-1", updates=True)
    assert [(e["revision"], e.get("change"), e["id"]) for e in told] == [
        (0, None, n1[0]["id"]), (1, "updated", n1[0]["id"]), (2, "updated", n1[0]["id"])]
    assert [e["evidence"]["idle_s"] for e in told] == [600.0, 2400.0, 4200.0]
    assert [e["detected_at"] for e in told] == [n1[0]["detected_at"]] * 3


def test_embedded_silence_at_the_end_of_a_recording():
    pipeline = Pipeline(CFG, detect=False)
    for i, m in enumerate(fleet(1800)):
        pipeline.submit(m, f"f:{i}")
    pipeline.flush()
    statuses = {u: [e["status"] for e in idle_events(pipeline.out.events, u)] for u in ("GPU-1", "GPU-2")}
    assert statuses == {"GPU-1": ["firing"], "GPU-2": ["firing", "resolved"]}


def test_the_fleet_page_lists_the_silent_node(embedded_store):
    from gpufleet.view import pages
    from gpufleet.view.data import FleetData, Window
    pipeline = Pipeline(CFG, detect=False)
    run_embedded(dict_source(fleet(1800)), pipeline, Sink(embedded_store, 10_000, 60))
    data = FleetData(embedded_store, "USD", 7.0, silent_after_s=CFG.silent_after_s)
    w = Window(T0, T0 + 5400)
    (silent,) = data.silent(w)
    assert silent["node"] == "n2" and silent["last_seen"] == T0 + 1800 and silent["gpus"] == 1
    assert data.silent(Window(T0, T0 + 1800)) == []           # not yet silent then
    html = pages.fleet_page(data, w, 6.0, 0.0)
    assert "Silent nodes (1)" in html and "<td>n2</td>" in html


TP = namedtuple("TP", "topic partition")


@dataclass
class Msg:
    tp: TP
    offset: int

    @property
    def topic(self):
        return self.tp.topic

    @property
    def partition(self):
        return self.tp.partition


@dataclass
class Event:
    message: Msg
    value: bytes


def test_distributed_a_dead_node_resolves_by_wall_clock():
    now = [T0]
    pipeline = Pipeline(CFG, detect=False, driver=Driver(live=True, route_jobs=False, clock=lambda: now[0]))
    stage = NodeStage(pipeline, {}, live=True, clock=lambda: now[0], assigned=lambda: {0}, lag=lambda p: 0)
    out = Output()
    for offset, m in enumerate(fleet(1800, end=2000)):
        now[0] = m["ts"]                                      # read as it is sent
        stage.process([Event(Msg(TP("telemetry", 0), offset), json.dumps(m).encode())], out)
    assert [e["status"] for e in idle_events(out.events, "GPU-2")] == ["firing"]
    now[0] = T0 + 2000 + 300                                  # n1 heard 300 s ago, n2 500 s ago: not yet
    stage.process([], out)
    assert [e["status"] for e in idle_events(out.events, "GPU-2")] == ["firing"]
    now[0] = T0 + 1800 + 601                                  # nothing more from n2 for 601 s of wall clock
    stage.process([], out)
    n2 = idle_events(out.events, "GPU-2")
    assert [e["status"] for e in n2] == ["firing", "resolved"]
    assert n2[1]["evidence"]["resolution"] == "no_telemetry"
    assert [e["status"] for e in idle_events(out.events, "GPU-1")] == ["firing"]
