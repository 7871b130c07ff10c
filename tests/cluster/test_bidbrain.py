"""Proteus BidBrain (scarjax.cluster.bidbrain): the expected-cost decision on hand-made price
series, bills without the provider-revoked partial hour, the free-computing fraction, no
peeking into the future, determinism, the baselines on hand-computed cases.

Every check is a helper with a message; each is shown to fail on a planted violation."""

import dataclasses
import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.cluster import bidbrain as bb
from scarjax.cluster import market as mk
from scarjax.data import transient as td

DAY = 86400.0
SC = bb.ScalingModel(0.05, 4.0)


def _flat(price, days=10.0, od=0.21, cores=4, name="flat"):
    return bb.spot_market([0.0], [price], on_demand=od, cores=cores, end_s=days * DAY, name=name)


def _flicker(base, spike, every_s, days=10.0, od=0.21, cores=4, name="flicker", spike_s=None):
    """``base``, jumping to ``spike`` for the last ``spike_s`` (default: half) of every ``every_s`` seconds."""
    spike_s = every_s / 2 if spike_s is None else spike_s
    k = np.arange(0.0, days * DAY, every_s)
    t = np.stack([k, k + every_s - spike_s], 1).ravel()
    p = np.tile([base, spike], k.size)
    return bb.spot_market(t, p, on_demand=od, cores=cores, end_s=days * DAY, name=name)


# ---- checks (each with a message) ---------------------------------------------------------


def check_first_choice(run: bb.ProteusRun, want: str) -> None:
    spot = [a for a in run.allocations if a["tier"] == "transient"]
    assert spot, "BidBrain bought no spot allocation"
    assert spot[0]["name"] == want, f"BidBrain chose {spot[0]['name']}, expected the cheaper {want}"


def check_no_partial_hour_bill(run: bb.ProteusRun, markets) -> None:
    """A provider-revoked allocation is charged whole hours only, each at its start price."""
    for a in run.allocations:
        if a["revoked"]:
            m = markets[a["market"]]
            hours = math.floor((a["end"] - a["start"]) / 3600.0 + 1e-6)
            want = a["n"] * sum(float(m.price_at("transient", a["start"] + 3600.0 * k)) for k in range(hours))
            assert a["usd"] == pytest.approx(want, rel=1e-5, abs=1e-6), (
                f"revoked allocation billed {a['usd']:.4f} USD, the whole hours cost {want:.4f}: "
                "the provider-revoked partial hour was charged"
            )


def check_fraction(free, comp, frac, want=None) -> None:
    assert 0.0 <= frac <= 1.0, f"free-computing fraction {frac} outside [0, 1]"
    assert free <= comp + 1e-9, f"free core-seconds {free} exceed computing {comp}"
    if want is not None:
        assert frac == pytest.approx(want, rel=1e-12), f"free-computing fraction {frac} != hand-computed {want}"


def check_same(a: dict, b: dict) -> None:
    assert a == b, "two runs with the same inputs differ"


# ---- the decision ---------------------------------------------------------------------


def test_expected_hour_and_fleet_cost_per_work_hand_computed():
    cost, core_s = bb.expected_hour(0.1, 4, 4, 0.25, 1800.0, 300.0)
    assert cost == pytest.approx(0.75 * 4 * 0.1)  # the evicted hour is free
    assert core_s == pytest.approx(16 * (0.75 * 3300.0 + 0.25 * 1500.0))
    cpw = bb.fleet_cost_per_work([0.42, 0.3], [8 * 3600.0, 16 * 1800.0], 1.0, SC, 30.0)
    cores = (8 * 3600.0 + 16 * 1800.0) / 3600.0
    want = 0.72 / (cores / (1 + 0.05 * np.log2(cores / 4.0)) * 3570.0 / 3600.0)
    assert cpw == pytest.approx(want)
    with pytest.raises(ValueError, match="beta"):
        bb.expected_hour(0.1, 1, 1, 1.5, 0.0)


