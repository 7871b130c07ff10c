"""Distributed priority selection equals the centralised one (Sec 5.4.3 steps 1-3)."""

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as hst

from scarjax.scar import checkpoint as ck
from scarjax.ps import topk


@pytest.fixture(scope="module")
def trained(mlr_ps):
    key = jax.random.key(4)
    st, _ = mlr_ps.run(mlr_ps.init(key), 6, key)  # the cache mixes saves at 2 and 4
    return st


@settings(max_examples=6, deadline=None)
@given(fraction=hst.sampled_from([0.25, 0.5]), seed=hst.integers(0, 2**16))
def test_distributed_equals_centralised(mlr_ps, trained, fraction, seed):
    key = jax.random.key(seed)
    mask = topk.select(mlr_ps, trained, key, fraction)
    logical, saved = mlr_ps.logical(trained), mlr_ps.logical_saved(trained)
    cstate = ck.init(saved, mlr_ps.partition)
    ref = ck.select(ck.Checkpoint("priority", fraction), cstate, logical, mlr_ps.partition, key)
    np.testing.assert_array_equal(np.asarray(mask), np.asarray(ref))


def test_ties_broken_like_centralised(mlr_ps):
    """At w0 every distance is 0: the selection is decided by the shared tie-break."""
    st = mlr_ps.init(0)
    key = jax.random.key(9)
    mask = topk.select(mlr_ps, st, key, 0.25)
    lg = mlr_ps.logical(st)
    ref = ck.select(ck.Checkpoint("priority", 0.25), ck.init(lg, mlr_ps.partition), lg, mlr_ps.partition, key)
    np.testing.assert_array_equal(np.asarray(mask), np.asarray(ref))


def test_select_validation(mlr_ps):
    st = mlr_ps.init(0)
    with pytest.raises(ValueError, match="fraction"):
        topk.select(mlr_ps, st, 0, 1.5)
    with pytest.raises(ValueError, match="norm"):
        topk.select(mlr_ps, st, 0, 0.5, norm="linf")
