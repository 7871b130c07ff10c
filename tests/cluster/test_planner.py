"""scarjax.cluster.planner: predictions positive and finite; the plan never infeasible
(deadline, budget, max machines; hypothesis over objectives) and an error when nothing is;
reliable-only when spot = on-demand; the SCAR rework prediction (Thm 5.3.1 + Thm 5.4.2) an
upper bound on the rework simulated with real partial recovery of a linearly convergent job;
the CLI prints a table; each check catches a planted violation."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scarjax.cluster import clock as ck
from scarjax.cluster import market as mk

from scarjax.cluster.steptime import step_time_fixed, step_time_linear

from scarjax.cluster.trainer import Trainer
from scarjax.cluster import planner as pl
from scarjax.cluster.jobprofile import JobProfile
from scarjax.cluster.marketmodel import MarketModel, availability
from scarjax.data import transient as td
from scarjax.models import quadratic

FAST = settings(max_examples=6, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _toy(**kw):
    base = dict(checkpoint_s=60.0, restore_s=30.0, max_workers=32)
    base.update(kw)
    return JobProfile("toy", 400.0, 0.99, step_time_linear(60.0, 0.5), **base)


def _market(mttf_h=2.0, spot=0.05, od=0.2, billing="hourly"):
    return MarketModel.parametric(mttf_h, spot, od, startup_s=120.0, billing=billing)


# ----------------------------------------------------------------------------- checks


def check_positive_finite(pred: pl.Prediction):
    """Every candidate the model can run has positive, finite time and cost and finite,
    non-negative spreads, revocations and rework."""
    ok = np.isfinite(pred.time_s)
    assert ok.any(), "no candidate has a finite prediction"
    for name in ("time_s", "cost"):
        a = getattr(pred, name)[ok]
        assert np.all(np.isfinite(a)) and np.all(a > 0), f"{name} not positive and finite: min {np.nanmin(a)!r}"
    for name in ("time_std_s", "cost_std", "revocations", "rework"):
        a = getattr(pred, name)[ok]
        assert np.all(np.isfinite(a)) and np.all(a >= 0), f"{name} not finite and >= 0: {a[~(np.isfinite(a) & (a >= 0))][:3]!r}"
    assert not np.any(pred.feasible & ~ok), "a candidate without a finite prediction is marked feasible"


def check_plan_feasible(plan: pl.Plan, objective: pl.Objective):
    """The chosen plan meets the deadline, the budget and the machine limit."""
    b = plan.best
    if objective.deadline_h is not None:
        assert b["time_s"] <= objective.deadline_h * 3600 * (1 + 1e-6), \
            f"plan misses the deadline: {b['time_s'] / 3600:.4g} h > {objective.deadline_h:g} h"
    if objective.budget is not None:
        assert b["cost"] <= objective.budget * (1 + 1e-6), f"plan over budget: ${b['cost']:.4g} > ${objective.budget:g}"
    if objective.max_machines is not None:
        assert b["workers"] <= objective.max_machines, f"plan uses {b['workers']} machines > {objective.max_machines}"
    assert math.isfinite(b["time_s"]) and math.isfinite(b["cost"]), "plan with a non-finite prediction"


def check_none_feasible(profile, market, objective, cands=None):
    """No candidate meets the objective (what NoFeasiblePlanError claims)."""
    cands = pl.candidates(profile, market, objective) if cands is None else cands
    pred = pl.predict(profile, market, cands)
    ok = np.isfinite(pred.time_s)
    if objective.deadline_h is not None:
        ok &= pred.time_s <= objective.deadline_h * 3600
    if objective.budget is not None:
        ok &= pred.cost <= objective.budget
    if objective.max_machines is not None:
        ok &= cands.workers <= objective.max_machines
    assert not ok.any(), f"NoFeasiblePlanError although candidate {int(np.flatnonzero(ok)[0])} meets the objective"


def check_reliable_only(plan: pl.Plan):
    """Spot = on-demand with revocations possible: the plan and every runner-up it prefers
    are on-demand only."""
    assert plan.best["policy"] == "on_demand", f"spot = on-demand but the plan is {plan.best['policy']}"
    assert plan.best["transient"] == 0, f"reliable-only plan with {plan.best['transient']} transient machines"


def check_rework_bound(predicted_per_event, events, extra, predicted_mean):
    """Simulated extra iterations to the target never exceed the bound: per trial the
    per-event bound times the trial's recoveries, and on average the planner's expected
    rework."""
    extra, events = np.asarray(extra, np.float64), np.asarray(events, np.float64)
    bad = np.flatnonzero(extra > predicted_per_event * events + 1e-9)
    assert bad.size == 0, (f"simulated rework exceeds the Thm 5.3.1 bound in trial {int(bad[0])}: "
                           f"{extra[bad[0]]:g} > {predicted_per_event:.3g} x {events[bad[0]]:g} events")
    assert extra.mean() <= predicted_mean + 1e-9, \
        f"mean simulated rework {extra.mean():.3g} exceeds the predicted {predicted_mean:.3g}"


# ----------------------------------------------------------------------------- tests


@FAST
@given(mttf=st.floats(0.2, 50.0), spot=st.floats(0.01, 0.19), od=st.floats(0.2, 3.0),
       step=st.floats(1.0, 300.0), hourly=st.booleans())
def test_predictions_positive_and_finite(mttf, spot, od, step, hourly):
    prof = dataclasses.replace(_toy(), step_time=step_time_linear(step, 0.1))
    m = _market(mttf, spot, od, "hourly" if hourly else "per_second")
    check_positive_finite(pl.predict(prof, m, pl.candidates(prof, m)))


def test_positive_finite_planted():
    prof, m = _toy(), _market()
    pred = pl.predict(prof, m, pl.candidates(prof, m))
    bad = pred._replace(cost=np.where(np.arange(pred.cost.size) == 3, np.nan, pred.cost))
    with pytest.raises(AssertionError, match="cost not positive and finite"):
        check_positive_finite(bad)
    bad = pred._replace(rework=-pred.rework - 1)
    with pytest.raises(AssertionError, match="rework not finite"):
        check_positive_finite(bad)


@FAST
@given(kind=st.sampled_from(pl.OBJECTIVES), deadline=st.one_of(st.none(), st.floats(0.05, 20.0)),
       budget=st.one_of(st.none(), st.floats(0.01, 20.0)), machines=st.one_of(st.none(), st.integers(1, 40)))
def test_plan_never_infeasible(kind, deadline, budget, machines):
    if kind == "cost_deadline" and deadline is None:
        deadline = 5.0
    obj = pl.Objective(kind, deadline_h=deadline, budget=budget, max_machines=machines)
    prof, m = _toy(), _market()
    try:
        p = pl.plan(prof, m, obj)
    except pl.NoFeasiblePlanError:
        check_none_feasible(prof, m, obj)
        return
    check_plan_feasible(p, obj)
    assert p.prediction.feasible[p.index]


def test_infeasible_raises_and_planted():
    prof, m = _toy(), _market()
    obj = pl.Objective("cost", deadline_h=0.01)
    with pytest.raises(pl.NoFeasiblePlanError, match="deadline_h=0.01"):
        pl.plan(prof, m, obj)
    p = pl.plan(prof, m, pl.Objective("cost"))  # the cheapest ignores a deadline
    with pytest.raises(AssertionError, match="plan misses the deadline"):
        check_plan_feasible(p, pl.Objective("cost", deadline_h=p.best["time_s"] / 3600 / 2))
    with pytest.raises(AssertionError, match="plan over budget"):
        check_plan_feasible(p, pl.Objective("cost", budget=p.best["cost"] / 2))
    fast = pl.plan(prof, m, pl.Objective("time"))
    with pytest.raises(AssertionError, match="machines >"):
        check_plan_feasible(fast, pl.Objective("time", max_machines=fast.best["workers"] - 1))
    with pytest.raises(AssertionError, match="NoFeasiblePlanError although"):
        check_none_feasible(prof, m, pl.Objective("cost"))


@FAST
@given(mttf=st.floats(0.1, 100.0), price=st.floats(0.05, 3.0), kind=st.sampled_from(("cost", "time")),
       hourly=st.booleans())
def test_reliable_only_when_spot_equals_on_demand(mttf, price, kind, hourly):
    m = _market(mttf, price, price, "hourly" if hourly else "per_second")
    check_reliable_only(pl.plan(_toy(), m, pl.Objective(kind)))


def test_reliable_only_planted():
    p = pl.plan(_toy(), _market(2.0, 0.05, 0.2), pl.Objective("cost"))
    assert p.best["policy"] != "on_demand"  # spot is cheaper here
    with pytest.raises(AssertionError, match="spot = on-demand but the plan is"):
        check_reliable_only(p)


@functools.lru_cache(maxsize=None)
def _qp_job():
    alg = quadratic.random_problem(0, 16, 10.0, c=0.97)
    l0 = float(Trainer(alg, 0).loss())
    return ck.Job(alg, 1e-4 * l0, step_time_fixed(10.0), workers=4, checkpoint_s=40.0, restore_s=10.0,
                  max_steps=400)


@functools.lru_cache(maxsize=None)
def _qp_setup():
    job = _qp_job()
    prof = JobProfile.from_job(job, 0)
    m = MarketModel.parametric(0.3, 0.05, 0.2, startup_s=60.0, billing="per_second")
    cands = pl.candidates(prof, m, workers=[4], policies=["scar"], fractions=[0.5], priorities=["round_robin"])
    return prof, m, cands, pl.predict(prof, m, cands)


@settings(max_examples=2, deadline=None, derandomize=True)
@given(seed=st.integers(0, 1000))
def test_scar_rework_bound_holds_on_simulated_partial_recovery(seed):
    """A linearly convergent QP (rate 0.97), SCAR on the cluster clock (running checkpoint,
    real partial recovery of the revoked servers' blocks), exponential revocations: the
    extra iterations to the target are at most the planner's Thm 5.3.1 bound (the profile's
    worst-case drift: without ``drift_mean`` the planner predicts the bound)."""
    prof, m, cands, _ = _qp_setup()
    pred = pl.predict(dataclasses.replace(prof, drift_mean=()), m, cands)
    assert abs(prof.c - quadratic.contraction(_qp_job().algorithm)) < 0.01  # the measured c
    sim = pl.to_simulation(0, cands, prof, m)
    runs = ck.simulate_trials(sim.policy, sim.job, sim.market, 12, jax.random.key(seed), horizon_s=30 * 3600,
                              **sim.kwargs)
    o = ck.outcomes(runs, sim.job.target_loss)
    assert o["reached"].all()
    events = [sum(1 for e in r.events if e[1] == "recovery") for r in runs]
    assert sum(events) > 0, "no revocation: the test is vacuous"
    extra = o["steps"] - prof.iterations
    rho = float(pred.rework[0] / pred.revocations[0])
    check_rework_bound(rho, events, extra, float(pred.rework[0]))
    # planted: a bound ten times too small is caught
    with pytest.raises(AssertionError, match="exceeds the Thm 5.3.1 bound|exceeds the predicted"):
        check_rework_bound(rho / 50, events, np.maximum(extra, 1), float(pred.rework[0]) / 50)


def test_to_simulation_and_table():
    prof = dataclasses.replace(_toy(), job=_qp_job())
    m = _market()
    p = pl.plan(prof, m, pl.Objective("cost"))
    sim = pl.to_simulation(p.index, p.candidates, prof, m)
    assert sim.policy.__name__ == p.best["policy"] or p.best["policy"] in sim.policy.__name__
    assert sim.job.workers == p.best["workers"] and isinstance(sim.market, mk.Market)
    t = p.table()
    assert t.splitlines()[1].split()[:2] == ["policy", "settings"] and "±" in t
    with pytest.raises(ValueError, match="profile has no job"):
        pl.to_simulation(p.index, p.candidates, _toy(), m)


def check_market_tables(m: MarketModel):
    """Lifetime CDFs nondecreasing in [0, 1], renewal functions >= the CDF, availability in
    [0, 1], the spot price paid at most the bid, MTTFs positive."""
    cdf, ren = np.asarray(m.cdf), np.asarray(m.renewal)
    assert np.all(np.diff(cdf, axis=-1) >= -1e-12) and cdf.min() >= 0 and cdf.max() <= 1 + 1e-12, "cdf not a CDF"
    assert np.all(ren >= cdf - 1e-9), "renewal function below the CDF"
    assert np.all((m.avail >= 0) & (m.avail <= 1)), "availability outside [0, 1]"
    bid = np.asarray(m.bids)[None, :] * np.asarray(m.on_demand)[:, None]
    granted = m.avail > 0
    assert np.all(m.spot[granted] <= bid[granted] * (1 + 1e-6) + 1e-9) or m.bids == (1.0,), "spot price above the bid"
    assert np.all(np.asarray(m.mttf_h) > 0), "non-positive MTTF"


def test_market_tables_and_planted():
    sp = td.load_spot_prices("c3.xlarge", "us-east-1a")
    aws = MarketModel.from_prices(mk.price_series(sp), sp.on_demand, window=(0.0, 7 * 86400.0))
    gce = MarketModel.from_lifetimes()
    for m in (aws, gce, _market()):
        check_market_tables(m)
    assert aws.bulk and aws.fallback and aws.billing == "hourly" and 1.0 in aws.bids
    assert gce.billing == "per_second" and np.allclose(gce.spot[:, 0], 0.3 * gce.on_demand, rtol=1e-5)
    bad = dataclasses.replace(aws, cdf=aws.cdf[..., ::-1].copy())
    with pytest.raises(AssertionError, match="cdf not a CDF"):
        check_market_tables(bad)


def test_on_demand_prediction_equals_the_simulator():
    """On-demand is deterministic: the predicted time and cost are the simulator's exactly."""
    prof = _qp_setup()[0]
    for billing in ("hourly", "per_second"):
        m = _market(billing=billing)
        cands = pl.candidates(prof, m, workers=[3], policies=["on_demand"])
        pred = pl.predict(prof, m, cands)
        sim = pl.to_simulation(0, cands, prof, m)
        o = sim.policy(sim.job, sim.market, key=0, horizon_s=1e6).to_target(sim.job.target_loss)
        assert o.reached and o.steps == prof.iterations
        check_close(pred.time_s[0], o.time_s, "time")
        check_close(pred.cost[0], o.dollars, "cost")
    with pytest.raises(AssertionError, match="predicted cost"):
        check_close(1.1 * o.dollars, o.dollars, "cost")


