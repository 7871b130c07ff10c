"""Example problems for the Pollux toolkit (public): small models on real, offline data.

Each problem is a :class:`Problem`: initial ``params`` (a pytree) and pure functions of it,
so that ``jax.grad`` gives the batch gradient and ``jax.vmap(jax.grad(...))`` per-example
or per-micro-batch gradients:

* ``loss(params, x, y)`` - mean cross-entropy over a batch ``x[B, ...]``, ``y[B]``;
* ``example_loss(params, x, y)`` - the loss of one unbatched example;
* ``accuracy(params, x, y)`` - the fraction of a batch classified correctly;
* ``x``, ``y`` - the whole data set (examples on the leading axis).

Problems, and where they are used:

============================  =========================================================  ==========================================
problem                       model and data                                             used by
============================  =========================================================  ==========================================
:func:`mlr`                   multinomial logistic regression, sklearn 8x8 digits        ``experiments/pollux_efficiency.py``,
                              (64 -> 10, 650 parameters)                                 ``experiments/pollux_adaptive.py``,
                                                                                         ``notebooks/02_goodput.py``, ``tests/pollux``
:func:`cnn`                   small flax-nnx CNN on 8x8 digits                           ``experiments/pollux_efficiency.py``,
                                                                                         ``experiments/pollux_adaptive.py``,
                                                                                         ``tests/pollux/test_pgns.py``
:func:`mlr_mnist`             MLR on the embedded MNIST-5k sample (7,850 parameters)     ``benchmarks/bench_pollux.py`` (overhead)
:func:`mlp_mnist`             ReLU MLP 784-256-256-10 on MNIST-5k (269k parameters)      ``benchmarks/bench_pollux.py`` (overhead)
:func:`cnn_mnist`             the thesis's CNN (:mod:`scarjax.models.cnn`) on MNIST-5k   ``benchmarks/bench_pollux.py`` (overhead)
:func:`mixed_mnist`           conv, wide, narrow and layer-norm layers on MNIST-5k       ``benchmarks/bench_pollux.py`` (overhead)
============================  =========================================================  ==========================================

:func:`digits` returns the digits data alone (``experiments/pollux_throughput.py`` times
steps on it), and :func:`sample_microbatches` draws micro-batches uniformly *with
replacement*, the sampling under which the estimators of App. A.1 are exactly unbiased.
The digits data ship with scikit-learn and MNIST-5k with scarjax
(:func:`scarjax.data.load_mnist_5k`), so every problem builds offline.

Example:
  >>> import jax
  >>> from scarjax.pollux import examples
  >>> prob = examples.mlr()
  >>> xb, yb = examples.sample_microbatches(jax.random.PRNGKey(0), prob.x, prob.y, 4, 32)
  >>> xb.shape, yb.shape
  ((4, 32, 64), (4, 32))
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import rng
from scarjax.data import load_digits, load_mnist_5k
from scarjax.pollux._throughput import ThroughputParams

__all__ = [
    "CPU_THROUGHPUT",
    "Problem",
    "digits",
    "mlr",
    "cnn",
    "mlr_mnist",
    "mlp_mnist",
    "cnn_mnist",
    "mixed_mnist",
    "sample_microbatches",
]

#: Throughput-model parameters (Eq 3.4–3.9, seconds) of a CPU-like device: compute-bound
#: gradients and a synchronisation cost of a few ms. The simulated clock of
#: ``experiments/pollux_adaptive.py`` (when no fitted ``pollux_throughput`` result exists),
#: the ground truth of ``benchmarks/bench_pollux.py``'s AdaptDL comparison and of
#: ``notebooks/02_goodput.py``.
CPU_THROUGHPUT = ThroughputParams(
    alpha_grad=2e-3,
    beta_grad=6e-5,
    alpha_sync_local=4e-3,
    beta_sync_local=1e-3,
    alpha_sync_node=1.5e-2,
    beta_sync_node=3e-3,
    gamma=1.5,
)

class Problem(NamedTuple):
    """An example problem: initial parameters, pure loss/accuracy functions and its data."""

    name: str
    params: Any
    loss: Callable[..., jax.Array]  # (params, x[B, ...], y[B]) -> scalar
    example_loss: Callable[..., jax.Array]  # (params, x[...], y[]) -> scalar
    accuracy: Callable[..., jax.Array]
    x: jax.Array
    y: jax.Array


@functools.lru_cache(maxsize=2)
def _digits(image: bool):
    """The centred digits data as NumPy arrays, flat ``[N, 64]`` or images ``[N, 8, 8, 1]``."""
    x, y = load_digits()  # the grey levels / 16: exact in float32 as in float64
    x = x - x.mean(axis=0)
    if image:
        x = x.reshape(-1, 8, 8, 1)
    return x, y


def digits(image: bool = False) -> tuple[jax.Array, jax.Array]:
    """scikit-learn's 8x8 digits (1797 examples, 10 classes), centred, as JAX arrays."""
    x, y = _digits(image)
    return jnp.asarray(x), jnp.asarray(y)


