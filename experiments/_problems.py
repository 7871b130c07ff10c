"""The reference problems the rework experiments share (SCAR's models are in
:mod:`experiments._scar`):

* :func:`mlr_digits` — MLR on scikit-learn's digits with its full-data optimum, thesis
  Figs 5.5 and 5.6(a) (step :data:`MLR_LR`, ridge :data:`MLR_L2`, w⁽⁰⁾ = 0);
* :func:`problem` — ``(algorithm, c)`` of the perturbation-source experiments
  (staleness, precision, revocation, combined): thesis Fig 5.3's QP, full-batch MLR on
  digits, and the same MLR on label-sorted (non-IID) shards.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

import scarjax
from scarjax import bounds
from scarjax.models import mlr, quadratic

__all__ = ["MLR_LR", "MLR_L2", "mlr_digits", "mlr_local_c", "problem"]

MLR_LR, MLR_L2 = 1.0, 1e-2  # SGD step and ridge of the MLR of Figs 5.5/5.6 (w⁽⁰⁾ = 0)


@functools.lru_cache(maxsize=None)
def _mlr_solved(lr: float, l2: float):
    """Full-batch MLR on digits with its optimum solved by L-BFGS (memoised: several
    experiments of one ``scarjax reproduce`` share the solve, seconds on 2 CPU cores)."""
    return mlr.solve_optimum(mlr.digits(lr=lr, l2=l2))


@functools.lru_cache(maxsize=None)
def mlr_digits(batch_size: int | None = None):
    """MLR on digits (step :data:`MLR_LR`, ridge :data:`MLR_L2`, w⁽⁰⁾ = 0, minibatches of
    ``batch_size``, ``None``: full batch) with its optimum (the full-data minimiser)
    attached (memoised, like :func:`mlr_local_c`: the same algorithm for every experiment)."""
    full = _mlr_solved(MLR_LR, MLR_L2)
    return mlr.digits(lr=MLR_LR, l2=MLR_L2, batch_size=batch_size).replace(optimum=full.optimum)


@functools.lru_cache(maxsize=None)
def mlr_local_c(batch_size: int | None = None) -> float:
    """``bounds.local_contraction`` of :func:`mlr_digits` (memoised: Figs 5.5 and 5.6(a)
    share it)."""
    return float(bounds.local_contraction(mlr_digits(batch_size)))


@functools.lru_cache(maxsize=None)
def problem(name: str, lr: float = 1.0, l2: float = 1e-2):
    """``(algorithm, c)``: ``'qp'`` – thesis Fig 5.3's QP (``c`` exact); ``'mlr'`` –
    full-batch gradient descent on MLR/digits with its optimum solved by L-BFGS (``c``
    estimated from an unperturbed run with ``estimate_c(method='max_ratio')``, the
    smallest c for which Eq 5.3 holds along the run), raised to ``1 − lr·l2`` — the exact
    rate of the Hessian's flattest direction); ``'mlr_noniid'`` – the same MLR with the
    examples sorted by label (contiguous worker shards are non-IID)."""
    if name == "qp":
        # Thesis Fig 5.3's QP with w* and w0 shifted off the dyadic grid: its w* =
        # (1, −1, 0.5, 2) is exactly representable with 2 mantissa bits, which would let
        # reduced-precision runs land on w* exactly. Same A, η, c and ‖w0 − w*‖ = 2.
        base = quadratic.fig53_problem()
        shift = 0.1 * np.sqrt([2.0, 3.0, 5.0, 7.0])
        qp = quadratic.problem(
            np.asarray(base.data["A"], np.float64),
            np.asarray(base.data["w_star"], np.float64) + shift,
            float(base.data["lr"]),
            np.asarray(base.data["w0"], np.float64) + shift,
        )
        return qp, quadratic.contraction(qp)
    if name == "mlr":
        alg = _mlr_solved(lr, l2)
        _, tr = scarjax.run(alg, None, 1000, jax.random.key(0))
        c_run = bounds.estimate_c(tr, method="max_ratio", start=50)
        # Eq 5.3 must hold for every w, not only along the baseline: the softmax's
        # per-feature shift direction is flat in the cross-entropy, so the Hessian's
        # smallest eigenvalue is the ridge l2 and gradient descent contracts it by exactly
        # 1 − lr·l2. Take the larger of the two.
        c = max(c_run, 1.0 - lr * l2)
        return alg, c
    if name == "mlr_noniid":
        # The same MLR with the examples sorted by label, so contiguous worker shards are
        # non-IID (each of 8 workers holds about one or two digits): a worker's lost
        # contribution then biases the merged gradient. Same loss, optimum and c.
        from sklearn.datasets import load_digits

        base, c = problem("mlr", lr, l2)
        ds = load_digits()
        order = np.argsort(ds.target, kind="stable")
        alg = mlr.mlr(ds.data[order] / 16.0, ds.target[order], num_classes=10, lr=lr, l2=l2, name="mlr_digits_sorted")
        return alg.replace(optimum=base.optimum), c
    raise ValueError(f"problem name must be 'qp', 'mlr' or 'mlr_noniid', got {name!r}")