def check_close(pred, sim, what, rtol=1e-5):
    assert abs(pred - sim) <= rtol * abs(sim) + 1e-9, f"predicted {what} {pred:.6g} != simulated {sim:.6g}"


def test_cli_prints_a_table():
    from scarjax import cli

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["plan", "--job", "qp", "--market", "parametric:2:0.05:0.2", "--max-machines", "16"])
    out = buf.getvalue()
    assert rc == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("plan for") and "feasible" in lines[0], out
    assert "cost $" in lines[1] and "time h" in lines[1], out
    assert lines[3].startswith("*") and "±" in lines[3], out
    assert len(lines) >= 5  # runners-up


def test_pollux_goodput_profile_chooses_batch_size():
    """A Pollux goodput profile (thesis Eq 3.3, 3.5-3.8): iterations scale by b0 / (b EFF(b));
    with a large noise scale (efficiency ~ 1) the fastest plan takes the largest batch, with a
    tiny one (efficiency ~ b0 / b) the base batch."""
    from scarjax import pollux

    tp = pollux.ThroughputParams(0.05, 0.002, 0.01, 0.001, 0.05, 0.004, 1.5)
    for phi, want in ((1e7, 1024), (1e-3, 128)):
        prof = JobProfile.from_pollux("p", tp, phi, 128, 2000.0, 0.999, [128, 1024],
                                         checkpoint_s=60.0, restore_s=30.0, max_workers=8)
        eff = np.asarray(pollux.efficiency(np.asarray(prof.batch_sizes, np.float32), phi, 128), np.float64)
        assert np.allclose(prof.iteration_scale, 128 / (np.asarray(prof.batch_sizes) * eff), rtol=1e-5)
        p = pl.plan(prof, _market(), pl.Objective("time"), grid={"workers": [1, 2, 4, 8]})
        assert p.best["batch_size"] == want, (phi, p.best)


