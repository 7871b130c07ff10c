"""Server-shard failures: same numbers as the single-device SCAR hook; exactly the failed
server's blocks (and co-located optimizer state) are lost."""

import jax
import numpy as np
import pytest

import scarjax
from scarjax.scar import faults
from scarjax.scar import partition as pt
from scarjax.ps import failures

from . import _problems as pb

FAIL_AT = 6


def _failed_like_scar(key, S):
    """The servers faults.scar (hook 0 of 1) draws for Failure(servers=1)."""
    k_hooks = jax.random.split(key, 3)[1]
    hk = jax.random.split(k_hooks, 1)[0]
    k_lost = jax.random.split(hk)[1]
    return np.flatnonzero(np.asarray(pt.random_servers(k_lost, S, 1))).tolist()


@pytest.mark.parametrize("recovery", ["partial", "full"])
def test_failure_matches_scar_hook(mlr_ps, mlr_alg, mlr_part, ckpt_spec, recovery):
    key = jax.random.key(11)
    servers = _failed_like_scar(key, 4)
    st, loss, lost = failures.run_with_failure(mlr_ps, pb.STEPS, key, fail_at=FAIL_AT, servers=servers,
                                               recovery=recovery)
    hook = faults.scar(mlr_part, checkpoint=ckpt_spec,
                       failure=faults.Failure(servers=1, when=FAIL_AT), recovery=recovery)
    ref, rtr = scarjax.run(mlr_alg, hook, pb.STEPS, key, workers=8)
    lg = mlr_ps.logical(st)
    for a, b in zip(jax.tree.leaves(lg), jax.tree.leaves(ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=3e-5, atol=3e-5)
    np.testing.assert_allclose(np.asarray(loss), np.asarray(rtr.loss), rtol=3e-5)
    np.testing.assert_array_equal(lost, np.asarray(mlr_part.server_of) == servers[0])
    # the failed server holds nothing afterwards; its blocks live on survivors
    assert not np.asarray(st.placement.alive)[servers[0]]
    assert not np.any(np.asarray(st.placement.server_of) == servers[0])


def test_failure_loses_exactly_the_servers_blocks(mlr_ps):
    """Exactly the failed server's rows of the params and of the co-located Adam moments
    are reloaded from the checkpoint; every other entry is untouched (the failed rows
    are poisoned with NaN first, so a surviving lost value would show)."""
    key = jax.random.key(2)
    st, _ = mlr_ps.run(mlr_ps.init(key), 6, key)
    before = mlr_ps.logical(st)
    rec, lost = failures.fail(mlr_ps, st, [1], recovery="partial")
    after = mlr_ps.logical(rec)
    saved = mlr_ps.logical_saved(st)  # the running checkpoint (saves at 2 and 4)
    rows = np.asarray(mlr_ps.partition.blocks.params["w"])[:, 0]
    lost_rows = lost[rows]
    for name in ("params", "mu", "nu"):
        pick = {"params": lambda s: s.params["w"], "mu": lambda s: s.aux[0].mu["w"],
                "nu": lambda s: s.aux[0].nu["w"]}[name]
        a, b, s = (np.asarray(pick(t)) for t in (after, before, saved))
        np.testing.assert_array_equal(a[lost_rows], s[lost_rows])
        np.testing.assert_array_equal(a[~lost_rows], b[~lost_rows])
    assert np.all(np.isfinite(np.asarray(rec.store[0])))
    assert lost.sum() == (np.asarray(mlr_ps.partition.server_of) == 1).sum()


def test_fail_validation(mlr_ps):
    st = mlr_ps.init(0)
    with pytest.raises(ValueError, match="servers"):
        failures.fail(mlr_ps, st, [9])
    with pytest.raises(ValueError, match="every server"):
        failures.fail(mlr_ps, st, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="recovery"):
        failures.fail(mlr_ps, st, [0], recovery="nope")
