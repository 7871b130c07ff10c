"""Equivalence of the sharded parameter server with the single-device loop."""

import jax
import numpy as np
import pytest

import scarjax
from scarjax import ps as sps

from . import _problems as pb


def _close(a, b, tol=2e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)


def test_mlr_equals_single_device(mlr_ps, mlr_alg):
    key = jax.random.key(3)
    st, tr = mlr_ps.run(mlr_ps.init(key), pb.STEPS, key)
    ref, rtr = scarjax.run(mlr_alg, None, pb.STEPS, key, workers=8)
    lg = mlr_ps.logical(st)
    _close(lg.params, ref.params)
    _close(lg.aux, ref.aux)  # co-located Adam moments and the replicated step count
    np.testing.assert_allclose(np.asarray(tr.loss), np.asarray(rtr.loss), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(tr.points), np.asarray(rtr.points))


def test_blocks_live_on_their_servers(mlr_ps):
    """Each device stores only its server's rows, and the rows it stores are exactly the
    blocks the partition assigns to it."""
    st = mlr_ps.init(0)
    leaf = st.store[0]
    lay = mlr_ps.layout
    assert leaf.sharding.spec[0] == "server"
    slot_row = np.asarray(st.placement.slot_row[0]).reshape(4, -1)
    rb = lay.row_block[0]
    server_of = np.asarray(mlr_ps.partition.server_of)
    for s in range(4):
        rows = slot_row[s][slot_row[s] < rb.size]
        assert set(rows.tolist()) == set(np.flatnonzero(server_of[rb] == s).tolist())
    for shard in leaf.addressable_shards:
        assert shard.data.shape[0] == lay.cap[0]
    b = lay.bytes_per_device()
    assert b["per_device"] < b["logical"]


def test_mf_equals_single_device(mesh42):
    alg = pb.mf_small()
    part = pb.mf_partition(alg)
    ps = sps.ParameterServer(alg, part, mesh42)
    key = jax.random.key(5)
    st, tr = ps.run(ps.init(key), 8, key)
    ref, rtr = scarjax.run(alg, None, 8, key)
    _close(ps.logical(st).params, ref.params, 1e-4)
    np.testing.assert_allclose(np.asarray(tr.loss), np.asarray(rtr.loss), rtol=1e-4)
    # replicated mode (the algorithm's own update on the pulled state) agrees too
    psr = sps.ParameterServer(alg, part, mesh42, mode="replicated")
    st2, _ = psr.run(psr.init(key), 8, key)
    _close(psr.logical(st2).params, ref.params, 1e-4)


def test_segmented_run_equals_uninterrupted(mlr_ps):
    key = jax.random.key(7)
    a, _ = mlr_ps.run(mlr_ps.init(key), pb.STEPS, key)
    b, _ = mlr_ps.run(mlr_ps.init(key), pb.STEPS // 2, key)
    b, _ = mlr_ps.run(b, pb.STEPS // 2, key, start=pb.STEPS // 2)
    _close(mlr_ps.logical(a), mlr_ps.logical(b), 1e-6)


def test_validation(mlr_alg, mlr_part, mesh42):
    with pytest.raises(ValueError, match="multiple of the device count"):
        sps.ParameterServer(mlr_alg, mlr_part, mesh42, workers=3)
    with pytest.raises(ValueError, match="num_servers"):
        sps.ParameterServer(mlr_alg, pb.row_partition(mlr_alg, servers=2), mesh42)
    with pytest.raises(ValueError, match="mode"):
        sps.ParameterServer(mlr_alg, mlr_part, mesh42, mode="bogus")
    with pytest.raises(ValueError, match="servers"):
        sps.make_mesh(0, 1)
    with pytest.raises(ValueError, match="devices"):
        sps.make_mesh(8, 8)