def test_errors_name_arguments():
    with pytest.raises(ValueError, match="c must"):
        JobProfile("x", 10.0, 1.5, step_time_fixed(1.0))
    with pytest.raises(ValueError, match="kind"):
        pl.Objective("cheapest")
    with pytest.raises(ValueError, match="cost_deadline' needs deadline_h"):
        pl.Objective("cost_deadline")
    with pytest.raises(ValueError, match="market must start with"):
        pl.market_from_spec("azure:x")
    with pytest.raises(ValueError, match="mttf_h"):
        MarketModel.parametric(-1.0, 0.1, 0.2)
    with pytest.raises(TypeError, match="profile must be a JobProfile"):
        pl.candidates("job", _market())


@settings(max_examples=25, deadline=None)
@given(mu=st.floats(0.0, 50.0), sd=st.floats(0.0, 2.0))
def test_expected_ceil_matches_numerical_integration(mu, sd):
    """A4': ``E[ceil(Y)]`` for a normal ``Y`` against a fine quadrature of the same integral."""
    got = float(pl._expected_ceil(jnp.float32(mu), jnp.float32(sd)))
    if sd < 1e-6:
        want = math.ceil(np.float32(mu))
    else:
        y = np.linspace(mu - 12 * sd, mu + 12 * sd, 400_001)
        pdf = np.exp(-0.5 * ((y - mu) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
        trapezoid = getattr(np, "trapezoid", None) or np.trapz  # NumPy < 2 has only trapz
        want = float(trapezoid(np.ceil(y) * pdf, y))
    assert abs(got - want) < 2e-3 * max(1.0, mu), f"E[ceil(N({mu}, {sd}))]: {got} vs quadrature {want}"


# ----------------------------------------------------------------------------- the planner on the simulator's market
# (MarketModel.from_market: availability, waits and the on-demand fallback, A7)

_P3 = mk.MachineType("p3.2xlarge", 3.06, spot=0.92)


def _trace_market(times_s, counts, **kw):
    return mk.Market.from_availability(np.asarray(times_s, np.float64), np.asarray(counts), machine=_P3,
                                       provider="aws_per_second", startup=mk.fixed_startup(120.0), **kw)


@functools.lru_cache(maxsize=1)
def _quad_profile():
    alg = quadratic.random_problem(0, 16, 10.0, c=0.9)
    job = ck.Job(alg, 1e-3, step_time_linear(600.0, 2.0), workers=4, checkpoint_s=60.0, restore_s=60.0,
                 max_steps=400)
    return JobProfile.from_job(job, 0, max_workers=8)


@st.composite
def availability_traces(draw, gap=False):
    """5-minute ticks over 12-48 h, counts 0-10 per run of ticks; ``gap``: a stretch of at least
    2 h with nothing obtainable somewhere in it."""
    hours = draw(st.integers(12, 48))
    n = hours * 12
    runs = draw(st.lists(st.tuples(st.integers(1, 36), st.integers(0, 10)), min_size=2, max_size=20))
    counts = np.concatenate([np.full(k, c) for k, c in runs])
    counts = np.resize(counts, n)
    if gap:
        at = draw(st.integers(0, n - 25))
        counts[at:at + 24] = 0
    if not counts.any():
        counts[0] = 4
    return np.arange(n) * 300.0, counts


def brute_force_wait(times_s, counts, n, window):
    """The mean wait from a start uniform in ``window`` until ``n`` machines are obtainable, by
    scanning forward from 20,000 evenly spaced starts (a wait past the window's end counts to
    it: the planner's stated censoring)."""
    lo, hi = window
    starts = lo + (np.arange(20000) + 0.5) * (hi - lo) / 20000
    ok_t = np.asarray(times_s, np.float64)[np.asarray(counts) >= n]
    if ok_t.size == 0:
        return math.inf  # never obtainable
    idx = np.searchsorted(times_s, starts, side="right") - 1
    now_ok = np.asarray(counts)[np.maximum(idx, 0)] >= n
    nxt = np.searchsorted(ok_t, starts)
    nxt_t = np.where(nxt < ok_t.size, ok_t[np.minimum(nxt, ok_t.size - 1)], hi)
    return float(np.mean(np.where(now_ok, 0.0, np.minimum(nxt_t, hi) - starts)))


def check_waits_included(profile, model, pred, cands, times_s, counts, window):
    """Every wait-rule candidate's predicted time is at least its fault-free time plus the
    trace's own mean wait for its machines (brute force over the raw counts); every
    prediction is finite where feasible."""
    check_positive_finite(pred)
    wait = np.asarray(cands.unavailable) == pl.UNAVAILABLE.index("wait")
    cr = np.asarray(cands.policy) == pl.POLICIES.index("checkpoint_restart")
    for i in np.flatnonzero(wait & cr):
        n = int(cands.transient[i])
        need = cands.iters0[i] * cands.step_s[i] + 0.98 * brute_force_wait(times_s, counts, n, window)
        assert pred.time_s[i] >= need - 1.0, (
            f"candidate {i} ({n} machines, waits) predicted {pred.time_s[i]:.0f} s < fault-free + mean wait {need:.0f} s")


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(trace=availability_traces(gap=True))
def test_predictions_include_the_waits_on_random_traces(trace):
    t, c = trace
    market = _trace_market(t, c)
    window = (0.0, float(t[-1]))
    model = MarketModel.from_market(market, window=window, n_max=8)
    assert model.limited, "a trace with a 2 h gap must be a limited market"
    prof = _quad_profile()
    cands = pl.candidates(prof, model, workers=(1, 2, 4, 8), fractions=(0.5,), periods=(1.0,))
    check_waits_included(prof, model, pl.predict(prof, model, cands), cands, t, c, window)


def test_waits_included_planted():
    """A predictor that ignores the gaps (the availability tables of an always-available
    market) fails the check on a trace with a gap."""
    t = np.arange(12 * 24) * 300.0
    c = np.where((t >= 3600.0 * 6) & (t < 3600.0 * 12), 0, 8)
    market = _trace_market(t, c)
    window = (0.0, float(t[-1]))
    model = MarketModel.from_market(market, window=window, n_max=8)
    prof = _quad_profile()
    cands = pl.candidates(prof, model, workers=(4,), fractions=(0.5,), periods=(1.0,))
    check_waits_included(prof, model, pl.predict(prof, model, cands), cands, t, c, window)
    blind = dataclasses.replace(model, wait_start_s=np.zeros_like(model.wait_start_s),
                                wait_revoked_s=np.zeros_like(model.wait_revoked_s))
    with pytest.raises(AssertionError, match="fault-free \\+ mean wait"):
        check_waits_included(prof, blind, pl.predict(prof, blind, cands), cands, t, c, window)


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(trace=availability_traces(), n=st.integers(1, 12))
def test_availability_equals_brute_force(trace, n):
    """availability()'s mean start wait and time share equal a brute-force scan of the counts."""
    t, c = trace
    window = (0.0, float(t[-1]) + 300.0)
    av = availability(t, c, 12, window=window)
    check_availability(av, t, c, n, window)


def check_availability(av, t, c, n, window):
    want = brute_force_wait(t, c, n, window)
    got = av.wait_start_s[n - 1]
    if math.isfinite(got):
        assert abs(got - want) <= 0.01 * want + 5.0, f"mean wait for {n}: {got:.1f} s, brute force {want:.1f} s"
    else:
        assert not (np.asarray(c) >= n).any(), f"wait for {n} infinite although the trace offers them"
    share = float(np.mean(np.asarray(c)[np.searchsorted(t, np.linspace(*window, 20000, endpoint=False),
                                                        side="right") - 1] >= n))
    assert abs(av.avail[n - 1] - share) <= 0.01, f"avail for {n}: {av.avail[n - 1]:.3f}, brute force {share:.3f}"


def test_availability_planted():
    t = np.arange(48) * 300.0
    c = np.where((t >= 3000) & (t < 9000), 0, 5)
    window = (0.0, 48 * 300.0)
    av = availability(t, c, 5, window=window)
    check_availability(av, t, c, 5, window)
    bad = av._replace(wait_start_s=2 * av.wait_start_s)  # gap² instead of gap² / 2
    with pytest.raises(AssertionError, match="mean wait for 5"):
        check_availability(bad, t, c, 5, window)


def _rare_trace(seed):
    """Spot obtainable about 5% of the time: 20-minute windows of 4 machines in 6-7 h gaps."""
    rng = np.random.default_rng(seed)
    t = np.arange(96 * 12) * 300.0
    c = np.zeros(t.size, np.int64)
    k = int(rng.integers(0, 60))
    while k < t.size:
        c[k:k + 4] = 4
        k += int(rng.integers(72, 84))
    return t, c


def check_plan_finishes(prof, model, market, plan, starts, horizon_s):
    """The chosen plan, simulated on the market it was made for, reaches the target from every
    start within the horizon."""
    sim = pl.to_simulation(plan.index, plan.candidates, prof, model)
    for k, s in enumerate(starts):
        run = sim.policy(sim.job, dataclasses.replace(sim.market, start_time_s=float(s)), key=k,
                         horizon_s=horizon_s, **sim.kwargs)
        o = run.to_target(sim.job.target_loss)
        assert o.reached, (f"the plan {plan.best['policy']} ({plan.best.get('unavailable')}) never finished from "
                           f"{s / 3600:.1f} h (ran {o.time_s / 3600:.1f} h, {o.steps} steps)")


@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100))
def test_plan_finishes_when_spot_is_rare(seed):
    t, c = _rare_trace(seed)
    market = _trace_market(t, c)
    model = MarketModel.from_market(market, n_max=8)
    assert model.avail_n[0, 0, 0] < 0.1, f"spot obtainable {model.avail_n[0, 0, 0]:.0%} of the time"
    prof = _quad_profile()
    p = pl.plan(prof, model, pl.Objective("cost"), grid={"workers": (4, 8), "fractions": (0.5,), "periods": (1.0,)})
    assert math.isfinite(p.best["time_s"]) and p.best["time_s"] < 48 * 3600
    check_plan_finishes(prof, model, market, p, [3600.0 * 5, 3600.0 * 30], 48 * 3600.0)


