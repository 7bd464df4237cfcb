"""The scale policy's rules as properties over many random situations and decision sequences: never below
what is rented, scale-in only on observed demand (a forecast never lowers a target), cooldown, min, max and
step, dry run; and the replay of a demand series against static peak capacity and a reactive policy."""
import math
import random
import re

import numpy as np
import pytest
from pydantic import ValidationError

from gpufleet.models.scaling import (
    Cadence,
    Observed,
    Policy,
    Standing,
    decide,
    next_standing,
    oracle,
    simulate,
    static_peak,
)

STEP = 600.0


def random_policy(rng: random.Random) -> Policy:
    lo = rng.choice([0, 0, 4, 16])
    return Policy(headroom_pct=rng.choice([0, 10, 25]), forecast_headroom_pct=rng.choice([None, 0, 5]),
                  min_gpus=lo, max_gpus=rng.choice([None, lo + rng.randint(0, 64)]),
                  capacity_gpus=rng.choice([None, None, rng.randint(0, 120)]), step_gpus=rng.choice([1, 4, 8]),
                  cooldown_s=rng.choice([0, 600, 1800, 3600]), lead_time_s=rng.choice([0, 600, 900, 1800]),
                  scale_in_after_s=rng.choice([600, 3600, 7200]))


def random_case(rng: random.Random):
    policy = random_policy(rng)
    at = 1e9 + rng.randint(0, 10_000) * 60
    current = rng.randint(0, 100)
    rented = rng.randint(0, current)
    seen = Observed(current_gpus=current, rented_gpus=rented, peak_gpus=rented + rng.uniform(0, 20),
                    observed_s=rng.choice([0, 600, 3600, 7200]),
                    capacity_gpus=rng.choice([None, current, current + rng.randint(0, 40)]))
    standing = rng.choice([None, Standing(rng.randint(0, 130), rng.choice([None, at - rng.randint(0, 7200)]))])
    forecast = rng.choice([None, [(at + k * STEP, rng.uniform(0, 150)) for k in range(288)]])
    return policy, at, seen, standing, forecast


CASES = [random_case(random.Random(i)) for i in range(3000)]


def capacity(policy: Policy, seen: Observed) -> int:
    if policy.capacity_gpus is not None:
        return max(policy.capacity_gpus, seen.rented_gpus)
    return max(seen.current_gpus, seen.capacity_gpus or 0, seen.rented_gpus)


def bounded_floor(policy: Policy, seen: Observed) -> int:
    """What the observations alone ask for."""
    need = policy.stepped(policy.with_headroom(max(seen.peak_gpus, seen.rented_gpus)))
    limit = capacity(policy, seen) if policy.max_gpus is None else min(capacity(policy, seen), policy.max_gpus)
    return max(min(need, limit), seen.rented_gpus)


@pytest.mark.parametrize("i", range(0, 3000, 300))
def test_never_below_the_gpus_rented_now_nor_above_what_the_pool_has(i):
    for policy, at, seen, standing, forecast in CASES[i:i + 300]:
        d = decide(policy, at, seen, standing, forecast, step_s=STEP)
        assert d.target_gpus >= seen.rented_gpus, d
        assert d.capacity_gpus == capacity(policy, seen)
        assert d.target_gpus <= d.capacity_gpus, d
        if policy.max_gpus is not None:
            assert d.target_gpus <= max(policy.max_gpus, seen.rented_gpus), d