def test_best_acquisition_and_renewal_pick_the_lower_expected_cost_per_work():
    members = ([0.42], [8 * 3600.0], [0.0])  # the reliable tier
    # two candidates alike but for the price: the cheaper one wins
    cc, cs = bb.expected_hour(np.array([0.06, 0.05]), 4, 4, 0.0, 3600.0, 300.0)
    assert bb.best_acquisition(*members, cc, cs, [0.0, 0.0], SC, 30.0) == 1
    # the cheaper market is evicted within its start-up every hour: no work, the other wins
    cc, cs = bb.expected_hour(np.array([0.06, 0.05]), 4, 4, np.array([0.0, 1.0]), np.array([3600.0, 240.0]), 300.0)
    assert bb.best_acquisition(*members, cc, cs, [0.0, 1.0], SC, 30.0) == 0
    # nothing is bought that raises the ratio (spot dearer per core than the reliable tier)
    cc, cs = bb.expected_hour(np.array([5.0]), 4, 4, 0.0, 3600.0, 300.0)
    assert bb.best_acquisition(*members, cc, cs, [0.0], SC, 30.0) == -1
    # renewal: a member that costs more per work than the rest is dropped, a cheap one kept
    assert not bb.renew_or_drop([0.42, 3.0], [8 * 3600.0, 16 * 3600.0], [0.0, 0.0], 1, SC, 30.0)
    assert bb.renew_or_drop([0.42, 0.1], [8 * 3600.0, 16 * 3600.0], [0.0, 0.0], 1, SC, 30.0)


def test_bidbrain_buys_the_cheaper_market_on_hand_made_series():
    job = bb.Job(work=200.0, scaling=SC)
    a, b = _flat(0.06, name="A"), _flat(0.05, name="B")
    run = bb.bidbrain(job, [a, b], 2 * DAY, reliable=1)
    check_first_choice(run, "B")
    # B jumps above any bid for 30 s every 4 minutes (history included): an allocation there
    # is revoked about when it starts working, so BidBrain's expectation picks A
    b2 = _flicker(0.05, 5.0, 240.0, name="B", spike_s=30.0)
    run2 = bb.bidbrain(job, [a, b2], 2 * DAY, reliable=1)
    check_first_choice(run2, "A")
    assert run.finished and run2.finished
    with pytest.raises(AssertionError, match="expected the cheaper A"):  # planted: the wrong market
        check_first_choice(run, "A")


def test_eviction_estimates_use_the_history_before_the_decision_only():
    m = _flicker(0.05, 0.2, 1200.0, days=6.0)
    t = 3 * DAY
    tab = bb.eviction_table(m)
    beta, tau = tab.estimate(t, 0.01)
    # bought in the cheap half (bid below 0.2): evicted at the next change, 600 or 300 s later
    # (the 300 s grid); in the dear half: never
    assert beta == pytest.approx(0.5, abs=0.01) and tau == pytest.approx(450.0 + mk.AWS_WARNING_S, abs=1.0)
    # the future changes completely: the estimate at t does not
    times, prices = m.spot.host_arrays()
    keep = times < t
    calm = bb.spot_market(np.r_[times[keep], t], np.r_[prices[keep], 0.05], on_demand=0.21, end_s=6 * DAY)
    assert bb.eviction_table(calm).estimate(t, 0.01) == (beta, tau)
    assert bb.eviction_table(calm).estimate(t + 2 * DAY, 0.01)[0] < beta  # later, the calm counts
    # before any history: the stated prior
    assert tab.estimate(0.0, 0.01) == (tab.prior_beta, 1800.0)


def test_notice_matches_market_price_driven():
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(60, 600, 400))
    p = np.round(rng.uniform(0.02, 0.3, 400), 4)
    m = bb.spot_market(t, p, on_demand=0.21)
    for t0, bid in zip(rng.uniform(t[0], t[-1], 20), rng.uniform(0.05, 0.3, 20)):
        bid = max(bid, float(m.price_at("transient", t0)))
        rev = mk.price_driven(m.spot, bid).sample(jax.random.PRNGKey(0), 1, t0)
        want = float(rev.lifetime[0]) + t0 - mk.AWS_WARNING_S
        got = float(bb._view(m).notice(t0, bid))
        assert (np.isinf(got) and np.isinf(want)) or got == pytest.approx(want, abs=2.0)