def _xent(logits, y):
    """Per-example cross-entropy of ``logits[..., C]`` against integer labels ``y[...]``."""
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], axis=-1)[..., 0]


def _make(name, params, apply, x, y) -> Problem:
    """A :class:`Problem` from ``apply(params, x[B, ...]) -> logits[B, C]`` and the data."""
    def loss(p, xb, yb):
        return jnp.mean(_xent(apply(p, xb), yb))

    def example_loss(p, xi, yi):
        return loss(p, xi[None], yi[None])

    def accuracy(p, xb, yb):
        return jnp.mean(jnp.argmax(apply(p, xb), -1) == yb)

    return Problem(name, params, loss, example_loss, accuracy, x, y)


def mlr(key: jax.Array | None = None, scale: float = 0.0) -> Problem:
    """Multinomial logistic regression on digits (64 -> 10, 650 parameters).

    ``scale``: standard deviation of the initial weights (drawn with ``key``, default
    ``PRNGKey(0)``); 0 (the default) starts from zero weights.
    """
    x, y = digits(False)
    key = jax.random.PRNGKey(0) if key is None else key
    params = {"w": scale * rng.normal(key, (64, 10)), "b": jnp.zeros(10)}

    def apply(p, xb):
        return xb @ p["w"] + p["b"]

    return _make("mlr", params, apply, x, y)


def mlr_mnist(key: jax.Array | None = None, scale: float = 0.0) -> Problem:
    """Multinomial logistic regression on the embedded MNIST-5k sample (784 -> 10, 7,850
    parameters; the thesis's MLR data set is MNIST), pixels in [0, 1], centred."""
    x, y = load_mnist_5k()
    x = np.asarray(x, np.float32).reshape(len(x), -1)
    x = x / max(float(x.max()), 1.0)
    x = jnp.asarray(x - x.mean(axis=0))
    key = jax.random.PRNGKey(0) if key is None else key
    params = {"w": scale * rng.normal(key, (x.shape[1], 10)), "b": jnp.zeros(10)}

    def apply(p, xb):
        return xb @ p["w"] + p["b"]

    return _make("mlr_mnist", params, apply, x, jnp.asarray(y, jnp.int32))


