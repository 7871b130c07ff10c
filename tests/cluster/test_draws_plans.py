"""scarjax.cluster.draws.plans: the clocks of many draws of checkpoint-restart and SCAR planned
in lock-step over arrays (the planning :func:`scarjax.cluster.draws.run` uses) equal the
per-draw planners' (:func:`~scarjax.cluster.policies.plan_checkpoint_restart`,
:func:`~scarjax.cluster.policies.plan_scar` on ``Market.acquire``, the oracle): operations,
events, every ledger entry with its charge, end, meta and counts, ``==`` (float64 bit for bit).
No training: fast. Hypothesis over random traces and parametric markets, planted violations
caught, purchases past the tables planned per draw; :meth:`Ledger.of_stopped` equals
``start``/``stop`` one by one."""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scarjax.cluster import clock as ck
from scarjax.cluster import draws as dr
from scarjax.cluster import market as mk
from scarjax.cluster import policies as po
from scarjax.cluster.ledger import Ledger
from scarjax.cluster.steptime import step_time_linear
from scarjax.models import mlr

from ._markets import machine, p3

HORIZON = 3 * 3600.0


@functools.lru_cache(maxsize=None)
def _alg():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    return mlr.mlr(x, y, num_classes=2, lr=0.5, batch_size=16)


@functools.lru_cache(maxsize=None)
def _job(workers=4, max_steps=60):
    return ck.Job(_alg(), 0.0, step_time_linear(40.0, 0.5), workers=workers, checkpoint_s=60.0, restore_s=30.0,
                  max_steps=max_steps)


def _oracle(policy, job, market, keys, starts, *, interval_steps=None, granularity=25, fraction=0.25):
    """The per-draw planners on the market at each start (``Market.acquire`` per purchase)."""
    out = []
    for k, s in zip(keys, starts):
        m = dataclasses.replace(market, start_time_s=float(s))
        if policy == "checkpoint_restart":
            K = po.resolve_interval_steps(job, m, interval_steps)
            out.append(po.plan_checkpoint_restart(job, m, k, HORIZON, K, granularity))
        else:
            K, _, spec = po.scar_setup(job, m, fraction, interval_steps=interval_steps)
            out.append(po.plan_scar(job, m, k, HORIZON, K, float(fraction), granularity, spec))
    return out


def _fields(p):
    led = [(e.machine_id, e.tier, e.price, e.billing, e.start, e.stop, e.revoked, e.charged)
           for e in p.fleet.ledger.entries]
    return {"ops": p.ops, "events": p.fleet.events, "ledger": led, "end_s": p.end_s, "meta": p.meta,
            "marks": p.marks, "t0": p.fleet.t0}


def plan_mismatches(a, b):
    """``'field[draw]'`` for every draw and plan field that differ (``==``)."""
    assert len(a) == len(b)
    return [f"{f}[{i}]" for i, (x, y) in enumerate(zip(a, b)) for f, v in _fields(x).items() if v != _fields(y)[f]]


def _both(policy, job, market, n, seed, starts, **kw):
    keys = jax.random.split(jax.random.key(seed), n)
    a = dr.plans(policy, job, market, keys, horizon_s=HORIZON, start_s=starts, **kw)
    return a, _oracle(policy, job, market, keys, starts, **kw)


def _revoked(plans):
    return sum(e[1] == "revocation" for p in plans for e in p.fleet.events)


# ----------------------------------------------------------------------------- equality


@pytest.mark.parametrize("policy", ["checkpoint_restart", "scar"])
def test_p3_trace_plans_equal_the_per_draw_planner(policy):
    starts = np.round(np.random.default_rng(2).uniform(0.0, 40000.0 - HORIZON, 24))
    a, b = _both(policy, _job(), p3(), 24, 3, starts)
    assert _revoked(b) >= 5, "too few revocations: a vacuous test"
    assert plan_mismatches(a, b) == []


@pytest.mark.parametrize("policy", ["checkpoint_restart", "scar"])
def test_parametric_market_plans_equal_the_per_draw_planner(policy):
    market = mk.Market(machine(), mk.exponential(1200.0), startup=mk.fixed_startup(60.0), billing="per_second")
    a, b = _both(policy, _job(workers=3), market, 12, 4, np.zeros(12), interval_steps=7, granularity=4)
    assert _revoked(b) >= 5, "too few revocations: a vacuous test"
    assert plan_mismatches(a, b) == []


