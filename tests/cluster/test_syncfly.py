"""scarjax.cluster.syncfly: the flexible barrier on hand cases, flush vs drop, the Eq 5 barrier
against a hand-computed gradient step, the checkpoint-recompute baseline, determinism, bills."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.cluster import clock
from scarjax.cluster import market as mk
from scarjax.cluster.steptime import step_time_fixed
from scarjax.cluster import syncfly as sf

LAM = 0.8


def check_barrier(fn) -> None:
    """Hand cases of the flexible barrier (Sec III-B): sync at the first report with
    cumulative progress > λ p(t-1); warm-up (no or non-positive reference) after r reports."""
    t = np.arange(1.0, 6.0)
    p = np.ones(5)
    i = fn(t, p, 2.5, lam=LAM, warmup_reports=3)
    assert i == 2, f"threshold 0.8 * 2.5 = 2.0 is exceeded at the third report (index 2), got {i}"
    i = fn(t, p, 2.0, lam=LAM, warmup_reports=3)
    assert i == 1, f"cumulative 2 > 1.6 at index 1, got {i}"
    assert fn(t, p, None, lam=LAM, warmup_reports=3) == 2, "warm-up: the r-th report (index r-1)"
    assert fn(t, p, -1.0, lam=LAM, warmup_reports=4) == 3, "a non-positive reference falls back to r reports"
    assert fn(t, p, 100.0, lam=LAM, warmup_reports=3) is None, "never reached: None"
    assert fn(t, np.array([0.5, -1.0, 3.0, 0.0, 0.0]), 2.5, lam=LAM, warmup_reports=3) == 2


def test_flexible_barrier_hand_cases():
    check_barrier(sf.flexible_barrier)


def test_barrier_check_catches_planted_violation():
    def geq(times, prog, prev, *, lam, warmup_reports):  # >= instead of > (and no warm-up rule)
        if prev is None or prev <= 0:
            return warmup_reports - 1
        hit = np.flatnonzero(np.cumsum(prog) >= lam * prev)
        return int(hit[0]) if hit.size else None

    with pytest.raises(AssertionError, match=r"threshold 0.8 \* 2.5 = 2.0 is exceeded at the third report"):
        check_barrier(geq)


def test_flexible_barrier_validates():
    with pytest.raises(ValueError, match="sorted"):
        sf.flexible_barrier(np.array([2.0, 1.0]), np.ones(2), 1.0, warmup_reports=1)
    with pytest.raises(ValueError, match="lam"):
        sf.flexible_barrier(np.array([1.0]), np.ones(1), 1.0, lam=0.0, warmup_reports=1)
    with pytest.raises(ValueError, match="finite"):
        sf.flexible_barrier(np.array([1.0]), np.array([np.nan]), 1.0, warmup_reports=1)


@pytest.fixture(scope="module")
def lr8():
    x, y = sf.synthetic_logistic(8, 3, seed=1)
    return sf.logistic_regression(x, y, lr=0.5), x, y


def _fleet():
    return sf.Fleet((1.0, 1.0), report_points=2, sync_s=0.5)


def check_flush(points_flush, points_drop) -> None:
    assert points_flush == 5, f"flushing merges worker 0's 4 points and revoked worker 1's 1 point, got {points_flush}"
    assert points_drop == 4, f"dropping merges only worker 0's 4 points, got {points_drop}"


def test_flush_vs_drop_hand_case(lr8):
    pb, x, y = lr8
    # worker 1 revoked at 1.5 s (1 point done), never replaced; worker 0 reports at 2 s, 4 s
    iv = [np.zeros((0, 2)), np.array([[1.5, np.inf]])]
    runs = {f: sf.sync_on_the_fly(pb, _fleet(), intervals=iv, key=jax.random.key(0), horizon_s=4.6, flush=f)
            for f in (True, False)}
    check_flush(runs[True].meta["points"][1], runs[False].meta["points"][1])
    assert runs[True].time_s[1] == pytest.approx(4.5), "warm-up barrier at the r-th report (4 s) + sync 0.5 s"
    assert runs[True].count("revocation") == 1
    # Eq 5 + Eq 3 by hand: the mean gradient over points 0-3 (worker 0) and 4 (worker 1's first)
    xb = np.concatenate([x, np.ones((8, 1))], axis=1).astype(np.float32)
    for f, idx in ((True, [0, 1, 2, 3, 4]), (False, [0, 1, 2, 3])):
        def loss(w, idx=idx):
            z = xb[idx] @ w
            return jnp.mean(jnp.logaddexp(0.0, z) - y[idx] * z) + 0.5 * 1e-4 * jnp.sum(w * w)

        w1 = -0.5 * jax.grad(loss)(jnp.zeros(4))
        got = runs[f].final_state.params
        np.testing.assert_allclose(np.asarray(got), np.asarray(w1), rtol=1e-5, atol=1e-7)
    with pytest.raises(AssertionError, match="flushing merges"):
        check_flush(runs[False].meta["points"][1], runs[False].meta["points"][1])


def test_revoked_worker_replacement_resumes(lr8):
    pb, _, _ = lr8
    iv = [np.zeros((0, 2)), np.array([[1.5, 3.0]])]
    run = sf.sync_on_the_fly(pb, _fleet(), intervals=iv, key=jax.random.key(0), horizon_s=60.0)
    assert run.count("revocation") == 1
    assert np.all(np.diff(run.time_s) > 0) and run.steps[-1] >= 3
    assert all(p <= 8 for p in run.meta["points"]), "a point counts at most once per barrier"


def test_determinism_and_same_draws_for_both_policies(lr8):
    pb, _, _ = lr8
    fleet = sf.mixed_fleet(2, 2.0, report_points=2, sync_s=0.5)
    mkt = sf.m4_large_market(mk.exponential(20.0))
    a = sf.sync_on_the_fly(pb, fleet, mkt, key=jax.random.key(3), horizon_s=80.0)
    b = sf.sync_on_the_fly(pb, fleet, mkt, key=jax.random.key(3), horizon_s=80.0)
    np.testing.assert_array_equal(a.loss, b.loss)
    np.testing.assert_array_equal(a.time_s, b.time_s)
    c = sf.sync_on_the_fly(pb, fleet, mkt, key=jax.random.key(4), horizon_s=80.0)
    assert [e for e in a.events if e[1] == "revocation"] != [e for e in c.events if e[1] == "revocation"]
    i1 = sf.down_intervals(mkt.process, jax.random.fold_in(jax.random.key(3), 1), 2, 80.0, 180.0)
    i2 = sf.down_intervals(mkt.process, jax.random.fold_in(jax.random.key(3), 1), 2, 80.0, 180.0)
    for u, v in zip(i1, i2):
        np.testing.assert_array_equal(u, v)
        assert np.all(u[:, 1] - u[:, 0] == pytest.approx(180.0))


@pytest.mark.parametrize("process", [mk.exponential(50.0, warning_s=5.0, unwarned=0.3),
                                     mk.empirical(np.array([10.0, 200.0, 45.0]), warning_s=2.0, unwarned=0.5)],
                         ids=["exponential", "empirical"])
def test_generations_drawn_wide_are_the_fleets_own_draws(process):
    """The lifetimes of a fleet's machine generations are drawn for a power-of-two width (one
    program per size class) and cut to the fleet: exactly the draws for the fleet's own width,
    so every fleet size keeps its numbers. Planted violation: without partitionable threefry a
    wide draw's first elements are other numbers (the width falls back to the fleet's own)."""
    key = jax.random.key(7)
    for workers in (3, 33):
        assert sf._draw_width(workers, key) > workers
        got = np.asarray(sf._draw_generations(process, key, 32, workers))
        own = np.asarray(sf._draw_generations_jit(process, key, 32, workers))
        assert got.shape == (sf._CHUNK, workers)
        np.testing.assert_array_equal(got, own)
        # one slot's intervals do not depend on the fleet's size either
        wide = sf.down_intervals(process, key, workers, 400.0, 20.0)
        narrow = sf.down_intervals(process, key, 2, 400.0, 20.0)
        for u, v in zip(narrow, wide):
            np.testing.assert_array_equal(u, v)
    with jax.threefry_partitionable(False):
        k = jax.random.key(1)
        assert sf._draw_width(3, k) == 3
        assert not np.array_equal(jax.random.uniform(k, (32,))[:3], jax.random.uniform(k, (3,)))
    assert sf._draw_width(3, jax.random.key(1, impl="rbg")) == 3  # another generator: its own width


def test_down_intervals_never_replaced_and_none():
    iv = sf.down_intervals(mk.exponential(10.0), jax.random.key(0), 3, 1000.0, None)
    assert all(len(v) == 1 and np.isinf(v[0, 1]) for v in iv), "never replaced: one revocation, back at inf"
    assert all(len(v) == 0 for v in sf.down_intervals(None, jax.random.key(0), 3, 1000.0))


def test_checkpoint_recompute_recomputes_the_same_trajectory(lr8):
    pb, _, _ = lr8
    fleet = _fleet()  # iteration = 4 points / 1 pt/s + 0.5 s = 4.5 s
    ref = sf.checkpoint_recompute(pb, fleet, key=jax.random.key(0), horizon_s=100.0, max_iterations=6)
    iv = [np.zeros((0, 2)), np.array([[10.0, 20.0]])]  # during iteration 3 (9 s .. 13.5 s + checkpoint)
    run = sf.checkpoint_recompute(pb, fleet, intervals=iv, key=jax.random.key(0), horizon_s=100.0,
                                  checkpoint_every=2, checkpoint_s=1.0, restore_s=2.0, max_iterations=6)
    kinds = [e[1] for e in run.events]
    assert "revocation" in kinds and "restart" in kinds
    restart_t = [e[0] for e in run.events if e[1] == "restart"][0]
    assert restart_t == pytest.approx(22.0), "back at 20 s + restore 2 s"
    # after the reload, iteration k has the same loss as in the uninterrupted run
    for k, loss in zip(run.steps, run.loss):
        assert loss == pytest.approx(float(ref.loss[int(k)]), rel=1e-6)
    never = sf.checkpoint_recompute(pb, fleet, intervals=[np.zeros((0, 2)), np.array([[10.0, np.inf]])],
                                    key=jax.random.key(0), horizon_s=100.0, target_loss=0.0)
    assert never.count("stall") == 1 and not never.to_target(0.0).reached


def bill_oracle(intervals, t, price):
    """USD of the fleet up to ``t`` under per-second billing without a minimum, written
    independently of the ledger: the price times the seconds a machine ran in each slot."""
    return float(np.sum(sf.alive_seconds(intervals, t))) * price / 3600.0


def check_bill(run, intervals, price):
    got = sum(run.cost_by_tier.values())
    want = bill_oracle(intervals, run.end_s, price)
    assert got == pytest.approx(want, rel=1e-9), f"bill {got} != machine-seconds x price {want}"


def test_bill_is_the_markets_per_second_rule(lr8):
    """The run's bill is the market's one billing rule (the ledger's, :func:`market.charged_seconds`)
    over each machine run: the seconds each worker slot had a machine, times the price."""
    pb, _, _ = lr8
    iv = [np.array([[10.0, 40.0], [100.0, 130.0]]), np.zeros((0, 2))]
    mkt = sf.m4_large_market(None, spot=0.1)
    run = sf.sync_on_the_fly(pb, _fleet(), mkt, intervals=iv, key=0, horizon_s=200.0)
    check_bill(run, iv, 0.1)
    runs = [(0.0, 10.0), (40.0, 100.0), (130.0, run.end_s), (0.0, run.end_s)]
    rule = float(np.sum(mk.charged_seconds(np.array([b - a for a, b in runs])))) * 0.1 / 3600.0
    assert sum(run.cost_by_tier.values()) == pytest.approx(rule, rel=1e-9)
    np.testing.assert_allclose(sf.alive_seconds(iv, 200.0), [140.0, 200.0])


def test_bill_check_catches_a_planted_violation(lr8, monkeypatch):
    """Planted: the ledger bills a revoked machine's run to the revocation plus one minute."""
    pb, _, _ = lr8
    iv = [np.array([[10.0, 40.0]]), np.zeros((0, 2))]
    mkt = sf.m4_large_market(None, spot=0.1)
    stop = sf.Ledger.stop
    monkeypatch.setattr(sf.Ledger, "stop", lambda self, k, t, revoked=False: stop(self, k, t + 60.0 * revoked,
                                                                                     revoked=revoked))
    run = sf.sync_on_the_fly(pb, _fleet(), mkt, intervals=iv, key=0, horizon_s=200.0)
    with pytest.raises(AssertionError, match="bill"):
        check_bill(run, iv, 0.1)


def test_validation(lr8):
    pb, _, _ = lr8
    with pytest.raises(ValueError, match="speeds"):
        sf.Fleet((1.0, -1.0))
    with pytest.raises(ValueError, match="intervals"):
        sf.sync_on_the_fly(pb, _fleet(), intervals=[np.zeros((0, 2))], key=jax.random.key(0), horizon_s=1.0)
    with pytest.raises(TypeError, match="flush"):
        sf.sync_on_the_fly(pb, _fleet(), key=jax.random.key(0), horizon_s=1.0, flush=1)
    with pytest.raises(ValueError, match="y must be"):
        sf.logistic_regression(np.zeros((3, 2)), np.array([0, 2, 1]))
    with pytest.raises(ValueError, match="non-negative"):
        sf.nmf([0], [0], [-1.0], (1, 1))
    assert sf.young_daly_every(10.0, 10.0, 1000.0, 1) == 14  # sqrt(2 * 10 * 1000) = 141 s = 14 iterations
    assert sf.young_daly_every(10.0, 10.0, math.inf, 1) >= 10**9


def test_shared_policy_signature(lr8):
    """The contract forms build the Problem from the Job (the per-point objective from the
    algorithm's loss) and train on ``train_key``; ``key`` draws the market only."""
    pb, _, _ = lr8
    fleet = _fleet()
    job = clock.Job(pb.algorithm, 0.5, step_time_fixed(1.0), workers=2, checkpoint_s=1.0, restore_s=2.0,
                    max_steps=5)
    mkt = sf.m4_large_market(mk.exponential(50.0))
    a = sf.sync_on_the_fly_policy(job, mkt, key=jax.random.key(2), horizon_s=200.0, fleet=fleet)
    b = sf.sync_on_the_fly(pb, fleet, mkt, key=jax.random.key(2), horizon_s=200.0, target_loss=0.5, max_barriers=5,
                           train_key=0)
    np.testing.assert_array_equal(a.loss, b.loss)
    np.testing.assert_array_equal(a.time_s, b.time_s)
    own = sf.sync_on_the_fly_policy(job, mkt, key=jax.random.key(2), horizon_s=200.0, fleet=fleet,
                                    point_loss=pb.point_loss)
    np.testing.assert_array_equal(a.loss, own.loss)
    c = sf.checkpoint_recompute_policy(job, mkt, key=jax.random.key(2), horizon_s=200.0, fleet=fleet)
    assert c.meta["executed_steps"] <= 5
    d = sf.sync_on_the_fly_policy(job, mkt, key=jax.random.key(2), horizon_s=200.0)  # default fleet
    assert d.meta["executed_steps"] <= 5
    with pytest.raises(ValueError, match="job.workers"):
        sf.sync_on_the_fly_policy(job, mkt, key=0, horizon_s=1.0, fleet=sf.Fleet((1.0,)))
    with pytest.raises(TypeError, match="point_loss"):
        sf.sync_on_the_fly_policy(job, mkt, key=0, horizon_s=1.0, point_loss=3)


def test_fleet_and_problem_from_a_job(lr8):
    pb, _, _ = lr8
    job = clock.Job(pb.algorithm, 0.5, step_time_fixed(4.0), workers=2)
    p = sf.Problem.from_job(job)
    assert p.algorithm is pb.algorithm and p.n == pb.n
    st = pb.algorithm.init(jax.random.key(0), pb.algorithm.data)
    w = st.params + 0.3
    np.testing.assert_allclose(np.asarray(p.point_loss(w)), np.asarray(pb.point_loss(w)), rtol=1e-6)
    f = sf.Fleet.from_job(job, p.n)
    assert f.workers == 2 and f.speeds[0] * 4.0 == pytest.approx(p.n / 2)  # one pass per step time
    with pytest.raises(TypeError, match="job"):
        sf.Problem.from_job(pb)


def test_checkpoint_recompute_caps_completed_iterations(lr8):
    """The step cap counts every completed iteration, recomputed ones too (as in every
    policy), not the global iteration index that a reload moves back."""
    pb, _, _ = lr8
    iv = [np.array([[10.0, 10.5]]), np.zeros((0, 2))]  # 4.5 s iterations: 2 done, then lost
    run = sf.checkpoint_recompute(pb, _fleet(), intervals=iv, key=0, horizon_s=1e4, checkpoint_every=100,
                                  checkpoint_s=0.0, restore_s=0.0, max_iterations=6)
    assert run.count("restart") >= 1
    assert run.meta["executed_steps"] == 6
    assert int(run.steps[-1]) == 4  # 2 iterations were redone after the reload


# ----------------------------------------------------------------------------- the market at each purchase


def _replay_market(start):
    """One node at a time: [0, 1000), [1500, 4000), [4000, never) on the trace's clock."""
    trace = mk.replay((np.array([0.0, 1500.0, 4000.0]), np.array([1000.0, 4000.0, np.inf])), warning_s=0.0)
    return mk.Market(mk.MachineType("m4.large", 0.1, spot=0.02), trace, billing="per_second", start_time_s=start)


def _price_market():
    """$0.05 from 0, $0.5 from 1000 s, $0.05 from 2000 s, $0.5 from 5000 s; bid $0.1, 120-s notice."""
    series = mk.price_series(np.array([0.05, 0.5, 0.05, 0.5]), np.array([0.0, 1000.0, 2000.0, 5000.0]), end_s=1e5)
    return mk.Market(mk.MachineType("m4.large", 0.1), mk.price_driven(series, bid=0.1, warning_s=120.0),
                     billing="per_second")


#: (market, horizon, restart_s, the slot's away intervals worked out by hand, job clock)
HAND = {
    # bought at market 500 s (job 0): node 0, removed at 1000 -> revoked at job 500; its replacement
    # is sought at job 600 (market 1100): no node until 1500 (job 1000); that one is removed at
    # 4000 (job 3500); the next, sought at job 3600 (market 4100), is node 2: never removed
    "replay": (_replay_market(500.0), 10_000.0, 100.0, [[500.0, 1000.0], [3500.0, 3600.0]]),
    # bought at 0: the notice at the price change to $0.5 (1000 s), gone 120 s later; the
    # replacement (1300 s) is refused while the price is above the bid, bought at 2000 s and
    # revoked at 5000 + 120 s; the next one (5300 s) never granted again
    "prices": (_price_market(), 9000.0, 180.0, [[1120.0, 2000.0], [5120.0, math.inf]]),
}


def check_hand_intervals(name):
    market, horizon, restart, want = HAND[name]
    got = sf.down_intervals(market, jax.random.key(0), 1, horizon, restart)
    np.testing.assert_allclose(got[0], want, err_msg=f"{name}: lifetimes not drawn from the market at each purchase")


@pytest.mark.parametrize("name", sorted(HAND))
def test_lifetimes_come_from_the_market_at_each_purchase(name):
    check_hand_intervals(name)


@pytest.mark.parametrize("name", sorted(HAND))
def test_purchase_check_catches_draws_from_the_markets_start(name, monkeypatch):
    """Planted: every purchase is drawn as if made at the market's time 0 (a stationary market)."""
    acquire = mk.Market.acquire
    monkeypatch.setattr(mk.Market, "acquire", lambda self, key, c, n, t, held=None: acquire(self, key, c, n, 0.0,
                                                                                            held=held))
    with pytest.raises(AssertionError, match="not drawn from the market at each purchase"):
        check_hand_intervals(name)


def test_replayed_workers_hold_distinct_nodes():
    """Two workers on a trace of two nodes then one: they never run on the same node, so after
    the first removal only one of them is up until a node is added."""
    trace = mk.replay((np.array([0.0, 0.0, 3000.0]), np.array([1000.0, 2000.0, np.inf])), warning_s=0.0)
    market = mk.Market(mk.MachineType("m", 0.1, spot=0.02), trace, billing="per_second")
    iv = sf.down_intervals(market, jax.random.key(1), 2, 5000.0, 0.0)
    up = [sum(1 for v in iv if not sf_down(v, t)) for t in (500.0, 1500.0, 2500.0, 3500.0)]
    assert up == [2, 1, 0, 1]


def sf_down(v, t):
    return bool(np.any((v[:, 0] <= t) & (t < v[:, 1])))


def test_a_replay_run_bills_only_the_machines_it_ran(lr8):
    """Sync-on-the-fly and its baseline on the hand trace: one machine at a time (its runs in the
    ledger are the trace's stays after the purchase), nothing billed while none is offered."""
    market = _replay_market(500.0)
    problem = lr8[0]
    job = clock.Job(problem.algorithm, -1e9, step_time_fixed(20.0), workers=1, max_steps=100_000)
    for fn in (sf.sync_on_the_fly_policy, sf.checkpoint_recompute_policy):
        run = fn(job, market, key=0, horizon_s=5000.0, restart_s=100.0, point_loss=problem.point_loss)
        spans = sorted((e.start, e.stop) for e in run.ledger.entries)
        assert spans[:2] == [(500.0, 1000.0), (1500.0, 4000.0)], f"{fn.__name__}: {spans}"
        assert all(a >= 4100.0 for a, _ in spans[2:]), f"{fn.__name__}: {spans}"


def check_within_availability(iv, market, horizon_s):
    """At every time up to the horizon (each end of an away interval, every change of the trace),
    no more worker slots have a machine than the market offers then."""
    t0 = market.start_time_s
    p = market.process
    times = {0.0} | {float(x) for v in iv for x in v.ravel() if np.isfinite(x) and x <= horizon_s}
    times |= {float(c) - t0 for c in np.concatenate([np.asarray(p.add_s), np.asarray(p.remove_s)])
              if np.isfinite(c) and t0 <= c <= t0 + horizon_s}
    for t in sorted(times):
        up = sum(1 for v in iv if not sf_down(v, t))
        assert up <= market.available(t0 + t), f"{up} workers up at {t:.0f} s, the market offers {market.available(t0 + t):g}"


@settings(max_examples=10, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([60.0, 250.0, 900.0]), st.integers(0, 4)), min_size=1, max_size=7)
       .filter(lambda v: any(c > 0 for _, c in v)),
       st.integers(1, 4), st.sampled_from([0.0, 100.0]), st.sampled_from([0.0, 450.0]), st.integers(0, 2**16))
