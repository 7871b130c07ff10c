"""Revocation processes, schedules on the training clock, bills and start-up delays
(scarjax.cluster.market): deterministic per key, vmapped draws equal single draws, parametric means
within stated standard errors of their closed forms, the empirical sampler reproduces the GCE data's
CDF (KS test), price-driven revocations equal hand-computed and brute-force ones, the 24 h cap and
warnings hold, and bills equal hand-checked cases. Every statistical check is shown to fail on a
planted violation."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax import hooks, run_trials
from scarjax.cluster import market as mk
from scarjax.data import transient as td
from scarjax.models import quadratic
from scarjax.perturb import generic
from scarjax.perturb.revocation import revocations

H = 3600.0
KEY = jax.random.key(14)
# z bound for a sample mean: |mean - mu| <= Z * sd / sqrt(N); two-sided false-alarm rate 6.8e-6 per check
Z = 4.5
# KS: alpha = 1e-3; sqrt(-ln(alpha / 2) / 2) / sqrt(N) (asymptotic Kolmogorov; conservative for the
# data's discrete CDF, so the false-alarm rate is at most 1e-3)
KS_ALPHA = 1e-3

# a small synthetic market: price 0.1 from t=0, 0.3 from 100 s, 0.15 from 250 s, 0.5 from 400 s, 0.1 from 1000 s
TIMES = [0.0, 100.0, 250.0, 400.0, 1000.0]
PRICES = [0.1, 0.3, 0.15, 0.5, 0.1]


def _check_mean(x, mu, sd, what="sample"):
    x = np.asarray(x, np.float64)
    se = sd / math.sqrt(x.size)
    assert abs(x.mean() - mu) <= Z * se, (
        f"{what} mean {x.mean():.6g} is {abs(x.mean() - mu) / se:.1f} standard errors from {mu:.6g}"
    )


def _ks(sample, data) -> tuple[float, float]:
    """``(D, critical)``: the KS distance between ``sample`` and the empirical CDF of ``data`` (exact
    at every jump of either), and the level-``KS_ALPHA`` critical value."""
    # both as float32 values (the sampler's dtype), so equal measurements are equal points
    s, d = (np.sort(np.asarray(x, np.float32).astype(np.float64)) for x in (sample, data))
    grid = np.unique(np.concatenate([s, d]))
    f_s = np.searchsorted(s, grid, side="right") / s.size
    f_d = np.searchsorted(d, grid, side="right") / d.size
    f_s_left = np.searchsorted(s, grid, side="left") / s.size
    f_d_left = np.searchsorted(d, grid, side="left") / d.size
    D = max(np.abs(f_s - f_d).max(), np.abs(f_s_left - f_d_left).max())
    return float(D), math.sqrt(-math.log(KS_ALPHA / 2) / 2) / math.sqrt(s.size)


def _check_ks(sample, data, what="sample"):
    D, crit = _ks(sample, data)
    assert D <= crit, f"{what}: KS distance {D:.4f} > {crit:.4f} (alpha = {KS_ALPHA})"


@pytest.fixture(scope="module")
def synthetic():
    return mk.price_series(PRICES, TIMES, end_s=2000.0)


@pytest.fixture(scope="module")
def c3():
    return td.load_spot_prices("c3.xlarge", "us-east-1a")


def _processes(synthetic):
    return {
        "exponential": mk.exponential(600.0, warning_s=120.0),
        "weibull-bulk": mk.weibull(0.7, 3600.0, warning_s=30.0, bulk=True, unwarned=0.3),
        "gce-v100": mk.gce_preemptible("V100"),
        "price": mk.price_driven(synthetic, 0.2, unwarned=0.5),
        "replay": mk.replay(td.load_aws_p3_trace()),
    }


# -- the common interface --------------------------------------------------------------------


def test_deterministic_per_key_and_vmapped_equals_single(synthetic):
    keys = jax.random.split(KEY, 3)
    procs = _processes(synthetic)
    single = jax.jit(lambda k: {name: mk.sample_lifetimes(p, k, 6, 50.0) for name, p in procs.items()})
    a, b = single(keys[0]), single(keys[0])
    batch = jax.vmap(single)(keys)
    ones = [single(k) for k in keys]
    for name in procs:
        np.testing.assert_array_equal(a[name].lifetime, b[name].lifetime, err_msg=name)
        np.testing.assert_array_equal(a[name].warning, b[name].warning, err_msg=name)
        for i in range(len(keys)):
            np.testing.assert_array_equal(batch[name].lifetime[i], ones[i][name].lifetime, err_msg=name)
            np.testing.assert_array_equal(batch[name].warning[i], ones[i][name].warning, err_msg=name)
        assert np.all(np.asarray(batch[name].warning) <= np.asarray(batch[name].lifetime)), name
        assert np.all(np.asarray(batch[name].warning) >= 0), name
    for name in ("exponential", "gce-v100", "replay"):  # the random ones differ between keys
        assert not np.array_equal(batch[name].lifetime[0], batch[name].lifetime[1]), name
    # the jitted draw equals the eager one
    np.testing.assert_array_equal(
        mk.sample_lifetimes(procs["exponential"], keys[0], 6, 50.0).lifetime, a["exponential"].lifetime
    )


def test_processes_are_pytrees_varied_under_vmap_and_jit(synthetic):
    """A process's numeric fields may be traced: one program for many mean lifetimes, bids, starts."""
    e = mk.exponential(600.0)
    means = jnp.array([10.0, 1000.0, 1e5])
    out = jax.vmap(lambda m: mk.sample_lifetimes(dataclasses.replace(e, mean_s=m), KEY, 4).lifetime)(means)
    for i, m in enumerate(means):
        np.testing.assert_allclose(
            out[i], mk.sample_lifetimes(mk.exponential(float(m)), KEY, 4).lifetime, rtol=1e-6
        )
    p = mk.price_driven(synthetic, 0.2)
    bids, starts = jnp.array([0.2, 0.35, 0.6]), jnp.array([50.0, 50.0, 50.0])
    life = jax.jit(
        jax.vmap(lambda b, t: mk.sample_lifetimes(dataclasses.replace(p, bid=b), KEY, 1, t).lifetime[0])
    )(bids, starts)
    np.testing.assert_array_equal(life, [50.0 + 120.0, 350.0 + 120.0, np.inf])
    jitted = jax.jit(mk.sample_lifetimes, static_argnums=2)(e, KEY, 3, 0.0)
    np.testing.assert_allclose(jitted.lifetime, mk.sample_lifetimes(e, KEY, 3).lifetime, rtol=1e-6)


