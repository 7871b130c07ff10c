"""Censoring-aware rework statistics (experiments._stats): no trial is ever dropped."""

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from experiments import _stats

finite_rework = st.floats(min_value=-50.0, max_value=100.0, allow_nan=False)


@st.composite
def cells(draw, min_size=1, max_size=30):
    """``(rework, horizon)``: finite reworks at most the horizon, some replaced by inf."""
    horizon = draw(st.floats(min_value=100.0, max_value=1e4))
    vals = draw(st.lists(finite_rework, min_size=min_size, max_size=max_size))
    cens = draw(st.lists(st.booleans(), min_size=len(vals), max_size=len(vals)))
    r = np.where(cens, np.inf, np.asarray(vals, np.float64))
    return r, horizon


@given(cells())
def test_restricted_mean_at_least_survivors_mean(cell):
    r, h = cell
    s = _stats.summary(r, h)
    fin = r[np.isfinite(r)]
    assume(fin.size)
    # Censored trials count at the horizon, which is above every finite rework.
    assert s["mean"] >= fin.mean() - 1e-9
    assert s["censored"] == int(np.isinf(r).sum())
    assert s["n"] == r.size
    assert s["mean_is_lower_bound"] == bool(np.isinf(r).any())


@given(st.lists(finite_rework, min_size=2, max_size=30), st.floats(min_value=100.0, max_value=1e4))
def test_no_censoring_is_the_plain_mean_and_t_interval(vals, h):
    from scipy import stats

    r = np.asarray(vals)
    s = _stats.summary(r, h)
    assert s["censored"] == 0 and not s["mean_is_lower_bound"] and not s["median_is_lower_bound"]
    assert s["mean"] == pytest.approx(r.mean(), abs=1e-9)
    assert s["median"] == pytest.approx(np.median(r), abs=1e-9)
    half = stats.t.ppf(0.975, r.size - 1) * r.std(ddof=1) / math.sqrt(r.size)
    assert s["ci"] == pytest.approx(half, rel=1e-9, abs=1e-12)


@given(cells(), st.floats(min_value=0.0, max_value=1e4))
def test_monotone_in_the_horizon(cell, extra):
    r, h = cell
    lo, hi = _stats.summary(r, h), _stats.summary(r, h + extra)
    assert hi["mean"] >= lo["mean"] - 1e-9
    assert hi["median"] >= lo["median"] - 1e-9


@given(st.integers(1, 20), st.floats(min_value=0.0, max_value=1e4))
def test_all_censored_is_the_horizon_never_nan(n, h):
    s = _stats.summary(np.full(n, np.inf), h)
    assert s["mean"] == pytest.approx(h) and s["median"] == pytest.approx(h)
    assert s["censored"] == n and s["mean_is_lower_bound"] and s["median_is_lower_bound"]
    assert not math.isnan(s["ci"])


def test_per_trial_horizons_and_median_flag():
    # Two of five censored at horizons above every finite value: the median is exact.
    s = _stats.summary([1.0, 2.0, 3.0, np.inf, np.inf], [10, 10, 10, 8, 9])
    assert s["mean"] == pytest.approx((1 + 2 + 3 + 8 + 9) / 5) and s["mean_is_lower_bound"]
    assert s["median"] == 3.0 and not s["median_is_lower_bound"]
    # Three of five censored: the median is only a lower bound.
    s = _stats.summary([1.0, 2.0, np.inf, np.inf, np.inf], 5.0)
    assert s["median"] == 5.0 and s["median_is_lower_bound"]
    # Half censored with an even count: the median averages a censored value.
    assert _stats.summary([1.0, np.inf], 5.0)["median_is_lower_bound"]


