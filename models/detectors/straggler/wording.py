"""What a straggler's page says: the cause its numbers show, and the evidence."""
from __future__ import annotations

from gpufleet.contracts.telemetry import BENIGN_CLOCK_EVENTS

from ..base import (
    POWER_CAP_BIT,
    Incident,
    Seen,
    Told,
    ended,
    event,
    minutes,
    throttle_text,
)
from .constants import CAUSE_THROTTLED_SHARE, KIND, LOW_CLOCK
from .features import FEATURES, Peers, Stats
from .seen import StragglerSeen


def numbers(stats: dict[str, Stats], name: str, x: list[float], peers: dict[str, Peers]) -> dict:
    """A GPU's (a node's) numbers against its peers', the :class:`StragglerSeen` fields by name."""
    s, p = stats[name], peers[name]
    return {"clock": s.clock, "peer_clock": p.clock, "util": s.util, "peer_util": p.util, "power": s.power,
            "peer_power": p.power, "throttled": s.throttled, "capped": s.capped,
            "slowdown": x[FEATURES.index("slowdown")]}

def _r(v, digits: int = 1) -> float | None:
    return None if v is None or v != v else round(v, digits)

def named_cause(info: StragglerSeen) -> str:
    """The cause the numbers show, in this order: a throttle reason held for a good part of the window (thermal, a
    power brake, a hardware slowdown); the power cap, where the GPU sat at it for a good part of the window while its
    clock or its power limit was below its peers' (peers brush the cap now and then, which slows nobody); a lower SM
    clock with a throttle reason reported in the window at all (a straggler paged on its first slow window has had
    little time to show it: never "without a throttle reason" while it reports one); a lower SM clock with no
    reason given; or, with its clocks level, slower work: its host, link or input feed it slowly."""
    bits = info.bits & ~POWER_CAP_BIT & ~BENIGN_CLOCK_EVENTS
    if info.throttled > CAUSE_THROTTLED_SHARE and throttle_text(bits):
        return throttle_text(bits)
    if info.capped > CAUSE_THROTTLED_SHARE and (clock_low(info) or limit_low(info)):
        return "power cap"
    if clock_low(info):
        return throttle_text(bits) or "lower SM clock without a throttle reason"
    return "slower without throttling (its host, link or input)"


def limit_low(info: StragglerSeen) -> bool:
    """Its power limit is known and under ``LOW_CLOCK`` times its peers' (lowered by an operator or a policy)."""
    limit, peers = info.limit, info.peer_limit
    if not limit or not peers:
        return False
    return limit < LOW_CLOCK * peers


def clock_low(info: StragglerSeen) -> bool:
    """Its SM clock share is known and under ``LOW_CLOCK`` times its peers'."""
    return info.clock == info.clock and info.peer_clock == info.peer_clock and \
        info.clock < LOW_CLOCK * info.peer_clock


def describe(status: str, info: Seen, st: Incident, resolved_at: float | None) -> dict:
    assert isinstance(info, StragglerSeen)
    if info.level == "node":
        who = f"{info.node} (all {info.gpus} GPUs, job {info.job})"
        peers = f"the job's other {info.peers} nodes" if info.peers != 1 else "the job's other node"
    else:
        who = f"GPU {info.index} on {info.node} (job {info.job})"
        peers = f"its {info.peers} peers" if info.peers != 1 else "its one peer"
    cause = named_cause(info)
    also = [throttle_text(info.bits & POWER_CAP_BIT)] if info.bits & POWER_CAP_BIT and cause != "power cap" \
        else []
    if status == "firing":
        if cause == "power cap" and info.limit and info.peer_limit:
            why = (f"at its power limit, {info.limit:.0f} W against its peers' {info.peer_limit:.0f} W, SM clock "
                   f"at {info.clock:.0%} of its maximum vs {info.peer_clock:.0%}")
        elif clock_low(info):
            why = f"SM clock at {info.clock:.0%} of its maximum vs {info.peer_clock:.0%} for its peers"
        else:
            why = f"utilization {info.util:.0f}% vs {info.peer_util:.0f}%, clocks normal"
        spans = minutes(st)          # from the start of the first slow window (the incident's start)
        summary = f"{who} runs {info.slowdown:.0%} behind {peers} for {spans:.0f} min: {why} ({cause})"
    else:
        lagged = f"it lagged for {minutes(st, resolved_at):.0f} min"
        summary = ended(who, st, resolved_at, lagged) or f"{who} keeps pace with {peers} again ({lagged})"
    evidence = {"cause": cause, "also_seen": also, "slowdown": round(info.slowdown, 3),
                "sm_clock_share": _r(info.clock, 3), "peers_sm_clock_share": _r(info.peer_clock, 3),
                "util_pct": _r(info.util), "peers_util_pct": _r(info.peer_util),
                "power_share": _r(info.power, 3), "peers_power_share": _r(info.peer_power, 3),
                "throttled_share": round(info.throttled, 3), "capped_share": round(info.capped, 3),
                "power_limit_w": _r(info.limit), "peers_power_limit_w": _r(info.peer_limit),
                "throttle_reasons": info.bits,
                "peers": info.peers, "level": info.level, "score": info.score}
    return event(KIND, info.target, status, st, resolved_at, info, Told(summary, evidence))
