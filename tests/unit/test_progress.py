"""A worker's view of its progress: a partition whose committed offset does not move while records wait is stuck,
whatever the consumer's own position says; an agent that keeps restarting is told apart from one that started."""
from gpufleet.streams.progress import PartitionProgress, Restarts

P = ("gpufleet.telemetry", 2)


def test_a_partition_read_to_its_end_whose_offset_never_moves_is_stuck():
    progress = PartitionProgress(stuck_after_s=60)
    progress.observe(P, 180, 362, now=0)
    for now in (5, 30, 59):
        progress.observe(P, 180, 362, now=now)
        assert progress.stuck(now) == {}
    progress.observe(P, 180, 362, now=61)
    assert progress.stuck(61) == {P: 61} and progress.lag(P) == 182


def test_a_moving_or_caught_up_partition_is_never_stuck():
    progress = PartitionProgress(stuck_after_s=60)
    for i, now in enumerate(range(0, 600, 5)):
        progress.observe(P, 100 + i, 100 + i + 50, now=now)            # far behind, but moving
    assert progress.stuck(600) == {} and progress.waiting_s(P, 600) <= 5
    progress.observe(P, 400, 400, now=700)
    progress.observe(P, 400, 400, now=10_000)                          # nothing waits: idle, not stuck
    assert progress.stuck(10_000) == {} and progress.lag(P) == 0
    progress.observe(P, 400, 401, now=10_005)          # a record arrives: it waits since nothing last waited
    assert progress.waiting_s(P, 10_050) == 50
    progress.forget([P])
    assert progress.stuck(99_999) == {}


def test_a_partition_never_committed_counts_from_its_start():
    progress = PartitionProgress(stuck_after_s=10)
    progress.observe(P, None, 50, now=0)
    progress.observe(P, None, 50, now=11)
    assert progress.stuck(11) == {P: 11} and progress.lag(P) == 50


def test_an_agent_that_keeps_restarting_is_named_one_that_started_is_not():
    now = [0.0]
    restarts = Restarts(limit=3, clock=lambda: now[0])
    restarts.started("node")
    restarts.started("job")
    assert restarts.restarting() == {}
    for t in (10, 20, 30):
        now[0] = t
        restarts.started("node")
    assert restarts.restarting() == {} and restarts.total == {"node": 3}
    now[0] = 40
    restarts.started("node")
    assert restarts.restarting() == {"node": 4}
    now[0] = 200                                                       # quiet for a while: no longer
    assert restarts.restarting() == {} and restarts.total == {"node": 4}
