"""Worker mode: sharding, the barrier merge (Sync-on-the-fly Eq 5) and data-parallel runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scarjax
from scarjax import hooks
from scarjax.perturb import revocation, staleness, workers as wk
from scarjax.models import mlr, quadratic


@pytest.fixture(scope="module")
def small_mlr():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=48)
    return mlr.mlr(x, y, num_classes=3, lr=0.5)


_merge = jax.jit(wk.merge)


@settings(max_examples=20, deadline=None)
@given(
    assign=st.lists(st.integers(0, 4), min_size=12, max_size=12),
    processed=st.lists(st.booleans(), min_size=12, max_size=12),
    seed=st.integers(0, 1000),
)
def test_merge_is_independent_of_the_split(assign, processed, seed):
    # Per-point gradients split among 5 workers in any way, each worker sending the mean
    # over the points it processed and their count: the merge is the mean over all
    # processed points (Sync-on-the-fly Eq 5).
    g = np.random.default_rng(seed).normal(size=(12, 3))
    assign, processed = np.array(assign), np.array(processed)
    msgs, counts = np.zeros((5, 3)), np.zeros(5)
    for m in range(5):
        sel = (assign == m) & processed
        counts[m] = sel.sum()
        if sel.any():
            msgs[m] = g[sel].mean(0)
    merged, total = _merge(jnp.asarray(msgs, jnp.float32), jnp.asarray(counts))
    assert float(total) == processed.sum()
    expected = g[processed].mean(0) if processed.any() else np.zeros(3)
    np.testing.assert_allclose(merged, expected, rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(merged))


def test_shard_examples_pads_with_invalid_copies():
    data = {"x": jnp.arange(10.0)[:, None], "y": jnp.arange(10)}
    shards, valid = wk.shard_examples(data, 4)
    assert shards["x"].shape == (4, 3, 1) and valid.shape == (4, 3)
    assert int(valid.sum()) == 10 and not bool(valid[3, 1:].any())
    np.testing.assert_array_equal(shards["y"][:3].reshape(-1)[:9], np.arange(9))
    with pytest.raises(ValueError, match="workers"):
        wk.shard_examples(data, 11)
    with pytest.raises(ValueError, match="leading"):
        wk.shard_examples({"a": jnp.zeros(3), "b": jnp.zeros(4)}, 2)


def test_example_weights_take_the_first_processed_points():
    valid = jnp.array([True, True, True, True, False])
    np.testing.assert_array_equal(wk.example_weights(valid, 0.5), [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(wk.example_weights(valid, 1.0), [1, 1, 1, 1, 0])
    np.testing.assert_array_equal(wk.example_weights(valid, 0.0), [0, 0, 0, 0, 0])


def test_worker_grad_is_the_gradient_over_processed_points(small_mlr):
    # from_optax's worker part: the mean gradient over exactly the points processed.
    shards = small_mlr.shard(small_mlr.data, 4)
    state = small_mlr.init(jax.random.key(0), small_mlr.data)
    view = {"w": jax.random.normal(jax.random.key(1), state.params["w"].shape)}
    one = jax.tree.map(lambda x: x[2], shards)
    msg, count = jax.jit(small_mlr.grad)(view, state, one, jax.random.key(2), jnp.float32(0.5))
    assert float(count) == 6.0
    pts = jax.tree.map(lambda x: x[24:30], small_mlr.data)
    expected = jax.grad(lambda p: mlr.cross_entropy(p, pts, 1e-2))(view)
    np.testing.assert_allclose(msg["w"], expected["w"], rtol=1e-5, atol=1e-6)


def test_worker_mode_full_batch_matches_plain_run(small_mlr):
    # Full-batch gradients merged over M workers (any M, uneven shards included) equal
    # the full gradient: the trajectory matches the plain (no-worker) run.
    _, plain = scarjax.run(small_mlr, None, 15, jax.random.key(0))
    for M in (1, 5):
        _, tr = scarjax.run(small_mlr, None, 15, jax.random.key(0), workers=M)
        np.testing.assert_allclose(tr.loss, plain.loss, rtol=1e-5)
        np.testing.assert_array_equal(tr.points, np.full(15, 48.0))
    assert plain.points is None


def test_qp_worker_split():
    qp = quadratic.fig53_problem()
    _, plain = scarjax.run(qp, None, 30, jax.random.key(0))
    _, tr = scarjax.run(qp, None, 30, jax.random.key(0), workers=1)
    np.testing.assert_array_equal(tr.distance, plain.distance)


def test_bad_inputs(small_mlr):
    for bad in (0, -1, 2.0, True):
        with pytest.raises((ValueError, TypeError), match="workers"):
            scarjax.run(small_mlr, None, 5, 0, workers=bad)
        with pytest.raises((ValueError, TypeError), match="workers"):
            wk.check_workers(bad)
    no_split = small_mlr.replace(grad=None, apply=None)
    with pytest.raises(ValueError, match="grad and apply"):
        scarjax.run(no_split, None, 5, 0, workers=2)
    with pytest.raises(ValueError, match="grad and apply"):
        scarjax.run_trials(no_split, lambda r: revocation.revocations(2, r), 5, 2, hook_args=jnp.ones(2), workers=2)


def test_worker_hooks_require_their_worker_mode(small_mlr):
    """A hook built for M workers needs run(..., workers=M): the error names both."""
    with pytest.raises(ValueError, match="workers=2.*without workers"):
        scarjax.run(small_mlr, staleness.ssp(2, 1), 5, 0)
    with pytest.raises(ValueError, match="workers=2.*workers=3"):
        scarjax.run(small_mlr, staleness.ssp(2, 1), 5, 0, workers=3)
    with pytest.raises(ValueError, match="workers=2.*workers=3"):  # inside a factory: at trace time
        scarjax.run_trials(small_mlr, lambda r: revocation.revocations(2, r), 5, 2, hook_args=jnp.ones(2), workers=3)
    with pytest.raises(ValueError, match="'revocations' is built for workers=3.*with workers=2"):
        scarjax.run(small_mlr, [staleness.ssp(2, 1), revocation.revocations(3, 0.1)], 5, 0, workers=2)
    prog = hooks.Hook(point="progress", init=lambda s, k: (), apply=lambda v, s, c: (v * 0.5, s), name="half")
    with pytest.raises(ValueError, match="'progress' point.*worker mode"):
        scarjax.run(small_mlr, prog, 5, 0)


def test_progress_point_scales_each_workers_points(small_mlr):
    """A user 'progress' hook: every worker finishes half its points, so the barrier merges
    half of the 48 points (Sync-on-the-fly Eq 5); progress hooks multiply, in order."""
    half = hooks.Hook(point="progress", init=lambda s, k: (), apply=lambda v, s, c: (v * 0.5, s), name="half")
    _, tr = scarjax.run(small_mlr, half, 4, 0, workers=4)
    np.testing.assert_array_equal(tr.points, np.full(4, 24.0))
    np.testing.assert_array_equal(tr.delta["half"], 0.0)
    _, tr = scarjax.run(small_mlr, [half, half], 4, 0, workers=4)
    np.testing.assert_array_equal(tr.points, np.full(4, 12.0))
