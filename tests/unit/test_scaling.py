"""The scale policy's rules as properties over many random situations and decision sequences: never below
what is rented, scale-in only on observed demand (a forecast never lowers a target), cooldown, min, max and
step, dry run; and the replay of a demand series against static peak capacity and a reactive policy."""
import math
import random

import numpy as np
import pytest
from pydantic import ValidationError

from gpufleet.models.scaling import Observed, Policy, Standing, decide, next_standing, simulate, static_peak

STEP = 600.0


def random_policy(rng: random.Random) -> Policy:
    lo = rng.choice([0, 0, 4, 16])
    return Policy(headroom_pct=rng.choice([0, 10, 25]), min_gpus=lo,
                  max_gpus=rng.choice([None, lo + rng.randint(0, 64)]), step_gpus=rng.choice([1, 4, 8]),
                  cooldown_s=rng.choice([0, 600, 1800, 3600]), lead_time_s=rng.choice([0, 600, 900, 1800]),
                  scale_in_after_s=rng.choice([600, 3600, 7200]))


def random_case(rng: random.Random):
    policy = random_policy(rng)
    at = 1e9 + rng.randint(0, 10_000) * 60
    rented = rng.randint(0, 80)
    seen = Observed(current_gpus=rng.randint(0, 100), rented_gpus=rented, peak_gpus=rented + rng.uniform(0, 20),
                    observed_s=rng.choice([0, 600, 3600, 7200]))
    standing = rng.choice([None, Standing(rng.randint(0, 100), rng.choice([None, at - rng.randint(0, 7200)]))])
    forecast = rng.choice([None, [(at + k * STEP, rng.uniform(0, 120)) for k in range(288)]])
    return policy, at, seen, standing, forecast


CASES = [random_case(random.Random(i)) for i in range(3000)]


def bounded_floor(policy: Policy, seen: Observed) -> int:
    """What the observations alone ask for."""
    return max(policy.bounded(policy.with_headroom(max(seen.peak_gpus, seen.rented_gpus))), seen.rented_gpus)


@pytest.mark.parametrize("i", range(0, 3000, 300))
def test_never_below_the_gpus_rented_now(i):
    for policy, at, seen, standing, forecast in CASES[i:i + 300]:
        d = decide(policy, at, seen, standing, forecast, step_s=STEP)
        assert d.target_gpus >= seen.rented_gpus, d


def test_scale_in_only_on_observed_demand():
    downs = 0
    for policy, at, seen, standing, forecast in CASES:
        d = decide(policy, at, seen, standing, forecast, step_s=STEP)
        if d.action == "scale_down":
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
        if d.target_gpus > seen.rented_gpus:
            assert d.target_gpus % policy.step_gpus == 0 or d.target_gpus == policy.max_gpus
            assert d.target_gpus >= policy.min_gpus
            assert policy.max_gpus is None or d.target_gpus <= policy.max_gpus
        else:                    # only what is rented can push a target past max_gpus
            assert d.target_gpus == seen.rented_gpus


def test_cooldown_between_changes_over_random_sequences():
    """Over random demand paths: two changes are at least the cooldown apart, unless the later one is a rise to
    what the demand observed then asks for."""
    checked = 0
    for seed in range(60):
        rng = random.Random(seed)
        policy = random_policy(rng).model_copy(update={"cooldown_s": rng.choice([1800, 3600, 7200])})
        standing, last_change, demand = None, None, 20.0
        for i in range(300):
            at = 1e9 + i * STEP
            demand = max(0.0, demand + rng.gauss(0, 4))
            seen = Observed(current_gpus=standing.target_gpus if standing else 30, rented_gpus=int(demand),
                            peak_gpus=demand + rng.uniform(0, 3), observed_s=7200)
            fc = [(at + k * STEP, demand + rng.uniform(-10, 30)) for k in range(24)] if rng.random() < 0.7 else None
            d = decide(policy, at, seen, standing, fc, step_s=STEP)
            if d.action != "hold":
                if last_change is not None and at - last_change < policy.cooldown_s:
                    checked += 1
                    assert d.action == "scale_up" and d.target_gpus == bounded_floor(policy, seen), d
                last_change = at
            standing = next_standing(standing, d)
            assert standing.changed_at == last_change
    assert checked > 0


def test_dry_run_decides_the_same_and_says_so():
    for policy, at, seen, standing, forecast in CASES[:500]:
        live = decide(policy, at, seen, standing, forecast, step_s=STEP)
        dry = decide(policy.model_copy(update={"dry_run": True}), at, seen, standing, forecast, step_s=STEP)
        assert (dry.action, dry.target_gpus, dry.reason) == (live.action, live.target_gpus, live.reason)
        assert dry.dry_run and not live.dry_run


def test_the_lead_time_and_cooldown_set_how_far_ahead_the_forecast_counts():
    policy = Policy(headroom_pct=0, lead_time_s=1800, cooldown_s=1800)
    seen = Observed(10, 10, 10.0, 7200)
    at = 1e9
    peak_in = [(at + k * STEP, 50.0 if k == 5 else 10.0) for k in range(24)]      # 50 min ahead: inside 60 min
    peak_out = [(at + k * STEP, 50.0 if k == 7 else 10.0) for k in range(24)]     # 70 min ahead: beyond
    assert decide(policy, at, seen, None, peak_in, step_s=STEP).target_gpus == 50
    assert decide(policy, at, seen, None, peak_out, step_s=STEP).target_gpus == 10
    # decisions an hour apart look an hour past the lead time
    assert decide(policy, at, seen, None, peak_out, step_s=STEP, next_decision_s=3600).target_gpus == 50


def test_bad_policies_are_refused_naming_the_field():
    with pytest.raises(ValidationError, match="max_gpus"):
        Policy(min_gpus=10, max_gpus=4)
    with pytest.raises(ValidationError, match="step_gpus"):
        Policy(step_gpus=0)
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
