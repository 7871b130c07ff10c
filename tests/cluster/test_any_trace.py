"""The cluster engine on any trace (property tests over random availability traces, price
histories, lifetimes and prices): every run ends and its clock advances; the bill is the
machine-seconds priced under the market's rule; no policy uses a machine the market did not
offer; on-demand equals the reliable run exactly; the same key gives the same run; bad times
and prices raise naming the argument. Each check is shown to fail on a planted violation."""

from __future__ import annotations

import functools
import itertools
import math

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scarjax.cluster import clock as ck

from scarjax.cluster import ledger as lg
from scarjax.cluster.ledger import hourly_bill

from scarjax.cluster.steptime import step_time_fixed

from scarjax.cluster.trainer import Trainer
from scarjax.cluster import market as mk
from scarjax.cluster import policies as po
from scarjax.cluster import litz
from scarjax.cluster import syncfly as sf
from scarjax.cluster import tierml as tm
from scarjax.models import mlr

from ._wallclock import within

H = 3600.0
HORIZON = 4 * H
TIMEOUT_S = 60  # wall-clock seconds a run may take before the termination check fails it
FEW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.lru_cache(maxsize=None)
def _alg():
    return mlr.digits(lr=1.0, l2=1e-2)  # full batch: one compiled trainer for the file


def _job(**kw):
    base = dict(workers=2, checkpoint_s=60.0, restore_s=0.0, max_steps=12)
    base.update(kw)
    return ck.Job(_alg(), -1.0, step_time_fixed(300.0), **base)


# ----------------------------------------------------------------------------- strategies

ticks = st.lists(st.tuples(st.sampled_from([60.0, 300.0, 1800.0, 3600.0]), st.integers(0, 3)),
                 min_size=1, max_size=6).filter(lambda xs: any(c > 0 for _, c in xs))


@st.composite
def markets(draw, kinds=("counts", "exponential", "empirical", "prices")):
    """A market: an availability trace with any gaps and counts (0 included), exponential or
    empirical lifetimes (tiny ones included), or a price history with a bid; a fixed spot price
    below on-demand; hourly or per-second billing; with or without a start-up delay."""
    kind = draw(st.sampled_from(kinds))
    if kind == "counts":
        xs = draw(ticks)
        times = np.cumsum([0.0] + [g for g, _ in xs[:-1]])
        process = mk.from_availability(times, [c for _, c in xs], warning_s=draw(st.sampled_from([0.0, 30.0, 120.0])))
    elif kind == "exponential":
        process = mk.exponential(draw(st.sampled_from([30.0, 600.0, 7200.0])), warning_s=120.0)
    elif kind == "empirical":
        process = mk.empirical(draw(st.lists(st.sampled_from([0.0, 1e-3, 5.0, 400.0, 5000.0]), min_size=1,
                                             max_size=4).filter(lambda v: max(v) > 0)), warning_s=30.0)
    else:
        n = draw(st.integers(1, 5))
        prices = draw(st.lists(st.sampled_from([0.01, 0.05, 0.3, 2.0]), min_size=n, max_size=n))
        times = np.arange(n) * draw(st.sampled_from([600.0, 3600.0]))
        series = mk.price_series(np.asarray(prices), times, end_s=float(times[-1]) + 8 * H)
        process = mk.price_driven(series, bid=draw(st.sampled_from([0.04, 0.5])))
    startup = draw(st.sampled_from([None, mk.fixed_startup(60.0)]))
    billing = draw(st.sampled_from(["hourly", "per_second"]))
    return mk.Market(mk.MachineType("m", 0.4, spot=draw(st.sampled_from([0.05, 0.12]))), process,
                     billing=billing, startup=startup)


