"""scarjax.cluster.draws: many draws of checkpoint-restart, SCAR and TierML in one call equal
the per-draw policies (summary fields ``==``, float64 bit for bit) on the p3 node trace, an
exponential market and a trace with a gap without machines; hypothesis over random traces,
with planted violations the comparison catches; same keys, same runs; bad input raises."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scarjax.cluster import clock as ck
from scarjax.cluster import draws as dr
from scarjax.cluster import market as mk
from scarjax.cluster.steptime import step_time_linear
from scarjax.cluster.trainer import Trainer
from scarjax.models import mlr

from ._markets import machine, p3, random_trace

HORIZON = 3 * 3600.0


@functools.lru_cache(maxsize=None)
def _alg():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 6)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int32) + (x[:, 2] > 1)
    return mlr.mlr(x, y, num_classes=3, lr=0.5, batch_size=16)  # minibatches: the keys matter


@functools.lru_cache(maxsize=None)
def _job(max_steps=60, workers=4):
    curve = Trainer(_alg(), 0).train(max_steps)
    # a target away from any loss by far more than float32 rounding (SCAR's vmapped losses)
    target = float(np.min(curve[: max_steps * 2 // 3])) + 1e-3
    return ck.Job(_alg(), target, step_time_linear(40.0, 0.5), workers=workers, checkpoint_s=60.0, restore_s=30.0,
                  max_steps=max_steps)


def _exp():
    return mk.Market(machine(), mk.exponential(1800.0), startup=mk.fixed_startup(60.0), billing="per_second")


def _gap():
    trace = mk.replay((np.array([0.0, 0.0, 7200.0]), np.array([3600.0, 1800.0, np.inf])), warning_s=0.0)
    return mk.Market(machine(), trace)


OPTS = {"checkpoint_restart": {}, "scar": {}, "tierml": {"reliable": 1, "transient": 3}}


def _both(policy, job, market, n, seed, starts=None, **kw):
    keys = jax.random.split(jax.random.key(seed), n)
    opts = {**OPTS[policy], **kw}
    a = dr.run(policy, job, market, keys, horizon_s=HORIZON, start_s=starts, **opts)
    b = dr.per_draw(policy, job, market, keys, horizon_s=HORIZON, start_s=starts, **opts)
    return a, b


def check_identical(a, b, target):
    """The vectorised runs' summaries equal the per-draw runs' (every field, every draw)."""
    bad = dr.mismatches(dr.summary(a, target), dr.summary(b, target))
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"


# ----------------------------------------------------------------------------- equality


@pytest.mark.parametrize("policy", sorted(dr.POLICIES))
def test_p3_trace_draws_equal_the_per_draw_loop(policy):
    job = _job()
    starts = np.random.default_rng(1).uniform(0.0, 40000.0 - HORIZON, 24)
    a, b = _both(policy, job, p3(), 24, 3, starts)
    check_identical(a, b, job.target_loss)
    assert any(e[1] == "revocation" for r in b for e in r.events), "no draw was revoked: a vacuous test"
    # the summary counts them (every policy names every revocation 'revocation', warned or not)
    assert dr.summary(b, job.target_loss)["revocations"].sum() > 0
    if policy == "scar":  # the losses to float32 rounding (module notes), the reliable prefix bit for bit
        check_scar_curves(a, b, _first_losses(job, p3(), jax.random.split(jax.random.key(3), 24), starts))
    else:  # the whole runs, bit for bit
        for r, q in zip(a, b):
            assert np.array_equal(r.loss, q.loss) and np.array_equal(r.dollars, q.dollars) and r.events == q.events


@pytest.mark.parametrize("policy", sorted(dr.POLICIES))
def test_exponential_market_draws_equal_the_per_draw_loop(policy):
    job = _job()
    a, b = _both(policy, job, _exp(), 16, 4)
    check_identical(a, b, job.target_loss)


def test_tierml_market_draws_beyond_the_tables_fall_back(monkeypatch):
    """TierML's chain of market draws past :data:`TIER_CALLS` is split on the host and its calls go
    to the market: the same runs. Planted: a chain that hands out a wrong key is caught."""
    monkeypatch.setattr(dr, "TIER_CALLS", 2)
    job = _job()
    starts = np.random.default_rng(1).uniform(0.0, 40000.0 - HORIZON, 6)
    a, b = _both("tierml", job, p3(), 6, 3, starts)
    check_identical(a, b, job.target_loss)
    real = dr._TierDraws._key
    monkeypatch.setattr(dr._TierDraws, "_key", lambda self, c: jax.random.fold_in(real(self, c), 1))
    monkeypatch.setattr(dr, "TIER_CALLS", 0)
    bad = dr.run("tierml", job, p3(), jax.random.split(jax.random.key(3), 6), horizon_s=HORIZON, start_s=starts,
                 **OPTS["tierml"])
    with pytest.raises(AssertionError, match="mismatches"):
        check_identical(bad, b, job.target_loss)


def test_tierml_draws_with_lost_blocks_equal_the_per_draw_loop():
    """Unwarned revocations of single ActivePSs (1 + 8 machines: 4 ActivePSs): their blocks roll
    back to the BackupPS and the draw's state leaves the shared trajectory; the runs stay the
    per-draw ones, bit for bit."""
    job = _job()
    market = mk.Market(machine(), mk.exponential(1800.0, warning_s=120.0, unwarned=1.0),
                       startup=mk.fixed_startup(60.0), billing="per_second")
    a, b = _both("tierml", job, market, 6, 8, transient=8)
    assert any(r.meta["rollbacks"] for r in b), "no draw lost blocks: a vacuous test"
    check_identical(a, b, job.target_loss)
    for r, q in zip(a, b):
        assert np.array_equal(r.loss, q.loss) and np.array_equal(r.dollars, q.dollars) and r.events == q.events


@pytest.mark.parametrize("policy", ["checkpoint_restart", "scar"])
@pytest.mark.parametrize("unavailable", ["on_demand", "wait"])
def test_gap_without_machines_equals_the_per_draw_loop(policy, unavailable):
    job = _job(workers=2)
    starts = np.array([0.0, 1000.0, 3000.0, 3500.0, 5000.0, 7000.0, 7300.0, 100.0])
    a, b = _both(policy, job, _gap(), 8, 5, starts, unavailable=unavailable)
    check_identical(a, b, job.target_loss)


def test_drawn_purchases_beyond_the_tables_fall_back(monkeypatch):
    """Purchases past :data:`PURCHASES` go to ``Market.acquire`` itself: the same runs."""
    monkeypatch.setattr(dr, "PURCHASES", 1)
    job = _job()
    a, b = _both("checkpoint_restart", job, _exp(), 6, 6)
    check_identical(a, b, job.target_loss)


# ----------------------------------------------------------------------------- SCAR's late start


def _first_losses(job, market, keys, starts):
    """Each draw's first step boundary at which its plan loses blocks (``None``: none)."""
    out = []
    for p in dr.plans("scar", job, market, keys, horizon_s=HORIZON, start_s=starts):
        lost = dr._scar_marks(p, job.max_steps, job.workers)[1].any(axis=1)
        out.append(int(np.argmax(lost)) if lost.any() else None)
    return out


