"""scarjax.cluster.sweep: the vectorised Fig 12 sweep equals the plain Python event loop, and
the bills follow AWS's 2015 hourly rules (TierML Sec 3.4 / 4.7)."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.cluster import market as mk
from scarjax.cluster import sweep as sw
from scarjax.data import transient as td

MODEL = sw.default_model()
H = 3600.0
KEYS = ("cost", "runtime", "minutes", "dollars", "revocations", "switches", "overran")


def _volatile(seed=0, minutes=4000, od=0.21):
    """Three classes whose prices wander around the on-demand price: revocations, switches,
    fall-backs and aggressive bids all happen."""
    rng = np.random.default_rng(seed)
    P = np.empty((3, minutes))
    for c in range(3):
        level = rng.uniform(0.02, 0.15)
        p, out = level, []
        for _ in range(minutes):
            if rng.random() < 0.02:
                p = level * rng.uniform(0.5, 1.5)
            if rng.random() < 0.004 * (c + 1):
                p = od * rng.uniform(0.7, 3.0)
            out.append(round(p, 4))
        P[c] = out
    return sw.markets_from_grid(P, od, pad_min=60 * 64)


VOL = _volatile()
# the embedded April 2015 extract: a volatile type, and one whose prices sit at on-demand exactly
REAL = {t: sw.build_markets(t, pad_min=60 * 64) for t in ("c3.xlarge", "r3.large")}


def check_agree(vec: dict, refs: list[dict], rtol=1e-9):
    """Every scenario's vectorised result equals the reference's (costs to ``rtol``)."""
    for i, ref in enumerate(refs):
        for k in KEYS:
            v, r = vec[k][i], ref[k]
            ok = (v == r) if k in ("revocations", "switches", "overran") else math.isclose(v, r, rel_tol=rtol, abs_tol=1e-12)
            if not ok:
                raise AssertionError(f"vectorised and reference disagree on scenario {i}: {k} {v!r} != {r!r}")


def check_runtime_at_least_on_demand(res: dict):
    """No policy beats the full on-demand fleet's runtime (start-up + 60 W at rate 1)."""
    bad = np.flatnonzero(np.asarray(res["runtime"]) < 1.0 - 1e-12)
    if bad.size:
        raise AssertionError(f"runtime below the on-demand fleet's for scenarios {bad[:5].tolist()}")


# other models: stage 2 with 2 reliable machines; a flush longer than the warning (rollback path)
MODELS = (
    MODEL,
    sw.ProgressModel(machines=16, reliable=2, checkpoint_s=60.0, startup_s=180.0),
    sw.ProgressModel(flush_s=180.0, rollback_s=420.0, switch_ratio=0.6),
)


def _run_both(tm, starts, homes, works, bid, policy, switching, model=MODEL):
    """``works`` in compute-hours; the sweep takes seconds."""
    vec = sw.run_vectorised(tm, starts, homes, H * np.asarray(works), bid, policy, model, switching=switching)
    refs = [
        sw.run_reference(tm, int(s), int(h), H * float(w), bid, policy, model, switching=switching)
        for s, h, w in zip(starts, homes, works)
    ]
    return vec, refs


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    real=st.sampled_from([None, "c3.xlarge", "r3.large"]),
    bid=st.sampled_from(sw.BIDS),
    policy=st.sampled_from(sw.POLICIES),
    switching=st.booleans(),
    model=st.sampled_from(MODELS),
)
def test_vectorised_equals_reference_on_random_scenarios(seed, real, bid, policy, switching, model):
    tm = REAL[real] if real else VOL
    rng = np.random.default_rng(seed)
    n = 12
    starts = rng.integers(0, tm.minutes, n)
    homes = rng.integers(0, 3, n)
    works = rng.choice([0.5, 2.0, 8.0, 20.0], n)
    vec, refs = _run_both(tm, starts, homes, works, bid, policy, switching, model)
    check_agree(vec, refs)
    check_runtime_at_least_on_demand(vec)


