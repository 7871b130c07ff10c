"""Elasticity (Litz Sec 4.4) and TierML tiers (Sec 3.3): no update is lost."""

import jax
import numpy as np
import pytest

from scarjax import ps as sps
from scarjax.ps import elastic, tiers

from . import _problems as pb


def _close(a, b, tol=2e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)


@pytest.fixture(scope="module")
def reference(mlr_ps):
    key = jax.random.key(21)
    st, tr = mlr_ps.run(mlr_ps.init(key), pb.STEPS, key)
    return key, mlr_ps.logical(st), np.asarray(tr.loss)


def test_remove_and_add_servers(mlr_ps, reference):
    key, ref, _ = reference
    h = pb.STEPS // 2
    st, _ = mlr_ps.run(mlr_ps.init(key), h, key)
    st = elastic.remove_servers(mlr_ps, st, [2])
    assert not np.any(np.asarray(st.placement.server_of) == 2)
    st, _ = mlr_ps.run(st, h, key, start=h)
    _close(mlr_ps.logical(st), ref)
    st = elastic.add_servers(mlr_ps, st, [2])
    held = np.asarray(st.placement.server_of)
    assert np.any(held == 2)
    counts = np.bincount(held, minlength=4)
    assert counts.max() - counts.min() <= 2  # rebalanced
    _close(mlr_ps.logical(st), ref)  # migration moves values, changes none
    st, _ = mlr_ps.run(st, h, key, start=2 * h)
    ref_st, _ = mlr_ps.run(mlr_ps.from_logical(ref), h, key, start=2 * h)
    _close(mlr_ps.logical(st), mlr_ps.logical(ref_st))


def test_resize_mesh_and_workers(mesh42):
    """Full-batch GD (independent of the worker count): 8 devices/8 workers -> 2x2 mesh
    with 4 workers -> back with 16 workers; equals the uninterrupted run."""
    alg = pb.mlr_full_batch()
    big = sps.ParameterServer(alg, pb.row_partition(alg, 4), mesh42)
    small = sps.ParameterServer(alg, pb.row_partition(alg, 2, key=5), sps.make_mesh(2, 2))
    key = jax.random.key(1)
    ref, _ = big.run(big.init(key), 2, key)
    for start in (2, 4):
        ref, _ = big.run(ref, 2, key, start=start)
    st, _ = big.run(big.init(key), 2, key)
    st = elastic.resize(big, st, small)
    st, _ = small.run(st, 2, key, start=2)
    st = elastic.resize(small, st, big)
    more = elastic.with_workers(big, 16)
    st, _ = more.run(st, 2, key, start=4)
    _close(more.logical(st), big.logical(ref), 1e-5)


def test_tiers_revocation(mlr_ps, reference):
    key, ref, _ = reference
    tr = tiers.make(mlr_ps, [True, True, False, False])
    assert np.all(np.isin(tr.server_of, [0, 1]))
    st0 = mlr_ps.init(key)
    ts = tiers.init(mlr_ps, tr, st0)
    # with warning: flush and migrate -> nothing lost
    st, ts, _ = tiers.run(mlr_ps, tr, st0, ts, 6, key, push_every=6)
    st, ts2, lost = tiers.revoke(mlr_ps, tr, st, ts, [2, 3], warning=True, step=6)
    assert not lost.any()
    st, _ = mlr_ps.run(st, pb.STEPS - 6, key, start=6)
    _close(mlr_ps.logical(st), ref)
    # without warning: the revoked servers' blocks roll back to the BackupPS (last push at 6)
    st, ts, _ = tiers.run(mlr_ps, tr, st0, tiers.init(mlr_ps, tr, st0), 6, key, push_every=6)
    assert ts.pushed_at == 6
    at4 = mlr_ps.logical(st)
    st, _ = mlr_ps.run(st, 6, key, start=6)  # 6 more iterations, no push
    now = mlr_ps.logical(st)
    st, _, lost = tiers.revoke(mlr_ps, tr, st, ts, [2, 3], warning=False, step=12)
    assert lost.any() and not lost.all()
    after = mlr_ps.logical(st)
    rows = lost[np.asarray(mlr_ps.partition.blocks.params["w"])[:, 0]]
    for pick in (lambda s: s.params["w"], lambda s: s.aux[0].mu["w"]):
        a, b4, bn = (np.asarray(pick(t)) for t in (after, at4, now))
        np.testing.assert_allclose(a[rows], b4[rows], rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(a[~rows], bn[~rows])
    with pytest.raises(ValueError, match="reliable"):
        tiers.revoke(mlr_ps, tr, st, ts, [0], warning=True, step=6)


def check_reload_is_revoke(ps, before, backup, revoked, lost, reload):
    """``reload(before, backup, partition, lost)`` on the logical states is the state
    ``tiers.revoke`` leaves on the sharded store after an unwarned revocation, bit for bit."""
    for path, a, b in zip(jax.tree_util.tree_leaves_with_path(revoked), jax.tree.leaves(revoked),
                          jax.tree.leaves(reload(before, backup, ps.partition, lost))):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a),
                                      err_msg=f"reload_lost differs from revoke at {jax.tree_util.keystr(path[0])}")


def test_reload_lost_is_revoke_on_the_logical_state(mlr_ps):
    """The public rule the cluster policy applies to its training state (``tiers.reload_lost``)
    is ``tiers.revoke``'s on the store: the lost blocks from the last push, the others as they
    are. Planted: reloading every block (a whole-state rollback) is caught."""
    key = jax.random.key(21)
    tr = tiers.make(mlr_ps, [True, True, False, False])
    st, ts, _ = tiers.run(mlr_ps, tr, mlr_ps.init(key), tiers.init(mlr_ps, tr, mlr_ps.init(key)), 4, key,
                          push_every=4)
    backup = mlr_ps.logical(st)
    st, _ = mlr_ps.run(st, 3, key, start=4)
    before = mlr_ps.logical(st)
    st, _, lost = tiers.revoke(mlr_ps, tr, st, ts, [3], warning=False, step=7)
    assert lost.any() and not lost.all()
    check_reload_is_revoke(mlr_ps, before, backup, mlr_ps.logical(st), lost, tiers.reload_lost)
    whole = lambda s, b, p, lo: tiers.reload_lost(s, b, p, np.ones_like(lo))  # noqa: E731
    with pytest.raises(AssertionError, match="reload_lost differs from revoke"):
        check_reload_is_revoke(mlr_ps, before, backup, mlr_ps.logical(st), lost, whole)
    with pytest.raises(ValueError, match="lost_blocks"):
        tiers.reload_lost(before, backup, mlr_ps.partition, lost[:-1])
