"""Delivering to one receiver: the rate limit, Retry-After, backoff with jitter up to the stated
limit, dead letters with reason and count, errors without secrets."""
import queue
import random
import time

import pytest
from notify_helpers import Endpoint, make

from gpufleet.streams.notify.http import Response, Unreachable
from gpufleet.streams.notify.outbox import Delivery, Outbox
from gpufleet.streams.notify.receivers import Notification
from gpufleet.streams.notify.routing import Routes
from gpufleet.streams.notify.sender import Job, RetryPolicy, Sender, TokenBucket

SECRET_URL = "http://hooks.test/services/T0/B0/XYZsecret"


@pytest.fixture
def slack(monkeypatch):
    monkeypatch.setenv("T_SLACK_URL", SECRET_URL)
    config = {"type": "slack", "url_env": "T_SLACK_URL", "rate_per_s": 0}
    return Routes.parse({"route": {"receiver": "s"}, "receivers": {"s": config}}).receivers["s"]


def run_one(tmp_path, receiver, endpoint, policy, n=1):
    outbox = Outbox(str(tmp_path), fsync=False)
    results: queue.Queue = queue.Queue()
    sender = Sender(receiver, outbox, policy, results, post=endpoint, seed=3)
    alerts = [make(target=f"GPU-{i}", gpu=f"GPU-{i}") for i in range(n)]
    deliveries = [Delivery(a, receiver.name, "g") for a in alerts]
    sender.start()
    sender.submit(Job(Notification(receiver.name, {}, alerts), deliveries))
    result = results.get(timeout=30)
    settled = len(result.deliveries)
    while settled < n:                                  # one result per request
        result = results.get(timeout=30)
        settled += len(result.deliveries)
    sender.stop()
    sender.join(timeout=5)
    rows = outbox.unexported()
    outbox.close()
    return result, rows


def test_token_bucket_allows_bursts_then_the_rate():
    t = [0.0]
    bucket = TokenBucket(2.0, 3, clock=lambda: t[0])
    waits = [bucket.wait_s() for _ in range(5)]
    assert waits == [0.0, 0.0, 0.0, 0.5, 1.0]
    t[0] = 10.0
    assert bucket.wait_s() == 0.0
    assert TokenBucket(0, 1).wait_s() == 0.0            # no limit


def test_backoff_doubles_with_jitter_up_to_the_cap():
    policy, rng = RetryPolicy(backoff_s=1.0, backoff_max_s=8.0), random.Random(1)
    for failures, full in ((1, 1), (2, 2), (3, 4), (4, 8), (9, 8)):
        waits = [policy.backoff(failures, rng) for _ in range(200)]
        assert full / 2 <= min(waits) and max(waits) <= full
        assert max(waits) - min(waits) > full / 4          # jittered, not one value


def test_5xx_and_no_answer_are_retried_then_dead_lettered_with_reason_and_count(tmp_path, slack):
    answers = iter([Unreachable(f"refused by {SECRET_URL}"), 503, 502, 500] + [503] * 100)
    endpoint = Endpoint(lambda url, body: next(answers))
    policy = RetryPolicy(retry_for_s=0.5, backoff_s=0.05, backoff_max_s=0.1)
    started = time.monotonic()
    result, (row,) = run_one(tmp_path, slack, endpoint, policy)
    assert result.state == "dead" and result.reason == "retry_limit"
    assert time.monotonic() - started < 2
    assert row["state"] == "dead" and row["reason"] == "retry_limit" and row["attempts"] == len(endpoint.calls) >= 4
    assert "gave up after" in row["last_error"] and "HTTP 503" in row["last_error"]
    assert "XYZsecret" not in result.error


def test_a_rejected_delivery_is_not_retried(tmp_path, slack):
    endpoint = Endpoint(lambda url, body: Response(400, {}, b"invalid_blocks"))
    result, (row,) = run_one(tmp_path, slack, endpoint, RetryPolicy(retry_for_s=60, backoff_s=0.01))
    assert len(endpoint.calls) == 1 and (row["state"], row["reason"], row["attempts"]) == ("dead", "rejected", 1)
    assert row["last_error"] == "HTTP 400: invalid_blocks"


