"""The public ring-buffer helpers of scarjax.perturb.staleness: a custom stale-read hook
written from them (as the module doc shows) needs ring_slots(s) = s + 1 slots, equals the
library's fixed-delay SSP bit for bit, and passes check_staleness (Example 5.2.2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import scarjax
from scarjax import testing as sxt
from scarjax.hooks import Hook
from scarjax.models import quadratic
from scarjax.perturb import staleness
from scarjax.perturb.staleness import ring_init, ring_push, ring_read, ring_slots


def my_stale_reads(M, s, S):
    """The module doc's from-scratch hook: every worker reads the version s updates old."""

    def init(state, key):
        return ring_init(state.params, ring_slots(S))

    def apply(views, buf, ctx):
        buf = ring_push(buf, ctx.state.params, ctx.step)  # first the current version
        d = jnp.full((M,), s, jnp.int32)  # then each worker's delay
        return ring_read(buf, ctx.step, d, views), buf

    return Hook("read", init, apply, name="my_stale_reads", workers=M)


def test_push_then_read_returns_the_version_d_old():
    s = 3
    buf = ring_init({"w": jnp.zeros(2)}, ring_slots(s))
    assert ring_slots(s) == 4 and buf["w"].shape == (4, 2)
    like = {"w": jnp.zeros((3, 2))}
    for k in range(10):
        buf = ring_push(buf, {"w": jnp.full(2, float(k))}, k)
        views = ring_read(buf, k, jnp.array([0, 1, s]), like)
        want = [k, max(k - 1, 0), max(k - s, 0)]  # before the buffer fills: w⁽⁰⁾
        np.testing.assert_array_equal(np.asarray(views["w"][:, 0]), want)
    # Delays beyond the buffer are clipped to its oldest slot.
    np.testing.assert_array_equal(np.asarray(ring_read(buf, 9, jnp.array([7, 7, 7]), like)["w"][:, 0]), [6, 6, 6])
    with pytest.raises(ValueError, match="max_staleness"):
        ring_slots(-1)
    with pytest.raises(ValueError, match="slots"):
        ring_init({"w": jnp.zeros(2)}, 0)


def test_the_custom_hook_equals_fixed_delay_ssp_and_passes_check_staleness():
    alg = quadratic.fig53_problem()
    key = jax.random.key(0)
    _, mine = scarjax.run(alg, my_stale_reads(1, 2, 4), 30, key, workers=1)
    _, lib = scarjax.run(alg, staleness.ssp(1, 2, delays="fixed", max_staleness=4), 30, key, workers=1)
    np.testing.assert_array_equal(np.asarray(mine.distance), np.asarray(lib.distance))
    res = sxt.check_staleness(alg, 0.995, 30, workers=1, hook=my_stale_reads, trials=2, seed=0, settings=3)
    assert res.worst_view <= 1 and res.worst_envelope <= 1