def test_workers_never_run_beyond_a_random_traces_availability(xs, workers, restart, start, seed):
    times = np.cumsum([0.0] + [g for g, _ in xs[:-1]])
    market = mk.Market(mk.MachineType("m", 0.1, spot=0.02), mk.from_availability(times, [c for _, c in xs], warning_s=0.0),
                       billing="per_second", start_time_s=start)
    iv = sf.down_intervals(market, jax.random.key(seed), workers, 6000.0, restart)
    check_within_availability(iv, market, 6000.0)


def test_availability_check_catches_workers_sharing_a_node(monkeypatch):
    """Planted: purchases ignore which trace nodes the other workers hold."""
    market = mk.Market(mk.MachineType("m", 0.1, spot=0.02), mk.from_availability([0.0, 1000.0], [2, 1], warning_s=0.0),
                       billing="per_second")
    check_within_availability(sf.down_intervals(market, jax.random.key(0), 2, 3000.0, 0.0), market, 3000.0)
    acquire = mk.Market.acquire
    monkeypatch.setattr(mk.Market, "acquire", lambda self, key, c, n, t, held=None: acquire(self, key, c, n, t))
    with pytest.raises(AssertionError, match="the market offers"):
        check_within_availability(sf.down_intervals(market, jax.random.key(0), 2, 3000.0, 0.0), market, 3000.0)