def test_demand_beyond_the_pool_is_a_request_exactly_when_the_need_exceeds_it():
    requests = 0
    for policy, at, seen, standing, forecast in CASES:
        d = decide(policy, at, seen, standing, forecast, step_s=STEP)
        cap = capacity(policy, seen)
        observed = policy.stepped(policy.with_headroom(max(seen.peak_gpus, seen.rented_gpus)))
        ahead = [policy.stepped(policy.with_headroom(p, policy.forecast_headroom)) for _, p in forecast or []]
        beyond = max([observed] + ahead) > cap
        assert (d.capacity_request is not None) == beyond, d
        if d.capacity_request is not None:
            requests += 1
            r = d.capacity_request
            # enough GPUs that the highest need fits, in whole steps; from when, for how long, and the p90 behind it
            assert cap + r.gpus >= max([observed] + ahead) > cap + r.gpus - policy.step_gpus
            assert r.gpus % policy.step_gpus == 0 and r.start >= at and r.end > r.start
            assert re.search(r"\d+ more GPUs? asked for from", d.reason)
            if observed <= cap:
                first = next(at + k * STEP for k, n in enumerate(ahead) if n > cap)
                assert r.start == first
                assert r.p90 == max(p for _, p in forecast if policy.stepped(policy.with_headroom(
                    p, policy.forecast_headroom)) > cap)
    assert requests > 300


def test_the_action_agrees_with_the_target_against_the_gpus_present_and_the_reason_is_one_sentence():
    seen_actions = set()
    for policy, at, seen, standing, forecast in CASES:
        d = decide(policy, at, seen, standing, forecast, step_s=STEP)
        c, t = seen.current_gpus, d.target_gpus
        expected = "scale_up" if t > c else "scale_down" if t < c else "hold"
        assert d.action == expected, d
        seen_actions.add(d.action)
        head = {"scale_up": f"Scale up from {c} to {t} GPUs: ", "scale_down": f"Scale down from {c} to {t} GPUs: ",
                "hold": f"Hold at {t} GPUs: "}[d.action]
        assert d.reason.startswith(head), d.reason
        # one plain sentence: one full stop, at the end; no line breaks
        assert d.reason.endswith(".") and ". " not in d.reason and "\n" not in d.reason, d.reason
    assert seen_actions == {"scale_up", "scale_down", "hold"}


def test_a_pool_with_nothing_rented_and_nothing_forecast_is_told_to_scale_down_within_what_it_has():
    """The case of the issue: 24 GPUs, none rented over the last hour, a 48-hour forecast of 0, and a target in
    force above the pool (27): the target comes down to 0, and the word says so."""
    policy = Policy(headroom_pct=10, step_gpus=1, cooldown_s=1800, scale_in_after_s=3600)
    at = 1e9
    seen = Observed(current_gpus=24, rented_gpus=0, peak_gpus=0.0, observed_s=3600, capacity_gpus=24)
    zeros = [(at + k * STEP, 0.0) for k in range(288)]
    d = decide(policy, at, seen, Standing(27, at - 7200), zeros, step_s=STEP)
    assert (d.action, d.target_gpus, d.capacity_request) == ("scale_down", 0, None)
    assert d.reason.startswith("Scale down from 24 to 0 GPUs: the peak rented over the last 60 min is 0 GPUs")
    # a busy forecast for the same pool: the target stops at the pool's 24, the rest is a request
    busy = [(at + k * STEP, 30.0 if 2 <= k < 38 else 10.0) for k in range(288)]
    d = decide(policy, at, Observed(24, 20, 20.0, 3600, 24), Standing(24, None), busy, step_s=STEP)
    assert (d.action, d.target_gpus) == ("hold", 24)
    assert d.capacity_request is not None and d.capacity_request.to_dict() == {
        "gpus": 9, "from": at + 2 * STEP, "until": at + 38 * STEP, "p90": 30.0}
    assert "capped at the pool's 24 GPUs" in d.reason and "9 more GPUs asked for from 2001-09-09 02:06 UTC for 6 h" \
        " (forecast p90 up to 30.0)" in d.reason, d.reason
    # every GPU rented and nothing more forecast: the headroom is asked for from now, on what is observed
    d = decide(policy, at, Observed(24, 24, 24.0, 3600, 24), Standing(24, None), zeros, step_s=STEP)
    assert d.capacity_request is not None and d.capacity_request.start == at and d.capacity_request.gpus == 3
    assert "3 more GPUs asked for from 2001-09-09 01:46 UTC for 60 min (the peak rented up to 24.0)" in d.reason


