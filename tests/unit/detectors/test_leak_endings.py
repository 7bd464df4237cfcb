"""A leak's incident ends as it happened: ``out_of_memory`` only where the telemetry shows it (the process gone at
the limit of its GPU's memory, or letting go of it there), the rental's or the job's end, the process's own, and
``cleared`` only while the process still runs below the limit with its growth stopped."""
from types import SimpleNamespace as NS

from gpufleet.contracts.output import Output
from gpufleet.models.detectors import memory_leak

TOTAL = 24e9
T0 = 6000.0


def leak_life(after, minutes: int = 100, onset_min: int = 10):
    """One GPU sampled every 5 s: its process (pid 100, job ``svc``, tenant ``t``) grows 0.5 GB a minute from 8 GB
    from minute ``onset_min`` (24 GB: out of memory at minute 42), then ``after(minute, used)`` (from minute 35)
    says what the GPU shows: ``(used, pid, job, tenant)``. Every window of a process 30 min old or more is scored
    0.99 (threshold 0.9, one window to fire, two to resolve, no hold-down): the stream's events of the GPU."""
    span = memory_leak.FEATURES.index("span")
    decider = NS(threshold=0.9, persist_on=1, persist_off=2, hold_down_s=None, urgent_score=None,
                 score_many=lambda xs: [0.99 if x[span] >= 0.5 else 0.0 for x in xs])
    detector, out = memory_leak.Detector(), Output()
    ctx = NS(out=out, recorder=None, flags=NS(quiet=set(), starved=set()))
    for k in range(12 * minutes):
        m = k / 12
        grown = min(8e9 + 0.5e9 * max(0.0, m - onset_min), 23.5e9)
        used, pid, job, tenant = (grown, 100, "svc", "t") if m < 35 else after(m, grown)
        g = NS(uuid="g0", index=0, util_pct=50.0, mem_used_bytes=used, mem_total_bytes=TOTAL,
               processes=[NS(pid=pid)] if pid is not None else [], job=job, tenant=tenant)
        detector.add(NS(ts=T0 + 5 * k, node="n1", pool="p", gpus=[g]), decider, ctx)
    return [e for e in out.events if e["status"] == "resolved" or not e.get("revision")]


def resolution(events) -> str | None:
    (fired, *rest) = events
    assert fired["status"] == "firing"
    return rest[-1]["evidence"]["resolution"] if rest else None


def test_a_process_gone_at_the_limit_ran_out_of_memory():
    # it reaches the limit at minute 41 and dies there; the job restarts it a minute later
    events = leak_life(lambda m, used: (used, 100, "svc", "t") if m < 41 else
                       (2e9, None, "svc", "t") if m < 42 else (8e9, 101, "svc", "t"))
    assert resolution(events) == "out_of_memory"
    assert "its process ran out of memory" in events[-1]["summary"]


def test_a_process_that_stops_at_the_limit_and_dies_later_is_not_cleared_meanwhile():
    # at the limit from minute 41 (flat: no growth to see), the process dies at minute 70
    events = leak_life(lambda m, used: (used, 100, "svc", "t") if m < 70 else (1e9, None, "svc", "t"))
    assert [e["status"] for e in events] == ["firing", "resolved"] and resolution(events) == "out_of_memory"
    assert events[-1]["resolved_at"] >= T0 + 70 * 60


def test_memory_let_go_at_the_limit_by_the_same_process_is_its_out_of_memory():
    # a framework that catches the error, frees its cache and goes on: the same pid, down to 9 GB
    events = leak_life(lambda m, used: (used, 100, "svc", "t") if m < 45 else (9e9, 100, "svc", "t"))
    assert resolution(events) == "out_of_memory"


def test_a_leak_still_growing_when_its_rental_or_job_ends_is_not_an_out_of_memory():
    # at minute 38 (about 22 GB of 24: 90 % used, 3 minutes of growth left) the rental is handed back
    rental = leak_life(lambda m, used: (used, 100, "svc", "t") if m < 38 else (0.5e9, None, None, None))
    assert resolution(rental) == "rental_ended"
    job = leak_life(lambda m, used: (used, 100, "svc", "t") if m < 38 else (0.5e9, 300, "next", "t"))
    assert resolution(job) == "job_ended"
    alone = leak_life(lambda m, used: (used, 100, "svc", "t") if m < 38 else (0.5e9, None, "svc", "t"))
    assert resolution(alone) == "process_ended"


def test_cleared_is_a_process_that_still_runs_with_its_growth_stopped_below_the_limit():
    # it stops at minute 35 (20.5 GB of 24) and runs on flat
    events = leak_life(lambda m, used: (20.5e9, 100, "svc", "t"))
    assert resolution(events) == "cleared"


def test_the_evaluation_reads_an_ending_against_the_labels_ending():
    from gpufleet.models.evaluate import ending_agrees

    def resolve(resolution, at=5000.0):
        return {"evidence": {"resolution": resolution}, "resolved_at": at}
    oom = {"reaches_oom": True, "end": 5000.0}
    ended = {"reaches_oom": False, "end": 5000.0}
    assert ending_agrees(oom, resolve("out_of_memory")) and not ending_agrees(oom, resolve("cleared"))
    assert not ending_agrees(oom, resolve("job_ended")) and not ending_agrees(oom, resolve("no_telemetry"))
    for how in ("job_ended", "rental_ended", "process_ended"):
        assert ending_agrees(ended, resolve(how))
    assert not ending_agrees(ended, resolve("out_of_memory")) and not ending_agrees(ended, resolve("cleared"))
    # the telemetry stopped with the fault (a recording's end): told as no telemetry, and that is how it ended
    assert ending_agrees(ended, resolve("no_telemetry", 4990.0))
    assert not ending_agrees(ended, resolve("no_telemetry", 3000.0))      # silent long before the fault ended