def test_random_scenarios_exercise_every_branch():
    """The volatile market drives revocations, proactive switches and on-demand fall-backs, so
    the equality test above covers them (checked here on a fixed draw)."""
    rng = np.random.default_rng(7)
    n = 40
    starts, homes, works = rng.integers(0, VOL.minutes, n), rng.integers(0, 3, n), rng.choice([2.0, 8.0], n)
    seen = {}
    for bid in sw.BIDS:
        for policy in sw.POLICIES:
            vec, refs = _run_both(VOL, starts, homes, works, bid, policy, True)
            check_agree(vec, refs)
            seen[(bid, policy)] = vec
    t = seen[("on_demand", "tierml")]
    assert t["revocations"].sum() > 0 and t["switches"].sum() > 0
    for model in MODELS[1:]:  # stage 2 rates; the rollback path (flush longer than the warning)
        vec, refs = _run_both(VOL, starts, homes, works, "on_demand", "tierml", True, model)
        check_agree(vec, refs)
        assert vec["revocations"].sum() > 0
    assert seen[("aggressive", "checkpoint")]["revocations"].sum() > seen[("on_demand", "checkpoint")]["revocations"].sum()
    assert np.any(t["cost"] > 0.5)  # some on-demand fall-back


def test_agreement_check_catches_a_planted_difference():
    starts, homes, works = np.array([100, 2000]), np.array([0, 2]), np.array([2.0, 8.0])
    vec, refs = _run_both(VOL, starts, homes, works, "on_demand", "tierml", True)
    vec = {k: np.array(v, copy=True) for k, v in vec.items()}
    vec["dollars"][1] *= 1.001
    with pytest.raises(AssertionError, match="disagree on scenario 1: dollars"):
        check_agree(vec, refs)
    vec["dollars"][1] /= 1.001
    vec["switches"][0] += 1
    with pytest.raises(AssertionError, match="disagree on scenario 0: switches"):
        check_agree(vec, refs)


def test_runtime_check_catches_a_planted_speed_up():
    with pytest.raises(AssertionError, match=r"runtime below the on-demand fleet's for scenarios \[1\]"):
        check_runtime_at_least_on_demand({"runtime": np.array([1.0, 0.9, 1.2])})


# --------------------------------------------------------------------------------------
# Billing invariants on controlled markets


def check_dollars(got: float, expected: float, what: str):
    """``got`` equals ``expected`` (to float32 prices: the grid holds float32 values)."""
    if not math.isclose(got, expected, rel_tol=1e-6):
        raise AssertionError(f"{what}: billed {got!r}, expected {expected!r}")


def _both_dollars(tm, start, home, w, bid, policy, switching=True):
    vec = sw.run_vectorised(tm, [start], [home], [H * w], bid, policy, MODEL, switching=switching)
    ref = sw.run_reference(tm, start, home, H * w, bid, policy, MODEL, switching=switching)
    check_agree(vec, [ref])
    return ref


def test_calm_market_user_ended_partial_hour_is_billed_in_full():
    """No revocation: the last partial hour is charged (the user ends the machines)."""
    N, R, S, od, p = MODEL.machines, MODEL.reliable, MODEL.startup_s / 60.0, 0.21, 0.05
    tm = sw.markets_from_grid(np.full((3, 3000), p), od)
    full, _ = MODEL.tierml_rates
    w = 2.0
    run_min = 60 * w / full  # 121.9 min: three billed hours, the third partial
    r = _both_dollars(tm, 10, 1, w, "on_demand", "tierml")
    check_dollars(r["dollars"], (N - R) * p * math.ceil(run_min / 60) + R * od * math.ceil(run_min / 60), "tierml calm")
    assert math.isclose(r["minutes"], S + run_min)
    mttf = sw.mttf_s(tm, "on_demand") / 60.0
    tau = math.sqrt(2 * (MODEL.checkpoint_s / 60.0) * mttf[1])
    ck_min = 60 * w + (MODEL.checkpoint_s / 60.0) * (math.ceil(60 * w / tau) - 1)
    r = _both_dollars(tm, 10, 1, w, "on_demand", "checkpoint")
    check_dollars(r["dollars"], N * p * math.ceil(ck_min / 60), "checkpoint calm")
    # the aggressive bid charges the bid: 0.05 rounds up to a nickel, 0.05
    r = _both_dollars(tm, 10, 1, w, "aggressive", "checkpoint")
    check_dollars(r["dollars"], N * 0.05 * math.ceil(ck_min / 60), "checkpoint calm, aggressive")


