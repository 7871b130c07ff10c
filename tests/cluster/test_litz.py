"""scarjax.cluster.litz: scale-out keeps the parameter state exactly (no restart), scale-in
loses nothing, the step-time and migration models on hand values, rebalance invariants."""

import functools
import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.cluster import clock, litz

from scarjax.cluster import market as mk

from scarjax.cluster.steptime import step_time_fixed
from scarjax.models import mlr
from scarjax import ps as sps
from scarjax.ps import elastic
from scarjax.scar import partition as spt

E = 4


@pytest.fixture(scope="module")
def runs():
    alg = mlr.digits(batch_size=64)
    step = litz.litz_step_time(60.0, 20.0, E)
    spec = litz.LitzSpec(E, E, param_bytes=1e6)
    job = lambda n: clock.Job(alg, -1e9, step, workers=n, max_steps=12)  # noqa: E731
    key = jax.random.key(0)
    return {
        "static2": litz.elastic(job(2), key=key, horizon_s=1e9, spec=spec),
        "static4": litz.elastic(job(4), key=key, horizon_s=1e9, spec=spec),
        "out": litz.elastic(job(2), key=key, horizon_s=1e9, spec=spec, schedule=[(100.0, 4)]),
        "in": litz.elastic(job(4), key=key, horizon_s=1e9, spec=spec, schedule=[(50.0, 2)]),
        "other_key": litz.elastic(job(2), key=key, horizon_s=1e9, spec=spec, train_key=1),
        "step": step,
        "spec": spec,
    }


def check_no_restart(static, elastic) -> None:
    """An elastic run ends in exactly the state of the static run and has the same loss after
    every iteration (nothing restarted, redone or lost)."""
    for a, b in zip(jax.tree.leaves(static.final_state), jax.tree.leaves(elastic.final_state)):
        assert np.array_equal(np.asarray(a), np.asarray(b)), "parameter state differs from the static run's"
    assert np.array_equal(static.steps, elastic.steps), "iterations differ (restarted or skipped)"
    assert np.array_equal(static.loss, elastic.loss), "per-iteration losses differ"


def test_scale_out_keeps_state_exactly(runs):
    check_no_restart(runs["static2"], runs["out"])
    ev = [e for e in runs["out"].events if e[1] == "scale"]
    assert len(ev) == 1 and "2 -> 4 nodes" in ev[0][2]


def test_scale_in_loses_nothing(runs):
    check_no_restart(runs["static4"], runs["in"])
    assert [e[2].split(",")[0] for e in runs["in"].events if e[1] == "scale"] == ["4 -> 2 nodes at step 2"]


def test_no_restart_check_catches_planted_violation(runs):
    with pytest.raises(AssertionError, match="parameter state differs"):
        check_no_restart(runs["static2"], runs["other_key"])


def test_paces_and_migration(runs):
    step, spec = runs["step"], runs["spec"]
    t2, t4 = step(2), step(4)
    assert (t2, t4) == (50.0, 35.0)  # 60 * ceil(4/N) / 4 + 20
    out = runs["out"]
    dt = np.diff(out.time_s)
    mig = litz.migration_s(spec, 2, 4)
    # requested at 100 s: takes effect at the end of iteration 2 (100 s), then the migration pause
    np.testing.assert_allclose(dt[:2], t2)
    assert dt[2] == pytest.approx(t4 + mig)
    np.testing.assert_allclose(dt[3:], t4)
    assert out.time_s[-1] < runs["static2"].time_s[-1]
    ideal = litz.ideal_time(runs["static4"], 100.0, 2, float(runs["static4"].loss[-1]))
    assert ideal == pytest.approx(100.0 + 10 * t4)
    assert out.to_target(float(out.loss[-1])).time_s == pytest.approx(ideal + mig)