def test_plan_finishes_planted():
    """A planner blind to the gaps (availability of an always-available market) that waits for
    spot picks a plan that does not finish within the horizon on a rare-spot trace."""
    t, c = _rare_trace(0)
    market = _trace_market(t, c)
    model = MarketModel.from_market(market, n_max=8)
    prof = _quad_profile()
    blind = dataclasses.replace(model, wait_start_s=np.zeros_like(model.wait_start_s),
                                wait_revoked_s=np.zeros_like(model.wait_revoked_s),
                                regrant=np.ones_like(model.regrant), start_share=np.ones_like(model.start_share))
    p = pl.plan(prof, blind, pl.Objective("cost"), grid={"workers": (8,), "fractions": (0.5,), "periods": (1.0,),
                                                         "policies": ("checkpoint_restart",), "unavailable": ("wait",)})
    with pytest.raises(AssertionError, match="never finished"):
        check_plan_finishes(prof, blind, market, p, [3600.0 * 5], 6 * 3600.0)


def test_from_market_matches_the_parametric_and_price_models():
    """from_market on an exponential market has the parametric model's MTTF and prices; on a
    price-driven market it is from_prices at the market's bid; bad arguments name themselves."""
    m = mk.Market(mk.MachineType("x", 0.2, spot=0.05), mk.exponential(2.0 * 3600), billing="hourly",
                  startup=mk.fixed_startup(120.0))
    got = MarketModel.from_market(m)
    assert got.mttf_h[0, 0] == pytest.approx(2.0) and got.spot[0, 0] == pytest.approx(0.05)
    assert not got.limited and got.billing == "hourly" and got.startup_s == pytest.approx(120.0)
    np.testing.assert_allclose(got.cdf[0, 0, ::32], -np.expm1(-got.grid_h[::32] / 2.0), atol=0.03)
    sp = td.load_spot_prices("c3.xlarge", "us-east-1a")
    ser = mk.price_series(sp)
    pm = mk.Market(mk.MachineType("c3", float(sp.on_demand), ser), mk.price_driven(ser, 0.5 * float(sp.on_demand)))
    a = MarketModel.from_market(pm, window=(0.0, 7 * 86400.0))
    b = MarketModel.from_prices(ser, sp.on_demand, window=(0.0, 7 * 86400.0), bids=(0.5,))
    np.testing.assert_allclose(a.mttf_h, b.mttf_h)
    np.testing.assert_allclose(a.avail, b.avail)
    assert a.build(0, 0.5).process.bid == pytest.approx(0.5 * float(sp.on_demand))
    with pytest.raises(TypeError, match="market must be"):
        MarketModel.from_market("aws")
    with pytest.raises(ValueError, match="n_max"):
        MarketModel.from_market(m, n_max=0)
    with pytest.raises(ValueError, match="window"):
        MarketModel.from_market(_trace_market([0.0, 300.0], [2, 0]), window=(5.0, 1.0))


