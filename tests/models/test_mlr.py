"""Tests for scarjax.models.mlr (multinomial logistic regression by SGD, Sec 5.5.1):
linear convergence to the optimum, local rate, determinism, real MNIST data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import scarjax
from scarjax import bounds
from scarjax.models import mlr


@pytest.fixture(scope="module")
def digits_alg(digits):
    return mlr.solve_optimum(mlr.mlr(*digits, num_classes=10, name="mlr_digits"))


def test_digits_factory_trains_on_the_digits_data(digits):
    alg = mlr.digits(batch_size=32)
    ref = mlr.mlr(*digits, num_classes=10, batch_size=32)
    assert set(alg.data) == set(ref.data) == {"x", "y"}
    for k in ref.data:
        np.testing.assert_array_equal(alg.data[k], ref.data[k])
    assert alg.data["x"].shape == (1797, 65)  # 64 pixels and the bias feature
    assert alg.name == "mlr_digits"


def test_mlr_gd_converges_linearly_to_optimum(digits_alg):
    _, tr = scarjax.run(digits_alg, None, 300, 0)
    d = np.asarray(tr.distance)
    assert d[-1] < 0.05 * d[0]
    c_emp = bounds.estimate_c(d[100:])
    c_loc = bounds.local_contraction(digits_alg)
    assert c_emp <= c_loc + 1e-3 and c_loc == pytest.approx(0.99, abs=2e-3)
    g = jax.grad(lambda p: digits_alg.loss(scarjax.State(p, ()), digits_alg.data))(digits_alg.optimum)
    assert float(jnp.linalg.norm(g["w"])) < 1e-3


def test_mlr_minibatch_determinism_and_shapes(digits):
    alg = mlr.mlr(*digits, num_classes=10, batch_size=32)
    s1, t1 = scarjax.run(alg, None, 10, 4)
    s2, t2 = scarjax.run(alg, None, 10, 4)
    np.testing.assert_array_equal(t1.loss, t2.loss)
    assert s1.params["w"].shape == (65, 10)
    assert t1.distance is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(x=np.zeros((5, 2, 2)), y=np.zeros(5, int)), "x must"),
        (dict(x=np.zeros((5, 2)), y=np.zeros(4, int)), "y must"),
        (dict(x=np.zeros((5, 2)), y=np.zeros(5, int), lr=-1.0), "lr"),
        (dict(x=np.zeros((5, 2)), y=np.zeros(5, int), batch_size=10), "batch_size"),
    ],
)
def test_mlr_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mlr.mlr(**kwargs, num_classes=kwargs.pop("num_classes", 3))


def test_mlr_on_real_mnist(mnist_test):
    """MLR on the real MNIST test files of ../shared/data (skipped when absent)."""
    X, y = mnist_test
    alg = mlr.mlr(X[:2000], y[:2000], num_classes=10, lr=0.5, batch_size=256)
    _, tr = scarjax.run(alg, None, 30, 0)
    assert float(tr.loss[-1]) < 0.6 * float(tr.loss[0])