# ---- bills and free computing -------------------------------------------------------------


def test_no_bill_for_a_provider_revoked_partial_hour():
    t0 = 2 * DAY
    # stable at 0.05, then far above any bid 1.5 hours after the start
    m = bb.spot_market([0.0, t0 + 5400.0], [0.05, 9.0], on_demand=0.21, end_s=5 * DAY)
    run = bb.bidbrain(bb.Job(work=400.0, scaling=SC), [m], t0, reliable=1, max_cores=24)
    revoked = [a for a in run.allocations if a["revoked"]]
    assert revoked and all(a["end"] == pytest.approx(t0 + 5400.0 + mk.AWS_WARNING_S) for a in revoked)
    assert all(a["usd"] == pytest.approx(a["n"] * 0.05) for a in revoked)  # hour 1 only
    check_no_partial_hour_bill(run, [m])
    # the same allocation ended by the user is billed the partial hour
    a = bb.Allocation(0, 2, 0.06, t0, t0 + 300.0, end=t0 + 5520.0)
    assert bb._bills([a], [m])[0] == pytest.approx(2 * (0.05 + 0.05))
    planted = dataclasses.replace(run, allocations=[dict(x, usd=x["usd"] + 0.05) for x in run.allocations])
    with pytest.raises(AssertionError, match="partial hour was charged"):
        check_no_partial_hour_bill(planted, [m])


def test_free_fraction_hand_computed():
    allocs = [
        bb.Allocation(0, 2, 0.06, 0.0, 300.0, end=5000.0, revoked=True),  # free: 2*4*(5000-3600)
        bb.Allocation(0, 1, math.inf, 0.0, 300.0, end=7200.0, tier="reliable"),
        bb.Allocation(1, 3, 0.02, 100.0, 400.0, end=350.0, revoked=True),  # revoked before it worked
    ]
    free, comp, frac = bb.free_fraction(allocs, [4, 2])
    want_free = 2 * 4 * 1400.0
    want_comp = 2 * 4 * 4700.0 + 4 * 6900.0
    assert (free, comp) == (want_free, want_comp)
    check_fraction(free, comp, frac, want_free / want_comp)
    with pytest.raises(AssertionError, match="outside"):
        check_fraction(free, comp, 1.2)
    with pytest.raises(AssertionError, match="hand-computed"):
        check_fraction(free, comp, frac, 0.5)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.floats(0, 2e4), st.floats(0, 2e4), st.floats(0, 9e3), st.booleans()),
                min_size=1, max_size=6))
def test_free_fraction_lies_in_the_unit_interval(rows):
    allocs = [bb.Allocation(0, n, 0.1, s, s + r, end=s + d, revoked=rev) for n, s, d, r, rev in rows]
    check_fraction(*bb.free_fraction(allocs, [4]))


# ---- runs -------------------------------------------------------------------------------


def test_determinism_and_billing_invariants_on_the_embedded_history():
    markets = bb.spot_markets("us-east-1a")
    tables = [bb.eviction_table(m) for m in markets]
    job = bb.Job(work=150.0, scaling=bb.ScalingModel(0.05, 8.0))
    for start in (4 * DAY + 3600.0, 17 * DAY):
        r1 = bb.bidbrain(job, markets, start, tables=tables).to_json()
        r2 = bb.bidbrain(job, markets, start).to_json()  # tables rebuilt: the same
        check_same(r1, r2)
        run = bb.bidbrain(job, markets, start, tables=tables, fixed_headroom=bb.PRICE_TICK)
        check_no_partial_hour_bill(run, markets)
        check_fraction(run.free_core_s, run.compute_core_s, run.free_fraction)
        assert run.cost == pytest.approx(sum(a["usd"] for a in run.allocations), rel=1e-6)
        assert all(a["bid"] == pytest.approx(float(markets[a["market"]].price_at("transient", a["start"])) + bb.PRICE_TICK)
                   for a in run.allocations if a["tier"] == "transient")
    with pytest.raises(AssertionError, match="differ"):
        check_same(r1, dict(r1, cost=r1["cost"] + 1))