def test_scale_in_waits_until_the_forecast_and_the_observed_demand_agree():
    downs = 0
    for policy, at, seen, standing, forecast in CASES:
        d = decide(policy, at, seen, standing, forecast, step_s=STEP)
        cap = capacity(policy, seen)
        limit = cap if policy.max_gpus is None else max(min(cap, policy.max_gpus), seen.rented_gpus)
        prev = min(standing.target_gpus if standing else seen.current_gpus, limit)
        if d.target_gpus < prev:
            downs += 1
            assert seen.observed_s >= policy.scale_in_after_s           # a whole window observed
            assert d.target_gpus >= bounded_floor(policy, seen)         # never below the demand seen + headroom
            assert standing is None or standing.changed_at is None or at - standing.changed_at >= policy.cooldown_s
        # a forecast only ever raises the target: the same decision without it is never higher
        reactive = decide(policy, at, seen, standing, None, step_s=STEP)
        assert d.target_gpus >= reactive.target_gpus
        # a forecast of nothing at all changes nothing against no forecast
        nothing = [(at + k * STEP, 0.0) for k in range(48)]
        assert decide(policy, at, seen, standing, nothing, step_s=STEP).target_gpus == reactive.target_gpus
    assert downs > 100           # the property was exercised


def test_min_max_and_step():
    for policy, at, seen, standing, forecast in CASES:
        d = decide(policy, at, seen, standing, forecast, step_s=STEP)
        prev = standing.target_gpus if standing else seen.current_gpus
        if d.target_gpus == prev:
            continue
        limit = capacity(policy, seen) if policy.max_gpus is None else min(capacity(policy, seen), policy.max_gpus)
        if d.target_gpus > seen.rented_gpus:
            # whole steps, unless the pool or max_gpus stops it between two
            assert d.target_gpus % policy.step_gpus == 0 or d.target_gpus == limit
            assert d.target_gpus >= min(policy.min_gpus, limit)
        else:                    # only what is rented can push a target past max_gpus or below min_gpus
            assert d.target_gpus == seen.rented_gpus


def test_cooldown_between_changes_over_random_sequences():
    """Over random demand paths: two changes are at least the cooldown apart, unless the later one is a rise to
    what the demand observed then asks for, or a cut to what the pool and max_gpus allow."""
    checked = 0
    for seed in range(60):
        rng = random.Random(seed)
        policy = random_policy(rng).model_copy(update={"cooldown_s": rng.choice([1800, 3600, 7200]),
                                                       "capacity_gpus": None})
        standing, last_change, demand = None, None, 20.0
        for i in range(300):
            at = 1e9 + i * STEP
            demand = max(0.0, demand + rng.gauss(0, 4))
            seen = Observed(current_gpus=standing.target_gpus if standing else 30, rented_gpus=int(demand),
                            peak_gpus=demand + rng.uniform(0, 3), observed_s=7200, capacity_gpus=200)
            fc = [(at + k * STEP, demand + rng.uniform(-10, 30)) for k in range(24)] if rng.random() < 0.7 else None
            d = decide(policy, at, seen, standing, fc, step_s=STEP)
            if d.changed:
                if last_change is not None and at - last_change < policy.cooldown_s:
                    checked += 1
                    limit = 200 if policy.max_gpus is None else max(min(200, policy.max_gpus), seen.rented_gpus)
                    rise = d.target_gpus > standing.target_gpus and d.target_gpus == bounded_floor(policy, seen)
                    assert rise or d.target_gpus == limit < standing.target_gpus, d
                last_change = at
            standing = next_standing(standing, d)
            assert standing.changed_at == last_change
    assert checked > 0


def test_dry_run_decides_the_same_and_says_so():
    for policy, at, seen, standing, forecast in CASES[:500]:
        live = decide(policy, at, seen, standing, forecast, step_s=STEP)
        dry = decide(policy.model_copy(update={"dry_run": True}), at, seen, standing, forecast, step_s=STEP)
        assert (dry.action, dry.target_gpus, dry.reason, dry.capacity_request) == \
            (live.action, live.target_gpus, live.reason, live.capacity_request)
        assert dry.dry_run and not live.dry_run


