"""At-least-once without loss or double counting: state saved between batches (without the messages still
waiting for the watermark), a crash, redelivery from the oldest unacknowledged input, same results."""
import json
import random

import pytest
from helpers import event_key

from gpufleet.collectors.simulator import FleetSpec, Simulation
from gpufleet.contracts.output import Output
from gpufleet.streams.config import StreamConfig
from gpufleet.streams.jobs import JOB_ROLLUP, JobProcessor
from gpufleet.streams.node import NodeProcessor
from gpufleet.streams.pipeline import Driver, Pipeline

CFG = StreamConfig(lateness_s=30)


def keyed(rows_by_table):
    """Rows by table, keyed as the store keys them (the first stored copy wins there)."""
    out = {}
    for table, rows in rows_by_table.items():
        for r in rows:
            out.setdefault((table.name, repr(r[:4])), r)
    return out


def reference(msgs):
    p = Pipeline(CFG)
    for i, m in enumerate(msgs):
        p.submit(m, str(i))
    p.flush()
    return keyed(p.out.rows), {event_key(e): e for e in p.out.events}


def crash_and_resume(msgs, crash_points, cfg=CFG, commit_every=1, positions=False):
    """Process in batches; after each batch save state and acknowledge what is done (committed every
    ``commit_every`` batches); at a crash point lose everything not saved and resume from the oldest
    message not committed. With ``positions`` each message says where it was read, as a worker's do."""
    saved_nodes, saved_jobs, acked, done = {}, {}, set(), set()
    rows, events, dead = {}, {}, []
    position, crashes, batches = 0, sorted(crash_points), 0
    counts = {}
    while position < len(msgs):
        p = Pipeline(cfg)
        p.nodes = {n: NodeProcessor.from_state(n, json.loads(s)) for n, s in saved_nodes.items()}
        p.jobs = {j: JobProcessor.from_state(j, json.loads(s)) for j, s in saved_jobs.items()}
        crash_at = crashes.pop(0) if crashes else len(msgs)
        i = position
        while i < len(msgs):
            end = min(i + 97, len(msgs))
            for k in range(i, end):
                p.submit(msgs[k], str(k), ref=k, position=(0, k) if positions else None)
            if end == len(msgs):
                p.flush()
            # durable first: rows and events to the store, then state, then acknowledgements
            rows.update({k: v for k, v in keyed(p.out.rows).items() if k not in rows})
            events.update({event_key(e): e for e in p.out.events})
            dead.extend(p.out.dead)
            p.out.rows, p.out.events, p.out.dead = {}, [], []
            if end >= crash_at and end != len(msgs):
                break                                     # crash: the state of this batch is lost
            saved_nodes = {n: json.dumps(x.to_state()) for n, x in p.nodes.items()}
            saved_jobs = {j: json.dumps(x.to_state()) for j, x in p.jobs.items()}
            done.update(r for r in p.out.done if r is not None)
            p.out.done = []
            batches += 1
            if batches % commit_every == 0:
                acked |= done
            i = end
        for k, n in p.out.counts.items():
            counts[k] = counts.get(k, 0) + n
        position = min((k for k in range(len(msgs)) if k not in acked), default=len(msgs))
        if i >= len(msgs):
            break
    return rows, events, dead, counts


@pytest.mark.parametrize("seed", [1, 2])
def test_crashes_lose_nothing_and_count_nothing_twice(seed):
    spec = FleetSpec(nodes=4, gpus_per_node=4, hours=2, seed=seed, faults_per_kind=1)
    msgs = list(Simulation(spec).messages())
    rng = random.Random(seed)
    msgs = sorted(msgs, key=lambda m: m["ts"] + rng.uniform(0, 25))      # within the lateness
    ref_rows, ref_events = reference(msgs)
    rows, events, dead, _ = crash_and_resume(msgs, crash_points=[700, 1500, 3333, 5000])
    assert dead == [], "a repeat after a restart is a duplicate, never late"
    assert rows.keys() == ref_rows.keys()
    assert rows == ref_rows
    assert events == ref_events
    assert any(k[0] == "job_rollup_1m" for k in rows) and any(k[0] == "gpu_rollup_1m" for k in rows)
    assert any(k.startswith("billing:") for k in events)          # the ledger too


def test_a_replay_older_than_the_dedup_horizon_is_recognised_by_its_offset_not_dead_lettered():
    # Commits far behind the saved state (a slow commit interval): after a crash the replay reaches
    # back further than the sample times remembered for deduplication.
    cfg = StreamConfig(lateness_s=30, dedup_horizon_s=60)
    spec = FleetSpec(nodes=4, gpus_per_node=2, hours=2, seed=3, faults_per_kind=1)
    msgs = list(Simulation(spec).messages())
    ref_p = Pipeline(cfg)
    for i, m in enumerate(msgs):
        ref_p.submit(m, str(i))
    ref_p.flush()
    ref_rows = keyed(ref_p.out.rows)
    crashes = [1900, 4100]
    _, _, dead, _ = crash_and_resume(msgs, crashes, cfg=cfg, commit_every=8)
    assert dead and {d["reason_code"] for d in dead} == {"late"}     # by time alone: false dead letters
    rows, _, dead, counts = crash_and_resume(msgs, crashes, cfg=cfg, commit_every=8, positions=True)
    assert dead == []
    assert counts["replayed"] > 0
    assert rows == ref_rows


