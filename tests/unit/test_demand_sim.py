"""The simulated pool demand: deterministic for a seed, busier by day than by night and on weekdays than at
weekends, every rental's GPUs counted while it runs."""
from gpufleet.collectors.simulator.demand import WEEK, pool_demand, rentals


def test_the_same_seed_gives_the_same_series_and_another_seed_another():
    a, b, c = pool_demand(2, seed=4), pool_demand(2, seed=4), pool_demand(2, seed=5)
    assert a == b and a[1] != c[1]
    times, gpus = a
    assert len(times) == 2 * WEEK // 600 and times[1] - times[0] == 600 and min(gpus) >= 0


def test_demand_follows_the_tide_of_the_day_and_the_week():
    times, gpus = pool_demand(8, seed=2, rentals_per_hour=50)
    by_hour = [0.0] * 24
    for t, g in zip(times, gpus):
        by_hour[int(t % 86400 // 3600)] += g
    assert max(range(24), key=by_hour.__getitem__) in range(14, 21)      # rentals peak at 14:00, run for hours
    assert min(range(24), key=by_hour.__getitem__) in (*range(0, 10), 23)
    weekday = [g for t, g in zip(times, gpus) if (t // 86400 + 3) % 7 < 5]
    weekend = [g for t, g in zip(times, gpus) if (t // 86400 + 3) % 7 >= 5]
    assert sum(weekday) / len(weekday) > 1.2 * sum(weekend) / len(weekend)


def test_the_demand_is_the_gpus_of_the_rentals_active():
    start = 1767571200.0
    times, gpus = pool_demand(1, seed=3, start=start)
    held = rentals(start - 3 * 86400, start + WEEK, seed=3)
    for i in (0, 100, 500, 1000):
        t = times[i]
        assert gpus[i] == sum(g for a, b, g in held if a <= t < b)


def test_a_pool_of_tenants_counts_the_most_held_in_each_step_and_each_tenant_rents_for_its_own_length():
    import math
    import statistics

    from gpufleet.collectors.simulator.demand import TENANTS, tenant_pool
    times, gpus, held = tenant_pool(2, seed=3, rentals_per_hour=20)
    assert tenant_pool(2, seed=3, rentals_per_hour=20) == (times, gpus, held)       # deterministic
    for i in (0, 300, 1000, 2000):
        t = times[i]
        moments = [t] + [a for a, _, _, _ in held if t < a < t + 600] + [b for _, b, _, _ in held if t < b < t + 600]
        assert gpus[i] == max(sum(g for a, b, g, _ in held if a <= m < b) for m in moments)
    medians = {n: statistics.median(b - a for a, b, _, name in held if name == n) / 3600 for n, _, _ in TENANTS}
    for name, share, hours in TENANTS:
        assert abs(math.log(medians[name] / hours)) < 0.3, medians     # each around its own median
        count = sum(1 for *_, n in held if n == name)
        assert abs(count / len(held) - share) < 0.05
