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
