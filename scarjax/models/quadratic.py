"""Strongly convex quadratic programs under gradient descent (thesis Fig 5.3).

``loss(w) = ½ (w − w*)ᵀ A (w − w*)`` with ``A`` symmetric positive definite, iterated by
gradient descent ``f(w) = w − η A (w − w*)``. Its contraction is known exactly:
``‖f(w) − w*‖ ≤ c ‖w − w*‖`` with ``c = maxᵢ |1 − η λᵢ(A)|`` (Eq 5.3/5.5 hold for every
``w``), which makes the QP the reference problem for property-testing Thm 5.3.1.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.core import Algorithm, State

__all__ = ["problem", "random_problem", "fig53_problem", "contraction"]


def _update(view, state, data, key):
    return -data["lr"] * (data["A"] @ (view - data["w_star"])), state


def _grad(view, state, data, key, progress):
    # Worker part (thesis Example 5.2.2 with M workers on a deterministic problem): every
    # worker computes the full gradient A(view − w*) at the view it read; a worker that
    # finished a fraction ``progress`` of its work carries that weight in the merge.
    return data["A"] @ (view - data["w_star"]), jnp.clip(progress, 0.0, 1.0)


def _apply(message, state, data, key):
    # Server part: one gradient step with the merged gradient.
    return -data["lr"] * message, state


def _loss(state, data):
    r = state.params - data["w_star"]
    return 0.5 * r @ (data["A"] @ r)


def _init(key, data):
    return State(data["w0"], ())


def problem(A, w_star, lr: float, w0) -> Algorithm:
    """Gradient descent with step ``lr`` on ``½ (w − w*)ᵀ A (w − w*)`` from ``w0``.

    Raises ``ValueError`` (naming the argument) unless ``A`` is square, symmetric and
    positive definite, the shapes agree, and ``0 < lr < 2/λ_max`` (so that ``c < 1``).
    """
    for nm, v in (("A", A), ("w_star", w_star), ("w0", w0)):
        va.check_real(nm, v)
    va.check_real("lr", lr, lo=0.0, lo_open=True, scalar=True)
    A = np.asarray(A, np.float64)
    w_star = np.asarray(w_star, np.float64)
    w0 = np.asarray(w0, np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square matrix, got shape {A.shape}")
    if not np.allclose(A, A.T):
        raise ValueError("A must be symmetric")
    eig = np.linalg.eigvalsh(A)
    if eig.min() <= 0:
        raise ValueError(f"A must be positive definite, smallest eigenvalue {eig.min():.3g}")
    d = A.shape[0]
    if w_star.shape != (d,) or w0.shape != (d,):
        raise ValueError(f"w_star and w0 must have shape ({d},), got {w_star.shape} and {w0.shape}")
    if not 0 < lr < 2 / eig.max():
        raise ValueError(f"lr must be in (0, 2/λ_max = {2 / eig.max():.4g}), got {lr!r}")
    data = {
        "A": jnp.asarray(A, jnp.float32),
        "w_star": jnp.asarray(w_star, jnp.float32),
        "w0": jnp.asarray(w0, jnp.float32),
        "lr": jnp.asarray(lr, jnp.float32),
    }
    return Algorithm(
        init=_init,
        update=_update,
        loss=_loss,
        data=data,
        optimum=data["w_star"],
        name=f"qp{d}",
        # The theory's reference problem: full float32 products on every backend, so that
        # its rounding floor is float32's on a GPU or TPU too (Algorithm.precision).
        precision="highest",
        grad=_grad,
        apply=_apply,
    )


def contraction(algorithm: Algorithm) -> float:
    """The exact linear rate ``c = maxᵢ |1 − η λᵢ(A)|`` of a :func:`problem`."""
    A = np.asarray(algorithm.data["A"], np.float64)
    lr = float(algorithm.data["lr"])
    return float(np.max(np.abs(1.0 - lr * np.linalg.eigvalsh(A))))


def random_problem(seed: int, d: int, condition: float, *, c: float | None = None, init_distance: float = 1.0) -> Algorithm:
    """A random ``d``-dimensional QP with condition number ``condition``.

    Eigenvalues are spread log-uniformly in ``[1, condition]`` (both ends included) with a
    random orthogonal eigenbasis; ``w*`` is random and ``w0`` lies at distance
    ``init_distance`` from it. The step is ``2/(λ_min + λ_max)`` (the optimal rate
    ``(κ−1)/(κ+1)``) unless ``c`` is given, in which case ``η = (1 − c)/λ_min`` so that
    the rate is exactly ``c`` (which needs ``c ≥ (κ − 1)/(κ + 1)``).
    """
    seed = va.check_int("seed", seed, lo=0)
    d = va.check_int("d", d, lo=1)
    va.check_real("condition", condition, lo=1.0, scalar=True)
    va.check_real("init_distance", init_distance, lo=0.0, scalar=True)
    if c is not None:
        va.check_real("c", c, lo=0.0, hi=1.0, lo_open=True, hi_open=True, scalar=True)
    rng = np.random.default_rng(seed)
    lam = np.exp(np.linspace(0.0, np.log(condition), d)) if d > 1 else np.ones(1)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    A = (Q * lam) @ Q.T
    A = 0.5 * (A + A.T)
    if c is None:
        lr = 2.0 / (lam.min() + lam.max())
    else:
        if not 0 < c < 1:
            raise ValueError(f"c must be in (0, 1), got {c}")
        lr = (1.0 - c) / lam.min()
        if lr * lam.max() - 1.0 > c + 1e-12:
            raise ValueError(f"c={c} is not attainable with condition {condition}: need c >= {(condition - 1) / (condition + 1):.4g}")
    w_star = rng.normal(size=d)
    u = rng.normal(size=d)
    w0 = w_star + init_distance * u / np.linalg.norm(u)
    return problem(A, w_star, lr, w0)


def fig53_problem() -> Algorithm:
    """The 4-D QP used for thesis Fig 5.3.

    The thesis does not list its matrix; we use eigenvalues ``(1, 2, 4, 8)`` in a fixed
    random basis with ``η = 0.005`` so that ``c = 0.995`` and an unperturbed run needs
    ~1,000 iterations to gain a factor ``e⁵`` — the regime of the figure ("ε is set so
    that an unperturbed trial converges in roughly 1,000 iterations"). ``w0 − w*`` lies
    along the slowest eigenvector (``‖w0 − w*‖ = 2``), so the baseline contracts at
    exactly ``c``.
    """
    rng = np.random.default_rng(53)
    Q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    A = (Q * np.array([1.0, 2.0, 4.0, 8.0])) @ Q.T
    A = 0.5 * (A + A.T)
    w_star = np.array([1.0, -1.0, 0.5, 2.0])
    # Start along the slowest eigenvector, so the unperturbed run contracts at exactly c
    # and (5.3) "cannot be improved" (the tightness condition of Thm 5.3.1).
    w0 = w_star + 2.0 * Q[:, 0]
    return problem(A, w_star, 0.005, w0)