def check_scar_curves(a, b, firsts):
    """SCAR's runs ``a`` against the per-draw runs ``b``: points, steps and events equal, the losses
    up to a draw's first lost block bit for bit (the one reliable run), after it to float32
    rounding (the batched program; module notes)."""
    for r, q, f in zip(a, b, firsts):
        assert np.array_equal(r.time_s, q.time_s) and np.array_equal(r.steps, q.steps) and r.events == q.events
        pre = r.steps <= (np.inf if f is None else f)
        assert np.array_equal(r.loss[pre], q.loss[pre]), "the reliable prefix differs"
        np.testing.assert_allclose(r.loss, q.loss, rtol=1e-5, atol=1e-6)


def _one_step_late(program, key, ck_key, state, ckpt, start, write, lost):
    return program(key, ck_key, state, ckpt, start + 1, write, lost)


def test_scar_draws_train_from_their_first_lost_block(monkeypatch):
    """A draw that loses blocks joins the chunk program at the chunk start before its first lost
    block (the reliable run's state and running checkpoint there) and is dropped after the chunk
    that reaches its target or its plan's end: with chunks of 4 steps (many joins, drops and
    padded sizes) the runs equal the per-draw loop's (summaries ``==``, losses to float32 rounding,
    the reliable prefix bit for bit). Planted: the program one global step late (the next step's
    minibatches and writes) is caught."""
    monkeypatch.setattr(dr, "SCAR_CHUNK", 4)
    job = _job()
    starts = np.random.default_rng(2).uniform(0.0, 40000.0 - HORIZON, 16)
    keys = jax.random.split(jax.random.key(11), 16)
    a = dr.run("scar", job, p3(), keys, horizon_s=HORIZON, start_s=starts)
    b = dr.per_draw("scar", job, p3(), keys, horizon_s=HORIZON, start_s=starts)
    firsts = _first_losses(job, p3(), keys, starts)
    assert sum(f is not None and f >= 4 for f in firsts) >= 2, "no draw starts late: a vacuous test"
    check_identical(a, b, job.target_loss)
    check_scar_curves(a, b, firsts)
    real = dr._scar_program
    monkeypatch.setattr(dr, "_scar_program", lambda *setup: functools.partial(_one_step_late, real(*setup)))
    bad = dr.run("scar", job, p3(), keys, horizon_s=HORIZON, start_s=starts)
    with pytest.raises(AssertionError):
        check_scar_curves(bad, b, firsts)