def test_summaries_over_a_grid():
    r = np.array([[0.0, 1.0, np.inf], [2.0, 2.0, 2.0]])
    out = _stats.summaries(r, np.array([5.0, 6.0, 7.0]))
    assert [c["censored"] for c in out] == [1, 0]
    assert out[0]["mean"] == pytest.approx((0 + 1 + 7) / 3)
    assert out[1]["mean"] == 2.0 and out[1]["ci"] == 0.0


@pytest.mark.parametrize("rework, horizon, name", [
    ([1.0, np.nan], 10.0, "rework"),
    ([1.0, -np.inf], 10.0, "rework"),
    ([], 10.0, "rework"),
    ([1.0, 2.0], -1.0, "horizon"),
    ([1.0, 2.0], np.nan, "horizon"),
    ([1.0, 2.0], np.inf, "horizon"),
    ([1.0, 20.0], 10.0, "horizon"),  # a finite rework beyond the horizon: wrong horizon
    ([1.0, 2.0], [1.0, 2.0, 3.0], "horizon"),
])
def test_bad_input_names_the_argument(rework, horizon, name):
    with pytest.raises(ValueError, match=name):
        _stats.summary(rework, horizon)


def test_bad_level():
    with pytest.raises(ValueError, match="level"):
        _stats.summary([1.0, 2.0], 5.0, level=1.5)


def test_single_trial_has_an_infinite_interval():
    s = _stats.summary([3.0], 5.0)
    assert s["mean"] == 3.0 and math.isinf(s["ci"])


@given(cells(), st.lists(st.floats(min_value=-10.0, max_value=1e3), min_size=30, max_size=30))
def test_bound_check_counts_every_trial(cell, bounds):
    r, _ = cell
    b = np.asarray(bounds[: r.size])
    c = _stats.bound_check(r, b)
    assert c["n"] == r.size and c["censored"] == int(np.isinf(r).sum())
    assert c["held"] == int(np.sum(np.isfinite(r) & (r <= b)))
    assert c["held"] <= c["n"] - c["censored"]


def test_censored_trial_is_never_under_even_an_infinite_bound():
    c = _stats.bound_check([np.inf, 1.0, 5.0], [np.inf, 2.0, 4.0], slack=1.0)
    assert c == {"held": 2, "n": 3, "censored": 1, "slack": 1.0}
    assert _stats.fmt_check(c) == ("held in 2 of 3 (1 never re-converged, counted as not shown under the bound)")
    with pytest.raises(ValueError, match="rework"):
        _stats.bound_check([np.nan], [1.0])
    with pytest.raises(ValueError, match="slack"):
        _stats.bound_check([1.0], [1.0], slack=-1.0)


def test_reduction_direction_under_censoring():
    exact = _stats.summary([2.0, 4.0], 10.0)  # mean 3
    full = _stats.summary([8.0, 12.0], 20.0)  # mean 10
    cens_p = _stats.summary([2.0, np.inf], 4.0)  # ≥ 3
    cens_f = _stats.summary([8.0, np.inf], 12.0)  # ≥ 10
    assert _stats.reduction(exact, full) == {"pct": pytest.approx(70.0), "relation": "=", "censored": 0,
                                             "base_censored": 0}
    assert _stats.reduction(cens_p, full)["relation"] == "≤"  # ours may be larger still
    assert _stats.reduction(exact, cens_f)["relation"] == "≥"  # the baseline may be larger still
    assert _stats.reduction(cens_p, cens_f)["relation"] == "?"
    assert _stats.fmt_reduction(_stats.reduction(cens_p, full)) == "≤ 70%"
    assert _stats.reduction(exact, _stats.summary([0.0, 0.0], 1.0))["pct"] is None


def test_formatting_never_prints_an_infinite_mean():
    s = _stats.summary([1.0, np.inf, np.inf], 250.0)
    text = _stats.fmt_cell(s)
    assert text == "≥ 167 (2 of 3 not re-converged)"
    assert "∞" not in text
    assert _stats.fmt_cell(_stats.summary([1.0, 3.0], 5.0)) == "2"