# -- parametric lifetimes ---------------------------------------------------------------------


def test_exponential_and_weibull_means_match_closed_forms():
    n = 20000
    mu = 600.0
    x = mk.sample_lifetimes(mk.exponential(mu), KEY, n).lifetime
    _check_mean(x, mu, mu, "exponential")
    # capped at c: E min(X, c) = mu (1 - e^{-c/mu}), E min(X, c)^2 = 2 mu^2 (1 - e^{-c/mu} (1 + c/mu))
    c = 900.0
    xc = np.asarray(mk.sample_lifetimes(mk.exponential(mu, cap_s=c), KEY, n).lifetime)
    m1 = mu * (1 - math.exp(-c / mu))
    m2 = 2 * mu**2 * (1 - math.exp(-c / mu) * (1 + c / mu))
    assert xc.max() == c and np.mean(xc == c) == pytest.approx(math.exp(-c / mu), abs=0.015)
    _check_mean(xc, m1, math.sqrt(m2 - m1**2), "capped exponential")
    k, lam = 0.7, 3600.0
    w = mk.sample_lifetimes(mk.weibull(k, lam), KEY, n).lifetime
    g1, g2 = math.gamma(1 + 1 / k), math.gamma(1 + 2 / k)
    _check_mean(w, lam * g1, lam * math.sqrt(g2 - g1**2), "weibull")
    # shape 1 is the exponential
    _check_mean(mk.sample_lifetimes(mk.weibull(1.0, mu), KEY, n).lifetime, mu, mu, "weibull(1)")


def test_mean_check_catches_a_wrong_mean():
    """The check above fails on a 5% bias (7 standard errors at N = 20000)."""
    x = mk.sample_lifetimes(mk.exponential(600.0), KEY, 20000).lifetime
    with pytest.raises(AssertionError, match="standard errors from"):
        _check_mean(x, 1.05 * 600.0, 600.0)


def test_bulk_revokes_the_whole_allocation():
    keys = jax.random.split(KEY, 4000)
    rev = jax.jit(jax.vmap(lambda k: mk.sample_lifetimes(mk.exponential(600.0, bulk=True), k, 8)))(keys)
    life = np.asarray(rev.lifetime)
    assert np.all(life == life[:, :1])  # every machine of an allocation together
    _check_mean(life[:, 0], 600.0, 600.0, "bulk exponential")
    per = np.asarray(mk.sample_lifetimes(mk.exponential(600.0), KEY, 8).lifetime)
    assert len(set(per.tolist())) == 8


def test_warnings_and_unwarned_revocations():
    n = 4000
    r = mk.sample_lifetimes(mk.exponential(600.0, warning_s=120.0), KEY, n)
    np.testing.assert_allclose(
        r.warning, np.maximum(np.asarray(r.lifetime) - 120.0, 0.0), rtol=1e-6, atol=1e-3
    )
    assert np.all(np.asarray(r.revoked))
    r = mk.sample_lifetimes(mk.exponential(600.0, warning_s=120.0, unwarned=1.0), KEY, n)
    np.testing.assert_array_equal(r.warning, r.lifetime)
    r = mk.sample_lifetimes(mk.exponential(600.0, warning_s=120.0, unwarned=0.25), KEY, n)
    none = np.asarray(r.warning) == np.asarray(r.lifetime)
    _check_mean(none, 0.25, math.sqrt(0.25 * 0.75), "unwarned fraction")


# -- empirical GCE lifetimes ------------------------------------------------------------------


