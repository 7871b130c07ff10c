"""The MTTF of a price-driven market (TierML Sec 2.3's AWS 2015 rules) by renewal over its price
series, the same in the simulator (``Market.mttf_s``, the Young/Daly interval of the policies)
and in the planner's model (``MarketModel.from_prices``): equal to a brute-force count on a
one-second grid, independent of the start time; each check catches a planted violation (the
former draw-based estimate: the residual life at the market's start time)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scarjax.cluster import market as mk
from scarjax.cluster.marketmodel import MarketModel

_H = 3600.0
WARN = mk.AWS_WARNING_S


def _series():
    """Granted (0.1 <= bid 1.0) for 100 s, 300 s and a last 200 s still granted at the end
    (censored); above the bid twice: two revocations."""
    return mk.price_series([0.1, 2.0, 0.1, 2.0, 0.1], [0.0, 100.0, 200.0, 500.0, 600.0], end_s=800.0)


def brute_mttf(times_s, prices, bid, end_s, warning_s, window=None) -> float:
    """The renewal MTTF on a one-second grid (integer change times): granted seconds plus a
    warning per revocation (a granted second followed by one above the bid) over the
    revocations."""
    lo, hi = (int(times_s[0]), int(end_s)) if window is None else (int(window[0]), int(window[1]))
    t = np.arange(lo, hi)
    p = np.asarray(prices, np.float32)[np.maximum(np.searchsorted(times_s, t, side="right") - 1, 0)]
    ok = p <= np.float32(bid)
    rev = int(np.sum(ok[:-1] & ~ok[1:]))
    if not ok.any():
        return 0.0
    return math.inf if rev == 0 else (float(ok.sum()) + rev * warning_s) / rev


def check_mttf(mttf_fn, times_s, prices, bid, end_s, window=None) -> None:
    """``mttf_fn(series, bid, window)`` equals the brute-force renewal MTTF."""
    ser = mk.price_series(np.asarray(prices, np.float64), np.asarray(times_s, np.float64), end_s=float(end_s))
    want = brute_mttf(np.asarray(times_s, np.float64), prices, bid, end_s, WARN, window)
    got = mttf_fn(ser, bid, window)
    assert got == pytest.approx(want, rel=1e-9), f"MTTF {got} != renewal over the series {want}"


def renewal(ser, bid, window):
    return mk.price_driven(ser, bid).mttf_s(window)


def residual_at_start(ser, bid, window):
    """The former Market.mttf_s of a price-driven market: the mean of draws at the start time,
    i.e. the residual life of an allocation bought then (a planted violation)."""
    start = 0.0 if window is None else float(window[0])
    m = mk.Market(mk.MachineType("x", 1.0), mk.price_driven(ser, bid), start_time_s=start)
    life, _ = m.revocations(jax.random.key(0), 64, start)
    return float(np.mean(np.asarray(life, np.float64)))


def test_price_driven_mttf_is_renewal_over_the_series():
    ser = _series()
    want = (100.0 + 300.0 + 200.0 + 2 * WARN) / 2
    assert mk.price_driven(ser, 1.0).mttf_s() == pytest.approx(want)
    for start in (0.0, 250.0, 650.0):  # every granted start: the same MTTF (not the residual life then)
        m = mk.Market(mk.MachineType("x", 1.0), mk.price_driven(ser, 1.0), start_time_s=start)
        assert m.mttf_s() == pytest.approx(want)
    # above the bid at the start: 0 (not granted; the policies start on on-demand machines)
    assert mk.Market(mk.MachineType("x", 1.0), mk.price_driven(ser, 1.0), start_time_s=550.0).mttf_s() == 0.0
    # a window: one revocation in [0, 300), the 100 s before it and the 100 s granted after
    assert mk.price_driven(ser, 1.0).mttf_s((0.0, 300.0)) == pytest.approx(200.0 + WARN)
    assert mk.price_driven(ser, 5.0).mttf_s() == math.inf  # never above the bid
    assert mk.price_driven(ser, 0.05).mttf_s() == 0.0  # never granted
    unwarned = mk.price_driven(ser, 1.0, unwarned=1.0).mttf_s()
    assert unwarned == pytest.approx((600.0) / 2)
    with pytest.raises(ValueError, match="window"):
        mk.price_driven(ser, 1.0).mttf_s((300.0, 100.0))


def test_price_driven_mttf_planted():
    """The draw-based estimate (the residual life at the start) is not the renewal MTTF."""
    with pytest.raises(AssertionError, match="renewal over the series"):
        check_mttf(residual_at_start, [0.0, 100.0, 200.0, 500.0, 600.0], [0.1, 2.0, 0.1, 2.0, 0.1], 1.0, 800.0)


@st.composite
def price_steps(draw):
    n = draw(st.integers(1, 12))
    gaps = draw(st.lists(st.integers(1, 400), min_size=n, max_size=n))
    times = np.concatenate([[0], np.cumsum(gaps)[:-1]]).astype(np.float64)
    prices = draw(st.lists(st.sampled_from([0.05, 0.1, 0.3, 0.8, 1.5]), min_size=n, max_size=n))
    end = float(times[-1] + draw(st.integers(1, 400)))
    bid = draw(st.sampled_from([0.07, 0.2, 1.0]))
    lo = draw(st.integers(0, int(end) - 1))
    hi = draw(st.integers(lo + 1, int(end)))
    window = draw(st.sampled_from([None, (float(lo), float(hi))]))
    return times, prices, bid, end, window


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=price_steps())
def test_price_driven_mttf_equals_brute_force(case):
    times, prices, bid, end, window = case
    check_mttf(renewal, times, prices, bid, end, window)


def test_planner_model_mttf_is_the_simulators():
    """MarketModel.from_prices' MTTF (the planner's Young/Daly) is the renewal over its window,
    the simulator's Market.mttf_s on that window; the old residual mean is far from it."""
    ser = _series()
    got = MarketModel.from_prices(ser, 1.0, window=(0.0, 780.0), bids=(1.0,), startup_s=0.0)
    want = mk.price_driven(ser, 1.0).mttf_s((0.0, 780.0)) / _H
    assert got.mttf_h[0, got.bid_index(1.0)] == pytest.approx(want)
    assert got.mttf_h[0, got.bid_index(1.0)] != pytest.approx(residual_at_start(ser, 1.0, None) / _H)