#: The policies under the shared contract ``policy(job, market, *, key, horizon_s, ...)``, with
#: the options each takes here; ``unavailable`` only where the policy has the rule.
POLICIES = {
    "checkpoint_restart": (po.checkpoint_restart, {"interval_steps": 4}),  # one SCAR program
    "scar": (po.scar, {"interval_steps": 4}),
    "litz": (litz.elastic, {"schedule": litz.Schedule((900.0, 1800.0), (3, 2))}),
    "sync_on_the_fly": (sf.sync_on_the_fly_policy, {}),
    "checkpoint_recompute": (sf.checkpoint_recompute_policy, {}),
    "tierml": (tm.tierml, {"transient": 2, "chunk": 4}),
}
#: Those that buy transient machines only where the market offers them (``market.available``).
OFFERED = ["checkpoint_restart", "scar"]
policies = st.sampled_from(sorted(POLICIES))
rules = st.sampled_from(po.UNAVAILABLE)


def _run(name, job, market, key, rule, **kw):
    fn, opts = POLICIES[name]
    if name in ("checkpoint_restart", "scar"):
        opts = {**opts, "unavailable": rule}
    return fn(job, market, key=key, horizon_s=HORIZON, **opts, **kw)


# ----------------------------------------------------------------------------- 1. termination


def check_ends_and_advances(run, job, horizon_s, *, strict=True):
    """The run ended (target, step cap, horizon or a stated give-up) with its clock advancing:
    increasing point times (strictly, for policies that record one point per step), no
    executed step beyond the cap, nothing after the horizon."""
    gaps = np.diff(run.time_s)
    assert np.all(gaps > 0) if strict else np.all(gaps >= 0), "the clock did not advance between steps"
    executed = run.meta.get("executed_steps", run.steps.size)
    assert executed <= job.max_steps, f"{executed} executed steps > max_steps {job.max_steps}"
    assert run.end_s <= horizon_s + 1e-6, f"the run ends at {run.end_s} s, after the horizon {horizon_s} s"
    assert np.all(run.time_s <= run.end_s + 1e-6), "steps after the run's end"


@functools.lru_cache(maxsize=None)
def _warm(name):
    """One short run first, so that the timed runs do not include the compilation."""
    _run(name, _job(max_steps=2), mk.Market(mk.MachineType("m", 0.4, spot=0.05), None), 0, "on_demand")


@FEW
@given(markets(), policies, rules, st.integers(0, 2**16))
def test_every_run_ends_and_its_clock_advances(market, name, rule, seed):
    job = _job()
    _warm(name)
    run = within(TIMEOUT_S, lambda: _run(name, job, market, seed, rule))
    check_ends_and_advances(run, job, HORIZON, strict=name in OFFERED)


def test_termination_check_catches_a_run_without_the_give_up(monkeypatch):
    """Planted: no give-up rule, machines that live 1 ms - forever shorter than a step (the
    revocation loop that never ends in wall-clock time)."""
    market = mk.Market(mk.MachineType("m", 0.4, spot=0.05), mk.empirical([1e-3], warning_s=0.0))
    run = within(TIMEOUT_S, lambda: _run("checkpoint_restart", _job(), market, 0, "on_demand"))
    assert run.count("give_up") == 1  # the stated give-up ends it
    monkeypatch.setattr(po, "MAX_FUTILE_RESTARTS", 10**12)
    with pytest.raises(AssertionError, match="did not end within"):
        within(3, lambda: _run("checkpoint_restart", _job(), market, 0, "on_demand"))


def check_ends_by_the_horizon(run, horizon_s):
    """Nothing of the run is past its horizon, exactly (no tolerance): its end, its points and
    its events."""
    assert run.end_s <= horizon_s, f"the run ends at {run.end_s!r} s, after its horizon {horizon_s!r} s"
    assert np.all(run.time_s <= run.end_s), "points after the run's end"
    late = [e for e in run.events if e[0] > run.end_s]
    assert not late, f"events after the run's end: {late[:3]}"


#: A price series whose spot price rises above the bid at 600 s (a 120 s warning at 480 s) and a
#: horizon before that: TierML once ran to the warning and its flush, ending past the horizon.
LATE_WARNING = mk.Market(mk.MachineType("m", 0.4, spot=0.12),
                         mk.price_driven(mk.price_series(np.array([0.3, 2.0, 2.0, 2.0]), np.arange(4) * 600.0,
                                                         end_s=30600.0), bid=0.5),
                         billing="per_second", startup=mk.fixed_startup(60.0))