def test_gce_sampler_reproduces_the_data_cdf():
    data = td.load_gce_lifetimes().select(campaign="2019-02")
    n = 4000
    for gpu, region in (("V100", None), ("K80", "us-central1"), ("P100", "us-west1")):
        proc = mk.gce_preemptible(gpu, region)
        rev = mk.sample_lifetimes(proc, KEY, n)
        life = np.asarray(rev.lifetime)
        ref = data.select(gpu=gpu, region=region).capped_lifetime_s
        _check_ks(life, ref, f"{gpu} {region}")
        assert life.max() <= mk.GCE_MAX_LIFETIME_S  # the 24 h cap
        np.testing.assert_allclose(rev.warning, np.maximum(life - mk.GCE_WARNING_S, 0.0))
        assert set(np.unique(life)) <= set(np.asarray(ref, np.float32).tolist())


def test_ks_check_catches_another_distribution():
    """The KS check fails when the sampler draws from another GPU/region or a same-mean exponential."""
    data = td.load_gce_lifetimes().select(campaign="2019-02")
    ref = data.select(gpu="V100").capped_lifetime_s
    wrong = mk.sample_lifetimes(mk.gce_preemptible("K80", "us-central1"), KEY, 4000).lifetime
    with pytest.raises(AssertionError, match="KS distance"):
        _check_ks(wrong, ref)
    same_mean = mk.sample_lifetimes(mk.exponential(float(ref.mean()), cap_s=86400.0), KEY, 4000).lifetime
    with pytest.raises(AssertionError, match="KS distance"):
        _check_ks(same_mean, ref)


def test_gce_arguments():
    with pytest.raises(ValueError, match="no V100 lifetimes in region 'us-east1'"):
        mk.gce_preemptible("V100", "us-east1")
    with pytest.raises(ValueError, match="lifetimes_s must be a non-empty"):
        mk.empirical([])
    assert float(mk.gce_preemptible_price(2.48)) == pytest.approx(0.744)


# -- price-driven revocations -----------------------------------------------------------------


def test_price_driven_hand_computed(synthetic):
    """bid 0.2 on 0.1 (t<100), 0.3 (100-250), 0.15 (250-400), 0.5 (400-1000), 0.1 (1000-): the notice comes
    at the first later change above the bid, the machines go 120 s after it."""
    p = mk.price_driven(synthetic, 0.2)
    cases = {  # start -> (warning, lifetime)
        0.0: (100.0, 220.0),
        50.0: (50.0, 170.0),
        99.0: (1.0, 121.0),
        260.0: (140.0, 260.0),
        120.0: (0.0, 0.0),  # 0.3 > 0.2 at the start: not granted
        1100.0: (np.inf, np.inf),  # never above the bid again before the series ends
    }
    for t0, (warn, life) in cases.items():
        r = mk.sample_lifetimes(p, KEY, 3, t0)
        np.testing.assert_array_equal(r.warning, [warn] * 3, err_msg=f"start {t0}")
        np.testing.assert_array_equal(r.lifetime, [life] * 3, err_msg=f"start {t0}")
    r = mk.sample_lifetimes(dataclasses.replace(p, bid=0.35), KEY, 1, 0.0)
    assert (float(r.warning[0]), float(r.lifetime[0])) == (400.0, 520.0)
    r = mk.sample_lifetimes(dataclasses.replace(p, unwarned=1.0), KEY, 1, 50.0)
    assert float(r.lifetime[0]) == float(r.warning[0]) == 50.0
    gce_like = mk.sample_lifetimes(mk.price_driven(synthetic, 0.2, warning_s=30.0), KEY, 1, 50.0)
    assert float(gce_like.lifetime[0]) == 80.0


def test_price_driven_equals_brute_force_on_real_prices(c3):
    """Binary lifting over the max table = a linear scan, on the April c3.xlarge series, for random
    starts and bids (the on-demand bid, aggressive bids, bids below the price)."""
    series = mk.price_series(c3)
    t, p = np.asarray(series.times_s, np.float64), np.asarray(series.prices, np.float64)
    rng = np.random.default_rng(0)
    starts = rng.uniform(0, c3.duration_s, 300).round()
    bids = np.concatenate([np.full(100, c3.on_demand), rng.uniform(0.03, 0.5, 200)]).astype(np.float32)
    proc = mk.price_driven(series, 0.21)
    got = jax.jit(
        jax.vmap(lambda b, t0: mk.sample_lifetimes(dataclasses.replace(proc, bid=b), KEY, 1, t0).lifetime[0])
    )(bids, starts)

    def scan(t0, b):
        i0 = max(np.searchsorted(t, t0, side="right") - 1, 0)
        if p[i0] > b:
            return 0.0
        later = np.flatnonzero(p[i0 + 1 :] > b)
        return np.inf if later.size == 0 else t[i0 + 1 + later[0]] - t0 + 120.0

    want = np.array([scan(s, b) for s, b in zip(starts, bids.astype(np.float64))])
    np.testing.assert_array_equal(np.asarray(got), want.astype(np.float32))
    assert 0 < np.mean(np.asarray(got) == 0) < 1 and np.isfinite(np.asarray(got)).mean() > 0.5


