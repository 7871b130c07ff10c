"""Shared pieces of the staleness / precision / revocation / combined experiments: the two
reference problems (thesis Fig 5.3's QP and full-batch MLR on digits), their rate ``c``
and ε, and the measured-vs-bound rework of one set of traces."""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

import scarjax
from scarjax import bounds, rework
from scarjax.models import mlr, quadratic

__all__ = ["problem", "baseline", "summarise", "finite"]


@functools.lru_cache(maxsize=None)
def problem(name: str, lr: float = 1.0, l2: float = 1e-2):
    """``(algorithm, c)``: ``'qp'`` – thesis Fig 5.3's QP (``c`` exact); ``'mlr'`` –
    full-batch gradient descent on MLR/digits with its optimum solved by L-BFGS (``c``
    estimated from an unperturbed run with ``estimate_c(method='max_ratio')``, the
    smallest c for which Eq 5.3 holds along the run: conservative)."""
    if name == "qp":
        qp = quadratic.fig53_problem()
        return qp, quadratic.contraction(qp)
    if name == "mlr":
        alg = mlr.solve_optimum(mlr.digits(lr=lr, l2=l2))
        _, tr = scarjax.run(alg, None, 3000, jax.random.key(0))
        c = bounds.estimate_c(tr, method="max_ratio", start=50)
        return alg, c
    raise ValueError(f"unknown problem {name!r}")


def finite(x: Any) -> np.ndarray:
    """Distances with NaN (a diverged run) replaced by ``inf``."""
    a = np.asarray(x, np.float64)
    return np.where(np.isnan(a), np.inf, a)


def baseline(alg, hooks, steps: int, eps_iters: int, key=0):
    """The unperturbed reference run under ``hooks`` (e.g. ``data_parallel(M)``) and the
    ε it reaches at exactly ``eps_iters`` iterations (as the thesis sets ε)."""
    _, tr = scarjax.run(alg, hooks, steps, key)
    eps = float(rework.calibrate_eps(tr, eps_iters))
    return tr, eps


def summarise(trace: Any, eps: float, kappa_w: float, c: float, d0: float, tail: int = 100) -> dict:
    """Per-trial measured rework (Eq 5.4), Δ_T and the Thm 5.3.1 bound for a traced run.

    Δ_T sums the measured ‖δ_ℓ‖ (``trace.perturbation_norms()``: write + update points +
    read effect) up to the iteration the perturbed run first reaches ε (the iterates up
    to then are those of a run whose perturbations stop there, to which Thm 5.3.1
    applies), or over the whole run when it never does.
    """
    dist = finite(trace.distance)
    k_y = rework.iterations_to(dist, eps)
    norms = finite(np.asarray(trace.perturbation_norms(), np.float64))
    out = {"rework": [], "delta_T": [], "bound": [], "final_error": [], "floor": [], "mean_delta": []}
    for i in range(dist.shape[0]):
        T = int(min(k_y[i], norms.shape[-1] - 1)) if np.isfinite(k_y[i]) else norms.shape[-1] - 1
        n = norms[i]
        if not np.all(np.isfinite(n)):
            dT, bnd = np.inf, np.inf
        else:
            ldt = float(bounds.log_delta_T(n, c, T=T))
            dT = float(np.exp(ldt)) if ldt < 700 else np.inf
            bnd = float(np.logaddexp(0.0, ldt - np.log(d0)) / np.log(1.0 / c))
        out["rework"].append(float(k_y[i] - kappa_w))
        out["delta_T"].append(dT)
        out["bound"].append(bnd)
        out["final_error"].append(float(dist[i, -1]))
        out["floor"].append(float(np.max(dist[i, -tail:])))
        out["mean_delta"].append(float(np.mean(n[-tail:])))
    return out