def test_provider_revocation_never_bills_the_partial_hour():
    """All classes spike above the bid at minute 100 (notice), revoked at 102: the checkpointing
    job has run 97 min on spot and pays one hour, not two; then it restarts on demand."""
    N, S, od, p = MODEL.machines, MODEL.startup_s / 60.0, 0.21, 0.05
    P = np.full((3, 4000), p)
    P[:, 100:400] = 0.5
    tm = sw.markets_from_grid(P, od)
    mttf = sw.mttf_s(tm, "on_demand") / 60.0
    tau = math.sqrt(2 * (MODEL.checkpoint_s / 60.0) * mttf[0])
    ran = 102 - S
    saved = math.floor(ran / (tau + (MODEL.checkpoint_s / 60.0))) * tau
    left = 120 - saved
    r = _both_dollars(tm, 0, 0, 2.0, "on_demand", "checkpoint")
    check_dollars(r["dollars"], N * p * 1 + N * od * math.ceil(left / 60), "checkpoint revoked")
    assert r["revocations"] == 1 and math.isclose(r["minutes"], 102 + S + left)
    # TierML: 63 spot machines pay one hour, then fall back to on demand until minute 400
    full, rel = MODEL.tierml_rates
    w = 8.0
    r = _both_dollars(tm, 0, 0, w, "on_demand", "tierml")
    done = full * (102 - MODEL.flush_s / 60.0 - S) + rel * S  # spot fleet, then the reliable alone during start-up
    assert r["revocations"] == 1
    left = 60 * w - done - full * (400 - 107)  # on demand from 107 to the spot's return at 400
    spot_up = 400 + S
    od_hours = math.ceil((spot_up - 107) / 60)
    fin = spot_up + left / full
    expected = (N - 1) * p * 1 + (N - 1) * od * od_hours + (N - 1) * p * math.ceil((fin - spot_up) / 60)
    expected += 1 * od * math.ceil((fin - S) / 60)
    check_dollars(r["dollars"], expected, "tierml revoked, fall-back")


def test_prices_above_on_demand_fall_back_to_on_demand():
    od = 0.21
    tm = sw.markets_from_grid(np.full((3, 3000), 0.5), od)
    w = 8.0
    r = _both_dollars(tm, 0, 0, w, "on_demand", "checkpoint")
    assert r["cost"] == pytest.approx(1.0) and r["revocations"] == 0
    r = _both_dollars(tm, 0, 0, w, "on_demand", "tierml")
    full, _ = MODEL.tierml_rates
    hours = math.ceil(60 * w / full / 60)
    assert r["cost"] == pytest.approx((MODEL.machines * od * hours) / (MODEL.machines * od * w))


def test_bill_check_catches_a_planted_partial_hour():
    with pytest.raises(AssertionError, match="checkpoint revoked: billed 6.4, expected 3.2"):
        check_dollars(6.4, 3.2, "checkpoint revoked")