def test_purchases_past_the_tables_are_planned_per_draw(monkeypatch):
    monkeypatch.setattr(dr, "PURCHASES", 2)
    market = mk.Market(machine(), mk.exponential(900.0), startup=mk.fixed_startup(60.0))
    for policy in ("checkpoint_restart", "scar"):
        a, b = _both(policy, _job(workers=2), market, 8, 6, np.zeros(8))
        assert any(e.machine_id.endswith(f"{3}.0") or e.machine_id.endswith(f"{3}.1")
                   for p in b for e in p.fleet.ledger.entries), "no draw bought past the tables: vacuous"
        assert plan_mismatches(a, b) == []


def _random_market(data):
    if data.draw(st.booleans(), label="replayed"):
        k = data.draw(st.integers(1, 6), label="nodes")
        add = np.array(sorted(data.draw(st.lists(st.integers(0, 6000), min_size=k, max_size=k), label="add")), float)
        stay = np.array(data.draw(st.lists(st.integers(1, 9000), min_size=k, max_size=k), label="stay"), float)
        forever = np.array(data.draw(st.lists(st.booleans(), min_size=k, max_size=k), label="forever"))
        process = mk.replay((add, np.where(forever, np.inf, add + stay)), warning_s=0.0)
    else:
        process = mk.exponential(float(data.draw(st.integers(200, 5000), label="mttf")))
    billing = data.draw(st.sampled_from(["hourly", "per_second"]), label="billing")
    return mk.Market(machine(), process, startup=mk.fixed_startup(float(data.draw(st.integers(0, 200)))),
                     billing=billing)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(data=st.data())
def test_property_random_markets_plans_equal_the_per_draw_planner(data):
    market = _random_market(data)
    policy = data.draw(st.sampled_from(["checkpoint_restart", "scar"]), label="policy")
    job = _job(workers=data.draw(st.integers(1, 3), label="workers"), max_steps=data.draw(st.integers(5, 60)))
    starts = np.array(data.draw(st.lists(st.integers(0, 8000), min_size=4, max_size=4), label="starts"), float)
    kw = {"granularity": data.draw(st.integers(1, 30), label="granularity"),
          "interval_steps": data.draw(st.sampled_from([None, 1, 5, 13]), label="interval_steps")}
    a, b = _both(policy, job, market, 4, data.draw(st.integers(0, 99), label="seed"), starts, **kw)
    assert plan_mismatches(a, b) == []


# ----------------------------------------------------------------------------- executing the plans


def _run_mismatches(a, b):
    out = []
    for i, (x, y) in enumerate(zip(a, b)):
        for f in ("time_s", "loss", "steps"):
            u, v = getattr(x, f), getattr(y, f)
            if u.dtype != v.dtype or not np.array_equal(u, v):
                out.append(f"{f}[{i}]")
        for f in ("policy", "events", "end_s", "meta", "dollars", "cost_by_tier", "free_seconds"):
            if getattr(x, f) != getattr(y, f):
                out.append(f"{f}[{i}]")
        if x.ledger is not y.ledger:
            out.append(f"ledger[{i}]")
    return out


@pytest.mark.parametrize("policy", ["checkpoint_restart", "scar"])
@pytest.mark.parametrize("stop_at_target", [True, False])
def test_execute_equals_execute_plan(policy, stop_at_target):
    """The runs recorded in one array pass per draw equal ``execute_plan``'s (deferred) on the same
    plans and curves, field for field; planted: one loss changed is caught."""
    starts = np.round(np.random.default_rng(5).uniform(0.0, 40000.0 - HORIZON, 16))
    keys = jax.random.split(jax.random.key(11), 16)
    job = dataclasses.replace(_job(), target_loss=0.3)
    ps = dr.plans(policy, job, p3(), keys, horizon_s=HORIZON, start_s=starts)
    if policy == "scar":
        ps = [p.training_only() for p in ps]
    rng = np.random.default_rng(3)
    curves = [np.sort(rng.uniform(0.0, 1.0, job.max_steps).astype(np.float32))[::-1] for _ in ps]
    a = dr._execute(ps, curves, job, policy, stop_at_target)
    b = [po.execute_plan(p, po.LossReplay(c), job, policy, stop_at_target=stop_at_target, deferred=True)
         for p, c in zip(ps, curves)]
    assert sum(e[1] == "target" for r in b for e in r.events) >= (4 if stop_at_target else 0)
    assert any(r.meta.get("rework_steps") or r.meta.get("recoveries") for r in b), "no rework: vacuous"
    assert _run_mismatches(a, b) == []
    curves[2] = curves[2].copy()
    curves[2][3] = np.nextafter(curves[2][3], np.float32(2.0))  # planted: one loss one ulp up
    assert "loss[2]" in _run_mismatches(dr._execute(ps, curves, job, policy, stop_at_target), b)


# ----------------------------------------------------------------------------- planted violations


