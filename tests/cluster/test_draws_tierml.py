"""scarjax.cluster.draws, TierML: the draws served by a template run (no warning, revocation or
refused purchase before their end), the draws resumed from a template run's state before
their first warning and the per-draw controller's other draws are the per-draw policy's runs,
every field bit for bit (points, bills, events, meta, ledger entries), on the embedded p3 node
trace, a trace built from arrays, a parametric market and random traces (hypothesis); planted
violations (a template serving interrupted draws, draws resumed past their first warning) are
caught."""

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
from scarjax.cluster import tierml as tm
from scarjax.cluster.steptime import step_time_linear
from scarjax.cluster.trainer import Trainer
from scarjax.models import mlr

from ._markets import machine, p3, random_trace

HORIZON = 3 * 3600.0
OPTS = {"reliable": 1, "transient": 3}


@functools.lru_cache(maxsize=None)
def _job(max_steps=40):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 6)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int32) + (x[:, 2] > 1)
    alg = mlr.mlr(x, y, num_classes=3, lr=0.5, batch_size=16)
    curve = Trainer(alg, 0).train(max_steps)
    target = float(np.min(curve[: max_steps * 2 // 3])) + 1e-3
    return ck.Job(alg, target, step_time_linear(40.0, 0.5), workers=4, checkpoint_s=60.0, restore_s=30.0,
                  max_steps=max_steps)


def _from_arrays():
    ticks = np.arange(0.0, 6 * 3600.0 + 1.0, 300.0)
    walk = np.clip(np.cumsum(np.random.default_rng(5).integers(-2, 3, ticks.size)) + 4, 0, 6)
    return mk.Market(machine(), mk.from_availability(ticks, walk, provider="aws"), startup=mk.fixed_startup(60.0),
                     billing="per_second")


def _exp():
    return mk.Market(machine(), mk.exponential(1800.0, warning_s=120.0), startup=mk.fixed_startup(60.0))


def _runs(market, n, seed, starts, monkeypatch=None, resumed=None, steps=40, **kw):
    """``(vectorised, per-draw, templated draws)``; ``resumed`` (a list): the draws resumed
    from a template's state are appended to it; ``steps``: the job's ``max_steps``."""
    served = []
    real = dr._tierml_templates

    def counting(*a, **k):
        out, resumes = real(*a, **k)
        served.append(len(out))
        if resumed is not None:
            resumed.extend(resumes)
        return out, resumes

    if monkeypatch is not None:
        monkeypatch.setattr(dr, "_tierml_templates", counting)
    keys = jax.random.split(jax.random.key(seed), n)
    opts = {**OPTS, **kw}
    a = dr.run("tierml", _job(steps), market, keys, horizon_s=HORIZON, start_s=starts, **opts)
    b = dr.per_draw("tierml", _job(steps), market, keys, horizon_s=HORIZON, start_s=starts, **opts)
    return a, b, sum(served)


def _entries(run):
    return [(e.machine_id, e.tier, e.price, e.billing, e.start, e.stop, e.revoked, e.charged)
            for e in run.ledger.entries]


def whole_run_mismatches(a, b):
    """Every field of every run, ``==`` (float64 bit for bit, dtypes too): ``[(draw, field)]``."""
    bad = []
    for i, (r, q) in enumerate(zip(a, b)):
        for f in ("time_s", "dollars", "loss", "steps"):
            x, y = getattr(r, f), getattr(q, f)
            if x.dtype != y.dtype or not np.array_equal(x, y):
                bad.append((i, f))
        for f in ("policy", "events", "cost_by_tier", "free_seconds", "end_s", "meta"):
            if getattr(r, f) != getattr(q, f):
                bad.append((i, f))
        if _entries(r) != _entries(q):
            bad.append((i, "ledger"))
    return bad


def test_p3_trace_templates_serve_draws_equal_to_the_per_draw_loop(monkeypatch):
    starts = np.round(np.random.default_rng(1).uniform(0.0, 40000.0 - HORIZON, 16))
    resumed = []
    a, b, served = _runs(p3(), 16, 3, starts, monkeypatch, resumed)
    assert 0 < served < 16, f"templates served {served} of 16 draws: a vacuous test"
    assert 0 < len(resumed) <= 16 - served, f"{len(resumed)} draws resumed from a template's state: a vacuous test"
    assert whole_run_mismatches(a, b) == []
    assert not dr.mismatches(dr.summary(a, _job().target_loss), dr.summary(b, _job().target_loss))


def test_trace_from_arrays_templates_equal_the_per_draw_loop(monkeypatch):
    starts = np.round(np.random.default_rng(2).uniform(0.0, 3 * 3600.0, 12))
    a, b, served = _runs(_from_arrays(), 12, 4, starts, monkeypatch)
    assert served > 0, "no draw served by a template: a vacuous test"
    assert whole_run_mismatches(a, b) == []


def test_planted_violation_resuming_past_the_first_warning_is_caught(monkeypatch):
    """Planted: the interrupted draws resume at the template's last pass, past their first
    warning (the pass rule without its condition). The comparison catches them; the
    controller's state is otherwise the draw's (its own trace nodes, lifetimes and warnings)."""
    monkeypatch.setattr(dr, "_resume_pass", lambda tops, first, longest: np.full(first.shape, tops.size - 1))
    starts = np.round(np.random.default_rng(1).uniform(0.0, 40000.0 - HORIZON, 6))
    resumed = []
    a, b, _ = _runs(p3(), 6, 3, starts, monkeypatch, resumed)
    assert resumed
    bad = whole_run_mismatches(a, b)
    assert bad and {i for i, _ in bad} <= set(resumed), bad


def test_draws_resumed_at_the_first_pass_equal_the_per_draw_loop(monkeypatch):
    """Every interrupted draw resumed at the template's first pass (the pass rule blinded:
    ``_first_pass`` alone picks it, as for the draws warned within the first pass): the runs
    are the per-draw loop's, every field."""
    monkeypatch.setattr(dr, "_resume_pass", lambda tops, first, longest: np.full(first.shape, -1))
    starts = np.round(np.random.default_rng(1).uniform(0.0, 40000.0 - HORIZON, 8))
    resumed = []
    a, b, served = _runs(p3(), 8, 3, starts, monkeypatch, resumed)
    assert len(resumed) == 8 - served > 0, f"{len(resumed)} draws resumed at the first pass: a vacuous test"
    assert whole_run_mismatches(a, b) == []


def test_planted_violation_resuming_early_warned_draws_a_pass_late_is_caught(monkeypatch):
    """Planted: the draws the pass rule leaves to run from the start (and every other
    interrupted draw) resumed at the template's second pass instead of its first. The draws
    warned within the first pass then miss their warning: the comparison catches them."""
    monkeypatch.setattr(dr, "_resume_pass", lambda tops, first, longest: np.full(first.shape, -1))
    monkeypatch.setattr(dr, "_first_pass", lambda tops, life_end: np.full(life_end.shape, 1))
    rng = np.random.default_rng(1)
    starts = np.round(rng.uniform(0.0, 40000.0 - HORIZON, 16))
    resumed = []
    a, b, _ = _runs(p3(), 16, 3, starts, monkeypatch, resumed)
    assert resumed
    bad = whole_run_mismatches(a, b)
    assert bad and {i for i, _ in bad} <= set(resumed), bad


def test_parametric_market_runs_per_draw_equal(monkeypatch):
    """An exponential process: no template (its lifetimes are the market's calls); the same runs."""
    a, b, served = _runs(_exp(), 6, 5, None, monkeypatch)
    assert served == 0
    assert whole_run_mismatches(a, b) == []


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
@settings(max_examples=6, deadline=None, derandomize=True)
@given(data=st.data())
def test_property_random_traces_equal_the_per_draw_loop(data):
    market = random_trace(data, max_nodes=6, warnings=(0.0, 120.0))
    starts = np.array(data.draw(st.lists(st.integers(0, 8000), min_size=4, max_size=4), label="starts"), float)
    transient = data.draw(st.integers(1, 4), label="transient")
    a, b, _ = _runs(market, 4, data.draw(st.integers(0, 99), label="seed"), starts, transient=transient)
    assert whole_run_mismatches(a, b) == []


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
@settings(max_examples=3, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), transient=st.integers(5, 7))
def test_property_p3_resumed_draws_equal_the_per_draw_loop(seed, transient):
    """The p3 trace at random starts, a job long enough for most draws to be warned after a
    while (resumed from a template's state): every field of every run equal."""
    starts = np.round(np.random.default_rng(seed).uniform(0.0, 40000.0 - HORIZON, 6))
    a, b, _ = _runs(p3(), 6, seed, starts, steps=160, transient=transient)
    assert whole_run_mismatches(a, b) == []


def test_planted_violation_template_serving_interrupted_draws_is_caught(monkeypatch):
    """Planted: every purchase looks granted for ever (the eligibility test blinded), so the
    template serves draws that a warning interrupts. The comparison catches them."""
    real = dr._tier_picks

    def blind(*a, **k):
        node, life, warn = real(*a, **k)
        return np.abs(node), np.full_like(life, np.inf), np.full_like(warn, np.inf)

    starts = np.round(np.random.default_rng(1).uniform(0.0, 40000.0 - HORIZON, 16))
    monkeypatch.setattr(dr, "_tier_picks", blind)
    a, b, served = _runs(p3(), 16, 3, starts, monkeypatch)
    assert served == 16
    assert whole_run_mismatches(a, b) != []
    assert dr.mismatches(dr.summary(a, _job().target_loss), dr.summary(b, _job().target_loss)) != []


# ----------------------------------------------------------------------------- one event contract


def _run_with(events):
    z = np.zeros(0)
    return ck.ClusterRun("tierml", z, z, z, z.astype(np.int64), events, {}, 0.0)


def test_every_revocation_is_a_revocation_event_and_the_warned_ones_are_counted():
    """TierML names every revocation ``'revocation'`` (as every policy): the summary counts them
    all; :func:`warned_revocations` those whose machines were all warned."""
    market = mk.Market(machine(), mk.exponential(1800.0, warning_s=120.0, unwarned=0.5),
                       startup=mk.fixed_startup(60.0), billing="per_second")
    keys = jax.random.split(jax.random.key(8), 6)
    runs = dr.run("tierml", _job(), market, keys, horizon_s=HORIZON, reliable=1, transient=8)
    kinds = {e[1] for r in runs for e in r.events}
    assert "revocation" in kinds and "warning" not in kinds
    warned = [tm.warned_revocations(r) for r in runs]
    total = dr.summary(runs, _job().target_loss)["revocations"]
    assert all(0 <= w <= n for w, n in zip(warned, total))
    assert sum(warned) > 0 and sum(warned) < total.sum(), "need warned and unwarned revocations: a vacuous test"
    # synthetic events: only revocations whose detail says 0 without warning are warned ones
    ev = [(1.0, "revocation", "3 warned, 0 without warning"), (2.0, "revocation", "2 warned, 1 without warning"),
          (3.0, "flush", "3 warned, 0 without warning"), (4.0, "revocation", "0 warned, 4 without warning")]
    assert tm.warned_revocations(_run_with(ev)) == 1 and _run_with(ev).count("revocation") == 3
    with pytest.raises(TypeError, match="run"):
        tm.warned_revocations(ev)


def test_a_misspelt_option_is_named_before_any_run():
    """A typo in TierML's options (``reliabel``) raises a TypeError naming it and the policy's
    options, on a replayed trace (the template path) and a parametric market alike."""
    keys = jax.random.split(jax.random.key(1), 3)
    for market in (p3(), _exp()):
        with pytest.raises(TypeError, match=r"tierml\(\).*'reliabel'.*reliable"):
            dr.run("tierml", _job(), market, keys, horizon_s=HORIZON, start_s=np.zeros(3), reliabel=1)


# ----------------------------------------------------------------------------- the controller's derived values


def _derived_checks(market, seed, start, transient, horizon=HORIZON):
    """Run TierML's per-draw controller; before every pass of its loop compare what it derived
    from its machine groups (live counts and speed, next warning, next boundary event, the
    quiet time of ``handle_boundary``) with the same values computed afresh. Returns
    ``(passes checked, [differences])``."""
    seen, bad = [0], []

    def on_pass(ctl, t, frac, next_check):
        cached = dict(ctl._derived)
        got = {"live": ctl._live(), "interrupt": ctl.next_interrupt(), "boundary": ctl.next_boundary_event()}
        ctl._derived = {}  # forgotten here (not by _touch, which the planted violation blinds)
        fresh = {"live": ctl._live(), "interrupt": ctl.next_interrupt(), "boundary": ctl.next_boundary_event()}
        if "quiet" in cached:
            got["quiet"], fresh["quiet"] = cached["quiet"], ctl._quiet_until()
        seen[0] += 1
        if got != fresh:
            bad.append((t, got, fresh))

    o = {**tm.tierml.__kwdefaults__, "reliable": 1, "transient": transient, "horizon_s": horizon,
         "param_bytes": None, "market_draws": None, "trainer": None}
    tm._tierml(_job(), dataclasses.replace(market, start_time_s=float(start)), key=jax.random.key(seed),
               on_pass=on_pass, **{k: v for k, v in o.items() if k not in ("key",)})
    return seen[0], bad


@settings(max_examples=4, deadline=None, derandomize=True)
@given(data=st.data())
def test_property_controller_derived_values_are_fresh(data):
    """The controller derives its live counts, next warning, next boundary event and the time
    before which ``handle_boundary`` has nothing to do once per change of its groups: at every
    pass they equal the values computed afresh (random traces, warned and unwarned revocations)."""
    market = random_trace(data, max_nodes=6, warnings=(0.0, 120.0))
    start = data.draw(st.integers(0, 8000), label="start")
    n, bad = _derived_checks(market, data.draw(st.integers(0, 99), label="seed"), start,
                             data.draw(st.integers(1, 4), label="transient"))
    assert n > 0 and bad == []


def test_planted_violation_stale_derived_values_are_caught(monkeypatch):
    """Planted: the controller forgets nothing when its groups change (``_touch`` a no-op once a
    value is derived). The per-pass comparison catches the stale values; the real one passes."""
    market = mk.Market(machine(), mk.exponential(1200.0, warning_s=120.0, unwarned=0.5),
                       startup=mk.fixed_startup(60.0))
    n, bad = _derived_checks(market, 3, 0.0, 4)
    assert n > 0 and bad == []
    real = tm._Controller._touch

    def forgetful(self):
        if not self._derived:
            real(self)

    monkeypatch.setattr(tm._Controller, "_touch", forgetful)
    n, bad = _derived_checks(market, 3, 0.0, 4)
    assert n > 0 and bad, "stale derived values not caught"
