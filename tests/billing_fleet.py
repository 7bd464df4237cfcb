"""A simulated fleet with what billing must survive, and the conservation checks of its ledger.

Used by tests/unit/test_conservation.py (a small fleet) and bench/bench_billing.py (a month of 128 GPUs).

The simulated fleet already has rentals that start and end mid-period and idle stretches. On top of it:
- tenant changes: once a day, one node's rented GPUs pass to another tenant for 25 minutes;
- gaps: once a day, one node's collector loses 25 minutes of messages and says so (``seq`` jumps), another
  node is down for 40 minutes and comes back with a new collector (``seq`` from 0), a third one's spool
  drops 15 minutes of messages and counts them in ``dropped``; and here and there single messages go
  missing (a one-sample gap, always billed as estimated).

The checks compute what the ledger must hold from the telemetry itself, independently of streams/billing/metering.py:
per GPU and period the rented time (the interval of every sample with a tenant) within one sample interval
of the ledger's measured time, busy + idle = rented exactly, idle per GPU equal to the idle windows' time,
estimated and unbilled time equal to the gaps (billed where the collector reported the loss), and each
amount equal to the price table's hand computation in Decimal.
"""
from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal

from gpufleet.collectors.simulator import FleetSpec, Simulation

DAY = 86400.0
EVIDENCE, RESTART = "evidence", "restart"


def fleet(spec: FleetSpec, seed: int = 7) -> Iterator[tuple[dict, str | None]]:
    """The simulated fleet's messages with tenant changes and gaps, each with a note on the first message after
    an outage (``evidence`` or ``restart``)."""
    rng = random.Random(seed)
    sim = Simulation(spec)
    names = [n.name for n in sim.fleet]
    pick = lambda k: names[k % len(names)]                                      # noqa: E731
    after: dict[str, str] = {}          # node -> note for its next message
    restarted: dict[str, int] = {}      # node -> restarts so far (a new collector id, seq from 0)
    seq_base: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for msg in sim.messages():
        node, t = msg["node"], msg["ts"] - spec.start
        day, in_day = int(t // DAY), t % DAY
        outage = None
        if node == pick(0 + day) and 2 * 3600 + 600 <= in_day < 2 * 3600 + 600 + 1500:
            outage = EVIDENCE
        elif node == pick(1 + day) and 3 * 3600 + 1200 <= in_day < 3 * 3600 + 1200 + 2400:
            outage = RESTART
        elif node == pick(2 + day) and 5 * 3600 + 300 <= in_day < 5 * 3600 + 300 + 900:
            outage = "dropped"
        if outage is not None:
            if outage == "dropped":
                dropped[node] = dropped.get(node, 0) + 1
                after[node] = EVIDENCE
            else:
                after[node] = outage
                if outage == RESTART:
                    restarted[node] = restarted.get(node, 0) + 1
                    seq_base[node] = msg["seq"] + 1
            continue
        if node == pick(3 + day) and rng.random() < 0.002 and node not in after:
            continue                                                            # one sample missing
        if node in restarted:
            msg["collector_id"] = f"{msg['collector_id']}-{restarted[node]}"
            msg["seq"] -= seq_base[node]
        if dropped.get(node):
            msg["dropped"] = dropped.pop(node)
        if node == pick(4 + day) and 6 * 3600 + 900 <= in_day < 6 * 3600 + 900 + 1500:
            for g in msg["gpus"]:
                if g["tenant"] is not None:
                    g["tenant"], g["job"] = "sublet-co", f"sub-{day}"
        yield msg, after.pop(node, None)


def hand_amount(price: Decimal, rented_s: float, topup_s: float, share: Decimal = Decimal(1)) -> str:
    ms = Decimal(round(rented_s * 1000)) + Decimal(round(topup_s * 1000))
    return str((price * ms / 3_600_000 * share).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP))