def test_inputs_delivered_again_after_the_end_of_input_was_saved_count_once():
    # The end-of-stream marker flushes every node of a partition. A worker whose partitions move while that
    # batch is being made durable may save the flushed state and not acknowledge: the next owner restores it
    # and gets the inputs since the committed offset again, the newest within the lateness of the last one.
    spec = FleetSpec(nodes=1, gpus_per_node=2, hours=2, seed=2, faults_per_kind=0, training_share=1.0)
    msgs = list(Simulation(spec).messages())
    first = Pipeline(CFG)
    for k, m in enumerate(msgs):
        first.submit(m, str(k), ref=k, position=(0, k))
    first.flush()
    assert any(e["schema"] == "gpufleet.billing.v1" for e in first.out.events)
    again = Pipeline(CFG)
    again.nodes = {n: NodeProcessor.from_state(n, json.loads(json.dumps(x.to_state()))) for n, x in first.nodes.items()}
    replayed = msgs[-100:]
    for k, m in enumerate(replayed, start=len(msgs) - len(replayed)):
        again.submit(m, str(k), ref=k, position=(0, k))
    again.flush()                                   # the marker comes again too
    assert again.out.events == [] and again.out.dead == []
    assert not any(again.out.rows.values())
    assert again.out.counts["replayed"] == len(replayed)
    assert sorted(r for r in again.out.done if r is not None) == list(range(len(msgs) - 100, len(msgs)))


def test_job_samples_delivered_again_after_a_restore_count_once():
    spec = FleetSpec(nodes=8, gpus_per_node=2, hours=1, seed=3, faults_per_kind=1, training_share=1.0)
    p = Pipeline(CFG, driver=Driver(route_jobs=False))
    samples = []
    for i, m in enumerate(Simulation(spec).messages()):
        p.submit(m, str(i))
        samples += p.out.job_samples
        p.out.job_samples = []
    p.flush()
    samples += p.out.job_samples
    job = max(sorted({s["job"] for s in samples}), key=lambda j: len({s["node"] for s in samples if s["job"] == j}))
    mine = [s for s in samples if s["job"] == job]
    assert len({s["node"] for s in mine}) >= 2, "a multi-node job"

    nodes = sorted({s["node"] for s in mine})

    def feed(proc, samples, out, latest):
        for s in samples:                          # released as far as every node of the job has come
            proc.push(s, out)
            latest[s["node"]] = max(latest.get(s["node"], 0.0), s["ts"])
            if len(latest) == len(nodes):
                proc.release(min(latest.values()), out)

    once = Output()
    proc = JobProcessor(job)
    feed(proc, mine, once, {})
    proc.flush(once)
    # the same, but saved after 60%, then restored and fed again from 40%: 20% come twice
    twice, proc = Output(), JobProcessor(job)
    cut, again = int(len(mine) * 0.6), int(len(mine) * 0.4)
    latest: dict = {}
    feed(proc, mine[:cut], twice, latest)
    proc = JobProcessor.from_state(job, json.loads(json.dumps(proc.to_state())))
    feed(proc, mine[again:], twice, {})
    proc.flush(twice)
    rows = lambda out: sorted(map(repr, out.rows.get(JOB_ROLLUP, [])))   # noqa: E731
    assert rows(twice) == rows(once) and rows(once)
    assert twice.counts["job_duplicates"] > 0 and twice.counts["job_late"] == 0


def test_a_job_sample_delivered_twice_while_waiting_is_done_only_with_the_first():
    job, out = JobProcessor("j"), Output()
    gpus = [["GPU-0", 0, 90.0, 1800.0, 1980.0, 600.0, 700.0, 60.0, 0, 1, 2]]
    sample = {"job": "j", "node": "n1", "ts": 100.0, "tenant": "t", "pool": "p", "interval": 5.0, "gpus": gpus}
    job.push({**sample, "node": "n2", "ts": 95.0}, out, ref="n2-95")
    job.push(sample, out, ref="first")            # waits for the watermark to pass 100
    job.push(sample, out, ref="again")            # the same input again
    job.release(96.0, out)
    assert out.done == ["n2-95"]
    job.release(101.0, out)
    assert {"first", "again"} <= set(out.done)
    job.push(sample, out, ref="late again")       # released already: a repeat, done at once
    assert out.done[-1] == "late again" and out.counts["job_duplicates"] == 2


def test_a_job_sample_behind_what_its_job_released_is_late_and_dead_lettered():
    job, out = JobProcessor("j"), Output()
    gpus = [["GPU-0", 0, 90.0, 1800.0, 1980.0, 600.0, 700.0, 60.0, 0, 1, 2]]
    sample = {"job": "j", "node": "n1", "ts": 100.0, "tenant": "t", "pool": "p", "interval": 5.0, "gpus": gpus}
    job.push(sample, out, ref="a")
    job.release(200.0, out)
    job.push({**sample, "node": "n2", "ts": 90.0}, out, ref="b", source="by-job/0/7", received_at=5.0)
    assert out.counts["job_late"] == 1 and out.done == ["a", "b"]
    (d,) = out.dead
    assert d["reason_code"] == "late" and d["source"] == "by-job/0/7" and "node n2" in d["reason"]
