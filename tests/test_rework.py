"""Measured rework (Eq 5.4) and ε calibration."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import scarjax


def test_iterations_to_semantics():
    v = np.array([5.0, 3.0, 0.5, 2.0, 0.4, 0.3])
    assert scarjax.iterations_to(v, 1.0) == 4  # stays below from k = 4 on
    assert scarjax.iterations_to(v, 10.0) == 0
    assert scarjax.iterations_to(v, 0.1) == np.inf
    np.testing.assert_array_equal(scarjax.iterations_to(np.stack([v, v / 10, v * 10]), 1.0), [4, 0, np.inf])


@given(c=st.floats(0.5, 0.99), n=st.integers(1, 200))
def test_calibrate_eps_hits_requested_iteration(c, n):
    v = 2.0 * c ** np.arange(400)
    eps = scarjax.calibrate_eps(v, n)
    assert scarjax.iterations_to(v, eps) == n


def test_rework_cost_and_errors():
    base = 0.9 ** np.arange(100)
    pert = base.copy()
    pert[30:] = 0.9 ** (np.arange(70) + 20)  # knocked back 10 iterations at 30
    eps = scarjax.calibrate_eps(base, 50)
    assert scarjax.rework_cost(pert, base, eps) == 10
    with pytest.raises(ValueError, match="baseline_trace never reaches"):
        scarjax.rework_cost(pert, base, 1e-9)
    with pytest.raises(ValueError, match="eps"):
        scarjax.rework_cost(pert, base, -1.0)
    with pytest.raises(ValueError, match="NaN"):
        scarjax.rework_cost(np.full(5, np.nan), base, eps)
    with pytest.raises(ValueError, match="metric"):
        scarjax.rework_cost(pert, base, eps, metric="accuracy")
    with pytest.raises(ValueError, match="iterations"):
        scarjax.calibrate_eps(base, 0)
    with pytest.raises(ValueError, match="not a new minimum"):
        scarjax.calibrate_eps(np.ones(10), 5)