class Conservation:
    """What the telemetry says the ledger must hold, gathered as messages and events go by; ``check()`` asserts."""

    def __init__(self, period_s: int, price_of, max_gap_s: float = 3600.0):
        self.period_ms = period_s * 1000
        self.price_of = price_of                 # (pool, period_start) -> Decimal price of a GPU-hour
        self.max_gap_ms = max_gap_s * 1000
        self.telemetry: dict[tuple[str, int], int] = defaultdict(int)       # (gpu, period) -> rented ms
        self.interval: dict[str, int] = {}
        self.last: dict[str, tuple[int, int, str]] = {}                      # gpu -> (ts ms, interval ms, tenant)
        self.expect_estimated: dict[str, int] = defaultdict(int)
        self.expect_unbilled: dict[str, int] = defaultdict(int)
        self.ledger: dict[tuple[str, int], int] = defaultdict(int)          # measured ms
        self.estimated: dict[str, int] = defaultdict(int)
        self.unbilled: dict[str, int] = defaultdict(int)
        self.idle: dict[str, int] = defaultdict(int)
        self.windows: dict[str, int] = defaultdict(int)
        self.records = 0
        self.problems: list[str] = []

    def message(self, msg: dict, note: str | None) -> None:
        ts, interval = round(msg["ts"] * 1000), round(msg["interval_s"] * 1000)
        for g in msg["gpus"]:
            uuid, tenant = g["uuid"], g["tenant"]
            prev = self.last.get(uuid)
            if tenant is None:
                self.last.pop(uuid, None)
                continue
            self.telemetry[(uuid, ts - ts % self.period_ms)] += interval
            self.interval[uuid] = interval
            if prev is not None and prev[2] == tenant:
                gap = ts - prev[0]
                hole = ts - prev[0] - prev[1]
                if 1.5 * prev[1] < gap <= 3 * prev[1]:
                    self.expect_estimated[uuid] += hole                     # a missing sample: always billed
                elif gap > 3 * prev[1]:
                    if note == EVIDENCE and hole <= self.max_gap_ms:
                        self.expect_estimated[uuid] += hole
                    else:
                        self.expect_unbilled[uuid] += hole
            self.last[uuid] = (ts, interval, tenant)

    def events(self, events: list[dict]) -> None:
        for e in events:
            if e["schema"] != "gpufleet.billing.v1":
                continue
            self.records += 1
            uuid, rented, est = e["gpu_uuid"], e["rented_s"], e["estimated_s"]
            key = (uuid, e["period_start"] * 1000)
            self.ledger[key] += round(rented * 1000) - round(est * 1000)
            self.estimated[uuid] += round(est * 1000)
            self.unbilled[uuid] += round(e["unbilled_s"] * 1000)
            self.idle[uuid] += round(e["idle_s"] * 1000)
            if Decimal(str(e["busy_s"])) + Decimal(str(e["idle_s"])) != Decimal(str(rented)):
                self.problems.append(f"busy + idle != rented: {e}")
            want = hand_amount(self.price_of(e["pool"], e["period_start"]), rented, e["minimum_topup_s"])
            if e["amount"] != want:
                self.problems.append(f"amount {e['amount']} != {want} by hand: {e}")

    def idle_windows(self, rows: list[tuple]) -> None:
        for r in rows:                           # IDLE_WINDOWS: gpu_uuid, started_at, ended_at (ms), ...
            self.windows[r[0]] += r[2] - r[1]

    def check(self) -> None:
        assert self.records, "no billing records"
        problems = list(self.problems)
        for key in self.telemetry.keys() | self.ledger.keys():
            diff = self.ledger.get(key, 0) - self.telemetry.get(key, 0)
            if abs(diff) > self.interval.get(key[0], 0):
                problems.append(f"{key}: ledger {self.ledger.get(key, 0)} ms, telemetry "
                                f"{self.telemetry.get(key, 0)} ms")
        for name, got, want in (("idle", self.idle, self.windows), ("estimated", self.estimated,
                                self.expect_estimated), ("unbilled", self.unbilled, self.expect_unbilled)):
            for uuid in got.keys() | want.keys():
                if got.get(uuid, 0) != want.get(uuid, 0):
                    problems.append(f"{name} of {uuid}: ledger {got.get(uuid, 0)} ms, expected {want.get(uuid, 0)}")
        assert not problems, f"{len(problems)} problems, the first: {problems[:5]}"