def test_baselines_hand_computed():
    m = _flat(0.05)
    job = bb.Job(work=100.0, scaling=SC, checkpoint_s=60.0, restore_s=60.0)
    rate = float(SC.rate(16 * 4))
    od = bb.on_demand(job, [m], DAY)
    assert od.runtime_s == pytest.approx(300.0 + 3600.0 * 100.0 / rate)
    assert od.cost == pytest.approx(16 * 0.21 * math.ceil(od.runtime_s / 3600.0))
    ck = bb.checkpoint_spot(job, [m], DAY)  # never evicted: MTTF = the history's day
    period = math.sqrt(2 * 60.0 * DAY)
    need = 3600.0 * 100.0 / rate
    assert ck.runtime_s == pytest.approx(300.0 + need + 60.0 * math.floor(need / period))
    assert ck.cost == pytest.approx(16 * 0.05 * math.ceil(ck.runtime_s / 3600.0))
    assert bb.mttf_before(_flicker(0.05, 1.0, 3600.0), 2 * DAY, 0.21) == pytest.approx(3600.0, rel=0.01)


def test_bad_arguments_are_named():
    m = _flat(0.05)
    with pytest.raises(ValueError, match="work"):
        bb.Job(work=0.0)
    with pytest.raises(ValueError, match="lead_s"):
        bb.bidbrain(bb.Job(work=1.0), [m], DAY, tick_s=600.0, lead_s=300.0)
    with pytest.raises(ValueError, match="kappa"):
        bb.ScalingModel(-1.0)
    with pytest.raises(ValueError, match="on_demand"):
        bb.spot_market([0.0], [0.1], on_demand=0.0)


# ---- the one Market ----------------------------------------------------------------------


def test_bidbrain_runs_on_markets_from_arrays_and_from_the_parser_record():
    """BidBrain consumes scarjax.cluster.market.Market objects: the shorthand spot_market, a
    Market.from_prices with a stated AWS preset and Market.from_spot_prices on the parser's
    record give the same run where they describe the same prices."""
    mkts = bb.spot_markets("us-east-1a")
    assert all(isinstance(m, mk.Market) and isinstance(m.process, mk.PriceDriven) for m in mkts)
    assert [m.machine.cores for m in mkts] == [bb.CORES[t] for t in td.SPOT_INSTANCE_TYPES]
    assert all(m.billing == "hourly" and float(m.process.warning_s) == mk.AWS_WARNING_S for m in mkts)
    spot = td.load_spot_prices("c3.xlarge", "us-east-1a")
    own = mk.Market.from_spot_prices(spot, bid=spot.on_demand, provider="aws", cores=4)
    times, prices = own.spot.host_arrays()
    same = mk.Market.from_prices(times, prices, bid=spot.on_demand, provider="aws", end_s=float(own.spot.end_s),
                                 machine=mk.MachineType(own.machine.name, spot.on_demand, cores=4))
    job = bb.Job(work=60.0, scaling=SC)
    r1, r2 = (bb.bidbrain(job, [m], 4 * DAY, reliable=1).to_json() for m in (own, same))
    check_same(r1, r2)
    assert r1["finished"]


def test_bidbrain_refuses_what_is_not_a_price_driven_market():
    job = bb.Job(work=1.0)
    with pytest.raises(TypeError, match="markets"):
        bb.bidbrain(job, [object()], DAY)
    fixed = mk.Market(mk.MachineType("m", 0.2, spot=0.05), mk.exponential(3600.0))
    with pytest.raises(ValueError, match=r"markets\[0\] must be a price-driven market"):
        bb.on_demand(job, [fixed], DAY)
    with pytest.raises(ValueError, match="warning_s"):
        mk.Market.from_prices([0.0], [0.1], bid=0.2, billing="hourly", machine=mk.MachineType("m", 0.2))
    with pytest.raises(ValueError, match="cores"):
        mk.MachineType("m", 0.2, cores=0)
