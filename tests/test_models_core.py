"""QP and MLR models: closed forms, optimum, local rate, real MNIST data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import scarjax
from scarjax import bounds
from scarjax.models import mlr, quadratic


def test_quadratic_contraction_matches_jacobian():
    qp = quadratic.random_problem(1, 6, 20.0)
    assert bounds.local_contraction(qp) == pytest.approx(quadratic.contraction(qp), rel=1e-5)
    assert quadratic.contraction(qp) == pytest.approx(19 / 21, rel=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(A=np.eye(2), w_star=np.zeros(3), lr=0.5, w0=np.ones(2)), "shape"),
        (dict(A=np.array([[1.0, 2.0], [0.0, 1.0]]), w_star=np.zeros(2), lr=0.5, w0=np.ones(2)), "symmetric"),
        (dict(A=-np.eye(2), w_star=np.zeros(2), lr=0.5, w0=np.ones(2)), "positive definite"),
        (dict(A=np.eye(2), w_star=np.zeros(2), lr=2.5, w0=np.ones(2)), "lr"),
    ],
)
def test_quadratic_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        quadratic.problem(**kwargs)


def test_random_problem_rate_is_attained():
    qp = quadratic.random_problem(2, 5, 4.0, c=0.9)
    assert quadratic.contraction(qp) == pytest.approx(0.9, rel=1e-6)
    with pytest.raises(ValueError, match="not attainable"):
        quadratic.random_problem(2, 5, 100.0, c=0.5)


@pytest.fixture(scope="module")
def digits_alg():
    return mlr.solve_optimum(mlr.digits())


def test_mlr_gd_converges_linearly_to_optimum(digits_alg):
    _, tr = scarjax.run(digits_alg, None, 300, 0)
    d = np.asarray(tr.distance)
    assert d[-1] < 0.05 * d[0]
    c_emp = bounds.estimate_c(d[100:])
    c_loc = bounds.local_contraction(digits_alg)
    assert c_emp <= c_loc + 1e-3 and c_loc == pytest.approx(0.99, abs=2e-3)
    g = jax.grad(lambda p: digits_alg.loss(scarjax.State(p, ()), digits_alg.data))(digits_alg.optimum)
    assert float(jnp.linalg.norm(g["w"])) < 1e-3


def test_mlr_minibatch_determinism_and_shapes():
    alg = mlr.digits(batch_size=32)
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


def test_mlr_on_real_mnist(shared_data_dir):
    """MLR on the real MNIST test files of ../shared/data (skipped when absent)."""
    from scarjax.data import load_mnist

    X, y = load_mnist(shared_data_dir / "mnist", split="test")
    alg = mlr.mlr(X[:2000], y[:2000], num_classes=10, lr=0.5, batch_size=256)
    _, tr = scarjax.run(alg, None, 30, 0)
    assert float(tr.loss[-1]) < 0.6 * float(tr.loss[0])