def test_planted_violation_tables_of_another_draw_are_caught(monkeypatch):
    """Planted: each draw planned with the next draw's purchases. The comparison fails."""
    real = dr._market_tables

    def shifted(market, keys, machines):
        tab = real(market, keys, machines)
        roll = {f: np.roll(getattr(tab, f), 1, axis=0) for f in ("up", "life", "u") if getattr(tab, f) is not None}
        return tab._replace(**roll)

    starts = np.round(np.random.default_rng(2).uniform(0.0, 40000.0 - HORIZON, 8))
    keys = jax.random.split(jax.random.key(3), 8)
    b = _oracle("checkpoint_restart", _job(), p3(), keys, starts)
    monkeypatch.setattr(dr, "_market_tables", shifted)
    a = dr.plans("checkpoint_restart", _job(), p3(), keys, horizon_s=HORIZON, start_s=starts)
    assert plan_mismatches(a, b) != []


def test_planted_violation_one_ulp_in_a_ledger_entry_is_caught():
    starts = np.zeros(3)
    market = mk.Market(machine(), mk.exponential(1200.0), startup=mk.fixed_startup(60.0))
    a, b = _both("checkpoint_restart", _job(), market, 3, 5, starts)
    assert plan_mismatches(a, b) == []
    e = a[1].fleet.ledger.entries[0]
    e.stop = float(np.nextafter(e.stop, np.inf))
    assert plan_mismatches(a, b) == ["ledger[1]"]


# ----------------------------------------------------------------------------- the bulk ledger


@settings(max_examples=30, deadline=None, derandomize=True)
@given(n=st.integers(0, 6), seed=st.integers(0, 10 ** 6), billing=st.sampled_from(["hourly", "per_second"]))
def test_property_ledger_of_stopped_equals_start_and_stop(n, seed, billing):
    rng = np.random.default_rng(seed)
    start = rng.uniform(0.0, 20000.0, n).round(rng.integers(0, 3))
    stop = start + rng.choice([0.0, 3600.0, 3599.5, 3600.5, 7201.0], n) + rng.uniform(0, 9000, n) * rng.integers(0, 2, n)
    revoked = rng.integers(0, 2, n).astype(bool)
    tiers = ["transient" if r else "reliable" for r in rng.integers(0, 2, n)]
    prices = [0.92 if t == "transient" else 3.06 for t in tiers]
    ids = [f"m{i % 3}" for i in range(n)]  # reused ids (each after its previous stop)
    one = Ledger()
    for i in range(n):
        one.start(ids[i], float(start[i]), price=prices[i], tier=tiers[i], billing=billing)
        one.stop(ids[i], float(stop[i]), revoked=bool(revoked[i]))
    bulk = Ledger.of_stopped(ids, tiers, prices, start, stop, revoked, billing=billing)
    key = lambda led: [dataclasses.astuple(e) for e in led.entries]  # noqa: E731
    assert key(bulk) == key(one)
    t = float(rng.uniform(0.0, 30000.0))
    assert bulk.cost(t) == one.cost(t) and bulk.by_tier(t) == one.by_tier(t)


def test_planted_violation_ledger_comparison_catches_a_charge():
    one = Ledger()
    one.start("a", 0.0, price=1.0)
    one.stop("a", 5400.0, revoked=True)
    bulk = Ledger.of_stopped(["a"], ["transient"], [1.0], [0.0], [5400.0], [False])  # planted: not revoked
    assert dataclasses.astuple(bulk.entries[0]) != dataclasses.astuple(one.entries[0])


def test_ledger_of_stopped_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="stop"):
        Ledger.of_stopped(["a"], ["transient"], [1.0], [10.0], [5.0], [False])
    with pytest.raises(ValueError, match="tiers"):
        Ledger.of_stopped(["a"], ["spot"], [1.0], [0.0], [5.0], [False])
    with pytest.raises(ValueError, match="prices"):
        Ledger.of_stopped(["a"], ["transient"], [-1.0], [0.0], [5.0], [False])
    with pytest.raises(ValueError, match="revoked"):
        Ledger.of_stopped(["a"], ["transient"], [1.0], [0.0], [5.0], [False, True])
    with pytest.raises(ValueError, match="billing"):
        Ledger.of_stopped(["a"], ["transient"], [1.0], [0.0], [5.0], [False], billing="monthly")


def test_plans_bad_input_names_the_argument():
    keys = jax.random.split(jax.random.key(0), 2)
    with pytest.raises(ValueError, match="policy"):
        dr.plans("tierml", _job(), p3(), keys, horizon_s=HORIZON)
    with pytest.raises(TypeError, match="job"):
        dr.plans("scar", None, p3(), keys, horizon_s=HORIZON)
    with pytest.raises(ValueError, match="horizon_s"):
        dr.plans("scar", _job(), p3(), keys, horizon_s=-1.0)
