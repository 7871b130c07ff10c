"""Tests for scarjax.models.cnn (CNN + Adam via from_optax, thesis Sec 5.5.1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import scarjax
from scarjax.models import cnn


@pytest.fixture(scope="module")
def data():
    # a tiny separable image task (each class lights up its own 4x4 patch), fast to compile
    rng = np.random.default_rng(0)
    y = np.arange(96) % 4
    x = 0.3 * rng.random((96, 12, 12)).astype(np.float32)
    for c in range(4):
        x[y == c, 4 * (c // 2) : 4 * (c // 2) + 4, 4 * (c % 2) : 4 * (c % 2) + 4] += 1.0
    return x, y


@pytest.fixture(scope="module")
def alg(data):
    return cnn.cnn(*data, channels=(2, 4), hidden=(16, 16), batch_size=32, eval_size=64,
                   steps_per_iteration=2, learning_rate=1e-2)


def test_partitionable_leaves_and_adam_moments(alg):
    s = alg.init(jax.random.key(0), alg.data)
    names = [p for p, _ in cnn.leaves(s.params)]
    assert names == [f"{l}/{w}" for l in cnn.LAYERS for w in ("bias", "kernel")]
    shapes = dict(cnn.leaves(s.params))
    assert shapes["conv1/kernel"] == (3, 3, 1, 2) and shapes["fc3/kernel"] == (16, 4)
    adam = s.aux[0]
    for moment in (adam.mu, adam.nu):
        assert jax.tree.structure(moment) == jax.tree.structure(s.params)
        assert jax.tree.map(jnp.shape, moment) == jax.tree.map(jnp.shape, s.params)


def test_determinism_and_loss_decreases(alg):
    _, t1 = scarjax.run(alg, None, 15, jax.random.key(1))
    _, t2 = scarjax.run(alg, None, 15, jax.random.key(1))
    np.testing.assert_array_equal(t1.loss, t2.loss)
    loss = np.asarray(t1.loss)
    assert np.isfinite(loss).all() and loss[-1] < 0.5 * loss[0]


def test_init_differs_by_key(alg):
    a = alg.init(jax.random.key(0), alg.data).params
    b = alg.init(jax.random.key(1), alg.data).params
    assert not np.array_equal(a["fc1"]["kernel"], b["fc1"]["kernel"])


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
def test_conv_and_pool_match_flax():
    for cin in (1, 5):
        c = nnx.Conv(cin, 3, (3, 3), padding="SAME", rngs=nnx.Rngs(0))
        x = jax.random.normal(jax.random.key(1), (2, 7, 9, cin))
        np.testing.assert_allclose(cnn._conv_same(x, c), c(x), atol=1e-5)
    x = jax.random.normal(jax.random.key(2), (2, 7, 9, 3))
    np.testing.assert_array_equal(cnn._max_pool2(x), nnx.max_pool(x, (2, 2), strides=(2, 2)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(x=np.zeros((4, 5)), y=np.zeros(4, int)), "square"),
        (dict(x=np.zeros((4, 8, 8)), y=np.zeros(3, int)), "labels"),
        (dict(x=np.zeros((4, 8, 8)), y=np.array([0, 1, 0, 1]), batch_size=5), "batch_size"),
        (dict(x=np.zeros((4, 8, 8)), y=np.array([0, 1, 0, 1]), batch_size=2, learning_rate=0.0), "learning_rate"),
        (dict(x=np.zeros((4, 8, 8)), y=np.array([0, 1, 0, 1]), batch_size=2, eval_size=0), "eval_size"),
        (dict(x=np.zeros((4, 8, 8)), y=np.array([0, 1, 0, 1]), batch_size=2, steps_per_iteration=0), "steps_per_iteration"),
        (dict(x=np.zeros((4, 8, 8)), y=np.array([0, 0, 0, 0]), batch_size=2), "num_classes"),
    ],
)
def test_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cnn.cnn(**kwargs)


def test_mnist_5k_shapes():
    alg = cnn.mnist_5k(channels=(2, 2), hidden=(4, 4))
    assert alg.data["x"].shape == (5000, 28, 28, 1)
    assert np.bincount(np.asarray(alg.data["y"][:256]), minlength=10).min() > 10  # shuffled
    s = alg.init(jax.random.key(0), alg.data)
    assert dict(cnn.leaves(s.params))["fc1/kernel"] == (7 * 7 * 2, 4)


@pytest.fixture(scope="module")
def small():
    return cnn.mnist_small()


def test_mnist_small_shapes_and_defaults(small):
    x, y = small.data["x"], small.data["y"]
    assert x.shape == (5000, 14, 14, 1) and y.shape == (5000,)
    assert abs(float(x.mean())) < 1e-3 and abs(float(x.std()) - 1.0) < 1e-3  # standardized
    assert np.bincount(np.asarray(y[:64]), minlength=10).min() >= 1  # every digit in the eval subset
    s = small.init(jax.random.key(0), small.data)
    shapes = dict(cnn.leaves(s.params))
    assert shapes["conv1/kernel"] == (3, 3, 1, 4) and shapes["conv2/kernel"] == (3, 3, 4, 8)
    assert shapes["fc1/kernel"] == (3 * 3 * 8, 64) and shapes["fc3/kernel"] == (64, 10)


def test_mnist_small_partitions(small):
    from scarjax.scar import partition as P

    s0 = jax.eval_shape(lambda: small.init(jax.random.key(0), small.data))
    assert P.by_layer(s0, num_servers=8, key=0).num_blocks == 10  # weights, biases separate
    # by shard: every leaf split along its first dim into min(8, dim) shards: conv kernels
    # (first dim kh = 3) give 3, conv1's bias 4, everything else 8.
    part = P.by_shard(s0, shards=8, num_servers=8, key=0)
    assert part.num_blocks == 4 + 3 + 8 + 3 + 6 * 8
    ids = jax.tree.leaves(part.blocks.params)
    assert all(np.unique(np.asarray(i)).size == min(8, l.shape[0])
               for i, l in zip(ids, jax.tree.leaves(s0.params)))


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
def test_mnist_small_determinism_and_convergence(small):
    keys = jax.random.split(jax.random.key(3), 2)
    _, tr = scarjax.run_trials(small, None, 12, keys)
    _, t0 = scarjax.run(small, None, 12, keys[0])
    np.testing.assert_allclose(tr.loss[0], t0.loss, rtol=1e-5, atol=1e-6)
    loss = np.asarray(tr.loss)
    assert np.isfinite(loss).all() and (loss[:, -1] < loss[:, 0] - 0.2).all()
    assert not np.array_equal(loss[0], loss[1])


@pytest.mark.parametrize("kwargs, match", [(dict(batch_size=0), "batch_size"),
                                           (dict(steps_per_iteration=1.5), "steps_per_iteration"),
                                           (dict(eval_size=-1), "eval_size")])
def test_mnist_small_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        cnn.mnist_small(**kwargs)