@FEW
@given(markets(), st.integers(0, 2**16), st.floats(300.0, HORIZON), st.integers(0, 3))
def test_tierml_ends_by_its_horizon(market, seed, horizon, transient):
    """TierML ends at the target, the step cap, the stated give-up or by its horizon, whatever the
    market and however the horizon falls between its events (not a whole number of steps)."""
    run = tm.tierml(_job(), market, key=seed, horizon_s=horizon, transient=transient, chunk=4)
    check_ends_by_the_horizon(run, horizon)


def test_horizon_check_catches_events_past_the_horizon(monkeypatch):
    """Planted: the controller takes warnings due after the horizon (TierML before the fix)."""
    horizon = 433.5799051701508
    check_ends_by_the_horizon(tm.tierml(_job(), LATE_WARNING, key=3, horizon_s=horizon, transient=3, chunk=4),
                              horizon)
    monkeypatch.setattr(tm, "_due_by", lambda t, horizon_s: t)
    with pytest.raises(AssertionError, match="after"):
        check_ends_by_the_horizon(tm.tierml(_job(), LATE_WARNING, key=3, horizon_s=horizon, transient=3, chunk=4),
                                  horizon)


# ----------------------------------------------------------------------------- 2. the bill


def oracle_charge(e):
    """One machine's USD under the market's rule, written independently of the ledger: per
    second, the seconds times the price; hourly, every begun hour, except the last partial one
    of a machine the provider revoked (a duration within 1 s of whole hours is whole)."""
    d = max(e.stop - e.start, 0.0)
    if e.billing == "per_second":
        return e.price * d / H
    whole = math.floor((d + 1.0) / H)
    partial = d - whole * H > 1.0
    return e.price * (whole + (1 if partial and not e.revoked else 0))


def check_bill(run):
    """The run's bill is the sum over its machines of their machine-seconds priced under the
    market's rule, and machine-seconds are the machines' own."""
    led = run.ledger
    assert not led.running, "machines still running at the end"
    want = sum(oracle_charge(e) for e in led.entries)
    got = sum(run.cost_by_tier.values())
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9), f"bill {got} != sum of machine charges {want}"
    secs = sum(led.machine_seconds(math.inf).values())
    assert secs == pytest.approx(sum(e.stop - e.start for e in led.entries)), "machine-seconds differ"


@FEW
@given(markets(), policies, rules, st.integers(0, 2**16))
def test_bill_is_machine_seconds_under_the_markets_rule(market, name, rule, seed):
    check_bill(_run(name, _job(), market, seed, rule))


def test_bill_check_catches_a_wrong_rule(monkeypatch):
    """Planted: the ledger bills a provider-revoked machine's partial hour (and 1% more per
    second)."""
    market = mk.Market(mk.MachineType("m", 0.4, spot=0.05), mk.exponential(600.0), billing="hourly")
    check_bill(_run("checkpoint_restart", _job(), market, 1, "on_demand"))
    wrong = hourly_bill
    monkeypatch.setattr(lg, "hourly_bill", lambda s, e, p, r=False, scheme="hourly", tol_s=1.0:
                        wrong(s, e, p, False, scheme, tol_s) * (1.01 if scheme == "per_second" else 1.0))
    run = _run("checkpoint_restart", _job(), market, 1, "on_demand")
    assert run.count("revocation") > 0
    with pytest.raises(AssertionError, match="bill"):
        check_bill(run)


# ----------------------------------------------------------------------------- 3. offered machines


def check_offered(run, market):
    """At every time, the run holds no more transient machines than the market offers."""
    tr = [e for e in run.ledger.entries if e.tier == "transient"]
    t0 = market.start_time_s
    for t in sorted({e.start for e in tr} | {e.stop - 1e-3 for e in tr}):
        held = sum(1 for e in tr if e.start <= t < e.stop)
        offered = market.available(t)
        assert held <= offered, f"{held} transient machines held at {t - t0:.0f} s, the market offers {offered:g}"