def test_sweep_cells_and_bad_arguments():
    res = sw.sweep(stride=2000, instance_types=("r3.large",), work_s=(2 * H,))
    assert {c["policy"] for c in res["cells"]} == {"tierml", "tierml_noswitch", "checkpoint"}
    assert len(res["cells"]) == 3 * 2 * 3  # zones x bids x policies
    assert all(c["n"] > 0 and c["cost"]["p95"] >= c["cost"]["mean"] * 0 for c in res["cells"])
    rows = sw.summarise(res["cells"], by=("bid", "policy"))
    assert len(rows) == 6 and all(r["n"] == res["cells"][0]["n"] * 3 for r in rows)
    with pytest.raises(ValueError, match="bid must be one of"):
        sw.run_vectorised(VOL, [0], [0], [2 * H], "low", "tierml", MODEL)
    with pytest.raises(ValueError, match="policy must be one of"):
        sw.run_reference(VOL, 0, 0, 2 * H, "on_demand", "flint", MODEL)
    with pytest.raises(ValueError, match="starts must be minutes"):
        sw.run_vectorised(VOL, [VOL.minutes], [0], [2 * H], "on_demand", "tierml", MODEL)
    with pytest.raises(ValueError, match="work_s"):
        sw.run_vectorised(VOL, [0], [0], [-1.0], "on_demand", "tierml", MODEL)
    with pytest.raises(ValueError, match="work_s"):
        sw.run_reference(VOL, 0, 0, math.nan, "on_demand", "tierml", MODEL)
    with pytest.raises(ValueError, match="mttf_s"):
        sw.run_reference(VOL, 0, 0, H, "on_demand", "checkpoint", MODEL, mttf_s=[0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="reliable in"):
        sw.ProgressModel(machines=4, reliable=4)
    with pytest.raises(ValueError, match="stride must be"):
        sw.sweep(stride=0)


def test_progress_model_stages_follow_the_ratio_thresholds():
    m = sw.default_model()
    assert m.stage(2, 1) == 1 and m.stage(3, 1) == 2 and m.stage(15, 1) == 2 and m.stage(16, 1) == 3
    full, rel = m.tierml_rates
    assert full == pytest.approx(63 / 64) and rel == pytest.approx(1 / 64)
    assert m.fleet_rate(8, 1) == pytest.approx(0.9 * 9 / 64)
    assert MODELS[1].tierml_rates == pytest.approx((0.9, 2 / 16))  # 14:2 is stage 2


def test_a_price_equal_to_the_bid_neither_revokes_nor_counts_as_usable():
    """Prices are float32 on the grid: a price equal to the on-demand bid (0.175 is not a float32)
    must not revoke, and is not below on-demand (no spot use at the on-demand price)."""
    od = 0.175
    P = np.full((3, 3000), 0.1)
    P[:, 200:] = od
    tm = sw.markets_from_grid(P, od)
    r = _both_dollars(tm, 0, 0, 8.0, "on_demand", "checkpoint")
    assert r["revocations"] == 0
    tm = sw.markets_from_grid(np.full((3, 3000), od), od)
    r = _both_dollars(tm, 0, 0, 2.0, "on_demand", "checkpoint")
    assert r["cost"] == pytest.approx(1.0)  # on demand: spot at the on-demand price is not cheaper
    r = _both_dollars(tm, 0, 0, 8.0, "on_demand", "tierml")
    assert r["switches"] == 0 and r["revocations"] == 0 and r["cost"] == pytest.approx((64 * 9) / (64 * 8))


def test_progress_model_from_an_iteration_time_model():
    """``t(M) = c / M`` (ideal scaling) reproduces the stated rates; with a log-depth all-reduce
    scaling is sublinear: 63 workers lose less than 1/64 of the fleet's rate, and the reliable
    machine alone does more than 1/64."""
    ideal = sw.ProgressModel.from_step_time(lambda m: 100.0 / m)
    assert ideal.tierml_rates == pytest.approx(MODEL.tierml_rates)
    sync = sw.ProgressModel.from_step_time(lambda m: 100.0 / m + 0.2 * math.log2(m))
    full, rel = sync.tierml_rates
    t = lambda m: 100.0 / m + 0.2 * math.log2(m)  # noqa: E731
    assert full == pytest.approx(t(64) / t(63)) and rel == pytest.approx(t(64) / t(1))
    assert full > 63 / 64 and rel > 1 / 64
    with pytest.raises(TypeError, match="step_time must be callable"):
        sw.ProgressModel.from_step_time(3.0)
    with pytest.raises(ValueError, match="calibrates stage 3"):
        sw.ProgressModel.from_step_time(lambda m: 1.0 / m, machines=8, reliable=1)


# --------------------------------------------------------------------------------------
# The tables come from the one Market


def _former_grid(instance_type, pad_min):
    """The grid as build_markets made it before the sweep took Markets (an oracle): the parser
    records' prices at every minute of their common window."""
    spot = [td.load_spot_prices(instance_type, z) for z in td.SPOT_ZONES]
    start, end = max(s.start for s in spot), min(s.end for s in spot)
    M = int((end - start).astype("timedelta64[s]").astype(np.int64)) // 60
    grid = start + (np.arange(M) * 60).astype("timedelta64[s]")
    P = np.stack([np.asarray(s.price_at(grid), np.float64) for s in spot])
    return sw.markets_from_grid(P, float(spot[0].on_demand), instance_type=instance_type, zones=td.SPOT_ZONES,
                                pad_min=pad_min, start=start, source="embedded")


def check_same_tables(a, b):
    for f in ("prices", "maxtab", "mintab", "hour_sums"):
        if not np.array_equal(getattr(a, f), getattr(b, f)):
            raise AssertionError(f"the tables differ: {f}")
    if (a.minutes, a.on_demand, a.zones) != (b.minutes, b.on_demand, b.zones):
        raise AssertionError("the tables differ: minutes, on_demand or zones")


@pytest.mark.parametrize("instance_type", td.SPOT_INSTANCE_TYPES)
def test_tables_from_markets_equal_the_former_grid_exactly(instance_type):
    check_same_tables(sw.build_markets(instance_type, pad_min=600), _former_grid(instance_type, 600))


def test_same_tables_check_catches_a_planted_price():
    tm = _former_grid("r3.large", 60)
    P = tm.prices[:, : tm.minutes].copy()
    P[1, 500] += 0.001
    with pytest.raises(AssertionError, match="prices"):
        check_same_tables(sw.markets_from_grid(P, tm.on_demand, zones=tm.zones, pad_min=60), tm)


def test_sweep_numbers_equal_the_former_sweep():
    """Pinned from the sweep before it took Markets and seconds (stride 2000, c3.xlarge,
    us-east-1a, 8 compute-hours): the same numbers to the last bit."""
    res = sw.sweep(stride=2000, instance_types=("c3.xlarge",), work_s=(2 * H, 8 * H))
    assert res["scenarios"] == 792
    got = {(c["bid"], c["policy"]): (c["cost"]["mean"], c["runtime"]["mean"]) for c in res["cells"]
           if c["zone"] == "us-east-1a" and c["work_s"] == 8 * H}
    assert got == {
        ("aggressive", "checkpoint"): (0.26650433297555304, 1.0503608429023128),
        ("aggressive", "tierml"): (0.2785866516166028, 1.0197267223040418),
        ("aggressive", "tierml_noswitch"): (0.9865056845962747, 1.0557303521221044),
        ("on_demand", "checkpoint"): (0.1769507567910276, 1.0493332963200335),
        ("on_demand", "tierml"): (0.1874893458867022, 1.0187106707725264),
        ("on_demand", "tierml_noswitch"): (0.901423117614203, 1.0404985049314945),
    }


def test_sweep_takes_markets_a_user_built():
    """A mapping of price-driven Markets (one clock) gives the sweep of the parser records."""
    spot = {(z, "r3.large"): td.load_spot_prices("r3.large", z) for z in td.SPOT_ZONES}
    origin = max(s.start for s in spot.values())
    markets = {k: mk.Market.from_spot_prices(s, bid=s.on_demand, provider="aws", origin=origin)
               for k, s in spot.items()}
    a = sw.sweep(markets, stride=3000, instance_types=("r3.large",), work_s=(2 * H,))
    b = sw.sweep(spot, stride=3000, instance_types=("r3.large",), work_s=(2 * H,))
    assert [c["cost"]["mean"] for c in a["cells"]] == [c["cost"]["mean"] for c in b["cells"]]
    assert a["mttf_s"] == b["mttf_s"]


def test_from_markets_refuses_markets_the_sweep_cannot_price():
    m = mk.Market.from_prices([0.0], [0.1], bid=0.2, provider="aws", end_s=6000.0, machine=mk.MachineType("m", 0.2))
    tm = sw.TypeMarkets.from_markets([m, m], pad_min=0)
    assert tm.prices.shape == (2, 100) and tm.zones == ("m", "m")
    with pytest.raises(ValueError, match=r"markets\[1\]: the sweep implements AWS's 2015 rules"):
        sw.TypeMarkets.from_markets([m, dataclasses.replace(m, billing="per_second")])
    with pytest.raises(ValueError, match=r"markets\[0\] must be price-driven"):
        sw.TypeMarkets.from_markets([mk.Market(mk.MachineType("m", 0.2), mk.exponential(600.0))])
    other = mk.Market.from_prices([0.0], [0.1], bid=0.2, provider="aws", end_s=6000.0, machine=mk.MachineType("m", 0.3))
    with pytest.raises(ValueError, match="on-demand prices differ"):
        sw.TypeMarkets.from_markets([m, other])
    with pytest.raises(TypeError, match="markets"):
        sw.TypeMarkets.from_markets(m)


def _brute_grid(times, prices, start_s, minutes):
    """The price in effect at each grid minute by a plain scan (an oracle)."""
    out = []
    for m in range(minutes):
        t = start_s + 60.0 * m
        out.append([p for ti, p in zip(times, prices) if ti <= t][-1])
    return np.array(out)


def check_grid_equals_brute(tm, series, start_s):
    for c, (times, prices) in enumerate(series):
        want = np.float32(_brute_grid(times, prices, start_s, tm.minutes)).astype(np.float64)
        if not np.array_equal(tm.prices[c, : tm.minutes], want):
            bad = int(np.flatnonzero(tm.prices[c, : tm.minutes] != want)[0])
            raise AssertionError(f"class {c}: minute {bad} priced {tm.prices[c, bad]}, in effect {want[bad]}")


_steps = st.lists(st.tuples(st.integers(1, 900), st.integers(1, 5000)), min_size=1, max_size=30)


@settings(max_examples=30, deadline=None)
@given(a=_steps, b=_steps, start_min=st.integers(0, 5))
def test_from_markets_prices_every_minute_at_the_price_in_effect(a, b, start_min):
    """Random step functions (changes at any second): each grid minute holds the price in
    effect then, for markets built from plain arrays."""
    series = []
    for steps in (a, b):
        times = np.concatenate([[0.0], np.cumsum([d for d, _ in steps], dtype=np.float64)])
        prices = np.concatenate([[0.05], [p / 1e4 for _, p in steps]])
        series.append((times, prices))
    end = min(t[-1] for t, _ in series) + 600.0
    markets = [mk.Market.from_prices(t, p, bid=0.5, provider="aws", end_s=end, machine=mk.MachineType("m", 0.5))
               for t, p in series]
    tm = sw.TypeMarkets.from_markets(markets, start_s=60.0 * start_min, pad_min=5)
    check_grid_equals_brute(tm, series, 60.0 * start_min)


def test_grid_check_catches_a_planted_lookup_off_by_a_change():
    times, prices = np.array([0.0, 60.0, 150.0]), np.array([0.1, 0.2, 0.3])
    m = mk.Market.from_prices(times, prices, bid=0.5, provider="aws", end_s=600.0, machine=mk.MachineType("m", 0.5))
    tm = sw.TypeMarkets.from_markets([m], pad_min=0)
    check_grid_equals_brute(tm, [(times, prices)], 0.0)
    # planted: the change at exactly minute 1 (60 s) not yet in effect (a 'left' lookup)
    P = tm.prices[:, : tm.minutes].copy()
    P[0, 1] = 0.1
    with pytest.raises(AssertionError, match="minute 1"):
        check_grid_equals_brute(sw.markets_from_grid(P, 0.5, pad_min=0), [(times, prices)], 0.0)
