"""Tests for scarjax.models.quadratic (gradient descent on a strongly convex QP, Fig 5.3)."""

import numpy as np
import pytest

from scarjax import bounds
from scarjax.models import quadratic


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
