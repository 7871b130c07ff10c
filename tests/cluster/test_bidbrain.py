"""Proteus BidBrain (scarjax.cluster.bidbrain): the expected-cost decision on hand-made price
series, bills without the provider-revoked partial hour, the free-computing fraction, no
peeking into the future, determinism, the baselines on hand-computed cases, and Proteus as a
policy of the shared contract (``policy(job, markets, *, key, horizon_s, ...) -> ClusterRun``).

Every check is a helper with a message; each is shown to fail on a planted violation."""

import dataclasses
import functools
import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.cluster import bidbrain as bb
from scarjax.cluster import clock as ck
from scarjax.cluster import market as mk
from scarjax.cluster.ledger import Ledger
from scarjax.cluster.steptime import step_time_fixed
from scarjax.data import transient as td
from scarjax.models import quadratic

DAY = 86400.0
WEEK = 7 * DAY
SC = bb.ScalingModel(0.05, 4.0)
POLICIES = (bb.proteus, bb.on_demand, bb.checkpoint_spot)


@functools.lru_cache(maxsize=None)
def _job(workers=16, checkpoint_s=60.0, restore_s=60.0):
    """A contract job (the work model trains nothing: any algorithm)."""
    return ck.Job(quadratic.random_problem(0, 4, 10.0), 0.0, step_time_fixed(60.0), workers=workers,
                  checkpoint_s=checkpoint_s, restore_s=restore_s)


def _run(markets, start, work, policy=bb.proteus, *, key=0, horizon_s=WEEK, job=None, scaling=SC, **kw):
    """``policy`` on ``markets`` from ``start`` for ``work`` units under ``scaling``."""
    return policy(job or _job(), bb.at(markets, start), key=key, horizon_s=horizon_s,
                  work=bb.WorkModel(work, scaling), **kw)


def _cost(run) -> float:
    return sum(run.cost_by_tier.values())


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


def check_first_choice(run: ck.ClusterRun, want: str) -> None:
    spot = [a for a in run.meta["allocations"] if a["tier"] == "transient"]
    assert spot, "BidBrain bought no spot allocation"
    assert spot[0]["name"] == want, f"BidBrain chose {spot[0]['name']}, expected the cheaper {want}"


def check_no_partial_hour_bill(run: ck.ClusterRun, markets) -> None:
    """A provider-revoked allocation is charged whole hours only, each at its start price."""
    for a in run.meta["allocations"]:
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


def check_contract(run: ck.ClusterRun, horizon_s: float) -> None:
    """The shared contract's result: one ledger entry per machine, the bill the sum of the
    entries' charges (and of the allocations'), the run ended by the horizon."""
    entries = run.ledger.entries
    allocs = run.meta["allocations"]
    assert len(entries) == sum(a["n"] for a in allocs), "not one ledger entry per machine"
    assert all(e.stop is not None for e in entries), "a machine is still billed after the run"
    total = sum(e.charged for e in entries)
    assert _cost(run) == pytest.approx(total, rel=1e-12, abs=1e-12), (
        f"the bill {_cost(run)} is not the sum over ledger entries {total}")
    assert sum(a["usd"] for a in allocs) == pytest.approx(total, rel=1e-12, abs=1e-12), (
        "the allocations' bills are not their ledger entries'")
    assert 0.0 <= run.end_s <= horizon_s, f"the run ended at {run.end_s} s, past the horizon {horizon_s} s"
    assert run.time_s.size and np.all(np.diff(run.time_s) >= 0) and run.time_s[-1] == run.end_s, (
        "the points do not run forward to the run's end")
    out = run.to_target(0.0)
    assert out.reached == run.meta["finished"], "to_target(0) disagrees with finished"
    assert run.count("revocation") == run.meta["evictions"], "revocation events disagree with evictions"


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
    a, b = _flat(0.06, name="A"), _flat(0.05, name="B")
    run = _run([a, b], 2 * DAY, 200.0, reliable=1)
    check_first_choice(run, "B")
    # B jumps above any bid for 30 s every 4 minutes (history included): an allocation there
    # is revoked about when it starts working, so BidBrain's expectation picks A
    b2 = _flicker(0.05, 5.0, 240.0, name="B", spike_s=30.0)
    run2 = _run([a, b2], 2 * DAY, 200.0, reliable=1)
    check_first_choice(run2, "A")
    assert run.meta["finished"] and run2.meta["finished"]
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
    run = _run([m], t0, 400.0, reliable=1, max_cores=24)
    revoked = [a for a in run.meta["allocations"] if a["revoked"]]
    assert revoked and all(a["end"] == pytest.approx(t0 + 5400.0 + mk.AWS_WARNING_S) for a in revoked)
    assert all(a["usd"] == pytest.approx(a["n"] * 0.05) for a in revoked)  # hour 1 only
    check_no_partial_hour_bill(run, [m])
    check_contract(run, WEEK)
    # the same machine ended by the user is billed the partial hour
    ledger = Ledger()
    ledger.start(0, t0, price=m.spot)
    assert ledger.stop(0, t0 + 5520.0) == pytest.approx(0.05 + 0.05)
    planted = dataclasses.replace(
        run, meta=dict(run.meta, allocations=[dict(x, usd=x["usd"] + 0.05) for x in run.meta["allocations"]]))
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
    sc = bb.ScalingModel(0.05, 8.0)
    for start in (4 * DAY + 3600.0, 17 * DAY):
        r1 = _run(markets, start, 150.0, scaling=sc, tables=tables).to_json()
        r2 = _run(markets, start, 150.0, scaling=sc).to_json()  # tables rebuilt: the same
        check_same(r1, r2)
        run = _run(markets, start, 150.0, scaling=sc, tables=tables, fixed_headroom=bb.PRICE_TICK)
        check_no_partial_hour_bill(run, markets)
        check_contract(run, WEEK)
        m = run.meta
        check_fraction(m["free_core_s"], m["compute_core_s"], m["free_fraction"])
        assert all(a["bid"] == pytest.approx(float(markets[a["market"]].price_at("transient", a["start"])) + bb.PRICE_TICK)
                   for a in m["allocations"] if a["tier"] == "transient")
    with pytest.raises(AssertionError, match="differ"):
        check_same(r1, dict(r1, cost_by_tier={k: v + 1 for k, v in r1["cost_by_tier"].items()}))


