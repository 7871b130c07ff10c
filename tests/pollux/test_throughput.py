"""Eq 3.4-3.8 throughput model and its fit (Sec 3.4.1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from scarjax import pollux as px

TRUE = px.ThroughputParams(
    alpha_grad=0.01,
    beta_grad=1e-3,
    alpha_sync_local=0.02,
    beta_sync_local=2e-3,
    alpha_sync_node=0.05,
    beta_sync_node=5e-3,
    gamma=2.0,
)


def test_t_sync_cases_eq_3_6():
    assert float(px.t_sync(TRUE, 1, 1)) == 0.0
    assert float(px.t_sync(TRUE, 1, 2)) == pytest.approx(0.02)
    assert float(px.t_sync(TRUE, 1, 4)) == pytest.approx(0.02 + 2 * 2e-3)
    assert float(px.t_sync(TRUE, 2, 2)) == pytest.approx(0.05)
    assert float(px.t_sync(TRUE, 2, 8)) == pytest.approx(0.05 + 6 * 5e-3)


@given(m=st.integers(1, 1000), k=st.integers(2, 32), s=st.integers(0, 8))
def test_t_iter_overlap_limits_eq_3_7_3_8(m, k, s):
    tg = float(px.t_grad(TRUE, m))
    ts = float(px.t_sync(TRUE, 1, k))
    no_overlap = float(px.t_iter(TRUE._replace(gamma=1.0), 1, k, m, s))
    assert no_overlap == pytest.approx(s * tg + tg + ts, rel=1e-5)
    near_max = float(px.t_iter(TRUE._replace(gamma=10.0), 1, k, m, s))
    lo, hi = s * tg + max(tg, ts), s * tg + (tg**10 + ts**10) ** 0.1
    assert lo * (1 - 1e-6) <= near_max <= hi * (1 + 1e-6)
    mid = float(px.t_iter(TRUE, 1, k, m, s))
    assert near_max * (1 - 1e-6) <= mid <= no_overlap * (1 + 1e-6)


def test_single_replica_has_no_sync():
    np.testing.assert_allclose(
        px.t_iter(TRUE, 1, 1, jnp.arange(1, 5), 2), 3 * (0.01 + 1e-3 * jnp.arange(1, 5)), rtol=1e-6
    )


def test_throughput_eq_3_4_and_placement():
    n, k = px.placement(jnp.array([[4, 0, 0], [2, 2, 0], [1, 1, 1]]))
    np.testing.assert_array_equal(n, [1, 2, 3])
    np.testing.assert_array_equal(k, [4, 4, 3])
    thr = px.throughput(TRUE, n, k, 32, 1)
    np.testing.assert_allclose(thr, k * 32 * 2 / px.t_iter(TRUE, n, k, 32, 1), rtol=1e-6)


def test_grad_of_model_is_finite_at_zero_sync():
    f = lambda g: px.t_iter(TRUE._replace(gamma=g), 1, 1, 8.0, 0)
    assert np.isfinite(float(jax.grad(f)(2.0)))


def _grid():
    cfg = [
        (n, k, m, s)
        for (n, k) in [(1, 1), (1, 2), (1, 4), (2, 4), (2, 8), (4, 16)]
        for m in (8, 32, 128)
        for s in (0, 2)
    ]
    return [np.array(c, dtype=np.float64) for c in zip(*cfg)]


def test_fit_self_consistency_exact_data():
    n, k, m, s = _grid()
    t = np.asarray(px.t_iter(TRUE, n, k, m, s), np.float64)
    fit = px.fit_throughput(n, k, m, s, t)
    assert fit.rmsle < 1e-4
    assert fit.max_rel_error < 1e-3
    np.testing.assert_allclose(np.array(fit.params), np.array(TRUE), rtol=0.02, atol=1e-6)
    assert fit.pinned == ()


def test_fit_self_consistency_noisy_data():
    n, k, m, s = _grid()
    rng = np.random.default_rng(0)
    t = np.asarray(px.t_iter(TRUE, n, k, m, s), np.float64)
    n, k, m, s, t = (np.tile(x, 5) for x in (n, k, m, s, t))
    t_obs = t * np.exp(0.03 * rng.standard_normal(t.size))
    fit = px.fit_throughput(n, k, m, s, t_obs)
    pred = np.asarray(px.t_iter(fit.params, n, k, m, s))
    assert np.mean(np.abs(pred - t) / t) < 0.02  # close to the noise-free truth
    assert fit.rmsle < 0.04


def test_priors_pin_unobserved_parameters():
    m = np.array([8.0, 32.0, 128.0])
    one = np.ones(3)
    t = np.asarray(px.t_iter(TRUE, one, one, m, 0 * one), np.float64)
    fit = px.fit_throughput(one, one, m, 0 * one, t)
    p = fit.params
    assert p.alpha_sync_local == p.beta_sync_local == p.alpha_sync_node == p.beta_sync_node == 0
    assert set(fit.pinned) >= {
        "alpha_sync_local",
        "beta_sync_local",
        "alpha_sync_node",
        "beta_sync_node",
        "gamma",
    }
    assert p.alpha_grad == pytest.approx(TRUE.alpha_grad, rel=1e-3)
    # Prior-driven exploration: predicted to scale perfectly to more devices.
    assert float(px.throughput(p, 2, 8, 32, 0)) == pytest.approx(8 * float(px.throughput(p, 1, 1, 32, 0)))

    # Two replicas on one node: the local pair is fitted, the node pair and betas pinned.
    n = np.array([1.0, 1, 1, 1])
    k = np.array([1.0, 1, 2, 2])
    m2 = np.array([8.0, 64, 8, 64])
    t2 = np.asarray(px.t_iter(TRUE, n, k, m2, 0 * n), np.float64)
    fit2 = px.fit_throughput(n, k, m2, 0 * n, t2)
    assert fit2.params.alpha_sync_node == fit2.params.beta_sync_node == 0
    assert fit2.params.beta_sync_local == 0
    assert fit2.params.alpha_sync_local > 0
    assert fit2.rmsle < 1e-3


def test_single_batch_size_ties_compute_split():
    k = np.array([1.0, 2.0])
    n = np.ones(2)
    m = np.array([32.0, 32.0])
    t = np.asarray(px.t_iter(TRUE, n, k, m, 0 * n), np.float64)
    fit = px.fit_throughput(n, k, m, 0 * n, t)
    assert fit.params.alpha_grad == pytest.approx(fit.params.beta_grad * 32, rel=1e-6)
    assert "alpha_grad=beta_grad*m" in fit.pinned


def test_fit_bad_inputs():
    with pytest.raises(ValueError, match="t_iter_obs"):
        px.fit_throughput([1], [1], [8], [0], [-1.0])
    with pytest.raises(ValueError, match="records"):
        px.fit_throughput([1, 1], [1], [8], [0], [1.0])
    with pytest.raises(ValueError, match="nodes must be <= replicas"):
        px.fit_throughput([2], [1], [8], [0], [1.0])
    with pytest.raises(ValueError, match="local_bsz"):
        px.fit_throughput([1], [1], [0], [0], [1.0])
    with pytest.raises(ValueError, match="at least one record"):
        px.fit_throughput([], [], [], [], [])
    with pytest.raises(ValueError, match="t_iter_obs"):
        px.fit_throughput([1], [1], [8], [0], [float("nan")])


def test_model_bad_inputs():
    with pytest.raises(ValueError, match="alpha_grad"):
        px.t_iter(TRUE._replace(alpha_grad=-1.0), 1, 1, 8, 0)
    with pytest.raises(ValueError, match="replicas"):
        px.t_iter(TRUE, 1, 0, 8, 0)
    with pytest.raises(ValueError, match="allocation"):
        px.placement(jnp.array([1, -1]))