def test_trace_market_spec():
    """``scarjax plan --market trace:NAME``: the replayed node traces through from_market."""
    p3 = pl.market_from_spec("trace:p3")
    assert p3.limited and p3.billing == "per_second" and p3.names == ("p3.2xlarge",)
    assert 0.5 < p3.mttf_h[0, 0] < 10.0, f"p3 trace residual MTTF {p3.mttf_h[0, 0]:.3g} h"
    gcp = pl.market_from_spec("trace:gcp-v100")
    assert gcp.warning_s == pytest.approx(30.0) and gcp.avail_n.shape[-1] == 64
    with pytest.raises(ValueError, match="market"):
        pl.market_from_spec("trace:moon")
    with pytest.raises(ValueError, match="expected trace:NAME"):
        pl.market_from_spec("trace:p3:x")


@FAST
@given(run_s=st.floats(0.0, 40 * 3600.0))
def test_billed_hours_without_time_error_is_the_one_rule(run_s):
    """The planner's expected hours (A4') without a time error are the one hourly rule,
    market.billed_hours (user stop, 1 s tolerance)."""
    got = float(pl._expected_ceil(jnp.float32(run_s / 3600.0 - 1.0 / 3600.0), jnp.float32(0.0)))
    check_hours(run_s, got)


def test_billed_hours_planted():
    with pytest.raises(AssertionError, match="expected hours"):
        check_hours(5400.0, math.floor(5400.0 / 3600.0))  # rounding down: the begun hour unbilled