def test_aggressive_bid_and_price_series_checks(synthetic):
    assert float(mk.aggressive_bid(0.23)) == pytest.approx(0.3)  # TierML Sec 4.5's example
    assert float(mk.aggressive_bid(0.3)) == pytest.approx(0.3)
    assert float(mk.aggressive_bid(0.0321, 0.05)) == pytest.approx(0.05)
    assert float(synthetic.price_at(-5.0)) == pytest.approx(0.1) and float(
        synthetic.price_at(399.0)
    ) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="2\\*\\*24"):
        mk.price_series([0.1, 0.2], [0.0, 2.0**24])
    with pytest.raises(ValueError, match="increase strictly"):
        mk.price_series([0.1, 0.2], [5.0, 5.0])
    with pytest.raises(ValueError, match="bid: give a bid"):
        mk.price_driven(synthetic)
    assert mk.price_driven(td.load_spot_prices("g2.2xlarge", "us-east-1b")).bid == 0.65  # the on-demand bid


# -- trace replay ------------------------------------------------------------------------------


def test_replay_equals_the_traces():
    p3 = td.load_aws_p3_trace()
    rp = mk.replay(p3)
    # the replayed count after each event time equals the trace's count after the last event at that time
    last = np.r_[np.flatnonzero(np.diff(p3.time_s) > 0), len(p3) - 1]
    np.testing.assert_array_equal(rp.count_at(p3.time_s[last]), p3.count[last])
    r = jax.jit(lambda k: mk.sample_lifetimes(rp, k, 8, 3600.0))(KEY)
    _, add, rem = p3.intervals()
    alive = (add <= 3600.0) & (3600.0 < rem)
    assert set(np.asarray(r.lifetime).tolist()) <= set((rem[alive] - 3600.0).astype(np.float32).tolist())
    assert int(alive.sum()) == int(rp.count_at(3600.0)) == 15
    # asking for more machines than are present: the rest are never granted
    r = jax.jit(lambda k: mk.sample_lifetimes(rp, k, 20, 3600.0))(KEY)
    assert np.sum(np.asarray(r.lifetime) == 0) == 5
    gcp = td.load_gcp_v100_trace()
    rc = mk.replay(gcp)
    assert (rp.warning_s, rc.warning_s) == (mk.AWS_WARNING_S, mk.GCE_WARNING_S)  # the providers' notices
    np.testing.assert_array_equal(rc.count_at(gcp.time_s), gcp.count)
    np.testing.assert_array_equal(rc.count_at(gcp.time_s[1:] - 1.0), gcp.count[:-1])


# -- the training clock ------------------------------------------------------------------------


