"""scarjax.cluster.lifetimes: Eq 4's closed form, the capped Kaplan-Meier CDF (monotone, in
[0, 1], the 24 h cap censored), Pr(R) in [0, 1], Table V on the embedded lifetimes, the Eq 4
validation's structure, errors naming bad arguments, planted violations."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.cluster import lifetimes as L


def check_cdf(t, F, cap_h):
    """The properties Fig 8's curves must have."""
    t, F = np.asarray(t), np.asarray(F)
    assert np.all(np.diff(t) > 0), "CDF times must increase"
    assert np.all(np.diff(F) >= -1e-12), "CDF must be non-decreasing"
    assert np.all((F >= 0) & (F <= 1)), "CDF must lie in [0, 1]"
    assert t[-1] == cap_h, f"CDF must end at the cap {cap_h}, ends at {t[-1]}"


# --------------------------------------------------------------------------- Eq 4 / Eq 5


def test_training_time_closed_form():
    # 64K steps at 4 steps/s, a 3.8 s checkpoint every 4K (16), 2 revocations of 90 + 75.6 s
    t = L.training_time(64000, 4.0, ckpt_interval=4000, ckpt_s=3.8, n_revocations=2, provision_s=90, replace_s=75.6)
    assert t == pytest.approx(16000 + 16 * 3.8 + 2 * 165.6)
    # ceil: 64001 steps need a 17th checkpoint; inf interval: none
    assert L.training_time(64001, 4.0, ckpt_interval=4000, ckpt_s=1.0) == pytest.approx(64001 / 4 + 17)
    assert L.training_time(100, 1.0, ckpt_interval=np.inf, ckpt_s=5.0) == pytest.approx(100)
    # vectorised (broadcast) and JAX in, JAX out (jit-able)
    v = L.training_time(np.array([4000, 8000]), np.array([[1.0], [2.0]]), ckpt_interval=4000, ckpt_s=1.0)
    np.testing.assert_allclose(v, [[4001, 8002], [2001, 4002]])
    f = jax.jit(lambda n: L.training_time(n, 2.0, ckpt_interval=10.0, ckpt_s=1.0))
    assert isinstance(f(jnp.float32(20.0)), jax.Array) and float(f(jnp.float32(20.0))) == pytest.approx(12.0)


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(n_steps=0), "n_steps"),
        (dict(speed=-1.0), "speed"),
        (dict(ckpt_interval=0), "ckpt_interval"),
        (dict(ckpt_s=-0.1), "ckpt_s"),
        (dict(n_revocations=np.nan), "n_revocations"),
        (dict(replace_s="x"), "replace_s"),
    ],
)
def test_training_time_errors_name_argument(kw, msg):
    base = dict(n_steps=100, speed=1.0, ckpt_interval=10, ckpt_s=1.0)
    base.update(kw)
    with pytest.raises((ValueError, TypeError), match=msg):
        L.training_time(base.pop("n_steps"), base.pop("speed"), **base)


def test_expected_revocations():
    assert L.expected_revocations([0.1, 0.2, 0.7]) == pytest.approx(1.0)
    np.testing.assert_allclose(L.expected_revocations(np.full((3, 4), 0.5)), [2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match="probs"):
        L.expected_revocations([0.5, 1.5])
    with pytest.raises(ValueError, match="probs"):
        L.expected_revocations(0.5)


@settings(max_examples=25, deadline=None)
@given(
    n=st.floats(1, 1e6), sp=st.floats(0.01, 100), ic=st.floats(1, 1e5), tc=st.floats(0, 100),
    nr=st.floats(0, 10), tp=st.floats(0, 300),
)
def test_training_time_monotone(n, sp, ic, tc, nr, tp):
    t = L.training_time(n, sp, ckpt_interval=ic, ckpt_s=tc, n_revocations=nr, provision_s=tp, replace_s=10.0)
    assert math.isfinite(t) and t >= n / sp
    assert L.training_time(n, sp * 2, ckpt_interval=ic, ckpt_s=tc, n_revocations=nr, provision_s=tp, replace_s=10.0) <= t
    assert L.training_time(n, sp, ckpt_interval=ic, ckpt_s=tc, n_revocations=nr + 1, provision_s=tp, replace_s=10.0) > t


def test_cost():
    c = L.training_cost(3600.0, workers=4, worker_price_h=L.gce_hourly_price("K80"), ps=1,
                        ps_price_h=L.gce_hourly_price(None))
    assert c == pytest.approx(4 * 0.3 * (0.45 + 0.19) + 0.3 * 0.19, rel=1e-6)
    assert L.gce_hourly_price("V100", preemptible=False) == pytest.approx(2.48 + 0.19)
    with pytest.raises(ValueError, match="gpu"):
        L.gce_hourly_price("A100")
    with pytest.raises(ValueError, match="time_s"):
        L.training_cost(-1.0, workers=1, worker_price_h=1.0)


# --------------------------------------------------------------------------- Kaplan-Meier


def test_kaplan_meier_censoring():
    # 4 VMs: revoked at 1 h and 3 h, one stopped (censored) at 2 h, one alive at the cap.
    t, F = L.kaplan_meier([1.0, 2.0, 3.0, 30.0], np.array([True, False, True, True]), cap_h=24.0)
    check_cdf(t, F, 24.0)
    # KM: S(1) = 3/4; at 3 h 2 at risk, one dies: S = 3/8. The 30 h "revocation" is past the cap: censored.
    np.testing.assert_allclose(t, [0, 1, 3, 24])
    np.testing.assert_allclose(F, [0, 0.25, 0.625, 0.625])
    assert L.cdf_at(t, F, 2.9) == pytest.approx(0.25) and L.cdf_at(t, F, 3.0) == pytest.approx(0.625)
    # restricted mean = integral of S to 24 h
    assert L.restricted_mean(t, F) == pytest.approx(1 + 0.75 * 2 + 0.375 * 21)
    # naive empirical CDF (censored treated as revoked) would put F(2) = 0.5: KM does not
    assert L.cdf_at(t, F, 2.5) < 0.5
    # a smaller cap censors everything alive then
    t2, F2 = L.kaplan_meier([1.0, 2.0, 3.0, 30.0], np.ones(4, bool), cap_h=2.5)
    np.testing.assert_allclose(F2[-1], 0.5)
    check_cdf(t2, F2, 2.5)


def test_kaplan_meier_errors():
    with pytest.raises(ValueError, match="durations_h"):
        L.kaplan_meier([-1.0, 2.0], np.array([True, True]))
    with pytest.raises(TypeError, match="revoked"):
        L.kaplan_meier([1.0, 2.0], [1, 0])
    with pytest.raises(ValueError, match="revoked"):
        L.kaplan_meier([1.0, 2.0], np.array([True]))
    with pytest.raises(ValueError, match="cap_h"):
        L.kaplan_meier([1.0], np.array([True]), cap_h=0.0)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 30), st.booleans()), min_size=1, max_size=30))