@FEW
@given(markets(kinds=("counts",)), st.sampled_from(OFFERED), rules, st.integers(0, 2**16), st.sampled_from([0.0, 900.0]))
def test_no_policy_uses_a_machine_the_market_did_not_offer(market, name, rule, seed, start):
    market = mk.Market(market.machine, market.process, billing=market.billing, startup=market.startup,
                       start_time_s=start)
    check_offered(_run(name, _job(workers=3), market, seed, rule), market)


def test_offered_check_catches_a_fleet_that_reuses_held_nodes(monkeypatch):
    """Planted: purchases ignore which trace nodes the job already holds (one node present
    after 1000 s, yet both machines run on it)."""
    market = mk.Market(mk.MachineType("m", 0.4, spot=0.05),
                       mk.from_availability([0.0, 1000.0], [2, 1], warning_s=0.0), billing="per_second")
    check_offered(_run("checkpoint_restart", _job(), market, 0, "on_demand"), market)
    acquire = mk.Market.acquire
    monkeypatch.setattr(mk.Market, "acquire", lambda self, key, c, n, t, held=None: acquire(self, key, c, n, t))
    with pytest.raises(AssertionError, match="the market offers 1"):
        check_offered(_run("checkpoint_restart", _job(), market, 0, "on_demand"), market)


# ----------------------------------------------------------------------------- 4. on-demand


def check_reliable(run, ref):
    """Bit for bit the reliable run: the same step times, steps and losses."""
    assert np.array_equal(run.steps, ref.steps), "steps differ from the reliable run's"
    assert np.array_equal(run.time_s, ref.time_s), "step times differ from the reliable run's"
    assert np.array_equal(run.loss, ref.loss), "losses differ from the reliable run's"


@FEW
@given(markets(), st.integers(0, 2**16))
def test_on_demand_equals_the_reliable_run_exactly(market, seed):
    job = _job()
    reliable = mk.Market(market.machine, None, billing=market.billing, startup=market.startup)
    ref = po.on_demand(job, reliable, key=0, horizon_s=HORIZON)
    check_reliable(po.on_demand(job, market, key=seed, horizon_s=HORIZON), ref)
    curve = Trainer(job.algorithm, 0).train(job.max_steps)
    assert np.array_equal(ref.loss, curve), "on-demand is not the plain training run"


def test_reliable_check_catches_a_perturbed_run():
    job = _job()
    market = mk.Market(mk.MachineType("m", 0.4, spot=0.05), None)
    run = po.on_demand(job, market, key=0, horizon_s=HORIZON)
    bad = po.on_demand(job, market, key=0, horizon_s=HORIZON)
    bad.loss = bad.loss.copy()
    bad.loss[5] = np.nextafter(bad.loss[5], np.inf)  # planted: one ulp at one step
    check_reliable(run, run)
    with pytest.raises(AssertionError, match="losses differ"):
        check_reliable(bad, run)


# ----------------------------------------------------------------------------- 5. determinism


def check_same_run(a, b):
    """Two runs are the same: curves, events, bills."""
    ja, jb = a.to_json(), b.to_json()
    for k in ja:
        assert ja[k] == jb[k], f"same key, different runs: {k} differs"


@FEW
@given(markets(), policies, rules, st.integers(0, 2**16))
def test_same_key_same_run(market, name, rule, seed):
    job = _job()
    check_same_run(_run(name, job, market, seed, rule), _run(name, job, market, seed, rule))


def test_same_run_check_catches_draws_that_ignore_the_key(monkeypatch):
    """Planted: each purchase draws from a fresh counter, not from the run's key."""
    market = mk.Market(mk.MachineType("m", 0.4, spot=0.05), mk.exponential(600.0))
    fresh = itertools.count(1)
    acquire = mk.Market.acquire
    monkeypatch.setattr(mk.Market, "acquire", lambda self, key, c, n, t, held=None:
                        acquire(self, jax.random.fold_in(key, next(fresh)), c, n, t, held=held))
    a = _run("checkpoint_restart", _job(), market, 7, "on_demand")
    b = _run("checkpoint_restart", _job(), market, 7, "on_demand")
    with pytest.raises(AssertionError, match="same key, different runs"):
        check_same_run(a, b)