def test_step_time_and_migration_hand_values():
    st16 = litz.litz_step_time(60.0, 20.0, 16)
    np.testing.assert_allclose(st16(np.array([1, 3, 4, 8])), [80.0, 60 * 6 / 16 + 20, 35.0, 27.5])
    with_over = litz.litz_step_time(60.0, 0.0, 16, overhead_per_executor=0.01)
    assert with_over(1) == pytest.approx(60.0 * (1 + 0.01 * 15))
    # MLR-like: 16 PShards of 10 MiB in all, 4 -> 8 nodes: every old node sends 2, every new one receives 2
    spec = litz.LitzSpec(16, 16, param_bytes=10 * 2**20, bandwidth=2.5e8, latency_s=1.0)
    assert litz.migration_s(spec, 4, 8) == pytest.approx(1.0 + 2 * (10 * 2**20 / 16) / 2.5e8)
    assert litz.migration_s(spec, 4, 4) == 0.0


@settings(max_examples=25, deadline=None)
@given(units=st.integers(1, 40), old=st.integers(1, 12), new=st.integers(1, 12))
def test_rebalance_keeps_every_unit_and_balances(units, old, new):
    check_rebalance(litz.rebalance, units, old, new)


def test_rebalance_check_catches_planted_violations():
    def no_balance(a, n):  # leaving units all to node 0
        a = np.asarray(a).copy()
        out = np.where(a >= n, 0, a)
        return out, out != a

    with pytest.raises(AssertionError, match="unbalanced loads"):
        check_rebalance(no_balance, 12, 4, 2)

    def churn(a, n):  # balanced, but reshuffles everything
        out = (np.arange(len(a)) + 1) % n
        return out, out != np.asarray(a)

    with pytest.raises(AssertionError, match="gave away units"):
        check_rebalance(churn, 8, 2, 4)


