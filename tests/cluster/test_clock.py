"""scarjax.cluster.clock: step-time models, the Ledger's bills (= market.bill; the free
partial hour; monotone in usage), the Trainer (bit-identical however the run is cut),
ClusterRun's censored outcomes and simulate_trials' dispatch."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scarjax import pollux
from scarjax.cluster import clock as ck
from scarjax.cluster.ledger import Ledger
from scarjax.cluster.steptime import step_time_fixed, step_time_linear, step_time_pollux
from scarjax.cluster.trainer import Trainer
from scarjax.cluster import market as mk
from scarjax.models import mlr

SETTINGS = settings(max_examples=25, deadline=None)


# ----------------------------------------------------------------------------- checks


def check_bill_matches(bill_fn, start, dur, price, revoked, scheme):
    """The Ledger-style bill equals market.bill (float32 there: relative 1e-5)."""
    ours = float(bill_fn(start, start + dur, price, revoked, scheme))
    ref = float(mk.bill(start, start + dur, price, revoked, scheme))
    assert abs(ours - ref) <= 1e-5 * max(1.0, ref), f"bill differs from market.bill: {ours} vs {ref}"


def check_partial_hour_free(bill_fn, start, dur, price):
    """A provider revocation bills whole hours only; a user stop bills the begun hour."""
    revoked = float(bill_fn(start, start + dur, price, True, "hourly"))
    whole = np.floor((dur + 1.0) / 3600.0)
    assert abs(revoked - price * whole) <= 1e-9 * max(1.0, price * whole), (
        f"provider revocation billed the partial hour: {revoked} for {dur} s at {price}/h")
    user = float(bill_fn(start, start + dur, price, False, "hourly"))
    assert user >= revoked, f"a user stop costs less than a provider revocation: {user} < {revoked}"


def check_monotone(bill_fn, start, durs, price, revoked, scheme):
    """Cost is non-decreasing in the machine's usage."""
    costs = np.array([float(bill_fn(start, start + d, price, revoked, scheme)) for d in sorted(durs)])
    bad = np.nonzero(np.diff(costs) < -1e-12)[0]
    assert bad.size == 0, f"cost decreases with usage: {costs[bad[0]]} -> {costs[bad[0] + 1]}"


def ledger_bill(start, end, price, revoked, scheme):
    led = Ledger()
    led.start("m", start, price=price, billing=scheme)
    return led.stop("m", end, revoked=revoked)


# ----------------------------------------------------------------------------- bills


@SETTINGS
@given(start=st.floats(0, 1e5), dur=st.floats(0, 5 * 3600), price=st.floats(0, 5),
       revoked=st.booleans(), scheme=st.sampled_from(["hourly", "per_second"]))
def test_ledger_equals_market_bill(start, dur, price, revoked, scheme):
    start = float(np.float32(start))
    dur = float(np.float32(start + dur)) - start  # whole float32 times as market.bill sees them
    check_bill_matches(ledger_bill, start, dur, price, revoked, scheme)


@SETTINGS
@given(start=st.floats(0, 1e5), dur=st.floats(0, 10 * 3600), price=st.floats(0.01, 5))
def test_provider_revocation_never_bills_partial_hour(start, dur, price):
    check_partial_hour_free(ledger_bill, start, dur, price)


@SETTINGS
@given(start=st.floats(0, 1e5), durs=st.lists(st.floats(0, 8 * 3600), min_size=2, max_size=6),
       price=st.floats(0, 5), revoked=st.booleans(), scheme=st.sampled_from(["hourly", "per_second"]))
def test_cost_monotone_in_usage(start, durs, price, revoked, scheme):
    check_monotone(ledger_bill, start, durs, price, revoked, scheme)


def test_bill_checks_catch_planted_violations():
    always_full = lambda s, e, p, r, sch: p * np.ceil((e - s) / 3600.0)  # noqa: E731  ignores the rule
    with pytest.raises(AssertionError, match="billed the partial hour"):
        check_partial_hour_free(always_full, 0.0, 5400.0, 1.0)
    off_by_one = lambda s, e, p, r, sch: ledger_bill(s, e, p, r, sch) + 0.5  # noqa: E731
    with pytest.raises(AssertionError, match="differs from market.bill"):
        check_bill_matches(off_by_one, 0.0, 100.0, 1.0, False, "hourly")
    refund = lambda s, e, p, r, sch: p * max(0.0, 2 - (e - s) / 3600.0)  # noqa: E731
    with pytest.raises(AssertionError, match="decreases with usage"):
        check_monotone(refund, 0.0, [0.0, 3600.0], 1.0, False, "hourly")


