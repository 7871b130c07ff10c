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
import hashlib
import os
from pathlib import Path

import jax
import numpy as np
import optax

import scarjax
from scarjax import bounds
from scarjax.models import mlr, quadratic

__all__ = ["MLR_LR", "MLR_L2", "OPTIMUM_FILE", "fingerprint", "mlr_digits", "mlr_local_c", "problem",
           "solved_record", "stored_optimum"]

MLR_LR, MLR_L2 = 1.0, 1e-2  # SGD step and ridge of the MLR of Figs 5.5/5.6 (w⁽⁰⁾ = 0)


#: The optimum of :func:`_mlr_solved` for ``(MLR_LR, MLR_L2)`` and its local rate, computed
#: once (:func:`solved_record`; regenerate with ``python -m experiments._problems``): the
#: L-BFGS solve and the Jacobian's op-by-op compilation cost each worker process of a
#: ``scarjax reproduce`` seconds. Used only for the data set, ``lr``, ``l2`` and JAX
#: environment it was computed in (:func:`fingerprint`; another CPU may still round the
#: solve differently, within its tolerance) and only while its ``w*`` passes
#: :func:`scarjax.models.mlr.solve_optimum`'s own convergence test; otherwise solved as before.
OPTIMUM_FILE = Path(__file__).with_name("mlr_digits_optimum.npz")
_SOLVE_TOL = 1e-7  # solve_optimum's default tol; it accepts a gradient norm up to 1e3 * tol


def fingerprint(alg, lr: float, l2: float) -> str:
    """SHA-256 of the MLR's data (``x``, ``y``: dtypes, shapes, bytes), ``(lr, l2)`` and what
    else decides the solve's float rounding: the JAX version, backend and device count, the
    ``XLA_FLAGS`` (a forced host device count changes it), the default matmul precision
    (the tests' "highest" gives another ``w*`` in the 7th digit) and 64-bit mode."""
    env = (jax.__version__, jax.default_backend(), jax.device_count(), os.environ.get("XLA_FLAGS", ""),
           str(jax.config.jax_default_matmul_precision), bool(jax.config.jax_enable_x64))
    h = hashlib.sha256(repr((float(lr), float(l2)) + env).encode())
    for name in ("x", "y"):
        a = np.asarray(alg.data[name])
        h.update(repr((name, a.dtype.str, a.shape)).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _gradient_norm(alg, params) -> float:
    """‖∇L(w)‖ of the full-data loss at ``params`` (as :func:`~scarjax.models.mlr.solve_optimum` tests it)."""
    state = alg.init(jax.random.key(0), alg.data)
    f = lambda p: alg.loss(state._replace(params=p), alg.data)  # noqa: E731
    return float(jax.jit(lambda p: optax.tree.norm(jax.grad(f)(p)))(params))


def solved_record(lr: float = MLR_LR, l2: float = MLR_L2) -> dict:
    """What :data:`OPTIMUM_FILE` stores, computed afresh: the data's fingerprint, ``w*``
    (:func:`~scarjax.models.mlr.solve_optimum`) and ``local_c``
    (:func:`scarjax.bounds.local_contraction` of the full-batch step at ``w*``)."""
    alg = mlr.solve_optimum(mlr.digits(lr=lr, l2=l2), tol=_SOLVE_TOL)
    return {"fingerprint": fingerprint(alg, lr, l2), "w": np.asarray(alg.optimum["w"]),
            "local_c": float(bounds.local_contraction(alg))}


def stored_optimum(alg, lr: float, l2: float, path: str | Path = OPTIMUM_FILE) -> dict | None:
    """``{"optimum": w*, "local_c": c}`` from the record at ``path`` (default
    :data:`OPTIMUM_FILE`) when it is for the MLR ``alg``'s data and ``(lr, l2)`` (its
    fingerprint) and its ``w*`` passes :func:`~scarjax.models.mlr.solve_optimum`'s
    convergence test (gradient norm at most ``1e3 · tol``) on ``alg``'s loss; else ``None``
    (no file, another problem, or not a minimiser)."""
    path = Path(path)
    if not path.exists():
        return None
    with np.load(path) as f:
        rec = {k: f[k] for k in f.files}
    if str(rec["fingerprint"]) != fingerprint(alg, lr, l2):
        return None
    params = {"w": jax.numpy.asarray(rec["w"])}
    if not _gradient_norm(alg, params) <= 1e3 * _SOLVE_TOL:
        return None
    return {"optimum": params, "local_c": float(rec["local_c"])}


@functools.lru_cache(maxsize=None)
def _mlr_stored_or_solved(lr: float, l2: float):
    """``(algorithm, local_c)``: full-batch MLR on digits with its optimum, from
    :data:`OPTIMUM_FILE` when it holds this problem (``local_c`` its stored rate), else
    solved by L-BFGS (``local_c`` ``None``: computed when asked)."""
    alg = mlr.digits(lr=lr, l2=l2)
    rec = stored_optimum(alg, lr, l2)
    if rec is None:
        return mlr.solve_optimum(alg, tol=_SOLVE_TOL), None
    return alg.replace(optimum=rec["optimum"]), rec["local_c"]


def _mlr_solved(lr: float, l2: float):
    """Full-batch MLR on digits with its optimum solved by L-BFGS (memoised: several
    experiments of one ``scarjax reproduce`` share the solve, seconds on 2 CPU cores; the
    same ``w*`` from :data:`OPTIMUM_FILE` when it holds this problem)."""
    return _mlr_stored_or_solved(lr, l2)[0]


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
    share it; full batch: the value stored with the optimum in :data:`OPTIMUM_FILE` when
    the optimum came from there)."""
    stored = _mlr_stored_or_solved(MLR_LR, MLR_L2)[1]
    if batch_size is None and stored is not None:
        return stored
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


if __name__ == "__main__":
    # Regenerate OPTIMUM_FILE (after a change to the MLR, its data or the solver).
    np.savez(OPTIMUM_FILE, **solved_record())
    print(f"wrote {OPTIMUM_FILE.name}")