def test_the_lead_time_and_cooldown_set_how_far_ahead_the_forecast_counts():
    policy = Policy(headroom_pct=0, lead_time_s=1800, cooldown_s=1800)
    seen = Observed(10, 10, 10.0, 7200, capacity_gpus=64)
    at = 1e9
    peak_in = [(at + k * STEP, 50.0 if k == 5 else 10.0) for k in range(24)]      # 50 min ahead: inside 60 min
    peak_out = [(at + k * STEP, 50.0 if k == 7 else 10.0) for k in range(24)]     # 70 min ahead: beyond
    assert decide(policy, at, seen, None, peak_in, step_s=STEP).target_gpus == 50
    assert decide(policy, at, seen, None, peak_out, step_s=STEP).target_gpus == 10
    # decisions an hour apart look an hour past the lead time
    assert decide(policy, at, seen, None, peak_out, step_s=STEP,
                  cadence=Cadence(next_decision_s=3600)).target_gpus == 50
    # the forecast's own headroom
    own = policy.model_copy(update={"forecast_headroom_pct": 20})
    assert decide(own, at, seen, None, peak_in, step_s=STEP).target_gpus == 60


def test_bad_policies_are_refused_naming_the_field():
    with pytest.raises(ValidationError, match="max_gpus"):
        Policy(min_gpus=10, max_gpus=4)
    with pytest.raises(ValidationError, match="step_gpus"):
        Policy(step_gpus=0)
    with pytest.raises(ValidationError, match="capacity_gpus"):
        Policy(capacity_gpus=-1)
    with pytest.raises(ValidationError, match="extra"):
        Policy(headroom=5)


# -- replaying a series ---------------------------------------------------------------------------
def tide(days: int = 14, seed: int = 2) -> np.ndarray:
    n = int(days * 86400 / STEP)
    t = np.arange(n) * STEP
    rng = np.random.default_rng(seed)
    return np.round(60 + 40 * np.sin(2 * np.pi * t / 86400) + rng.normal(0, 2, n))


def test_static_peak_never_falls_short_and_provisions_the_peak_all_along():
    d = tide()
    out = static_peak(d, Policy(step_gpus=8), STEP)
    assert out.shortfall_gpu_h == 0 and out.shortfall_count == 0
    assert out.peak_capacity == 8 * math.ceil(d.max() / 8)
    assert out.provisioned_gpu_h == pytest.approx(out.peak_capacity * len(d) * STEP / 3600)


def test_a_forecast_of_the_tide_avoids_the_shortfall_of_a_reactive_policy_on_less_than_static_peak():
    d = tide()
    policy = Policy(headroom_pct=5, step_gpus=4, cooldown_s=1800, lead_time_s=1800, scale_in_after_s=3600)
    start = int(86400 / STEP)
    horizon = int(86400 / STEP)
    padded = np.concatenate([d, np.full(horizon, d[-1])])

    def perfect(i):                                   # the true future as the p90
        return padded[i:i + horizon]

    ours = simulate("forecast", d, start, policy, STEP, perfect, decide_every=6)
    reactive = simulate("reactive", d, start, policy, STEP, None, decide_every=6)
    static = static_peak(d[start:], policy, STEP)
    assert reactive.shortfall_count > 5 and reactive.shortfall_gpu_h > 10
    assert ours.shortfall_gpu_h == 0 and ours.shortfall_count == 0
    assert ours.provisioned_gpu_h < static.provisioned_gpu_h
    assert ours.idle_gpu_h == pytest.approx(ours.provisioned_gpu_h - d[start:].sum() * STEP / 3600)
    # capacity is never below demand without a shortfall being counted, and never below zero
    assert (ours.capacity >= 0).all()


