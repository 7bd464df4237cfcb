"""The candidate built on the rentals running now: Kaplan-Meier survival of rental lengths (censoring kept,
per tenant), arrivals by hour of the week, nothing known after the origin; on a simulated pool of tenants it
beats the last value an hour ahead where the bare series cannot."""
import math

import numpy as np
import pytest

from gpufleet.collectors.simulator.demand import tenant_pool
from gpufleet.models import backtest
from gpufleet.models.forecast import Forecaster, History
from gpufleet.models.rentals import Rentals, RentalsModel, Survival, read_rentals
from gpufleet.models.series import DAY, SeriesError, regular

STEP = 600.0


def test_survival_follows_the_lengths_and_keeps_the_censored_ones():
    rng = np.random.default_rng(1)
    mean = 5 * 3600.0
    lengths = rng.exponential(mean, 20_000)
    # half the rentals are seen for a while only, still running when the record stops
    seen = np.where(rng.random(20_000) < 0.5, rng.uniform(0, 3 * mean, 20_000), np.inf)
    durations, ended = np.minimum(lengths, seen), lengths <= seen
    s = Survival(durations, ended, STEP)
    for hours in (1, 5, 10, 20):
        assert math.exp(s.log(np.array([hours * 3600.0]))[0]) == pytest.approx(math.exp(-hours * 3600 / mean),
                                                                                abs=0.015)
    # dropping the censored ones instead would bias it short: at 10 h the truth is 0.135
    naive = Survival(durations[ended], np.ones(int(ended.sum()), bool), STEP)
    assert math.exp(naive.log(np.array([36000.0]))[0]) < 0.1
    # past the oldest rental the tail keeps the hazard of the last ages seen
    far = s.log(np.array([100 * DAY, 101 * DAY]))
    assert far[1] < far[0] < 0


def pool(weeks=5, seed=7, per_hour=40):
    times, gpus, held = tenant_pool(weeks, seed=seed, rentals_per_hour=per_hour)
    return regular(np.array(times), np.array(gpus), STEP, "last"), Rentals.of(held)


@pytest.fixture(scope="module")
def simulated():
    return pool()


def test_each_tenant_has_its_own_survival_and_a_rental_is_expected_to_end_as_its_tenant_s_do(simulated):
    series, rentals = simulated
    hist = History(series)
    m = RentalsModel(rentals)
    assert m.fit(hist, len(series) - 288, 288)
    assert set(m.tenants) == {"interactive", "batch", "training"}
    # a rental two hours old: an interactive one is far less likely to run six hours more than a training one
    two = np.array([2 * 3600.0])
    later = two + 6 * 3600

    def still(name):
        s = m.tenants[name]
        return math.exp(s.log(later)[0] - s.log(two)[0])
    assert still("interactive") < 0.25 < 0.6 < still("training")
    assert still("interactive") < math.exp(m.pool.log(later)[0] - m.pool.log(two)[0]) < still("training")


def test_a_forecast_knows_only_what_was_known_at_its_origin(simulated):
    series, rentals = simulated
    hist = History(series)
    m = RentalsModel(rentals)
    cut = len(series) - 600
    m.fit(hist, cut, 288)
    origin = cut + 100
    t = series.start + origin * STEP
    before = m.predict(hist, np.array([origin]), 288)
    # rentals after the origin changed: the ones that start later are gone, the running ones end at other times
    later = rentals.start >= t
    running = (rentals.start < t) & (rentals.end > t)
    end = np.where(running, t + 1 + rentals.end % 977, rentals.end)
    other = Rentals(rentals.start[~later], end[~later], rentals.gpus[~later], rentals.tenant[~later])
    values = series.values.copy()
    values[origin:] = 0
    after = RentalsModel(other)
    after.__dict__.update({k: v for k, v in m.__dict__.items() if k != "rentals"})
    assert np.array_equal(after.predict(History(type(series)(series.start, STEP, values)), np.array([origin]), 288),
                          before)


@pytest.mark.slow
def test_with_the_rentals_the_forecast_beats_the_last_value_an_hour_ahead():
    series, rentals = pool(weeks=6, seed=11, per_hour=50)
    test_from = series.start + 4 * 7 * DAY
    bare = backtest.run(series, DAY, test_from, backtest.Schedule(refit_every_s=14 * DAY))
    known = backtest.run(series, DAY, test_from, backtest.Schedule(refit_every_s=14 * DAY), rentals=rentals)
    last = known.report()["1h"]["last_value"]["smape_pct"]
    ours = known.report()["1h"]["gpufleet"]["smape_pct"]
    assert ours <= 0.9 * last, (ours, last)
    assert ours < bare.report()["1h"]["gpufleet"]["smape_pct"]
    assert known.chosen()["1h"] == {"rentals": 1}


def test_the_forecaster_keeps_what_it_learnt_and_forecasts_with_the_rentals_read_later(simulated):
    series, rentals = simulated
    n = len(series) - 144
    early = Rentals(rentals.start, np.where(rentals.end > series.start + n * STEP, np.inf, rentals.end), rentals.gpus,
                    rentals.tenant)
    keep = early.start < series.start + n * STEP
    early = Rentals(early.start[keep], early.end[keep], early.gpus[keep], early.tenant[keep])
    f = Forecaster(STEP, DAY, rentals=early).fit(series, end=n)
    assert "rentals" in f.describe()
    a = f.predict(series, [n + 72], rentals=rentals).mean
    g = Forecaster(STEP, DAY, rentals=rentals).fit(series, end=n)
    assert np.allclose(a, g.predict(series, [n + 72]).mean)


def test_rentals_from_csv_and_errors_that_name_the_line(tmp_path):
    good = tmp_path / "r.csv"
    good.write_text("start,end,gpus,tenant\n2026-01-05T00:00:00Z,2026-01-05T03:00:00Z,8,acme\n"
                    "1767571200,,2,\n")
    r = read_rentals(str(good))
    assert len(r) == 2 and r.gpus.tolist() == [8.0, 2.0] and math.isinf(r.end[1]) and r.tenant.tolist() == ["acme", ""]
    assert r.held(np.array([1767571200.0, 1767571200 + 3 * 3600.0])).tolist() == [10.0, 2.0]
    for text, words in (("start,gpus\n1,2\n", "no column end"), ("start,end,gpus\n5,1,2\n", ":2: a rental needs"),
                        ("start,end,gpus\nsoon,,2\n", ":2: cannot read"), ("start,end,gpus\n", "no rentals")):
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(SeriesError, match=words):
            read_rentals(str(bad))
