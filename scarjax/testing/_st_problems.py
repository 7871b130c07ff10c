"""Ready-made test beds: strongly convex quadratics under gradient descent, whose linear
rate is known exactly (``c = maxᵢ |1 − ηλᵢ(A)|``, Eq 5.3 holds for every iterate)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from hypothesis import strategies as st

from scarjax.core import Algorithm
from scarjax.models import quadratic

__all__ = ["TestBed", "quadratics"]


class TestBed(NamedTuple):
    """An algorithm with its exact linear rate.

    Attributes:
      algorithm: the :class:`~scarjax.Algorithm` (with its optimum).
      c: the exact rate of Eq 5.3.
      description: how it was drawn (for counterexamples).
    """

    __test__ = False  # not a pytest class

    algorithm: Algorithm
    c: float
    description: str


@st.composite
def quadratics(
    draw: Any,
    *,
    d: Any = None,
    c: Any = None,
    slowest: Any = None,
    seed: Any = None,
) -> TestBed:
    """Strongly convex quadratics ``½(w − w*)ᵀA(w − w*)`` by gradient descent with a known rate.

    Each argument is a strategy (its default in brackets).

    Args:
      d: the dimension [``sampled_from([1, 2, 4, 8])``, shrinks to 1].
      c: the exact rate [``floats(0.8, 0.97)``]; the condition number is drawn in
        ``[1, (1 + c)/(1 − c)]`` so that ``c`` is attainable.
      slowest: start along the slowest eigenvector (the baseline then contracts at
        exactly ``c`` from ``w⁽⁰⁾``, the tightness condition of Thm 5.3.1) [``booleans()``].
      seed: the problem's seed [``integers(0, 10_000)``].
    """
    d = draw(st.sampled_from([1, 2, 4, 8]) if d is None else d)
    c = draw(st.floats(0.8, 0.97) if c is None else c)
    slow = draw(st.booleans() if slowest is None else slowest)
    s = draw(st.integers(0, 10_000) if seed is None else seed)
    kappa = (1 + c) / (1 - c)
    cond = 1.0 + (kappa - 1.0) * np.random.default_rng(s).uniform(0.0, 1.0)
    qp = quadratic.random_problem(s, d, cond, c=c)
    if slow:
        A = np.asarray(qp.data["A"], np.float64)
        v = np.linalg.eigh(A)[1][:, 0]
        w0 = np.asarray(qp.data["w_star"], np.float64) + v
        qp = quadratic.problem(A, qp.data["w_star"], float(qp.data["lr"]), w0)
    exact = quadratic.contraction(qp)
    desc = f"quadratic d={d}, c={exact:.6g}, condition={cond:.4g}, seed={s}" + (", w0 on the slowest eigenvector" if slow else "")
    return TestBed(qp, exact, desc)