def test_capacity_asked_for_arrives_after_the_lead_time():
    d = np.array([10.0] * 12 + [40.0] * 12)
    policy = Policy(headroom_pct=0, lead_time_s=3 * STEP, cooldown_s=0, scale_in_after_s=STEP)
    out = simulate("reactive", d, 1, policy, STEP, None)
    cap = out.capacity                                   # index 0 is step 1
    assert cap[10] == 10                                 # step 11: still 10
    assert cap[11] == 10 and cap[12] == 10 and cap[13] == 10 and cap[14] == 10   # asked at step 13, here at 16
    assert cap[15] == 40
    assert out.shortfall_count == 1 and out.shortfall_steps == 4


def test_every_policy_replayed_stays_within_the_pool_and_the_oracle_provisions_least():
    d = tide()                                          # peaks near 100 GPUs
    policy = Policy(headroom_pct=10, step_gpus=8, cooldown_s=1800, lead_time_s=900, capacity_gpus=88)
    start = int(86400 / STEP)
    horizon = int(86400 / STEP)
    padded = np.concatenate([d, np.full(horizon, d[-1])])
    ours = simulate("forecast", d, start, policy, STEP, lambda i: padded[i:i + horizon] * 1.2, decide_every=6)
    reactive = simulate("reactive", d, start, policy, STEP, None, decide_every=6)
    static = static_peak(d[start:], policy, STEP, capacity=88)
    best = oracle(d[start:], policy, STEP, capacity=88)
    for o in (ours, reactive, static, best):
        assert o.capacity.max() <= 88, o.name
    assert static.peak_capacity == 88
    # the oracle falls short only where demand is beyond the pool, and no policy provisions less
    beyond = np.maximum(d[start:] - 88, 0).sum() * STEP / 3600
    assert best.shortfall_gpu_h == pytest.approx(beyond) and beyond > 0
    assert (best.capacity == np.minimum(8 * np.ceil(d[start:] / 8), 88)).all()
    for o in (ours, reactive, static):
        assert o.provisioned_gpu_h >= best.provisioned_gpu_h and o.shortfall_gpu_h >= best.shortfall_gpu_h - 1e-9
    # without a configured capacity the pool is the series' peak
    free = simulate("reactive", d, start, policy.model_copy(update={"capacity_gpus": None}), STEP, None, 6)
    assert free.capacity.max() <= d.max()


def test_a_forecast_of_a_few_hours_history_asks_for_no_capacity():
    """A forecast made from 6 hours of history (a band as wide as a random walk's, as make demo's l40s pool had)
    asks for no GPUs beyond the pool; the demand observed still does, and a day of history lets the forecast ask.
    The targets are the same either way: the rule concerns requests only."""
    policy = Policy(headroom_pct=10, step_gpus=1, cooldown_s=1800, scale_in_after_s=3600)
    at = 1e9
    wide = [(at + k * STEP, 15.0 + 0.2 * k) for k in range(288)]          # p90 widening to 72 GPUs in 48 h
    seen = Observed(current_gpus=16, rented_gpus=12, peak_gpus=12.0, observed_s=3600, capacity_gpus=16)
    young = decide(policy, at, seen, Standing(16, None), wide, step_s=STEP, cadence=Cadence(history_s=6 * 3600))
    grown = decide(policy, at, seen, Standing(16, None), wide, step_s=STEP, cadence=Cadence(history_s=86400))
    unknown = decide(policy, at, seen, Standing(16, None), wide, step_s=STEP)
    assert young.capacity_request is None
    assert "no capacity asked for on the forecast yet: it rests on 6 h of history, a request on a forecast needs " \
        "24 h" in young.reason, young.reason
    assert grown.capacity_request is not None and grown.capacity_request.gpus == 80 - 16
    assert unknown.capacity_request == grown.capacity_request
    assert young.target_gpus == grown.target_gpus == 16
    # the demand observed beyond the pool is asked for whatever the history
    full = Observed(current_gpus=16, rented_gpus=16, peak_gpus=16.0, observed_s=3600, capacity_gpus=16)
    d = decide(policy, at, full, Standing(16, None), wide, step_s=STEP, cadence=Cadence(history_s=3 * 3600))
    assert d.capacity_request is not None and d.capacity_request.start == at and d.capacity_request.gpus == 2
    assert "no capacity asked for on the forecast yet" in d.reason
