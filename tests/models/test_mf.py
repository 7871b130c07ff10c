"""Tests for scarjax.models.mf (ALS matrix factorisation, thesis Sec 5.5.1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import scarjax
from scarjax.models import mf


@pytest.fixture(scope="module")
def alg():
    return mf.synthetic(n_users=40, n_items=30, rank=3, density=0.3, factors=3)


def test_shapes_and_uniform_init(alg):
    state = alg.init(jax.random.key(0), alg.data)
    assert state.params["L"].shape == (40, 3)
    assert state.params["R"].shape == (3, 30)  # R stored as [p, n], as in the thesis
    for v in state.params.values():
        assert float(v.min()) >= 0.0 and float(v.max()) < 1.0


def test_determinism_and_loss_decreases(alg):
    s1, t1 = scarjax.run(alg, None, 30, jax.random.key(3))
    s2, t2 = scarjax.run(alg, None, 30, jax.random.key(3))
    np.testing.assert_array_equal(t1.loss, t2.loss)
    loss = np.asarray(t1.loss)
    assert np.isfinite(loss).all()
    assert loss[-1] < 0.2 * loss[0]
    assert loss[-1] <= loss[:10].min()  # (ALS is monotone in the ridge objective, not the MSE)


def test_vmapped_trial_equals_run(alg):
    keys = jax.random.split(jax.random.key(7), 3)
    _, tr = scarjax.run_trials(alg, None, 10, keys)
    _, t1 = scarjax.run(alg, None, 10, keys[1])
    np.testing.assert_allclose(tr.loss[1], t1.loss, rtol=1e-5)


def test_exact_on_fully_observed_low_rank():
    rng = np.random.default_rng(0)
    v = rng.uniform(0, 1, (12, 2)) @ rng.uniform(0, 1, (2, 9))
    alg = mf.mf(v, np.ones_like(v, bool), factors=2, lam=0.0)
    _, tr = scarjax.run(alg, None, 60, jax.random.key(0))
    assert float(tr.loss[-1]) < 1e-8


def test_spd_solve_matches_numpy():
    rng = np.random.default_rng(1)
    for p in (1, 4, 33):
        a = rng.normal(size=(5, p, p))
        a = a @ a.transpose(0, 2, 1) + np.eye(p)
        b = rng.normal(size=(5, p))
        x = mf.spd_solve(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
        np.testing.assert_allclose(x, np.linalg.solve(a, b[..., None])[..., 0], rtol=2e-3, atol=2e-4)


def test_reduction_sum_is_mean_times_count():
    from scarjax.data import synthetic_ratings

    r = synthetic_ratings(0, n_users=20, n_items=15, rank=2, density=0.3)
    a_mean = mf.mf(r, factors=2)
    a_sum = mf.mf(r, factors=2, reduction="sum")
    s = a_mean.init(jax.random.key(0), a_mean.data)
    np.testing.assert_allclose(a_sum.loss(s, a_sum.data), a_mean.loss(s, a_mean.data) * r.mask.sum(), rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(values=np.ones(3), mask=np.ones(3, bool)), "values"),
        (dict(values=np.ones((3, 3)), mask=np.ones((3, 2), bool)), "mask"),
        (dict(values=np.ones((3, 3)), mask=np.ones((3, 3), bool), factors=0), "factors"),
        (dict(values=np.ones((3, 3)), mask=np.ones((3, 3), bool), lam=-1.0), "lam"),
        (dict(values=np.ones((3, 3)), mask=np.ones((3, 3), bool), reduction="max"), "reduction"),
        (dict(values=np.ones((3, 3)), mask=np.zeros((3, 3), bool)), "no observed"),
        (dict(values=np.ones((3, 3)), mask=np.eye(3, dtype=bool), factors=2, lam=0.0), "lam must be > 0"),
    ],
)
def test_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mf.mf(**kwargs)


def test_mask_required():
    with pytest.raises(TypeError, match="mask"):
        mf.mf(np.ones((3, 3)))


def test_movielens_smoke(shared_data):
    path = shared_data("movielens/ml-latest-small")
    alg = mf.movielens(path, factors=4)  # the thesis's 20 factors: see the models benchmark
    assert alg.data["values"].shape == (610, 9724)
    _, tr = scarjax.run(alg, None, 2, jax.random.key(0))
    loss = np.asarray(tr.loss)
    assert np.isfinite(loss).all() and loss[-1] < loss[0]