# ----------------------------------------------------------------------------- 6. bad input

CONSTRUCTORS = {
    "times_s": lambda t, c: mk.from_availability(t, c, warning_s=0.0),
    "add_s": lambda t, c: mk.replay((t, t + 10.0), warning_s=0.0),
    "remove_s": lambda t, c: mk.replay((np.zeros_like(t), t), warning_s=0.0),
    "price_times": lambda t, c: mk.price_series(np.full(t.shape, 0.1), t),
    "prices": lambda t, c: mk.price_series(c, np.arange(t.size) * 60.0),
    "start": lambda t, c: mk.bill(t, t.max() + 10.0 if np.isfinite(t).all() else 1e6, 0.1),
    "price": lambda t, c: mk.bill(0.0, 10.0, c),
}
NAMES = {"price_times": "times_s", "start": "start", "prices": "prices", "price": "price"}


def check_refused(build, t, c, name):
    """``build`` raises a ValueError whose message names ``name``."""
    try:
        build(t, c)
    except ValueError as e:
        assert name in str(e), f"the error does not name {name!r}: {e}"
        return
    raise AssertionError(f"no error for bad {name}: t={t!r}, c={c!r}")


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(CONSTRUCTORS)), st.sampled_from(["nan", "negative", "unsorted"]),
       st.integers(2, 6), st.data())
def test_bad_times_and_prices_raise_naming_the_argument(which, bad, n, data):
    t = np.sort(np.asarray(data.draw(st.lists(st.floats(0.0, 1e5), min_size=n, max_size=n, unique=True))))
    c = np.asarray(data.draw(st.lists(st.integers(1, 4), min_size=n, max_size=n)), np.float64)
    i = data.draw(st.integers(0, n - 1))
    arg = "t" if which in ("times_s", "add_s", "remove_s", "price_times", "start") else "c"
    if bad == "unsorted" and (arg == "c" or which in ("add_s", "remove_s", "start")):
        bad = "nan"  # order only matters for series of times
    if bad == "negative" and which == "price_times":
        bad = "unsorted"  # a price series may start before its window (negative times are allowed)
    x = (t if arg == "t" else c).copy()
    if bad == "nan":
        x[i] = np.nan
    elif bad == "negative":
        x[i] = -1.0 - x[i]
    else:
        x[[0, -1]] = x[[-1, 0]]
    t, c = (x, c) if arg == "t" else (t, x)
    check_refused(CONSTRUCTORS[which], t, c, NAMES.get(which, which))


def test_refusal_check_catches_an_unchecked_constructor():
    """Planted: :func:`~scarjax.cluster.market.counts_to_intervals` does no validation (it is
    the unchecked helper behind :func:`~scarjax.cluster.market.from_availability`)."""
    t = np.array([0.0, np.nan, 10.0])
    check_refused(CONSTRUCTORS["times_s"], t, np.ones(3), "times_s")
    with pytest.raises(AssertionError, match="no error for bad times_s"):
        check_refused(lambda t, c: mk.counts_to_intervals(t, c), t, np.ones(3), "times_s")


def test_market_from_availability_in_one_call():
    """A user's 5-minute availability series (nothing obtainable for 20 minutes) as a market in
    one call, with the provider's rules by name; the job runs to its end."""
    times = np.arange(12) * 300.0
    counts = np.array([2, 2, 1, 0, 0, 0, 0, 1, 2, 2, 2, 2])
    m = mk.Market.from_availability(times, counts, provider="aws_per_second",
                                    machine=mk.MachineType("p3.2xlarge", 3.06, spot=0.92))
    assert (m.billing, m.process.warning_s) == ("per_second", mk.AWS_WARNING_S)
    assert m.available(1000.0) == 0 and m.next_available(1000.0) == 2100.0
    with pytest.raises(ValueError, match="billing: state it"):
        mk.Market.from_availability(times, counts, warning_s=30.0, machine=m.machine)
    run = within(TIMEOUT_S, lambda: _run("scar", _job(), m, 0, "wait"))
    check_ends_and_advances(run, _job(), HORIZON)
    check_offered(run, m)