def test_baselines_hand_computed():
    m = _flat(0.05)
    rate = float(SC.rate(16 * 4))
    od = _run([m], DAY, 100.0, bb.on_demand)  # job.workers = 16 machines
    assert od.end_s == pytest.approx(300.0 + 3600.0 * 100.0 / rate)
    assert _cost(od) == pytest.approx(16 * 0.21 * math.ceil(od.end_s / 3600.0))
    cp = _run([m], DAY, 100.0, bb.checkpoint_spot)  # never evicted: MTTF = the history's day
    period = math.sqrt(2 * 60.0 * DAY)
    need = 3600.0 * 100.0 / rate
    assert cp.end_s == pytest.approx(300.0 + need + 60.0 * math.floor(need / period))
    assert _cost(cp) == pytest.approx(16 * 0.05 * math.ceil(cp.end_s / 3600.0))
    for run in (od, cp):
        check_contract(run, WEEK)
        assert run.meta["finished"] and run.to_target(0.0).time_s == run.end_s
    assert bb.mttf_before(_flicker(0.05, 1.0, 3600.0), 2 * DAY, 0.21) == pytest.approx(3600.0, rel=0.01)


def test_bad_arguments_are_named():
    m = _flat(0.05)
    with pytest.raises(ValueError, match="work"):
        bb.WorkModel(work=0.0)
    with pytest.raises(ValueError, match="lead_s"):
        _run([m], DAY, 1.0, tick_s=600.0, lead_s=300.0)
    # a zero tick never advanced the decision clock (the run hung); NaN and an empty list are named
    with pytest.raises(ValueError, match="tick_s must lie in"):
        _run([m], DAY, 1.0, tick_s=0.0, lead_s=300.0)
    with pytest.raises(ValueError, match="lead_s must not be NaN"):
        _run([m], DAY, 1.0, lead_s=float("nan"))
    with pytest.raises(ValueError, match="markets must hold at least one Market"):
        bb.proteus(_job(), [], key=0, horizon_s=DAY)
    with pytest.raises(TypeError, match="job must be a scarjax.cluster.clock.Job"):
        bb.proteus(object(), [m], key=0, horizon_s=DAY)
    with pytest.raises(ValueError, match="horizon_s"):
        _run([m], DAY, 1.0, horizon_s=0.0)
    with pytest.raises(ValueError, match="start_time_s"):
        bb.proteus(_job(), [m, *bb.at(m, DAY)], key=0, horizon_s=DAY)
    with pytest.raises(TypeError, match="work must be a bidbrain.WorkModel"):
        bb.on_demand(_job(), [m], key=0, horizon_s=DAY, work=5.0)
    with pytest.raises(ValueError, match="machines"):
        _run([m], DAY, 1.0, bb.on_demand, machines=0)
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
    r1, r2 = (_run([m], 4 * DAY, 60.0, reliable=1).to_json() for m in (own, same))
    check_same(r1, r2)
    assert r1["meta"]["finished"]


