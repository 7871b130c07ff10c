"""scarjax.cluster.litz: scale-out keeps the parameter state exactly (no restart), scale-in
loses nothing, the step-time and migration models on hand values, rebalance invariants."""

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