def check_hours(run_s, got):
    want = float(mk.billed_hours(np.float32(run_s), False))
    assert abs(got - want) <= 1.0 and (got == want or abs(run_s % 3600.0) < 2.0 or abs(run_s % 3600.0 - 3600.0) < 2.0), \
        f"{run_s} s: expected hours {got} != billed_hours {want}"


def check_mean_cost(pred_cost, sim_costs, rtol):
    """The predicted cost is the mean simulated cost over the starts within ``rtol``."""
    sim = float(np.mean(sim_costs))
    assert abs(pred_cost - sim) <= rtol * sim, \
        f"predicted cost {pred_cost:.4g} vs mean simulated {sim:.4g} ({100 * (pred_cost / sim - 1):+.1f}%)"


def test_price_driven_revoked_run_is_billed_to_its_end():
    """A price-driven market (A5b) whose price rises above the bid 20 minutes in: every granted
    start is revoked, its replacements are on-demand to the end of the revoked run (restart and
    lost work included), billed after their start-up (hourly: at least one hour each); the
    checkpoint-restart prediction is the mean over the window's minute starts of the simulator's
    bill (the model's own definition of a random start) within 6%, for both billing rules."""
    prof = _qp_setup()[0]
    ser = mk.price_series([0.1, 2.0], [0.0, 1200.0], end_s=40 * 3600.0)
    for billing in ("per_second", "hourly"):
        m = mk.Market(mk.MachineType("x", 1.0, ser), mk.price_driven(ser, 0.5), billing=billing,
                      startup=mk.fixed_startup(300.0))
        model = MarketModel.from_market(m, window=(0.0, 1260.0))
        cands = pl.candidates(prof, model, workers=[4], policies=["checkpoint_restart"], periods=[1.0], bids=[0.5])
        pred = pl.predict(prof, model, cands)
        sim = pl.to_simulation(0, cands, prof, m)
        costs = [sim.policy(sim.job, dataclasses.replace(sim.market, start_time_s=float(s)), key=0, horizon_s=1e6)
                 .to_target(sim.job.target_loss).dollars for s in np.arange(0.0, 1260.0, 60.0)]
        check_mean_cost(float(pred.cost[0]), costs, 0.06)
    with pytest.raises(AssertionError, match="predicted cost"):  # planted: the bill of the revoked run cut short
        check_mean_cost(0.8 * float(np.mean(costs)), costs, 0.06)