def test_429_waits_for_retry_after(tmp_path, slack):
    answers = iter([Response(429, {"retry-after": "1"}, b"rate_limited"), 200])
    stamps = []

    def answer(url, body):
        stamps.append(time.monotonic())
        return next(answers)
    result, (row,) = run_one(tmp_path, slack, Endpoint(answer), RetryPolicy(retry_for_s=60, backoff_s=0.01))
    assert result.state == "sent" and row["attempts"] == 2 and row["sent_at"] is not None
    assert stamps[1] - stamps[0] >= 0.95


def test_a_429_beyond_the_retry_limit_is_dead(tmp_path, slack):
    endpoint = Endpoint(lambda url, body: Response(429, {"retry-after": "3600"}, b""))
    result, (row,) = run_one(tmp_path, slack, endpoint, RetryPolicy(retry_for_s=5, backoff_s=0.01))
    assert len(endpoint.calls) == 1 and row["reason"] == "retry_limit" and "HTTP 429" in row["last_error"]


def test_the_rate_limit_spaces_requests(tmp_path, monkeypatch):
    monkeypatch.setenv("T_PD_KEY", "k")
    config = {"type": "pagerduty", "routing_key_env": "T_PD_KEY", "rate_per_s": 20, "burst": 2}
    pd = Routes.parse({"route": {"receiver": "p"}, "receivers": {"p": config}}).receivers["p"]
    stamps = []

    def answer(url, body):
        stamps.append(time.monotonic())
        return 202
    result, rows = run_one(tmp_path, pd, Endpoint(answer), RetryPolicy(), n=8)
    assert result.state == "sent" and len(rows) == 8
    # 2 at once, then one every 50 ms: the 8th no sooner than 6 intervals after the first
    assert stamps[-1] - stamps[0] >= 6 * 0.05 * 0.9


def test_a_send_that_raises_is_a_failed_attempt_and_a_url_that_cannot_be_sent_to_is_dead_lettered(tmp_path, slack):
    """Any error at send time is an attempt that failed with its reason: retried, then dead-lettered; a URL urllib
    cannot open is a configuration to fix, dead-lettered at once. Nothing is left owed with no one to retry it."""
    def broken(url, body, headers, timeout_s):
        raise RuntimeError("socket library exploded")
    result, rows = run_one(tmp_path, slack, broken, RetryPolicy(retry_for_s=0.2, backoff_s=0.05, backoff_max_s=0.05))
    assert result.state == "dead" and result.reason == "retry_limit" and "RuntimeError: socket" in result.error
    assert rows[0]["state"] == "dead" and rows[0]["attempts"] >= 2

    from gpufleet.streams.notify import http
    result, rows = run_one(tmp_path / "b", slack, lambda *a: http.post("not a url", b"{}", {}, 1.0), RetryPolicy())
    assert result.state == "dead" and result.reason == "rejected" and "cannot send to this URL" in result.error
    assert rows[0]["attempts"] == 1


def test_a_bug_in_building_or_sending_never_leaves_a_delivery_owed(tmp_path, slack, monkeypatch):
    monkeypatch.setattr(Sender, "_deliver", lambda self, job, request, owed: 1 / 0)
    result, rows = run_one(tmp_path, slack, Endpoint(), RetryPolicy())
    assert result.state == "dead" and result.reason == "internal_error" and "ZeroDivisionError" in result.error
    assert [r["state"] for r in rows] == ["dead"]


def test_the_sender_says_whether_it_is_paced_or_retrying(tmp_path, slack):
    sender = Sender(slack, Outbox(str(tmp_path), fsync=False), RetryPolicy(), queue.Queue())
    sender.state = "retrying"
    sender.last_error = "HTTP 503: down"
    assert sender.describe() == "s: retrying after a failure (HTTP 503: down)"
    sender.state = "paced"
    assert sender.describe() == "s: waiting as the receiver asked (429)"      # this one has no rate limit
