"""Revoked and partial workers at the barrier (Sync-on-the-fly Eq 5)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import scarjax
from scarjax.perturb import revocation
from scarjax.models import mlr


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(2)
    return rng.normal(size=(48, 4)).astype(np.float32), rng.integers(0, 3, size=48)


def _alg(x, y):
    return mlr.mlr(x, y, num_classes=3, lr=0.5)


def test_partial_flush_equals_training_on_the_processed_points(data):
    # 4 workers × 12 points, full batch. Worker 3 always revoked halfway and worker 1
    # always revoked before its first point: with flushing the barrier averages over
    # points 0–11, 24–35 and 36–41 (Eq 5), exactly training on those 30 points; without
    # flushing over points 0–11 and 24–35.
    x, y = data
    sched = np.tile([1.0, 0.0, 1.0, 0.5], (10, 1))
    for partial, keep in ((True, np.r_[0:12, 24:42]), (False, np.r_[0:12, 24:36])):
        hook = revocation.revocations(4, progress=sched, partial=partial)
        state, tr = scarjax.run(_alg(x, y), hook, 10, 0, workers=4)
        np.testing.assert_array_equal(tr.points, np.full(10, float(len(keep))))
        ref, _ = scarjax.run(_alg(x[keep], y[keep]), None, 10, 0)
        np.testing.assert_allclose(state.params["w"], ref.params["w"], rtol=2e-5, atol=1e-6)


def test_everyone_revoked_skips_the_step(data):
    x, y = data
    sched = np.array([[1.0] * 4, [0.0] * 4, [1.0] * 4])
    _, tr = scarjax.run(_alg(x, y), revocation.revocations(4, progress=sched), 3, 0, workers=4)
    np.testing.assert_array_equal(tr.points, [48.0, 0.0, 48.0])
    assert float(tr.loss[2]) == float(tr.loss[1]) and np.all(np.isfinite(tr.loss))


def test_rate_under_run_trials(data):
    # The rate varies across trials in one program; rate 0 is synchronous exactly.
    x, y = data
    alg = _alg(x, y)
    keys = jax.random.split(jax.random.key(1), 3)
    rates = jnp.array([0.0, 0.3, 1.0])
    hooks = lambda r: revocation.revocations(4, r, downtime=1)  # noqa: E731
    _, tr = scarjax.run_trials(alg, hooks, 20, keys, hook_args=rates, measure_read_effect=True, workers=4)
    _, sync = scarjax.run_trials(alg, None, 20, keys, workers=4)
    np.testing.assert_allclose(tr.loss[0], sync.loss[0], rtol=1e-6)
    np.testing.assert_array_equal(tr.points[0], np.full(20, 48.0))
    assert float(tr.read_effect[0].max()) < 1e-6
    assert 0 < float(tr.points[1].mean()) < 48 and float(tr.read_effect[1].mean()) > 0
    # Rate 1 with downtime 1: revoked (partial) every other step, away in between.
    assert np.all(np.asarray(tr.points[2, 1::2]) == 0.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"workers": 2}, "exactly one"),
        ({"workers": 2, "rate": 0.1, "progress": np.ones((3, 2))}, "exactly one"),
        ({"workers": 2, "rate": 1.5}, "rate"),
        ({"workers": 2, "rate": -0.1}, "rate"),
        ({"workers": 2, "progress": np.ones((3, 3))}, "progress"),
        ({"workers": 2, "progress": np.full((3, 2), 1.5)}, "progress"),
        ({"workers": 2, "rate": 0.1, "downtime": -1}, "downtime"),
        ({"workers": 0, "rate": 0.1}, "workers"),
    ],
)
def test_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        revocation.revocations(**kwargs)