def check_rebalance(fn, units, old, new):
    a0 = litz.placement(units, old)
    a1, moved = fn(a0, new)
    assert a1.shape == (units,) and a1.min() >= 0 and a1.max() < new, "every unit on exactly one remaining node"
    load = np.bincount(a1, minlength=new)
    assert load.max() - load.min() <= 1, f"unbalanced loads {load}"
    assert np.all(moved[a0 >= new]), "units of leaving nodes must move"
    assert np.array_equal(moved, a0 != a1)
    # no needless moves: a remaining node keeps its units down to the balanced floor
    load0 = np.bincount(a0, minlength=max(old, new))
    for j in range(min(old, new)):
        kept = int(np.sum((a0 == j) & ~moved))
        assert kept >= min(int(load0[j]), units // new), f"node {j} gave away units below the balanced load"


def test_validation(runs):
    alg = mlr.digits(batch_size=64)
    job = clock.Job(alg, -1e9, runs["step"], workers=2, max_steps=2)
    with pytest.raises(ValueError, match="times_s must be non-decreasing"):
        litz.elastic(job, key=0, horizon_s=1e9, spec=runs["spec"], schedule=[(10.0, 4), (5.0, 2)])
    with pytest.raises(ValueError, match="times_s"):
        litz.Schedule((float("nan"),), (2,))
    with pytest.raises(ValueError, match="nodes"):
        litz.Schedule((1.0,), (0,))
    with pytest.raises(ValueError, match="one entry per time"):
        litz.Schedule((1.0, 2.0), (2,))
    with pytest.raises(ValueError, match=r"\(time_s, nodes\)"):
        litz.elastic(job, key=0, horizon_s=1e9, spec=runs["spec"], schedule=[(10.0,)])
    with pytest.raises(TypeError, match="spec"):
        litz.elastic(job, key=0, horizon_s=1e9, spec="E=4")
    with pytest.raises(ValueError, match="executors"):
        litz.LitzSpec(0, 1)
    with pytest.raises(ValueError, match="assign"):
        litz.rebalance([], 2)
    assert math.isinf(litz.ideal_time(runs["static4"], 0.0, 0, -1e9))


def test_key_draws_the_market_train_key_the_training(runs):
    """One meaning of ``key`` across policies: the market's draws (a scripted schedule draws
    none), ``train_key`` the training."""
    alg = mlr.digits(batch_size=64)
    job = clock.Job(alg, -1e9, runs["step"], workers=2, max_steps=12)
    other = litz.elastic(job, key=jax.random.key(5), horizon_s=1e9, spec=runs["spec"])
    check_no_restart(runs["static2"], other)


def test_bills_from_the_jobs_start_on_the_market_clock():
    """Started at market time 100 h, 2 nodes for half an hour at $0.8/h per second: $0.80
    (not billed from market time 0)."""
    alg = mlr.digits(batch_size=64)
    job = clock.Job(alg, -1e9, step_time_fixed(60.0), workers=2, max_steps=30)
    market = mk.Market(mk.MachineType("m4.4xlarge", 0.8), None, billing="per_second", start_time_s=100 * 3600.0)
    run = litz.elastic(job, market, key=0, horizon_s=1e9, spec=litz.LitzSpec(E, E))
    assert run.end_s == pytest.approx(1800.0)
    assert sum(run.cost_by_tier.values()) == pytest.approx(0.80)
    assert run.dollars[-1] == pytest.approx(0.80)


# ----------------------------------------------------------------------------- one implementation


@pytest.fixture(scope="module")
def ps4():
    """A real parameter server: MLR on 4 server shards (one forced host device each)."""
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 (forced host) devices")
    alg = mlr.digits(batch_size=None, lr=0.5)
    part = spt.by_row(alg.init(jax.random.key(0), alg.data), num_servers=4, key=1)
    return sps.ParameterServer(alg, part, sps.make_mesh(4, 1), workers=4)


@pytest.mark.parametrize("key", [0, 7])
def test_rebalance_is_the_parameter_servers_plan(ps4, key):
    """Litz's executor/PShard moves are :mod:`scarjax.ps.elastic`'s block moves: scaling a real
    parameter server in (4 -> 2 servers) and out again (2 -> 4) leaves its blocks exactly where
    :func:`litz.rebalance` puts the same units, every block weighing the same."""
    weight = np.zeros(ps4.layout.num_blocks, np.int64)
    for rb in ps4.layout.row_block:
        np.add.at(weight, rb, 1)
    assert np.all(weight == weight[0]), "the check needs blocks of one size (unit weights in Litz)"
    st = ps4.init(jax.random.key(3))
    a0 = np.asarray(st.placement.server_of)
    st = elastic.remove_servers(ps4, st, [2, 3], key=key)
    a1, moved = litz.rebalance(a0, 2, key=key)
    np.testing.assert_array_equal(np.asarray(st.placement.server_of), a1)
    assert moved.sum() == np.sum(a0 >= 2)
    st = elastic.add_servers(ps4, st, [2, 3], key=key)
    a2, _ = litz.rebalance(a1, 4, key=key)
    np.testing.assert_array_equal(np.asarray(st.placement.server_of), a2)
    load = np.bincount(a2, minlength=4)
    assert load.max() - load.min() <= 1


def test_plan_check_catches_a_different_rebalance(ps4, monkeypatch):
    """Planted: Litz keeps its own joining rule (every unit to the least loaded node in turn,
    not a minimal move): the parameter server's placement no longer matches."""
    st = ps4.init(jax.random.key(3))
    a1, _ = litz.rebalance(np.asarray(st.placement.server_of), 2)
    st = elastic.add_servers(ps4, elastic.remove_servers(ps4, st, [2, 3]), [2, 3])
    monkeypatch.setattr(litz.ps_elastic, "rebalance", lambda layout, a, alive, key=0: np.arange(a.size) % alive.size)
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(np.asarray(st.placement.server_of), litz.rebalance(a1, 4)[0])


# ----------------------------------------------------------------------------- only what the market offers


@functools.lru_cache(maxsize=None)
def _offer_alg():
    return mlr.digits(lr=1.0, l2=1e-2)  # full batch: one compiled trainer for these tests


def _offer_job(workers=4, max_steps=12, step=None):
    return clock.Job(_offer_alg(), -1e9, step or step_time_fixed(300.0), workers=workers, max_steps=max_steps)


def _counts_market(times, counts, *, start=0.0, billing="per_second"):
    return mk.Market(mk.MachineType("m", 0.4, spot=0.1), mk.from_availability(times, counts, warning_s=0.0),
                     billing=billing, start_time_s=start)


def test_follows_the_offer_by_hand():
    """4 nodes offered, then 1 from 1000 s, none from 2000 s, 3 from 3000 s; 300-s iterations,
    1-s moves: 3 iterations on 4 nodes, the scale-in to 1 at the last boundary before 1000 s
    (900 s), 3 iterations on 1 node, the release at 1801 s (no iteration fits before 2000 s),
    the wait until 3000 s, the resume on 3 nodes (1 s) and the 6 remaining iterations."""
    market = _counts_market([0.0, 1000.0, 2000.0, 3000.0], [4, 1, 0, 3], start=0.0)
    run = litz.elastic(_offer_job(), market, key=0, horizon_s=1e9, spec=litz.LitzSpec(E, E), tier="transient")
    np.testing.assert_allclose(run.time_s, [0, 300, 600, 900, 1201, 1501, 1801] + [3001 + 300 * i for i in range(1, 7)])
    assert run.meta["nodes"] == [4, 4, 4, 4, 1, 1, 1, 3, 3, 3, 3, 3, 3]
    assert [e[1] for e in run.events] == ["scale", "wait", "resume"]
    spans = sorted((e.start, e.stop, e.revoked) for e in run.ledger.entries)
    assert spans == [(0.0, 901.0, False)] * 3 + [(0.0, 1801.0, False)] + [(3000.0, 4801.0, False)] * 3
    assert sum(run.cost_by_tier.values()) == pytest.approx(0.1 * (3 * 901 + 1801 + 3 * 1801) / 3600)
    check_within_offer(run, market)


def _change_times(market):
    p = market.process
    if isinstance(p, mk.Replay):
        t = np.concatenate([np.asarray(p.add_s, float), np.asarray(p.remove_s, float)])
    elif isinstance(p, mk.PriceDriven):
        t = np.asarray(p.series.times_s, float)
    else:
        t = np.zeros(0)
    return t[np.isfinite(t)]


def check_within_offer(run, market, tier="transient"):
    """At every time (each machine's start and the instant before its stop, every change of the
    market's offer within the run), the run holds no more nodes of ``tier`` than
    ``market.available`` says; nothing runs after the run's end and the clock advances."""
    assert np.all(np.diff(run.time_s) > 0), "the clock did not advance between iterations"
    mine = [e for e in run.ledger.entries if e.tier == tier]
    t0 = market.start_time_s
    assert all(e.stop <= t0 + run.end_s + 1e-6 for e in mine), "a node billed after the run's end"
    times = {e.start for e in mine} | {e.stop - 1e-3 for e in mine if e.stop > e.start}
    times |= {float(c) for c in _change_times(market) if t0 <= c <= t0 + run.end_s}
    for t in sorted(times):
        held = sum(1 for e in mine if e.start <= t < e.stop)
        offered = market.available(t) if tier == "transient" else math.inf
        assert held <= offered, f"{held} nodes held at market time {t:.0f} s, the market offers {offered:g}"


@st.composite
def offer_markets(draw):
    """An availability trace with any gaps and counts (0 included) or a price history with a
    bid, started at market time 0 or mid-trace, billed hourly or per second."""
    start = draw(st.sampled_from([0.0, 450.0]))
    billing = draw(st.sampled_from(["hourly", "per_second"]))
    if draw(st.booleans()):
        xs = draw(st.lists(st.tuples(st.sampled_from([60.0, 250.0, 700.0, 1800.0]), st.integers(0, 5)),
                           min_size=1, max_size=7).filter(lambda v: any(c > 0 for _, c in v)))
        times = np.cumsum([0.0] + [g for g, _ in xs[:-1]])
        return _counts_market(times, [c for _, c in xs], start=start, billing=billing)
    n = draw(st.integers(1, 5))
    prices = draw(st.lists(st.sampled_from([0.01, 0.05, 0.3]), min_size=n, max_size=n))
    times = np.arange(n) * draw(st.sampled_from([400.0, 1500.0]))
    series = mk.price_series(np.asarray(prices), times, end_s=float(times[-1]) + 8 * 3600.0)
    return mk.Market(mk.MachineType("m", 0.4), mk.price_driven(series, bid=0.1, warning_s=120.0), billing=billing,
                     start_time_s=start)


schedules = st.lists(st.tuples(st.sampled_from([100.0, 500.0, 1300.0, 2500.0]), st.integers(1, 6)), max_size=3).map(
    lambda v: sorted(v, key=lambda x: x[0]))


@settings(max_examples=12, deadline=None)
@given(offer_markets(), schedules, st.integers(1, 5), st.sampled_from([0.0, 5e8]))
def test_never_uses_a_node_the_market_did_not_offer(market, schedule, workers, state_bytes):
    """Any availability trace or price history, any schedule of requests, any start: the run
    ends within the horizon and never holds more nodes than the market offers."""
    spec = litz.LitzSpec(E, E, param_bytes=state_bytes)
    job = _offer_job(workers=workers, step=litz.litz_step_time(200.0, 100.0, E))
    run = litz.elastic(job, market, key=0, horizon_s=4 * 3600.0, spec=spec, schedule=schedule, tier="transient")
    assert run.end_s <= 4 * 3600.0 + 1e-6 and run.meta["executed_steps"] <= job.max_steps
    check_within_offer(run, market)


def test_offer_check_catches_a_run_that_ignores_the_market(monkeypatch):
    """Planted: Litz takes the market's offer as unlimited (the nodes it was asked for, also
    while none are offered)."""
    market = _counts_market([0.0, 1000.0, 2000.0, 3000.0], [4, 1, 0, 3], start=450.0)
    run = litz.elastic(_offer_job(), market, key=0, horizon_s=1e9, spec=litz.LitzSpec(E, E), tier="transient")
    check_within_offer(run, market)
    monkeypatch.setattr(litz, "offer", lambda market, tier: (np.array([-math.inf]), np.array([math.inf])))
    bad = litz.elastic(_offer_job(), market, key=0, horizon_s=1e9, spec=litz.LitzSpec(E, E), tier="transient")
    with pytest.raises(AssertionError, match="the market offers"):
        check_within_offer(bad, market)


def test_offer_of_each_market_kind():
    """On-demand nodes: no limit; a counts trace: its counts at its ticks; a price history:
    unlimited at or below the bid, none above."""
    m = _counts_market([0.0, 600.0], [2, 0], start=100.0)
    t, n = litz.offer(m, "transient")
    assert (t.tolist(), n.tolist()) == ([-math.inf, 0.0, 600.0], [0.0, 2.0, 0.0])
    assert litz.offer(m, "reliable")[1].tolist() == [math.inf]
    series = mk.price_series(np.array([0.05, 0.3, 0.05]), np.array([0.0, 100.0, 200.0]), end_s=1e4)
    pm = mk.Market(mk.MachineType("m", 0.4), mk.price_driven(series, bid=0.1), billing="hourly")
    assert litz.offer(pm, "transient")[1].tolist() == [math.inf, math.inf, 0.0, math.inf]
    with pytest.raises(ValueError, match="tier"):
        litz.offer(m, "spot")
    with pytest.raises(TypeError, match="market"):
        litz.offer("m", "transient")
