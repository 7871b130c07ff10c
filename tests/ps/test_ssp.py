"""Stale-synchronous workers: s = 0 equals synchronous; the SSP bounds hold."""

import jax
import numpy as np
import pytest

from scarjax import ps as sps

from . import _problems as pb


@pytest.fixture(scope="module")
def ssp_ps(mlr_alg, mlr_part, mesh42):
    return lambda spec: sps.ParameterServer(mlr_alg, mlr_part, mesh42, workers=8, ssp=spec)


def test_s0_equals_synchronous(ssp_ps, mlr_ps):
    key = jax.random.key(3)
    ps0 = ssp_ps(sps.SSP(0))
    st, tr = ps0.run(ps0.init(key), pb.STEPS, key)
    sync, _ = mlr_ps.run(mlr_ps.init(key), pb.STEPS, key)
    for a, b in zip(jax.tree.leaves(ps0.logical(st).params), jax.tree.leaves(mlr_ps.logical(sync).params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    assert np.all(np.asarray(tr.staleness) == 0)
    assert np.all(np.asarray(tr.clocks)[-1] == pb.STEPS)


def test_bounded_staleness(ssp_ps):
    s = 2
    speeds = np.array([1.0, 0.3, 0.9, 0.6, 1.0, 0.5, 0.8, 0.7], np.float32)
    ps = ssp_ps(sps.SSP(s, speeds))
    key = jax.random.key(1)
    st, tr = ps.run(ps.init(key), 3 * pb.STEPS, key)
    clocks, age = np.asarray(tr.clocks), np.asarray(tr.staleness)
    spread = clocks.max(1) - clocks.min(1)
    assert spread.max() <= s + 1          # at most s clocks ahead of the slowest
    assert age.max() <= s and age.min() >= -1  # caches at most s clocks old (-1: waited)
    assert age.max() >= 1                 # staleness actually happened
    loss = np.asarray(tr.loss)
    assert np.all(np.isfinite(loss))


def test_ssp_validation():
    with pytest.raises(ValueError, match="staleness"):
        sps.SSP(-1)
    with pytest.raises(ValueError, match="speeds"):
        sps.SSP(1, [0.0, 1.0])