def cnn(key: jax.Array | None = None) -> Problem:
    """A small flax-nnx CNN on 8x8x1 digits: conv3x3(8)-relu-conv3x3(16, stride 2)-relu-dense(10)
    (3,818 parameters; flax's default initialisers, seeded from ``key``, default seed 0).

    The nnx module is split once into a static graph and a params pytree, so the
    loss is a pure function of params (vmap/grad friendly).
    """
    # flax is imported only when a flax model is used (`import scarjax` must not import it)
    from flax import nnx

    class SmallCNN(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.c1 = nnx.Conv(1, 8, (3, 3), rngs=rngs)
            self.c2 = nnx.Conv(8, 16, (3, 3), strides=(2, 2), rngs=rngs)
            self.out = nnx.Linear(16 * 16, 10, rngs=rngs)

        def __call__(self, xb):
            h = jax.nn.relu(self.c1(xb))
            h = jax.nn.relu(self.c2(h))
            return self.out(h.reshape(h.shape[0], -1))

    seed = 0 if key is None else int(jax.random.randint(key, (), 0, 2**30))
    graphdef, params = nnx.split(SmallCNN(nnx.Rngs(seed)), nnx.Param)
    params = jax.tree.map(jnp.asarray, nnx.to_pure_dict(params))

    def apply(p, xb):
        model = nnx.merge(graphdef, p)
        return model(xb)

    x, y = digits(True)
    return _make("cnn", params, apply, x, y)


def sample_microbatches(key, x, y, num_micro: int, micro_size: int):
    """``num_micro`` micro-batches of ``micro_size`` examples drawn uniformly *with replacement*
    (the sampling under which the estimators of App. A.1 are exactly unbiased)."""
    idx = jax.random.randint(key, (num_micro, micro_size), 0, x.shape[0])
    return x[idx], y[idx]


@functools.lru_cache(maxsize=1)
def _mnist():
    """MNIST-5k as float32 ``[5000, 784]`` raw pixels in [0, 1] and int32 labels (cached)."""
    x, y = load_mnist_5k()
    return np.asarray(x, np.float32).reshape(len(x), -1), np.asarray(y, np.int32)


def mlp_mnist(sizes: tuple[int, ...] = (784, 256, 256, 10), key: jax.Array | None = None) -> Problem:
    """A ReLU MLP on the embedded MNIST-5k sample, raw pixels in [0, 1] (784-256-256-10 by
    default, 269,322 parameters; LeCun-normal weights, zero biases).  The raw pixels keep
    MNIST's border pixels: 0 in every image, or non-zero in only a few."""
    x, y = _mnist()
    key = jax.random.PRNGKey(0) if key is None else key
    keys = jax.random.split(key, len(sizes) - 1)
    init = jax.nn.initializers.lecun_normal()
    params = {
        f"dense{i}": {"kernel": init(k, (a, b)), "bias": jnp.zeros(b)}
        for i, (k, a, b) in enumerate(zip(keys, sizes[:-1], sizes[1:]))
    }
    n_layers = len(sizes) - 1

    def apply(p, xb):
        h = xb
        for i in range(n_layers):
            h = h @ p[f"dense{i}"]["kernel"] + p[f"dense{i}"]["bias"]
            if i < n_layers - 1:
                h = jax.nn.relu(h)
        return h

    return _make("mlp_mnist", params, apply, jnp.asarray(x), jnp.asarray(y))


def mixed_mnist(key: jax.Array | None = None) -> Problem:
    """Several layers of different shapes on MNIST-5k: a 5x5 conv (8 channels, stride 2),
    a wide dense layer, a narrow bottleneck, layer norm, a wider layer and the classifier
    (conv 5x5x1x8 -> 1568x256 -> 256x32 -> LayerNorm(32) -> 32x128 -> 128x10; 415,674
    parameters; leaves from 8 to 401k entries: tall, flat, 4-d)."""
    x, y = _mnist()
    key = jax.random.PRNGKey(0) if key is None else key
    ks = jax.random.split(key, 5)
    init = jax.nn.initializers.lecun_normal()
    shapes = [(1568, 256), (256, 32), (32, 128), (128, 10)]
    params = {
        "conv": {"kernel": init(ks[0], (5, 5, 1, 8)), "bias": jnp.zeros(8)},
        **{
            f"dense{i}": {"kernel": init(k, s), "bias": jnp.zeros(s[1])}
            for i, (k, s) in enumerate(zip(ks[1:], shapes))
        },
        "norm": {"scale": jnp.ones(32), "bias": jnp.zeros(32)},
    }

    def apply(p, xb):
        img = xb.reshape(-1, 28, 28, 1)
        h = jax.lax.conv_general_dilated(
            img, p["conv"]["kernel"], (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        h = jax.nn.relu(h + p["conv"]["bias"]).reshape(img.shape[0], -1)
        h = jax.nn.relu(h @ p["dense0"]["kernel"] + p["dense0"]["bias"])
        h = h @ p["dense1"]["kernel"] + p["dense1"]["bias"]
        mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
        h = (h - mu) * jax.lax.rsqrt(var + 1e-5) * p["norm"]["scale"] + p["norm"]["bias"]
        h = jax.nn.relu(h @ p["dense2"]["kernel"] + p["dense2"]["bias"])
        return h @ p["dense3"]["kernel"] + p["dense3"]["bias"]

    return _make("mixed_mnist", params, apply, jnp.asarray(x), jnp.asarray(y))


def cnn_mnist(key: jax.Array | None = None) -> Problem:
    """The thesis's CNN (:class:`scarjax.models.cnn.CNN`: two 3x3 convs with ReLU and max
    pooling, three dense layers; channels (4, 8), hidden (32, 32)) on MNIST-5k 28x28."""
    # flax (and the flax model) are imported only when used (`import scarjax` must not import flax)
    from flax import nnx

    from scarjax.models.cnn import CNN  # the flax model

    x, y = _mnist()
    seed = 0 if key is None else int(jax.random.randint(key, (), 0, 2**30))
    graphdef, params = nnx.split(CNN((28, 28, 1), 10, rngs=nnx.Rngs(seed)), nnx.Param)
    params = jax.tree.map(jnp.asarray, nnx.to_pure_dict(params))

    def apply(p, xb):
        return nnx.merge(graphdef, p)(xb.reshape(-1, 28, 28, 1))

    return _make("cnn_mnist", params, apply, jnp.asarray(x), jnp.asarray(y))