def test_kaplan_meier_properties(obs):
    d = np.array([o[0] for o in obs])
    r = np.array([o[1] for o in obs])
    t, F = L.kaplan_meier(d, r, cap_h=24.0)
    check_cdf(t, F, 24.0)
    # without censoring before the cap KM is the empirical fraction revoked before the cap
    if not np.any(~r & (d < 24.0)):
        assert F[-1] == pytest.approx(np.mean(r & (d < 24.0)))
    assert 0.0 <= L.restricted_mean(t, F) <= 24.0 + 1e-9


def test_check_cdf_catches_planted_violations():
    with pytest.raises(AssertionError, match="non-decreasing"):
        check_cdf([0, 1, 24], [0, 0.5, 0.4], 24)
    with pytest.raises(AssertionError, match=r"\[0, 1\]"):
        check_cdf([0, 1, 24], [0, 0.5, 1.2], 24)
    with pytest.raises(AssertionError, match="end at the cap"):
        check_cdf([0, 1, 23], [0, 0.5, 0.5], 24)


# --------------------------------------------------------------------------- on the data


def test_lifetime_cdfs_and_probabilities_on_embedded_data():
    for gpu in ("K80", "P100", "V100"):
        t, F = L.lifetime_cdf(None, gpu)
        check_cdf(t, F, 24.0)
        p = L.revocation_probability(None, gpu, np.array([0.0, 1.0, 12.0, 23.9, 24.0, 48.0]))
        assert np.all((p >= 0) & (p <= 1)) and np.all(np.diff(p) >= 0), p
        assert p[-1] == 1.0 and p[-2] == 1.0  # the cap ends every VM
    # K80 us-central1: 14 of 16 revoked before 24 h (2 reached the cap: censored, F < 1)
    t, F = L.lifetime_cdf(None, "K80", "us-central1")
    assert F[-1] == pytest.approx(14 / 16)
    with pytest.raises(ValueError, match="region"):
        L.lifetime_cdf(None, "V100", "us-east1")
    with pytest.raises(ValueError, match="duration_h"):
        L.revocation_probability(None, "K80", -1.0)
    with pytest.raises(TypeError, match="lifetimes"):
        L.lifetime_cdf([1, 2, 3], "K80")


def test_revocation_table_and_mttr():
    rows = L.revocation_table()
    total = {r["gpu"]: r for r in rows if r["region"] == "total"}
    assert sum(r["launched"] for r in total.values()) == 152
    assert total["K80"]["launched"] == 64 and total["K80"]["revoked"] == 20
    for r in rows:
        assert r["revoked"] == r["revoked_stressed"] + r["revoked_idle"]
        assert r["launched"] == r["revoked"] + r["reached_cap"]
        assert 0 <= r["percent"] <= 100
    m = L.mean_time_to_revocation(gpu="K80")
    c = m[("K80", "us-central1")]
    assert c["n"] == 16 and c["revoked"] == 14 and c["censored"] == 2
    # censoring-aware restricted mean >= naive mean of the revoked only; <= cap
    assert c["naive_mean_h"] <= c["km_restricted_mean_h"] <= 24.0
    assert m[("K80", "us-east1")]["naive_mean_h"] is None and m[("K80", "us-east1")]["exponential_mttf_h"] == math.inf
    assert ("K80", "all") in m


def test_validate_training_time_structure():
    v = L.validate_training_time()
    assert {r["gpu"] for r in v["resnet32"]} == {"k80", "p100", "v100"}
    k80 = next(r for r in v["resnet32"] if r["gpu"] == "k80")
    assert k80["measured_s"] == pytest.approx(64000 / k80["measured_speed"] + 16 * k80["measured_ckpt_s"])
    done = [r for r in v["gce_runs"] if r["completed"]]
    assert len(v["gce_runs"]) == 107 and all(r["predicted_s"] > 0 for r in done)
    assert all(r["rel_error"] is None for r in v["gce_runs"] if not r["completed"])
    assert set(v["summary"]) == {"resnet32", "k80-4", "k80-8", "v100"}
    with pytest.raises(ValueError, match="predicted_ckpt_s"):
        L.validate_training_time(predicted_ckpt_s=-1.0)
