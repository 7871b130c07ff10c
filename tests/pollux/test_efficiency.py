"""Invariants of Eq 3.3 (efficiency) and Eq 3.1 (goodput)."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from scarjax import pollux as px

PARAMS = px.ThroughputParams(0.01, 1e-3, 0.02, 2e-3, 0.05, 5e-3, 2.0)

phis = st.one_of(st.floats(0.0, 1e7), st.just(float("inf")))
m0s = st.floats(1.0, 1e4)


@given(phi=phis, m0=m0s, r1=st.floats(1.0, 1e3), r2=st.floats(1.0, 1e3))
def test_efficiency_in_unit_interval_and_non_increasing(phi, m0, r1, r2):
    m1, m2 = m0 * min(r1, r2), m0 * max(r1, r2)
    e = np.asarray(px.efficiency(jnp.array([m0, m1, m2]), phi, m0), np.float64)
    assert np.all(np.isfinite(e))
    assert np.all(e > 0) and np.all(e <= 1 + 1e-6)
    assert e[0] == pytest.approx(1.0, abs=1e-6)  # E(M0) = 1
    assert e[2] <= e[1] + 1e-6  # non-increasing in M


@given(phi=st.floats(0.0, 1e5), m0=st.floats(1.0, 1e3), r=st.floats(1.0, 1e3))
def test_efficiency_matches_eq_3_3(phi, m0, r):
    m = m0 * r
    assert float(px.efficiency(m, phi, m0)) == pytest.approx((phi + m0) / (phi + m), rel=1e-5)


def test_efficiency_limits():
    assert float(px.efficiency(1024.0, float("inf"), 32.0)) == 1.0  # pure noise: no loss
    assert float(px.efficiency(1024.0, 0.0, 32.0)) == pytest.approx(32 / 1024)  # no noise


def test_efficiency_from_stats_uses_noise_scale():
    stats = px.GradStats(jnp.float32(0.5), jnp.float32(50.0))
    assert float(px.efficiency_from_stats(200.0, stats, 100.0)) == pytest.approx(200 / 300)


@given(
    phi=st.floats(0.0, 1e5),
    n=st.integers(1, 4),
    extra=st.integers(0, 12),
    m=st.integers(1, 512),
    s=st.integers(0, 7),
)
def test_goodput_is_throughput_times_efficiency(phi, n, extra, m, s):
    k = n + extra
    m0 = 1.0
    gp = float(px.goodput(PARAMS, phi, m0, n, k, m, s))
    thr = float(px.throughput(PARAMS, n, k, m, s))
    eff = float(px.efficiency(k * m * (s + 1), phi, m0))
    assert gp == pytest.approx(thr * eff, rel=1e-5)
    assert 0 < gp <= thr * (1 + 1e-6)


def test_goodput_vectorised_over_configurations():
    n = jnp.array([1, 1, 2, 4])
    k = jnp.array([1, 4, 8, 16])
    m = jnp.array([[16], [64]])
    gp = px.goodput(PARAMS, 300.0, 16.0, n, k, m, 0)
    assert gp.shape == (2, 4)
    for i in range(2):
        for j in range(4):
            assert float(gp[i, j]) == pytest.approx(
                float(px.goodput(PARAMS, 300.0, 16.0, int(n[j]), int(k[j]), int(m[i, 0]), 0)), rel=1e-5
            )


def test_statistical_epochs_accumulates():
    ep = px.statistical_epochs(jnp.array([10.0, 20.0, 40.0]), jnp.array([1.0, 0.5, 0.25]), 100)
    np.testing.assert_allclose(ep, [0.1, 0.2, 0.3], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=10.0, phi=1.0, base_batch_size=0.0), "base_batch_size"),
        (dict(batch_size=10.0, phi=-1.0, base_batch_size=1.0), "phi"),
        (dict(batch_size=10.0, phi=float("nan"), base_batch_size=1.0), "phi"),
        (dict(batch_size=0.5, phi=1.0, base_batch_size=1.0), "batch_size"),
        (dict(batch_size=-3.0, phi=1.0, base_batch_size=1.0), "batch_size"),
    ],
)
def test_efficiency_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        px.efficiency(**kwargs)


def test_efficiency_below_base_opt_in():
    assert float(px.efficiency(16.0, 10.0, 32.0, allow_below_base=True)) > 1.0


def test_goodput_bad_inputs():
    with pytest.raises(ValueError, match="nodes must be <= replicas"):
        px.goodput(PARAMS, 1.0, 1.0, 3, 2, 8, 0)
    with pytest.raises(ValueError, match="accum_steps"):
        px.goodput(PARAMS, 1.0, 1.0, 1, 2, 8, 0.5)
    with pytest.raises(ValueError, match="gamma"):
        px.goodput(PARAMS._replace(gamma=0.5), 1.0, 1.0, 1, 2, 8, 0)
    with pytest.raises(TypeError, match="ThroughputParams"):
        px.goodput((1.0, 2.0), 1.0, 1.0, 1, 2, 8, 0)
