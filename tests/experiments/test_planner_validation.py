"""experiments/planner_validation: the quick run end to end (JSON keys, PNG, report, no
absolute path), regret >= 0 by construction, censored runs counted (never dropped), the series
re-billing equal to ``market.bill``, the built availability series as stated."""

import json
import math
import re

import numpy as np
import pytest

from experiments import planner_validation as m
from scarjax.cluster.ledger import Ledger
from scarjax.cluster import market as mk

#: a machine's own path (tests/test_layout.py's rule for committed reports, in short)
ABSOLUTE = re.compile(r"(?<![\w.~$/:-])/(?:home|Users|work|root|mnt|opt|srv|data|media)/[\w.$-]")
CASE_KEYS = {"family", "label", "job", "market", "plan_window", "eval_window", "chosen", "chosen_plan", "pred", "sim",
             "sim_mean", "err", "censored", "regret", "best", "subset", "subset_censored", "subset_runs",
             "pred_same_window", "err_same_window", "spot_avail_eval"}


def check_results(res: dict) -> None:
    """The JSON's shape and its invariants: every case has its keys, regret >= 0 (or inf when
    censored), the chosen plan among the simulated ones, censored runs recounted from the
    per-start outcomes and never dropped from the summaries."""
    need = {"config", "profile", "cases", "points", "summary"}
    assert need <= set(res), f"results lack keys {sorted(need - set(res))}"
    s = res["summary"]
    for k in ("err_dollars_chosen", "err_time_h_chosen", "err_dollars_all", "err_time_h_all", "regret"):
        assert k in s, f"summary lacks {k!r}"
    assert s["n_cases"] == len(res["cases"]) >= 1, "summary n_cases must count every case"
    cens = 0
    for c in res["cases"]:
        assert CASE_KEYS <= set(c), f"case lacks keys {sorted(CASE_KEYS - set(c))}"
        assert c["chosen"] in c["subset"], "the chosen plan must be simulated (regret >= 0 by construction)"
        r = float(c["regret"])
        missed = sum(not x for x in c["sim"]["reached"])
        assert c["censored"] == missed, f"censored {c['censored']} but {missed} runs of the chosen plan missed the target"
        assert r >= 0.0, f"regret {r} < 0"
        assert math.isfinite(r) == (c["regret_reason"] is None), "regret is inf exactly when the chosen plan is not eligible"
        if missed:
            assert not math.isfinite(r), "a chosen plan with a censored run must have regret inf (counted, not dropped)"
        cens += missed
    assert s["censored_chosen_runs"] == cens, f"summary censored_chosen_runs {s['censored_chosen_runs']} != {cens} recounted"
    assert s["err_dollars_chosen"]["n"] == len(res["cases"]), "a case was dropped from the error summary"
    assert s["regret"]["n"] == len(res["cases"]), "a case was dropped from the regret summary"
    fams = {c["family"] for c in res["cases"]}
    assert set(s["by_family"]) == fams, "every family must have its own summary"
    assert sum(b["n_cases"] for b in s["by_family"].values()) == len(res["cases"]), "a case was dropped from a family"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    pytest.importorskip("scarjax.cluster.planner")
    out = tmp_path_factory.mktemp("pv")
    m.run(m.Config.quick(), out)
    return out, json.loads((out / "results" / f"{m.NAME}.json").read_text())


def test_quick_end_to_end(quick):
    out, res = quick
    check_results(res)
    assert [c["family"] for c in res["cases"]] == ["p3_nodes", "rare"]
    assert not ABSOLUTE.search(json.dumps(res)), "an absolute path in the results"
    assert (out / "paper_figs" / f"{m.NAME}.png").stat().st_size > 10_000
    text = m.report(res)
    assert "Regret" in text and "median abs" in text
    # planted violations
    bad = json.loads(json.dumps(res))
    bad["cases"][0]["regret"] = -0.1
    with pytest.raises(AssertionError, match="regret -0.1 < 0"):
        check_results(bad)
    bad = json.loads(json.dumps(res))
    bad["cases"][0]["sim"]["reached"][0] = False
    with pytest.raises(AssertionError, match="missed the target"):
        check_results(bad)
    bad = json.loads(json.dumps(res))
    bad["summary"]["regret"]["n"] = 0
    with pytest.raises(AssertionError, match="dropped from the regret summary"):
        check_results(bad)
    bad = json.loads(json.dumps(res))
    del bad["cases"][0]["err"]
    with pytest.raises(AssertionError, match="case lacks keys"):
        check_results(bad)


def test_regret_by_construction_and_censoring():
    sims = {
        0: {"reached": [True, True], "dollars": [2.0, 4.0], "time_h": [1.0, 1.0]},
        1: {"reached": [True, True], "dollars": [1.0, 2.0], "time_h": [3.0, 3.0]},
        2: {"reached": [True, False], "dollars": [0.1, 0.1], "time_h": [9.0, 48.0]},  # cheap but censored
    }
    r = m.regret(0, sims)
    assert r["best"] == 1 and r["regret"] == pytest.approx(3.0 / 1.5 - 1.0) and not r["censored"]
    assert m.regret(1, sims)["regret"] == 0.0
    r = m.regret(2, sims)  # the chosen plan missed the target at a start: inf, not dropped, not negative
    assert r["regret"] == math.inf and r["censored"] and r["best"] == 1
    assert m.regret(0, sims, "time_h")["best"] == 0
    r = m.regret(1, sims, deadline_h=2.0)  # over the deadline in simulation: inf, and the best is 0
    assert r["regret"] == math.inf and r["reason"] == "deadline" and r["best"] == 0
    with pytest.raises(ValueError, match="chosen candidate 7 must be among"):
        m.regret(7, sims)
    s = m.regret_summary([0.0, 0.5, math.inf])
    assert s["n"] == 3 and s["censored"] == 1 and s["zero"] == 1 and s["max"] == 0.5