def test_bidbrain_refuses_what_is_not_a_price_driven_market():
    with pytest.raises(TypeError, match="markets"):
        bb.proteus(_job(), [object()], key=0, horizon_s=DAY)
    fixed = mk.Market(mk.MachineType("m", 0.2, spot=0.05), mk.exponential(3600.0))
    with pytest.raises(ValueError, match=r"markets\[0\] must be a price-driven market"):
        bb.on_demand(_job(), [fixed], key=0, horizon_s=DAY)
    with pytest.raises(ValueError, match="warning_s"):
        mk.Market.from_prices([0.0], [0.1], bid=0.2, billing="hourly", machine=mk.MachineType("m", 0.2))
    with pytest.raises(ValueError, match="cores"):
        mk.MachineType("m", 0.2, cores=0)


# ---- the shared policy contract -------------------------------------------------------------


@settings(max_examples=8, deadline=None)
@given(st.sampled_from(POLICIES), st.floats(2 * DAY, 6 * DAY), st.floats(600.0, 3 * DAY), st.integers(0, 2 ** 31 - 1))
def test_proteus_and_its_baselines_are_policies_of_the_shared_contract(policy, start, horizon_s, seed):
    """Callable as ``policy(job, markets, *, key, horizon_s, work=...)`` like every policy:
    the same key gives the same run (price-driven markets draw nothing, so another key too),
    the bill is the sum over the ledger's per-machine entries, and the run ends by the
    horizon."""
    markets = [_flicker(0.05, 0.3, 5400.0, name="A"), _flat(0.07, cores=8, name="B")]
    run = _run(markets, start, 300.0, policy, key=seed, horizon_s=horizon_s, reliable=1) if policy is bb.proteus \
        else _run(markets, start, 300.0, policy, key=seed, horizon_s=horizon_s)
    check_contract(run, horizon_s)
    again = policy(_job(), bb.at(markets, start), key=jax.random.PRNGKey(seed), horizon_s=horizon_s,
                   work=bb.WorkModel(300.0, SC), **({"reliable": 1} if policy is bb.proteus else {}))
    check_same(run.to_json(), again.to_json())


def test_the_contract_check_catches_planted_violations():
    m = _flicker(0.05, 0.3, 5400.0)
    run = _run([m], 2 * DAY, 300.0, reliable=1)
    check_contract(run, WEEK)
    with pytest.raises(AssertionError, match="past the horizon"):  # planted: a horizon ignored
        check_contract(run, run.end_s / 2)
    with pytest.raises(AssertionError, match="not the sum over ledger entries"):  # planted: a bill off the ledger
        check_contract(dataclasses.replace(run, cost_by_tier={"reliable": 1.0, "transient": 0.0}), WEEK)
    with pytest.raises(AssertionError, match="one ledger entry per machine"):  # planted: one entry per allocation
        a = run.meta["allocations"]
        check_contract(dataclasses.replace(run, meta=dict(run.meta, allocations=[dict(x, n=x["n"] + 1) for x in a])),
                       WEEK)


def test_proteus_under_simulate_trials_and_a_horizon_cut():
    """The engine's Monte-Carlo helper runs Proteus like any policy; a horizon shorter than the
    job leaves it unfinished at the horizon, machines billed to then."""
    m = _flat(0.05)
    job = _job()
    runs = ck.simulate_trials(bb.proteus, job, bb.at(m, DAY), 2, 0, horizon_s=WEEK, work=bb.WorkModel(300.0, SC))
    check_same(runs[0].to_json(), runs[1].to_json())
    full = runs[0]
    assert full.meta["finished"] and full.to_target(0.0).reached
    cut = _run([m], DAY, 300.0, horizon_s=full.end_s / 2)
    check_contract(cut, full.end_s / 2)
    assert not cut.meta["finished"] and cut.end_s == pytest.approx(full.end_s / 2)
    assert not cut.to_target(0.0).reached and cut.loss[-1] > 0.0
    # the default work model: what job.workers machines of the first market do in the job's runtime
    w = bb.WorkModel.from_job(job, 4, scaling=SC)
    assert w.work == pytest.approx(float(SC.rate(16 * 4)) * job.max_steps * 60.0 / 3600.0)