def test_ledger_hand_checked_and_free_seconds():
    led = Ledger()
    led.start("a", 0.0, price=1.0, tier="transient")
    led.start("b", 0.0, price=3.0, tier="reliable")
    assert led.cost(10.0) == pytest.approx(4.0)  # both begun an hour
    led.stop("a", 5400.0, revoked=True)  # 1.5 h, provider: 1 hour billed, 1800 s free
    assert led.free_seconds(5400.0) == pytest.approx(1800.0)
    assert led.by_tier(5400.0) == pytest.approx({"transient": 1.0, "reliable": 6.0})
    np.testing.assert_allclose(led.cost_curve([10.0, 3600.0, 3602.0]), [4.0, 4.0, 8.0])  # as of t: a user stop
    led.stop("b", 7200.0)
    assert led.cost(1e6) == pytest.approx(7.0)
    with pytest.raises(ValueError, match="machine_id 'b' is not running"):
        led.stop("b", 8000.0)
    with pytest.raises(ValueError, match="tier"):
        led.start("c", 0.0, price=1.0, tier="spot")


def test_ledger_price_series_uses_market_bill():
    series = mk.price_series([0.1, 0.5], [0.0, 3600.0], end_s=20000.0)
    led = Ledger()
    led.start("s", 0.0, price=series, billing="hourly")
    assert led.cost(4000.0) == pytest.approx(0.6)  # hour 1 at 0.1, hour 2 at 0.5
    assert led.stop("s", 4000.0, revoked=True) == pytest.approx(0.1)


# ----------------------------------------------------------------------------- step time and market


def test_step_time_models():
    lin = step_time_linear(8.0, 0.5)
    np.testing.assert_allclose(lin(np.array([1, 2, 4, 8])), [8.0, 4.5, 3.0, 2.5])
    assert step_time_fixed(2.0)(7) == 2.0
    p = pollux.ThroughputParams(0.1, 0.001, 0.05, 0.01, 0.1, 0.02, 2.0)
    pt = step_time_pollux(p, 256, gpus_per_node=4)
    want = float(pollux.t_iter(p, 2, 8, 32, 0))
    assert pt(8) == pytest.approx(want, rel=1e-6)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        lin(0)
    with pytest.raises(ValueError, match="compute_s"):
        step_time_linear(0.0)


def test_market_mttf_and_prices():
    m = mk.Market(mk.MachineType("x", 1.0), mk.exponential(600.0))
    assert m.mttf_s() == pytest.approx(600.0)
    assert m.spot == pytest.approx(0.3)  # GCE's 70% off by default
    series = mk.price_series([0.1, 2.0], [0.0, 100.0], end_s=1000.0)
    pm = mk.Market(mk.MachineType("y", 1.0), mk.price_driven(series, 1.0))
    assert pm.transient_available(50.0) and not pm.transient_available(150.0)
    assert pm.mttf_s() == pytest.approx(100.0 + mk.AWS_WARNING_S)
    assert mk.Market(mk.MachineType("z", 1.0)).mttf_s() == float("inf")
    with pytest.raises(ValueError, match="billing"):
        mk.Market(mk.MachineType("x", 1.0), billing="monthly")


# ----------------------------------------------------------------------------- trainer


def test_trainer_cut_invariant_and_redo_bit_identical():
    alg = mlr.digits(lr=1.0, l2=1e-2, batch_size=32)
    a = Trainer(alg, 3)
    la = a.train(12)
    b = Trainer(alg, 3)
    lb = np.concatenate([b.train(5), b.train(7)])
    np.testing.assert_array_equal(la, lb)
    snap, at = b.snapshot(), b.step
    l_more = b.train(4)
    b.restore(snap, at)  # rework: the redone steps draw the same minibatches
    np.testing.assert_array_equal(b.train(4), l_more)
    assert b.loss() == pytest.approx(float(l_more[-1]), rel=1e-6)
    with pytest.raises(ValueError, match="multiple of unit=2"):
        Trainer(alg, 0, unit=2).train(3)


# ----------------------------------------------------------------------------- runs


def _run(loss, end_s=10.0):
    led = Ledger()
    led.start(0, 0.0, price=3600.0, billing="per_second")  # $1 per second
    rec = ck.Recorder("p", led)
    t = rec.interval(0.0, 1.0, loss, 0)
    rec.event(t, "done")
    return rec.finish(end_s)


def test_cluster_run_to_target_and_censoring():
    run = _run([3.0, 2.0, 1.0, 0.5])
    o = run.to_target(1.0)
    assert o == ck.Outcome(True, 3.0, pytest.approx(3.0), 3)
    c = run.to_target(0.1)
    assert not c.reached and c.time_s == 10.0 and c.dollars == pytest.approx(10.0)
    js = run.to_json()
    assert js["policy"] == "p" and js["loss"] == [3.0, 2.0, 1.0, 0.5] and js["events"][0][1] == "done"


def test_simulate_trials_dispatch():
    job = ck.Job(mlr.digits(), 0.5, step_time_fixed(1.0), workers=1, max_steps=2)
    market = mk.Market(mk.MachineType("x", 1.0))
    seen = []

    def pol(job, market, *, key, horizon_s):
        seen.append(np.asarray(jax.random.key_data(key)))
        return _run([1.0])

    runs = ck.simulate_trials(pol, job, market, 3, 0, horizon_s=5.0)
    assert len(runs) == 3 and len({s.tobytes() for s in seen}) == 3
    pol.run_trials = lambda job, market, keys, *, horizon_s: ["fast"] * len(keys)
    assert ck.simulate_trials(pol, job, market, 2, 0, horizon_s=5.0) == ["fast", "fast"]