def test_error_summary_and_rel_err():
    e = m.rel_err([1.1, 0.5, 2.0], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(e, [0.1, -0.5, 1.0])
    s = m.error_summary(e, [False, True, False])
    assert s["n"] == 3 and s["censored"] == 1 and s["median_abs"] == pytest.approx(0.5)
    assert s["mean_signed"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="sim must be finite and > 0"):
        m.rel_err([1.0], [0.0])


def test_series_bill_equals_market_bill():
    sp, ser = m._spot("us-east-1e:c3.xlarge", None)
    ts, ps = np.asarray(ser.times_s, np.float64), np.asarray(ser.prices, np.float64)
    rng = np.random.default_rng(0)
    for i in range(12):
        s = float(np.round(rng.uniform(0, 25 * 86400)))
        d = float(np.round(rng.uniform(0, 30000))) if i % 3 else 3600.0 * (i % 4) + 0.5
        rev, b = bool(i % 2), ("hourly", "per_second")[(i // 2) % 2]
        assert m.series_bill(ts, ps, s, s + d, rev, b) == pytest.approx(float(mk.bill(s, s + d, ser, rev, b)), rel=1e-5, abs=1e-6)


def test_rebill_matches_a_series_ledger():
    """A ledger billed with the sentinel spot price, re-billed at the series, equals the same
    ledger billed with the series by the simulator's own rule."""
    sp, ser = m._spot("us-east-1e:r3.large", None)
    ts, ps = np.asarray(ser.times_s, np.float64), np.asarray(ser.prices, np.float64)
    fast, real = Ledger(), Ledger()
    plan = [("a", 1000.0, 9000.0, False), ("b", 2000.0, 2500.0, True), ("c", 5000.0, None, False)]
    for led, price in ((fast, 3 * m._SENTINEL), (real, None)):
        for mid, a, b, rev in plan:
            p = price if price is not None else mk.price_series(ps * 3, ts, end_s=float(ser.end_s))
            led.start(mid, a, price=p, tier="transient")
            if b is not None:
                led.stop(mid, b, revoked=rev)
        led.start("od", 1500.0, price=sp.on_demand, tier="reliable")
    got = m.rebill(fast, 8000.0, ts, ps, sp.on_demand)
    assert got["dollars"] == pytest.approx(real.cost(8000.0), rel=1e-5)
    assert got["reliable"] == pytest.approx(2 * sp.on_demand)


def test_windows_and_bad_arguments():
    sp, _ = m._spot("us-east-1e:c3.xlarge", None)
    w = m.windows(sp, "week")
    assert len(w) == 3 and w[0]["eval"] == w[1]["plan"]
    assert all(a["plan"][1] <= a["eval"][0] for a in w), "a planning window must end before its evaluation window"
    with pytest.raises(ValueError, match="period must be"):
        m.windows(sp, "day")
    with pytest.raises(ValueError, match="markets: each must be 'zone:instance_type'"):
        m._parse_market("us-east-1e")
    with pytest.raises(ValueError, match="window must have start < end"):
        m._starts((3600.0, 0.0), 2, 7200.0, np.random.default_rng(0))
    s = m._starts((0.0, 100 * 3600.0), 50, 48 * 3600.0, np.random.default_rng(0))
    assert s.min() >= 0 and s.max() <= 52 * 3600.0, "starts must leave the horizon inside the window"
    k = np.floor(s / (52 * 3600.0 / 50) - 1e-9).clip(0, 49)  # stratified: one start per stratum (to the minute)
    assert np.unique(k).size >= 48, "starts must be stratified over the window"
    s = m._starts((0.0, 100 * 3600.0), 50, 48 * 3600.0, np.random.default_rng(0), end_s=200 * 3600.0)
    assert s.max() > 90 * 3600.0 and s.max() <= 100 * 3600.0, "a market that goes on: starts over the whole window"
    with pytest.raises(ValueError, match="families: unknown family"):
        m.cases(m.Config(families=("moon",)))


def test_availability_series_as_stated():
    """The built series: 5-minute ticks, counts 0 or 4-16, the share of time with machines
    near up / (up + down) (rare: about 5%), deterministic in the seed."""
    for up, down in ((4.0, 2.0), (0.25, 4.75)):
        shares = []
        for seed in range(6):
            t, c = m.availability_series(seed, 400.0, up, down)
            assert np.all(np.diff(t) == 300.0) and set(np.unique(c)) <= {0} | set(range(4, 17))
            shares.append(float(np.mean(c > 0)))
        want = up / (up + down)
        assert abs(np.mean(shares) - want) <= 0.35 * want, f"share {np.mean(shares):.3f} vs stated {want:.3f}"
    a, b = m.availability_series(3, 50.0, 4.0, 2.0), m.availability_series(3, 50.0, 4.0, 2.0)
    assert np.array_equal(a[1], b[1])