def test_revocation_steps_and_progress_table():
    steps = mk.revocation_steps(jnp.array([0.0, 59.9, 60.0, 125.0, jnp.inf]), 60.0)
    np.testing.assert_array_equal(steps, [0, 0, 1, 2, -1])
    np.testing.assert_array_equal(mk.revocation_steps(jnp.array([125.0]), 60.0, start_step=10), [12])
    rev = mk.Revocations(jnp.array([90.0, jnp.inf, 0.0]), jnp.array([0.0, jnp.inf, 0.0]))
    table = mk.progress_table(rev, 60.0, 5, restart_s=100.0)
    np.testing.assert_allclose(
        table, [[1.0, 1.0, 0.0], [0.5, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    )
    np.testing.assert_allclose(mk.progress_table(rev, 60.0, 3)[:, 0], [1.0, 0.5, 0.0])
    revocations(3, progress=np.asarray(table))  # accepted by the Sync-on-the-fly hook


def test_revocation_schedule_inside_run_trials(synthetic):
    """One compiled program: trial i's spot allocation starts at starts[i] (hook_args) and a write hook
    fires at exactly the step of its revocation (or warning) on a 10 s-per-step clock."""
    alg = quadratic.random_problem(0, 4, 10.0)
    proc = mk.price_driven(synthetic, 0.2)
    starts = jnp.array([50.0, 260.0, 0.0])

    def factory(t0):
        return [
            hooks.scheduled(
                generic.gaussian(0.1, name=event),
                mk.revocation_schedule(proc, 1, 10.0, start_time=t0, event=event),
            )
            for event in ("revocation", "warning")
        ]

    _, trace = run_trials(alg, factory, 30, jax.random.split(KEY, 3), hook_args=starts)
    for event, want in (("revocation", [17, 26, 22]), ("warning", [5, 14, 10])):
        fired = np.asarray(trace.delta[event]) > 0
        for i, step in enumerate(want):
            assert np.flatnonzero(fired[i]).tolist() == [step], (event, i)
    # random draws inside init: vmapped init equals the steps of sample_lifetimes with the same key
    e = mk.exponential(300.0, warning_s=60.0)
    sched = mk.revocation_schedule(e, 4, 10.0)
    keys = jax.random.split(KEY, 3)
    got = jax.vmap(sched.init)(keys)
    for i in range(3):
        np.testing.assert_array_equal(
            got[i], mk.revocation_steps(mk.sample_lifetimes(e, keys[i], 4).lifetime, 10.0)
        )
        assert bool(sched(got[i][0], KEY, got[i])) and not bool(sched(-1, KEY, got[i]))


# -- bills --------------------------------------------------------------------------------------


def test_bill_hand_checked_cases(synthetic):
    # AWS hourly, fixed $0.50/h, 2.5 h: the user pays 3 hours, a provider revocation makes the last partial hour free
    assert float(mk.bill(0.0, 2.5 * H, 0.5, False)) == 1.5
    assert float(mk.bill(0.0, 2.5 * H, 0.5, True)) == 1.0
    assert float(mk.bill(0.0, 2 * H, 0.5, False)) == float(mk.bill(0.0, 2 * H, 0.5, True)) == 1.0
    assert float(mk.bill(0.0, 0.5 * H, 0.5, True)) == 0.0  # revoked in its first hour: free
    # vectorised over machines
    got = mk.bill(
        jnp.zeros(3),
        jnp.array([100.0, H, 4000.0]),
        jnp.array([0.2, 0.3, 0.4]),
        jnp.array([False, True, True]),
    )
    np.testing.assert_allclose(got, [0.2, 0.3, 0.4])
    # hourly on a price series: each hour at the price at its beginning
    series = mk.price_series([0.1, 0.2, 0.05], [0.0, 1800.0, 5400.0], end_s=20000.0)
    end = 600.0 + 3 * H - 100.0  # hours begin at 600 (0.1), 4200 (0.2), 7800 (0.05)
    assert float(mk.bill(600.0, end, series, False)) == pytest.approx(0.35)
    assert float(mk.bill(600.0, end, series, True)) == pytest.approx(0.30)
    # per-second: fixed price, a minimum charge (GCE's minute), whoever ends it
    assert float(mk.bill(0.0, 100.0, 0.36, True, "per_second")) == pytest.approx(0.01)
    assert float(
        mk.bill(0.0, 30.0, 0.36, False, "per_second", minimum_s=mk.GCE_MINIMUM_CHARGE_S)
    ) == pytest.approx(0.006)
    # per-second on a series: 0.1 $/h for 1200 s, then 0.2 $/h for 3600 s, then 0.05 $/h for 600 s
    assert float(mk.bill(600.0, 6000.0, series, True, "per_second")) == pytest.approx((120 + 720 + 30) / 3600)
    # GCE's fixed preemptible price
    assert float(mk.gce_preemptible_price(1.0)) == pytest.approx(0.3)


def test_bill_properties_on_real_prices(c3):
    """A provider revocation never bills more than a user termination (and never its partial hour);
    the bill grows with the end time; per-second bills equal a float64 integral of the price."""
    series = mk.price_series(c3)
    rng = np.random.default_rng(1)
    start = rng.uniform(0, 20 * 86400, 200).round().astype(np.float32)
    # whole hours plus a partial one at least 10 s from either end (tol_s = 1 s decides nearer ones)
    dur = (rng.integers(0, 30, 200) * H + rng.uniform(10, H - 10, 200)).astype(np.float32)
    bill = jax.jit(mk.bill, static_argnames="scheme")
    user = np.asarray(bill(start, start + dur, series, False))
    prov = np.asarray(bill(start, start + dur, series, True))
    assert np.all(prov <= user + 1e-6)
    whole = np.asarray(bill(start, start + np.floor(dur / H) * H, series, False))
    np.testing.assert_allclose(prov, whole, rtol=1e-6)
    longer = np.asarray(bill(start, start + dur + 1800.0, series, False))
    assert np.all(longer >= user - 1e-6)
    t, p = np.asarray(series.times_s, np.float64), np.asarray(series.prices, np.float64)

    def integral(a, b):
        grid = np.concatenate([[a], t[(t > a) & (t < b)], [b]])
        idx = np.maximum(np.searchsorted(t, grid[:-1], side="right") - 1, 0)
        return float((p[idx] * np.diff(grid)).sum() / 3600.0)

    sec = np.asarray(bill(start, start + dur, series, False, "per_second"))
    want = np.array([integral(float(a), float(a) + float(d)) for a, d in zip(start, dur)])
    np.testing.assert_allclose(sec, want, rtol=2e-5, atol=1e-6)


def test_bill_and_process_arguments():
    with pytest.raises(ValueError, match="scheme must be"):
        mk.bill(0.0, 1.0, 0.1, scheme="monthly")
    with pytest.raises(ValueError, match="end must be >= start"):
        mk.bill(10.0, 1.0, 0.1)
    with pytest.raises(ValueError, match="mean_s"):
        mk.exponential(0.0)
    with pytest.raises(ValueError, match="unwarned"):
        mk.weibull(0.5, 10.0, unwarned=1.5)
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        mk.sample_lifetimes(mk.exponential(1.0), KEY, 0)
    with pytest.raises(TypeError, match="process must be a revocation process"):
        mk.sample_lifetimes("gce", KEY, 2)


# -- start-up delays ----------------------------------------------------------------------------


def test_startup_delays():
    st = td.load_startup_times()
    d = mk.cmdare_startup("preemptible", "K80", "us-east1")
    x = np.asarray(d.sample(KEY, 3000))
    ref = st.select(kind="preemptible", gpu="K80", region="us-east1").total
    assert set(np.unique(x).tolist()) <= set(np.asarray(ref, np.float32).tolist())
    _check_ks(x, ref, "start-up")
    np.testing.assert_array_equal(d.sample(KEY, 5), d.sample(KEY, 5))
    assert float(mk.cmdare_startup().mean_s) == pytest.approx(
        st.select(kind="preemptible").total.mean(), rel=1e-5
    )
    np.testing.assert_array_equal(mk.fixed_startup(mk.DEFAULT_STARTUP_S["aws"]).sample(KEY, 3), [300.0] * 3)
    assert mk.DEFAULT_STARTUP_S["gce"] == pytest.approx(st.select(kind="preemptible").total.mean(), abs=0.5)
    with pytest.raises(ValueError, match="kind must be among"):
        mk.cmdare_startup("spot")


# -- a user's own trace, and bad input ------------------------------------------------------------


def test_from_availability_any_ticks_any_counts():
    """Counts at irregular ticks, including 0 (nothing obtainable): the replayed count at every
    time equals the count in effect; removals are last in, first out."""
    t = np.array([0.0, 300.0, 900.0, 1000.0, 4000.0, 4300.0])
    c = np.array([2, 0, 3, 1, 1, 4])
    rp = mk.from_availability(t, c, warning_s=mk.AWS_WARNING_S)
    np.testing.assert_array_equal(rp.count_at(t), c)
    np.testing.assert_array_equal(rp.count_at(t[1:] - 0.5), c[:-1])
    assert [rp.available(x) for x in (-1.0, 100.0, 500.0, 950.0)] == [0, 2, 0, 3]
    assert rp.next_available(500.0) == 900.0
    assert rp.horizon() == 4300.0 and rp.warning_s == mk.AWS_WARNING_S
    add, rem = mk.counts_to_intervals(t, c)
    np.testing.assert_array_equal(add, [0.0, 0.0, 900.0, 900.0, 900.0, 4300.0, 4300.0, 4300.0])
    assert rem[4] == 1000.0 and rem[3] == 1000.0 and rem[2] == math.inf  # last in, first out
    # the package's GCP record goes through the same constructor
    gcp = td.load_gcp_v100_trace()
    np.testing.assert_array_equal(mk.replay(gcp).count_at(gcp.time_s), gcp.count)


def test_from_node_events_equals_the_intervals():
    p3 = td.load_aws_p3_trace()
    ev = mk.from_node_events(p3.time_s, p3.added, p3.node, provider="aws")
    _, add, rem = p3.intervals()
    np.testing.assert_array_equal(np.asarray(ev.add_s), add.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(ev.remove_s), rem.astype(np.float32))
    with pytest.raises(ValueError, match="nodes: node 'b' removed at 5.0 s"):
        mk.from_node_events([0.0, 5.0], np.array([True, False]), ["a", "b"], warning_s=0.0)
    with pytest.raises(ValueError, match="times_s must be non-decreasing"):
        mk.from_node_events([5.0, 0.0], np.array([True, False]), ["a", "a"], warning_s=0.0)


def test_warning_and_billing_are_stated_never_defaulted():
    add, rem = np.zeros(2), np.array([10.0, np.inf])
    with pytest.raises(ValueError, match="warning_s: state the revocation notice"):
        mk.replay((add, rem))
    with pytest.raises(ValueError, match="warning_s: state"):
        mk.from_availability([0.0, 60.0], [1, 2])
    assert mk.replay((add, rem), provider="aws").warning_s == mk.AWS_WARNING_S
    assert mk.from_availability([0.0, 60.0], [1, 2], provider="gce").warning_s == mk.GCE_WARNING_S
    assert mk.PROVIDERS["aws_per_second"] == mk.Provider("aws_per_second", 120.0, "per_second")
    with pytest.raises(ValueError, match="provider"):
        mk.replay((add, rem), provider="azure")
    with pytest.raises(ValueError, match="not both"):
        mk.replay((add, rem), provider="aws", warning_s=5.0)


@pytest.mark.parametrize("call, name", [
    (lambda: mk.replay((np.array([0.0, 1.0]), np.array([np.nan, 3.0])), warning_s=0.0), "remove_s must not be NaN"),
    (lambda: mk.replay((np.array([np.nan]), np.array([3.0])), warning_s=0.0), "add_s must not be NaN"),
    (lambda: mk.replay((np.array([-1.0]), np.array([3.0])), warning_s=0.0), "add_s must be >= 0"),
    (lambda: mk.replay((np.array([5.0]), np.array([3.0])), warning_s=0.0), "remove_s must be >= add_s"),
    (lambda: mk.from_availability([0.0, np.nan], [1, 2], warning_s=0.0), "times_s must not be NaN"),
    (lambda: mk.from_availability([0.0, -5.0], [1, 2], warning_s=0.0), "times_s must be >= 0"),
    (lambda: mk.from_availability([10.0, 5.0], [1, 2], warning_s=0.0), "times_s must increase strictly"),
    (lambda: mk.from_availability([0.0, 5.0], [1, -2], warning_s=0.0), "counts must be whole numbers"),
    (lambda: mk.from_availability([0.0, 5.0], [1, np.nan], warning_s=0.0), "counts must be whole numbers"),
    (lambda: mk.from_availability([0.0, 5.0], [0, 0], warning_s=0.0), "counts: every count is 0"),
    (lambda: mk.revocation_steps(np.array([10.0, np.nan]), 1.0), "times_s must not be NaN"),
    (lambda: mk.revocation_steps(np.array([-10.0]), 1.0), "times_s must lie in"),
    (lambda: mk.bill(0.0, np.nan, 1.0), "end must not be NaN"),
    (lambda: mk.bill(np.nan, 10.0, 1.0, scheme="per_second"), "start must not be NaN"),
    (lambda: mk.bill(0.0, np.inf, 1.0), "end must be finite"),
    (lambda: mk.bill(0.0, 10.0, np.nan), "price must not be NaN"),
    (lambda: mk.bill(0.0, 10.0, -1.0), "price must lie in"),
    (lambda: mk.empirical([0.0, 0.0]), "lifetimes_s: every lifetime is 0"),
    (lambda: mk.price_series([0.1, np.nan], [0.0, 5.0]), "prices must be finite"),
])
def test_bad_times_and_prices_raise_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# ----------------------------------------------------------------------------- the one billing rule
# The copies of the hourly rule that the package held before it was written once
# (market.billed_hours / charged_seconds / bill_np), kept here as oracles.


def _oracle_ledger_hourly_bill(start, end, price, revoked=False, scheme="hourly", tol_s=1.0):
    """The ledger's former NumPy copy (float64)."""
    start, end, price, revoked = np.broadcast_arrays(
        np.asarray(start, np.float64), np.asarray(end, np.float64), np.asarray(price, np.float64),
        np.asarray(revoked, bool))
    dur = np.maximum(end - start, 0.0)
    if scheme == "per_second":
        return price * dur / 3600.0
    whole = np.floor((dur + tol_s) / 3600.0)
    partial = dur - whole * 3600.0 > tol_s
    return price * np.where(partial & ~revoked, whole + 1.0, whole)


def _oracle_ledger_free_seconds(dur, revoked, tol_s=1.0):
    whole = np.floor((dur + tol_s) / 3600.0)
    rest = dur - whole * 3600.0
    return np.where(np.asarray(revoked, bool) & (rest > tol_s), rest, 0.0)


def _oracle_market_bill_hours(dur, revoked, tol_s=1.0):
    """market.bill's former inline float32 copy of the hourly rule."""
    dur = jnp.asarray(dur, jnp.float32)
    tol = jnp.float32(tol_s)
    whole = jnp.floor((dur + tol) / 3600.0)
    partial = dur - whole * 3600.0 > tol
    return jnp.where(partial & ~jnp.asarray(revoked, bool), whole + 1.0, whole).astype(jnp.int32)


def check_rule_equals_oracles(rule_hours, dur, revoked, price, scheme):
    """The one rule (in NumPy and in JAX) equals each former copy exactly."""
    dur = np.asarray(dur, np.float64)
    got = mk.bill_np(np.zeros_like(dur), dur, price, revoked, scheme)
    want = _oracle_ledger_hourly_bill(0.0, dur, price, revoked, scheme)
    np.testing.assert_array_equal(got, want, err_msg="bill_np differs from the ledger's former copy")
    if scheme == "hourly":
        d32 = dur.astype(np.float32)
        np.testing.assert_array_equal(np.asarray(rule_hours(d32, revoked)), np.asarray(_oracle_market_bill_hours(d32, revoked)),
                                      err_msg="billed_hours (jnp) differs from market.bill's former copy")
        np.testing.assert_array_equal(mk.free_seconds(dur, revoked), _oracle_ledger_free_seconds(dur, revoked),
                                      err_msg="free_seconds differs from the ledger's former copy")


_durations = st.lists(st.one_of(st.floats(0, 10 * H), st.integers(0, 10).map(lambda k: k * H),
                                st.integers(0, 10).map(lambda k: k * H + 1.0)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(durs=_durations, data=st.data(), price=st.floats(0, 5), scheme=st.sampled_from(mk.BILLINGS))
def test_one_billing_rule_equals_former_copies(durs, data, price, scheme):
    revoked = np.array(data.draw(st.lists(st.booleans(), min_size=len(durs), max_size=len(durs))))
    check_rule_equals_oracles(lambda d, r: mk.billed_hours(d, r, tol_s=jnp.float32(1.0), xp=jnp).astype(jnp.int32),
                              durs, revoked, price, scheme)
    # and market.bill (fixed price, float32) applies it
    d32 = np.asarray(durs, np.float32)
    b = np.asarray(mk.bill(0.0, d32, price, revoked, scheme))
    np.testing.assert_allclose(b, mk.bill_np(0.0, d32.astype(np.float64), price, revoked, scheme), rtol=1e-6, atol=1e-6)


def test_one_billing_rule_check_catches_a_planted_copy():
    """Planted: a copy of the rule without the free partial hour, and one without the tolerance."""
    durs, revoked = np.array([5400.0, 3600.5]), np.array([True, False])
    no_free = lambda d, r: mk.billed_hours(d, False, xp=jnp)  # noqa: E731
    with pytest.raises(AssertionError, match="billed_hours"):
        check_rule_equals_oracles(no_free, durs, revoked, 1.0, "hourly")
    no_tol = lambda d, r: mk.billed_hours(d, r, tol_s=0.0, xp=jnp)  # noqa: E731
    with pytest.raises(AssertionError, match="billed_hours"):
        check_rule_equals_oracles(no_tol, durs, revoked, 1.0, "hourly")


def test_bill_np_hand_checked_and_checks_its_arguments():
    np.testing.assert_array_equal(mk.bill_np(0.0, [5400.0, 5400.0, 3600.5, 7200.0], 0.5, [False, True, False, True]),
                                  [1.0, 0.5, 0.5, 1.0])
    assert float(mk.bill_np(0.0, 30.0, 3.6, scheme="per_second", minimum_s=mk.GCE_MINIMUM_CHARGE_S)) == pytest.approx(0.06)
    for kw, name in ((dict(start=math.nan, end=1.0, price=1.0), "start"), (dict(start=0.0, end=-1.0, price=1.0), "end"),
                     (dict(start=0.0, end=1.0, price=-1.0), "price"), (dict(start=0.0, end=math.inf, price=1.0), "end")):
        with pytest.raises(ValueError, match=name):
            mk.bill_np(**kw)
    with pytest.raises(ValueError, match="scheme"):
        mk.bill_np(0.0, 1.0, 1.0, scheme="monthly")
    with pytest.raises(ValueError, match="end must be >= start"):
        mk.bill_np(10.0, 1.0, 1.0)


# ----------------------------------------------------------------------------- the one Market's constructors


def test_market_from_prices_and_from_spot_prices():
    machine = mk.MachineType("c3.xlarge", 0.21, cores=4)
    m = mk.Market.from_prices([0.0, 3600.0], [0.03, 0.5], bid=0.21, provider="aws", machine=machine, end_s=7200.0)
    assert isinstance(m.process, mk.PriceDriven) and m.billing == "hourly" and float(m.process.warning_s) == 120.0
    assert m.end_s == 7200.0 and m.machine.cores == 4
    assert m.available(100.0) == math.inf and m.available(4000.0) == 0.0  # above the bid: nothing offered
    # the float64 prices as given stay on the host; a JAX transformation rebuilds the series without them
    t, p = m.spot.host_arrays()
    assert p.dtype == np.float64 and p[0] == 0.03 and not p.flags.writeable
    rebuilt = jax.tree_util.tree_map(lambda x: x, m.spot)
    assert rebuilt.host is None and np.array_equal(rebuilt.host_arrays()[1], np.float32([0.03, 0.5]))
    # stated, never defaulted: the billing and the notice, each named when missing
    with pytest.raises(ValueError, match="billing"):
        mk.Market.from_prices([0.0], [0.1], bid=0.2, warning_s=120.0, machine=machine)
    with pytest.raises(ValueError, match="warning_s"):
        mk.Market.from_prices([0.0], [0.1], bid=0.2, billing="hourly", machine=machine)
    own = mk.Market.from_prices([0.0], [0.1], bid=0.2, provider="aws", billing="per_second", warning_s=30.0,
                                machine=machine)
    assert own.billing == "per_second" and float(own.process.warning_s) == 30.0  # stated values win
    for bad, name in (([0.0, math.nan], "times_s"), ([10.0, 5.0], "times_s")):
        with pytest.raises(ValueError, match=name):
            mk.Market.from_prices(bad, [0.1, 0.2], bid=0.2, provider="aws", machine=machine)
    with pytest.raises(ValueError, match="prices"):
        mk.Market.from_prices([0.0, 1.0], [0.1, -0.2], bid=0.2, provider="aws", machine=machine)
    with pytest.raises(ValueError, match="machine.spot"):
        mk.Market.from_prices([0.0], [0.1], bid=0.2, provider="aws", machine=mk.MachineType("m", 0.2, spot=0.1))
    # the parser's record in one call; an origin puts several records on one clock
    spot = td.load_spot_prices("c3.xlarge", "us-east-1a")
    r = mk.Market.from_spot_prices(spot, bid=spot.on_demand, provider="aws", cores=4)
    assert r.machine.name == "us-east-1a:c3.xlarge" and r.end_s == spot.duration_s
    later = spot.start + np.timedelta64(86400, "s")
    s2 = mk.Market.from_spot_prices(spot, bid=spot.on_demand, provider="aws", origin=later)
    t2, p2 = s2.spot.host_arrays()
    assert t2[0] <= 0.0 < t2[1] and p2[0] == spot.price_at(later)  # from the change in effect at the origin
    assert s2.end_s == spot.duration_s - 86400.0
    with pytest.raises(TypeError, match="SpotPrices"):
        mk.Market.from_spot_prices((np.zeros(2), np.ones(2)), bid=1.0, provider="aws")
    # end_s of the other processes
    assert mk.Market(machine, mk.exponential(600.0)).end_s == math.inf
    rep = mk.Market.from_availability([0.0, 300.0], [2, 1], provider="gce", machine=machine, end_s=900.0)
    assert rep.end_s == 900.0 and rep.billing == "per_second"
