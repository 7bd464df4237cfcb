"""A new kind of fault is its package and one registry line: a toy kind (a GPU running hot), defined here only,
goes through the stream, training, evaluation and the fleet page without a line of gpufleet changed."""
import re
import types
from dataclasses import dataclass

import pytest
from helpers import gpu, message

from gpufleet.models import evaluate
from gpufleet.models.artifact import Model
from gpufleet.models.detectors import KINDS, Kind, register, unregister
from gpufleet.models.detectors.base import EPOCH_S, Incidents, Judge, Seen, Told, event, minutes
from gpufleet.models.train import fit, label, tune
from gpufleet.streams.embedded import dict_source
from gpufleet.streams.embedded import run as run_embedded
from gpufleet.streams.pipeline import Pipeline
from gpufleet.streams.recording import record
from gpufleet.streams.sink import Sink

HOT_C = 85.0


def toy_package() -> types.ModuleType:
    """A node-stage detector of GPUs that run hot: every epoch, each GPU's mean temperature and utilization."""
    m = types.ModuleType("hot_gpu")
    m.KIND, m.STAGE, m.LEVEL, m.RUNBOOK = "hot_gpu", "node", "gpu", "runbooks/hot_gpu.md"
    m.FEATURES = ("temp", "util")

    @dataclass(slots=True, kw_only=True)
    class HotSeen(Seen):
        index: int = 0
        target: str = ""
        temp: float = 0.0

    m.SEEN = HotSeen

    def applies(x):
        return True

    def decide(x, score, decider, info=None):
        return score >= decider.threshold and x[0] * 100 >= HOT_C

    def baseline(x):
        return x[0] * 100 >= HOT_C

    def describe(status, info, st, resolved_at):
        summary = (f"GPU {info.index} on {info.node} runs hot for {minutes(st):.0f} min" if status == "firing"
                   else f"GPU {info.index} on {info.node} is cool again")
        return event(m.KIND, info.target, status, st, resolved_at, info, Told(summary, {"temp_c": info.temp}))

    def features(temps, utils):
        return [sum(temps) / len(temps) / 100, sum(utils) / len(utils) / 100]

    class Detector:
        def __init__(self):
            self.epoch, self.seen, self.incidents = None, {}, Incidents()

        def add(self, msg, decider, ctx):
            epoch = int(msg.ts // EPOCH_S)
            if self.epoch is not None and epoch > self.epoch:
                at = (self.epoch + 1) * EPOCH_S
                for uuid, (temps, utils, info) in self.seen.items():
                    x = features(temps, utils)
                    key = f"{m.KIND}:{uuid}"
                    (score,) = decider.score_many([x])
                    info = HotSeen(**info, target=uuid, score=round(score, 4), temp=x[0] * 100)
                    if ctx.recorder is not None:
                        ctx.recorder(m.KIND, key, at, x, info)
                    self.incidents.observe(key, decide(x, score, decider, info), at, info,
                                           Judge(decider, ctx.out, describe))
                self.seen = {}
            self.epoch = epoch
            for g in msg.gpus:
                if g.temp_c is not None and g.util_pct is not None:
                    temps, utils, _ = self.seen.setdefault(g.uuid, ([], [], {
                        "node": msg.node, "gpu_uuid": g.uuid, "index": g.index, "job": g.job, "tenant": g.tenant,
                        "pool": msg.pool}))
                    temps.append(g.temp_c)
                    utils.append(g.util_pct)

        def silence(self, ts, out, node=None):
            self.incidents.close_all(ts, describe, out, "no_telemetry")

        def end(self, ts, out):
            pass

        def to_state(self):
            return {"epoch": self.epoch, "incidents": self.incidents.to_state()}

        @classmethod
        def from_state(cls, state):
            d = cls()
            d.epoch, d.incidents = state["epoch"], Incidents.from_state(state["incidents"], HotSeen)
            return d

    m.applies, m.decide, m.baseline, m.describe, m.features, m.Detector = \
        applies, decide, baseline, describe, features, Detector
    return m


class Kept:
    """An events writer that keeps them."""

    def __init__(self):
        self.items = []

    def write(self, items):
        self.items += items


@pytest.fixture(scope="module")
def packaged():
    return Model.default()           # read before the toy kind exists: a model must hold every registered kind


@pytest.fixture
def hot_gpu(packaged):
    register(Kind(toy_package(), hold_down_s=0.0, edge_s=60.0, persist_off=2, colour="#123456", delay_goal_s=300.0,
                  oom_goals=False, fault=None))
    yield "hot_gpu"
    unregister("hot_gpu")


def fleet(start: float, hot: tuple[float, float]):
    """Two nodes of two GPUs, two hours at 10 s; GPU a0 runs at 92 °C through ``hot`` (seconds from the start)."""
    messages = []
    for k in range(720):
        ts = start + 10 * k
        for node in ("a", "b"):
            gpus = []
            for i in range(2):
                temp = 60.0 + (k * 7 + i * 3) % 5
                if node == "a" and i == 0 and hot[0] <= ts - start < hot[1]:
                    temp = 92.0
                gpus.append(gpu(i, uuid=f"GPU-{node}{i}", temp_c=temp, util_pct=80.0, job=f"j{node}"))
            messages.append(message(ts, node=node, gpus=gpus))
    label = {"kind": "hot_gpu", "node": "a", "gpus": ["GPU-a0"], "gpu_uuid": "GPU-a0", "level": "gpu", "job": "ja",
             "start": start + hot[0], "end": start + hot[1]}
    return messages, [label]


def test_a_toy_kind_goes_through_the_stream_training_evaluation_and_the_page(packaged, hot_gpu, embedded_store):
    assert hot_gpu in KINDS and hot_gpu in evaluate.KINDS

    # training: the stream records every window the toy detector evaluates; trees fitted and tuned on them
    rec = record(*fleet(1.8e9, (1800, 4200)), model=Model.untrained())
    rows = rec.rows[hot_gpu]
    assert rows and {r[0] for r in rows} == {f"{hot_gpu}:GPU-{n}{i}" for n in "ab" for i in range(2)}
    ys = label(hot_gpu, rows, rec.labels)
    assert sum(1 for y in ys if y) > 50 and sum(1 for y in ys if y == 0) > 500
    km = fit(hot_gpu, rows, ys)
    tuned = tune(hot_gpu, rec, km, max_false_per_1000h=0.3)
    assert tuned["f1"] == 1.0
    model = Model({**packaged.kinds, hot_gpu: km}, packaged.metadata)
    assert Model.from_dict(model.to_dict()).kinds[hot_gpu].trees == km.trees      # saved and read back

    # the stream: a fleet it never saw, into the store
    messages, labels = fleet(1.8e9 + 86400, (3000, 5400))
    pipeline = Pipeline(model=model)
    sink = Sink(embedded_store, 10_000, 60)
    events = Kept()
    run_embedded(dict_source(messages), pipeline, sink, events)
    stored = embedded_store.query("SELECT status, gpu_uuid FROM alerts FINAL WHERE kind = {k:String}",
                                  {"k": hot_gpu})
    assert sorted(map(tuple, stored)) == [("firing", "GPU-a0"), ("resolved", "GPU-a0")]
    alerts = [e for e in events.items if e.get("kind") == hot_gpu]

    # evaluation: scored and held to the toy's own delay goal, beside the other kinds
    report = evaluate.score(labels, alerts, gpu_hours=8.0)
    assert report.kinds[hot_gpu].f1 == 1.0 and report.kinds[hot_gpu].delay(0.5) <= 300
    goals = {g: ok for g, ok, _ in evaluate.goals({"detectors": report})}
    assert goals[f"{hot_gpu}: median delay <= 5 min"] and goals[f"{hot_gpu}: F1 >= 0.9"]

    # the fleet page: the toy's incident, in the toy's colour
    from gpufleet.view import pages
    from gpufleet.view.data import FleetData, Window
    data = FleetData(embedded_store, "USD", 7.0)
    html = pages.fleet_page(data, Window(1.8e9 + 86400, 1.8e9 + 86400 + 7200), 6.0, 0.0)
    assert f'<span class="kind" style="background:#123456">{hot_gpu}</span>' in html
    assert hot_gpu in html


@pytest.mark.parametrize("break_it, says", [
    (lambda m: delattr(m.Detector, "silence"), "Detector has no silence()"),
    (lambda m: setattr(m.Detector, "add", lambda self, msg, decider: None),
     "Detector.add(self, msg, decider) must take"),
    (lambda m: delattr(m, "RUNBOOK"), "RUNBOOK must be its runbook page"),
    (lambda m: setattr(m, "STAGE", "pool"), "STAGE must be one of"),
    (lambda m: delattr(m, "describe"), "no describe()"),
    (lambda m: setattr(m, "SEEN", dict), "SEEN must be its record of what a window showed"),
])
def test_a_kind_that_breaks_the_contract_fails_when_it_registers(break_it, says):
    m = toy_package()
    break_it(m)
    with pytest.raises(TypeError, match=re.escape(says)):
        register(Kind(m, hold_down_s=60.0, edge_s=60.0, persist_off=2, colour="#f00", delay_goal_s=None,
                      oom_goals=False, fault=None))
    assert "hot_gpu" not in KINDS


def test_every_shipped_kind_has_its_runbook_page():
    from conftest import ROOT

    from gpufleet.models.detectors import REGISTRY
    for kind in REGISTRY.values():
        assert (ROOT / "docs" / kind.module.RUNBOOK).is_file(), kind.name