def _padding_ok(padded, n):
    p = padded(n)
    return n <= p <= max(8, n + max(3, (n - 1) // 8))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(n=st.integers(1, 5000))
def test_property_padded_sizes(n):
    """A chunk call's padded draw count: at least ``n``, at most 3 more (an eighth more above 32
    draws). Planted: doubling is caught."""
    assert _padding_ok(dr._padded, n)
    assert not _padding_ok(lambda m: 2 * m + 8, n)


def test_padded_sizes_are_few_per_octave():
    """At most 8 padded sizes per octave (compilations); planted: no padding (every size) is caught."""
    def most(padded):
        return max(len({padded(n) for n in range(2**k + 1, 2**(k + 1) + 1)}) for k in range(3, 13))

    assert most(dr._padded) <= 8
    assert most(lambda n: n) > 8


# ----------------------------------------------------------------------------- properties


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
@settings(max_examples=6, deadline=None, derandomize=True)
@given(data=st.data())
def test_property_random_traces_equal_the_per_draw_loop(data):
    market = random_trace(data, max_nodes=5)
    policy = data.draw(st.sampled_from(["checkpoint_restart", "scar"]), label="policy")
    unavailable = data.draw(st.sampled_from(["on_demand", "wait"]), label="unavailable")
    starts = np.array(data.draw(st.lists(st.integers(0, 8000), min_size=4, max_size=4), label="starts"), float)
    job = _job(workers=2)
    a, b = _both(policy, job, market, 4, data.draw(st.integers(0, 99), label="seed"), starts, unavailable=unavailable)
    check_identical(a, b, job.target_loss)


def test_planted_violation_tables_of_another_draw_are_caught(monkeypatch):
    """Planted: each draw served the next draw's purchases (the tables' rows shifted, for the
    lock-step planner and the per-draw fallback alike). The equality check fails."""
    job = _job()
    starts = np.random.default_rng(1).uniform(0.0, 40000.0 - HORIZON, 24)
    real = dr._market_tables

    def shifted(market, keys, machines):
        tab = real(market, keys, machines)
        return tab._replace(**{f: np.roll(getattr(tab, f), 1, axis=0) for f in ("up", "life", "u")
                               if getattr(tab, f) is not None})

    monkeypatch.setattr(dr, "_market_tables", shifted)
    a, b = _both("checkpoint_restart", job, p3(), 24, 3, starts)
    with pytest.raises(AssertionError, match="mismatches"):
        check_identical(a, b, job.target_loss)


def test_planted_violation_one_ulp_and_one_count_are_caught():
    job = _job()
    a, b = _both("checkpoint_restart", job, _exp(), 4, 7)
    s = dr.summary(b, job.target_loss)
    assert dr.mismatches(dr.summary(a, job.target_loss), s) == []
    t = {k: v.copy() for k, v in s.items()}
    t["dollars"][1] = np.nextafter(t["dollars"][1], np.inf)
    assert dr.mismatches(s, t) == [f"dollars[1]: {s['dollars'][1]!r} != {t['dollars'][1]!r}"]
    t = {k: v.copy() for k, v in s.items()}
    t["rework_steps"][0] += 1
    assert len(dr.mismatches(s, t)) == 1
    del t["rework_steps"]
    assert dr.mismatches(s, t) == ["rework_steps: only in the first"]


# ----------------------------------------------------------------------------- determinism, input


@pytest.mark.parametrize("policy", sorted(dr.POLICIES))
def test_same_keys_same_runs(policy):
    job = _job()
    keys = jax.random.split(jax.random.key(9), 6)
    starts = np.linspace(0.0, 30000.0, 6)
    one = dr.summary(dr.run(policy, job, p3(), keys, horizon_s=HORIZON, start_s=starts, **OPTS[policy]), job.target_loss)
    two = dr.summary(dr.run(policy, job, p3(), keys, horizon_s=HORIZON, start_s=starts, **OPTS[policy]), job.target_loss)
    assert dr.mismatches(one, two) == []


def test_bad_input_names_the_argument():
    job, keys = _job(), jax.random.split(jax.random.key(0), 3)
    with pytest.raises(ValueError, match="policy"):
        dr.run("on_demand", job, _exp(), keys, horizon_s=HORIZON)
    with pytest.raises(ValueError, match="start_s"):
        dr.run("scar", job, _exp(), keys, horizon_s=HORIZON, start_s=[0.0, 1.0])
    with pytest.raises(ValueError, match="start_s"):
        dr.run("scar", job, _exp(), keys, horizon_s=HORIZON, start_s=[0.0, -1.0, 2.0])
    with pytest.raises(TypeError, match="keys"):
        dr.run("scar", job, _exp(), np.zeros(3), horizon_s=HORIZON)
    with pytest.raises(TypeError, match="market"):
        dr.run("scar", job, "p3", keys, horizon_s=HORIZON)
    with pytest.raises(TypeError, match="job"):
        dr.run("scar", None, _exp(), keys, horizon_s=HORIZON)
    with pytest.raises(ValueError, match="horizon_s"):
        dr.run("scar", job, _exp(), keys, horizon_s=0.0)
