"""Rework-cost theory of SCAR (thesis Sec 5.3 and Appendix B).

Notation (thesis Eq 5.2–5.6): the unperturbed iterates contract linearly,
``‖f(w) − w*‖ ≤ c‖w − w*‖`` with ``0 < c < 1`` (Eq 5.3, 5.5); perturbations ``δ_ℓ`` hit
the iterate before step ``ℓ``; ``d₀ = ‖w⁽⁰⁾ − w*‖``; and

    Δ_T = Σ_{ℓ ≤ T} c^{−ℓ} E‖δ_ℓ‖.

* :func:`rework_bound` – Thm 5.3.1 (Eq 5.6): ``π ≤ log(1 + Δ_T/d₀) / log(1/c)``.
* :func:`envelope` – Lemma B.2.1 (Eq B.4): ``E‖y⁽ᵏ⁾ − w*‖ ≤ cᵏ (d₀ + Σ_{ℓ<k} c^{−ℓ}E‖δ_ℓ‖)``.
* :func:`infinite_bound`, :func:`error_floor` – Appendix B.1.1 (Eq B.1–B.2): perturbations
  of size ``≤ Δ`` at every step leave an irreducible error ``cΔ/(1 − c)``.
* :func:`sgd_bound` – Appendix B.1.2: the implicit SGD bound solved numerically.
* :func:`estimate_c` – the empirical linear rate of an unperturbed run.

Sums of ``c^{−ℓ}`` overflow float32 quickly (``0.9^{−1000}``), so everything is computed
in log space (``log Δ_T`` by ``logsumexp``) and in float64 NumPy: these are post-hoc
analysis functions, called outside the compiled loop. Inputs are validated and errors
name the offending argument.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
from jax.flatten_util import ravel_pytree
import numpy as np
from scipy.special import logsumexp

__all__ = [
    "log_delta_T",
    "plateau",
    "delta_T",
    "rework_bound",
    "trace_rework_bound",
    "iterations_bound",
    "envelope",
    "error_floor",
    "infinite_bound",
    "infinite_iterations",
    "sgd_bound",
    "estimate_c",
    "CEstimate",
    "local_contraction",
    "NotLinearlyConvergentError",
]


#: :func:`estimate_c` (``'max_ratio'``) rejects a window whose local rate is still slowing
#: below this ratio (last quarter / third quarter; a power law gives ≈ 0.71).
_MIN_SETTLE = 0.85
# Only a stall below this fraction of a run's largest value counts as a float32 floor (plateau).
_MAX_FLOOR = 1e-3


class NotLinearlyConvergentError(ValueError):
    """Raised by :func:`estimate_c` when a run does not converge linearly (Eq 5.3)."""


# --------------------------------------------------------------------------------------
# Validation helpers.


def _check_c(c: Any) -> np.ndarray:
    try:
        arr = np.asarray(c, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"c must be a number in (0, 1), got {c!r}") from e
    if not np.all((arr > 0) & (arr < 1)):
        raise ValueError(f"c must lie in the open interval (0, 1), got {c!r}")
    return arr


def _check_positive(name: str, x: Any) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    return arr


def _check_norms(name: str, x: Any) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0:
        raise ValueError(f"{name} must be an array of per-step norms, got a scalar")
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative norms (no NaN), got min {np.nanmin(arr)!r}")
    return arr


def _trace_norms(trace: Any) -> np.ndarray:
    """A Trace's ‖δ_ℓ‖ (float64, unchecked), refusing read-point perturbations it missed."""
    pd = getattr(trace, "point_delta", None)
    if (
        isinstance(pd, dict)
        and pd.get("read") is not None
        and getattr(trace, "read_effect", None) is None
        and np.any(np.asarray(pd["read"]) > 0)
    ):
        raise ValueError(
            "trace: read-point hooks changed the parameters the workers read, but the "
            "trace has no read_effect, so its perturbation norms miss them; run with "
            "measure_read_effect=True (thesis Example 5.2.2)"
        )
    return np.asarray(trace.perturbation_norms(), dtype=np.float64)


def _norms_of(x: Any) -> np.ndarray:
    """Accept a Trace (uses its perturbation_norms) or an array of norms."""
    if hasattr(x, "perturbation_norms"):
        return _check_norms("trace.perturbation_norms()", _trace_norms(x))
    return _check_norms("norms", x)


# --------------------------------------------------------------------------------------
# Theorem 5.3.1.


def log_delta_T(norms: Any, c: float, *, T: int | None = None, expectation: bool = False) -> np.ndarray:
    """``log Δ_T`` with ``Δ_T = Σ_{ℓ=0}^{T} c^{−ℓ} E‖δ_ℓ‖`` (Thm 5.3.1), in log space.

    Args:
      norms: ``[..., L]`` per-step perturbation norms ‖δ_ℓ‖ (index ℓ as in Eq 5.2), or a
        :class:`~scarjax.Trace` (its :meth:`~scarjax.Trace.perturbation_norms`).
      c: the linear rate, in (0, 1).
      T: last index included (default: all).
      expectation: average the norms over the leading (trial) axis first, giving the
        ``E‖δ_ℓ‖`` of the theorem from Monte-Carlo trials.

    Returns ``-inf`` where every norm is zero.
    """
    n = _norms_of(norms)
    c = float(_check_c(c))
    if expectation:
        if n.ndim < 2:
            raise ValueError("expectation=True needs norms with a leading trial axis")
        n = n.mean(axis=0)
    if T is not None:
        if not 0 <= T < n.shape[-1]:
            raise ValueError(f"T must be in [0, {n.shape[-1] - 1}], got {T}")
        n = n[..., : T + 1]
    ell = np.arange(n.shape[-1])
    with np.errstate(divide="ignore"):
        return logsumexp(np.log(n) + ell * np.log(1.0 / c), axis=-1)


def delta_T(norms: Any, c: float, *, T: int | None = None, expectation: bool = False) -> np.ndarray:
    """``Δ_T = Σ_{ℓ ≤ T} c^{−ℓ} E‖δ_ℓ‖`` (Thm 5.3.1); may be ``inf`` in float64 for very
    late perturbations — prefer :func:`log_delta_T` / :func:`trace_rework_bound` then."""
    with np.errstate(over="ignore"):
        return np.exp(log_delta_T(norms, c, T=T, expectation=expectation))


def rework_bound(delta_T: Any, initial_distance: Any, c: Any) -> np.ndarray:
    """Theorem 5.3.1 (Eq 5.6): ``π(δ, ε) ≤ log(1 + Δ_T/‖w⁽⁰⁾ − w*‖) / log(1/c)``.

    Independent of ε. Broadcasts over arrays.

    >>> float(rework_bound(0.0, 1.0, 0.5))
    0.0
    >>> round(float(rework_bound(1.0, 1.0, 0.5)), 6)  # log 2 / log 2
    1.0
    """
    c = _check_c(c)
    d0 = _check_positive("initial_distance", initial_distance)
    dt = np.asarray(delta_T, dtype=np.float64)
    if np.any(np.isnan(dt)) or np.any(dt < 0):
        raise ValueError(f"delta_T must be >= 0 (no NaN), got {delta_T!r}")
    return np.log1p(dt / d0) / np.log(1.0 / c)


def _start_indices(norms: np.ndarray, start: Any) -> np.ndarray:
    """Per-trial restart iteration ``s`` (an int array over the leading axes)."""
    L = norms.shape[-1]
    if isinstance(start, str):
        if start != "auto":
            raise ValueError(f"start must be 'auto' or an int in [0, {L - 1}], got {start!r}")
        return np.asarray(np.argmax(norms > 0, axis=-1))  # 0 where there is no perturbation
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or not 0 <= start < L:
        raise ValueError(f"start must be 'auto' or an int in [0, {L - 1}], got {start!r}")
    return np.asarray(np.full(norms.shape[:-1], int(start)))


def trace_rework_bound(
    trace: Any,
    c: float,
    *,
    initial_distance: Any | None = None,
    T: int | None = None,
    start: int | str = "auto",
    expectation: bool = False,
) -> np.ndarray:
    """Thm 5.3.1 (Eq 5.6) evaluated on a run, from the trace's measured ‖δ_ℓ‖.

    The theorem is applied to the run *restarted at iteration s*: with
    ``d_s = ‖y⁽ˢ⁾ − w*‖`` (read from ``trace.distance``) and
    ``Δ = Σ_{ℓ ≥ s} c^{−(ℓ−s)} ‖δ_ℓ‖``, the bound is ``log(1 + Δ/d_s)/log(1/c)``, computed
    stably as ``softplus(log Δ − log d_s)/log(1/c)``.

    Args:
      trace: a :class:`~scarjax.Trace` (possibly with a leading trial axis), or ``[..., L]``
        norms ‖δ_ℓ‖ (then only ``start=0`` with ``initial_distance`` is possible).
      c: the linear rate of Eq 5.3/5.5, in (0, 1).
      initial_distance: ``d₀`` for ``start=0`` when the trace has no optimum.
      T: last perturbation index included (absolute iteration; default all).
      start: ``'auto'`` (default): per trial, the first iteration with a nonzero
        perturbation norm (a trial with no perturbation gets bound 0); ``0``: the form
        from ``w⁽⁰⁾`` printed in the thesis; an int ``s``: restart at ``s`` (perturbations
        before ``s`` are then not summed; they are in ``d_s``).
      expectation: average the norms (and ``d_s``) over the leading trial axis first,
        giving one bound for ``E‖δ_ℓ‖`` (with ``'auto'``, ``s`` is the first iteration
        where any trial is perturbed).

    **Which form bounds the rework you measure.** Eq 5.6 is the difference of two
    *upper bounds* on iterations: ``κ(y) ≤ log((d₀ + Δ_T)/ε)/log(1/c)`` (always, under
    Eq 5.3/5.5, proof Eq B.8–B.9) minus ``κ(w) = log(d₀/ε)/log(1/c)``. It bounds the
    rework measured against the real unperturbed run (:func:`scarjax.rework_cost`) only
    when that run needs the full ``κ(w)``, i.e. when the baseline contracts no faster than
    ``c`` — when "(5.3) cannot be improved".

    * ``start=0`` (the w⁽⁰⁾ form) is valid when the baseline contracts at exactly ``c``
      from ``w⁽⁰⁾``: e.g. gradient descent on a QP started on its slowest eigendirection
      (``tests/test_bounds.py::test_thm_531_w0_form_holds_and_is_tight_when_the_baseline_is_tight``). When the baseline first
      contracts faster than ``c`` (a fast transient: ridge regression or MLR from
      ``w⁽⁰⁾ = 0``, whose error starts mostly in fast eigendirections) it is *too small*:
      ``c^{−s}‖δ_s‖/d₀`` under-counts a perturbation at ``s`` because
      ``d_s < c^s d₀``; on ridge regression by gradient descent it is exceeded by most
      adversarial perturbations (``test_w0_form_is_exceeded_after_a_fast_transient``).
    * ``start='auto'`` applies the theorem to the run restarted at ``y⁽ˢ⁾ = w⁽ˢ⁾``: before
      the first perturbation the perturbed and unperturbed runs are the same run (same
      keys), so the restarted theorem's "unperturbed run" is the measured baseline from
      ``w⁽ˢ⁾`` on, and the transient before ``s`` no longer enters. It bounds the measured
      rework whenever the baseline contracts no faster than ``c`` *from* ``w⁽ˢ⁾`` (its
      slowest direction dominant by then, which any perturbation after the transient
      meets; an adversarial perturbation along ``y⁽ˢ⁾ − w*`` meets it at any ``s`` for a
      linear contraction, since it only rescales the error). A perturbation inside the
      transient that moves the error into a slow direction the baseline hardly had can
      still exceed it; :func:`scarjax.rework.check_rework` measures that slack of the
      baseline and adds it, giving a bound that holds whenever Eq 5.3/5.5 hold with
      ``c``.

    Returns ``[...]`` bounds in iterations (float64); ``inf`` if ``d_s = 0`` with a
    perturbation.
    """
    norms = _norms_of(trace)
    dist = getattr(trace, "distance", None)
    if initial_distance is None:
        initial_distance = getattr(trace, "initial_distance", None)
    elif not (start == 0 and not isinstance(start, str)):
        raise ValueError(
            "initial_distance is the d₀ of the w⁽⁰⁾ form: give it with start=0 (with "
            f"start={start!r}, d_s = ‖y⁽ˢ⁾ − w*‖ is read from trace.distance)"
        )
    return _trace_bound(norms, dist, initial_distance, c, T=T, start=start, expectation=expectation)


def _trace_bound(
    norms: np.ndarray,
    dist: Any,
    initial_distance: Any,
    c: Any,
    *,
    T: int | None,
    start: int | str,
    expectation: bool,
) -> np.ndarray:
    """:func:`trace_rework_bound` on validated norms ``[..., L]`` and distances (or None)."""
    c = float(_check_c(c))
    if T is not None:
        if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or not 0 <= T < norms.shape[-1]:
            raise ValueError(f"T must be an int in [0, {norms.shape[-1] - 1}], got {T!r}")
        norms = norms[..., : T + 1]
    if not isinstance(expectation, (bool, np.bool_)):
        raise TypeError(f"expectation must be a bool, got {expectation!r}")
    if expectation:
        if norms.ndim < 2:
            raise ValueError("expectation=True needs norms with a leading trial axis")
        norms = norms.mean(axis=0)
    s = _start_indices(norms, start)
    perturbed = (norms > 0).any(axis=-1)
    restart = not isinstance(start, str) and start > 0
    if restart or np.any(np.where(perturbed, s, 0) > 0) or (initial_distance is None and dist is not None):
        if dist is None:
            raise ValueError(
                f"start={start!r} restarts at an iteration s > 0 and needs d_s = ‖y⁽ˢ⁾ − w*‖: "
                "give a Trace with distances (an algorithm with an optimum), or start=0 "
                "with initial_distance for the w⁽⁰⁾ form"
            )
        dist = np.asarray(dist, np.float64)
        if dist.shape[-1] < norms.shape[-1] or (not expectation and dist.shape[:-1] != norms.shape[:-1]):
            raise ValueError(f"trace.distance has shape {dist.shape}, incompatible with the norms {norms.shape}")
        if expectation:
            d = np.take(dist, s, axis=-1)
            d = d.mean(axis=0) if d.ndim else d
        else:
            d = np.take_along_axis(dist, s[..., None], axis=-1)[..., 0]
        if np.any(np.isnan(d)) or np.any(d < 0):
            raise ValueError("trace.distance must be non-negative and not NaN at the restart iterations")
    else:
        if initial_distance is None:
            raise ValueError("initial_distance is required when the trace has no optimum")
        d = _check_positive("initial_distance", initial_distance)
        if expectation and d.ndim:
            d = d.mean(axis=0)
    ell = np.arange(norms.shape[-1])
    shift = ell - s[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(shift >= 0, np.log(norms) + shift * np.log(1.0 / c), -np.inf)
        ldt = logsumexp(terms, axis=-1)
        out = np.logaddexp(0.0, ldt - np.log(d)) / np.log(1.0 / c)
    # No perturbation at or after s: nothing to bound (0), also where d_s = 0. An
    # infinite norm or d_s (a diverged trial, see check_rework) gives an infinite bound.
    out = np.where(ldt > -np.inf, out, 0.0)
    return np.where(np.isnan(out), np.inf, out)[()]


def iterations_bound(initial_distance: Any, eps: Any, c: Any, delta_T: Any = 0.0) -> np.ndarray:
    """``κ = log((d₀ + Δ_T)/ε) / log(1/c)`` (proof of Thm 5.3.1, Eq B.8–B.9): iterations
    after which ``E‖y⁽ᵏ⁾ − w*‖ < ε`` is guaranteed. With ``delta_T = 0`` this is the
    unperturbed ``κ(w, ε)``."""
    c = _check_c(c)
    d0 = _check_positive("initial_distance", initial_distance)
    eps = _check_positive("eps", eps)
    dt = np.asarray(delta_T, dtype=np.float64)
    if np.any(dt < 0):
        raise ValueError(f"delta_T must be >= 0, got {delta_T!r}")
    return np.log((d0 + dt) / eps) / np.log(1.0 / c)


def envelope(norms: Any, initial_distance: float, c: float) -> np.ndarray:
    """Lemma B.2.1 (Eq B.4) as a trajectory: ``[..., L + 1]`` upper bounds on
    ``E‖y⁽ᵏ⁾ − w*‖`` for ``k = 0 … L``, given ``[..., L]`` norms ‖δ_ℓ‖ indexed by ℓ.

    ``bound_k = cᵏ d₀ + Σ_{ℓ<k} c^{k−ℓ} ‖δ_ℓ‖`` (computed by the stable recursion
    ``b_{k+1} = c (b_k + ‖δ_k‖)`` of Eq B.5)."""
    n = _norms_of(norms)
    c = float(_check_c(c))
    d0 = _check_positive("initial_distance", initial_distance)
    out = np.empty(n.shape[:-1] + (n.shape[-1] + 1,))
    b = np.broadcast_to(d0, n.shape[:-1]).astype(np.float64)
    out[..., 0] = b
    for k in range(n.shape[-1]):
        b = c * (b + n[..., k])
        out[..., k + 1] = b
    return out


# --------------------------------------------------------------------------------------
# Appendix B.1.1: perturbations at every step.


def error_floor(Delta: Any, c: Any) -> np.ndarray:
    """The irreducible error ``cΔ/(1 − c)`` of perturbations ``E‖δ_k‖ ≤ Δ`` at every step
    (Example 5.3.4, Eq B.1)."""
    c = _check_c(c)
    D = np.asarray(Delta, dtype=np.float64)
    if np.any(np.isnan(D)) or np.any(D < 0):
        raise ValueError(f"Delta must be >= 0, got {Delta!r}")
    return c * D / (1.0 - c)


def infinite_iterations(Delta: Any, initial_distance: Any, eps: Any, c: Any) -> np.ndarray:
    """Iterations after which ``E‖y⁽ᵏ⁾ − w*‖ < ε`` is guaranteed under perturbations of
    size ``≤ Δ`` every step (Appendix B.1.1):
    ``k > log((d₀ − F)/(ε − F)) / log(1/c)``, ``F = cΔ/(1 − c)``.

    ``inf`` where ``ε ≤ F`` (unreachable); ``0`` where ``d₀ ≤ F < ε`` (the envelope
    ``F + cᵏ(d₀ − F)`` is below ε from the start)."""
    c = _check_c(c)
    d0 = _check_positive("initial_distance", initial_distance)
    eps = _check_positive("eps", eps)
    F = error_floor(Delta, c)
    d0, eps, F, c = np.broadcast_arrays(d0, eps, F, c)
    out = np.zeros(d0.shape)
    unreachable = eps <= F
    live = (~unreachable) & (d0 > F)
    out[unreachable] = np.inf
    out[live] = np.log((d0[live] - F[live]) / (eps[live] - F[live])) / np.log(1.0 / c[live])
    return out if out.ndim else float(out)


def infinite_bound(Delta: Any, initial_distance: Any, eps: Any, c: Any) -> np.ndarray:
    """Rework bound (Eq B.2) for perturbations of size ``≤ Δ`` at every iteration:

        π ≤ log( (1 − F/d₀) / (1 − F/ε) ) / log(1/c),   F = cΔ/(1 − c),

    i.e. :func:`infinite_iterations` minus the unperturbed ``κ(w, ε) = log(d₀/ε)/log(1/c)``.
    ``inf`` when ``ε ≤ F`` (ε-optimality is impossible: the irreducible floor)."""
    c = _check_c(c)
    d0 = _check_positive("initial_distance", initial_distance)
    eps = _check_positive("eps", eps)
    k_y = infinite_iterations(Delta, d0, eps, c)
    k_w = np.log(d0 / eps) / np.log(1.0 / c)
    return k_y - k_w


# --------------------------------------------------------------------------------------
# Appendix B.1.2: SGD.


def sgd_bound(
    norms: Any,
    alphas: Sequence[float] | np.ndarray | Callable[[np.ndarray], np.ndarray],
    G: float,
    initial_distance: float,
    eps: float,
    *,
    horizon: int | None = None,
) -> float:
    """Iteration-cost bound for SGD (Appendix B.1.2), solved numerically.

    With ``a_k = Π_{i=1}^{k} (1 − α_i)`` (``a_0 = 1``) and perturbations ``δ_0 … δ_{T−1}``
    (``T = len(norms)``), the thesis's analogue of Eq B.8 is

        E‖y⁽ᵏ⁾ − w*‖ ≤ a_k [ d₀ + Σ_{ℓ=0}^{T−1} a_ℓ^{−1} (E‖δ_ℓ‖ + α_ℓ² G²) ] < ε,

    an implicit condition on ``k``. The bound is ``κ(y) − κ(w)``: the first ``k ≥ T``
    satisfying it with the measured norms, minus the same with all ``δ = 0``.

    Caveat: this is the closed form *as printed*. It adds ``E‖δ‖`` to a bound on squared
    distances and drops the gradient noise after the last perturbation, so it is not a
    valid bound on a noisy SGD run in general (unperturbed noisy SGD ends far above
    ``a_k·d₀``: ``tests/testing/test_rework_bound.py::
    test_b12_printed_closed_form_is_not_a_bound_for_noisy_sgd``). To check an SGD run,
    use the recursion Eq B.3 implies with the perturbations carried through,
    ``U_{k+1} = (1 − α_k)(√U_k + ‖δ_k‖)² + α_k²G²``:
    ``scarjax.testing.check_rework_bound(..., variant='B.1.2')``.

    Args:
      norms: ``[T]`` perturbation norms ‖δ_ℓ‖.
      alphas: the sequence ``α_k`` for ``k = 0 … horizon`` (array), or a function of
        ``k`` (array of ints) returning ``α_k``; each in [0, 1).
      G: bound on the expected stochastic-gradient norm (>= 0).
      initial_distance: ``d₀ > 0``.
      eps: target ``ε > 0``.
      horizon: number of iterations searched when ``alphas`` is a function
        (default ``10⁶``).

    Returns:
      The bound in iterations (a float); ``inf`` when the perturbed condition is not
      met within the horizon (a ``ValueError`` if even the unperturbed one is not).
    """
    n = _check_norms("norms", norms)
    if n.ndim != 1:
        raise ValueError(f"norms must be 1-D, got shape {n.shape}")
    d0 = float(_check_positive("initial_distance", initial_distance))
    eps = float(_check_positive("eps", eps))
    if not np.isfinite(G) or G < 0:
        raise ValueError(f"G must be finite and >= 0, got {G!r}")
    T = n.shape[0]
    if callable(alphas):
        H = int(horizon or 10**6)
        a = np.asarray(alphas(np.arange(H + 1)), dtype=np.float64)
    else:
        a = np.asarray(alphas, dtype=np.float64)
        if horizon is not None:
            a = a[: horizon + 1]
    if a.ndim != 1 or a.shape[0] <= T:
        raise ValueError(f"alphas must be a 1-D sequence longer than len(norms)={T}")
    if np.any(np.isnan(a)) or np.any(a < 0) or np.any(a >= 1):
        raise ValueError("alphas must lie in [0, 1)")
    # log a_k = Σ_{i=1}^k log(1 − α_i).
    log_a = np.concatenate([[0.0], np.cumsum(np.log1p(-a[1:]))])
    inv_a = np.exp(-log_a[:T])
    noise = float(np.sum(inv_a * a[:T] ** 2 * G**2))
    pert = float(np.sum(inv_a * n))

    def first_k(total: float) -> float:
        ok = log_a + np.log(total) < np.log(eps)
        ok[:T] = False
        idx = np.flatnonzero(ok)
        return float(idx[0]) if idx.size else np.inf

    k_w = first_k(d0 + noise)
    if not np.isfinite(k_w):
        raise ValueError(
            "the unperturbed SGD condition is not met within the horizon; "
            "increase horizon or eps"
        )
    return first_k(d0 + noise + pert) - k_w


# --------------------------------------------------------------------------------------
# Estimating c.


class CEstimate(NamedTuple):
    """:func:`estimate_c` with ``full_output=True``: the estimate and its spread.

    Attributes:
      c: the estimate of the chosen ``method``.
      low: the fitted mean rate over the window (``exp`` of the least-squares slope of
        ``log d_k``); a fast transient pulls it below the asymptotic rate.
      high: the largest one-step ratio ``d_{k+1}/d_k`` in the window: the smallest ``c``
        for which Eq 5.3 holds along the observed stretch.
      method: ``'max_ratio'`` or ``'fit'``.
      n_points: iterations used (the window above the floor).
      r2: R² of the log-linear fit (1 for an exactly geometric run; a fast transient
        lowers it without making the run sublinear).
      settle: the local rate ``1 − d_{k+1}/d_k`` averaged over the last quarter of the
        window, divided by its average over the third quarter: ≈ 1 once the run has
        reached its asymptotic rate; a power law ``k^{−p}`` gives ≈ 0.71.
      floor: the error level below which iterations were ignored.

    ``[low, high]`` is the range of rates the run shows: their gap is the uncertainty of
    an empirical ``c``. A bound computed with ``low`` can be exceeded; one computed with
    ``high`` holds along the observed window.
    """

    c: float
    low: float
    high: float
    method: str
    n_points: int
    r2: float
    settle: float
    floor: float


def plateau(values: Any) -> np.ndarray:
    """The level at which a run stalls, per trial (0 where it is still converging): the
    float32 noise floor that :func:`estimate_c` stays above and
    :func:`scarjax.rework.noise_floor` builds on.

    Take the tail from where the run first comes within 2× of its minimum ``m``. A run
    still converging geometrically at any rate is at ≥ √2·m over the first half of that
    tail; one that has stalled at a floor (float32 rounding: constant, or cycling among a
    few values) is back at ≤ 1.1·m there. For a stalled run the plateau is the largest
    value from its first return to ≤ 1.1·m on. Only a stall below 1e-3 × the run's
    largest value counts: float32 floors lie orders of magnitude below the start (the
    Fig 5.3 QP stalls at 1e-5 of it, ridge regression at 1e-7), while a loss levelling off
    at its minimum ``L* > 0`` is not a rounding floor.
    """
    v = np.asarray(values, np.float64)
    if v.ndim == 0 or v.shape[-1] < 4:
        return np.zeros(v.shape[:-1]) if v.ndim else np.zeros(())
    L = v.shape[-1]
    m = v.min(axis=-1, keepdims=True)
    idx = np.arange(L)
    j = np.argmax(v <= 2 * m, axis=-1)[..., None]
    tau = L - j
    first_half = (idx >= j) & (idx < j + np.maximum(tau // 2, 1))
    stalled = (tau[..., 0] >= 4) & (np.where(first_half, v, np.inf).min(axis=-1) <= 1.1 * m[..., 0])
    j2 = np.argmax((idx >= j) & (v <= 1.1 * m), axis=-1)[..., None]
    level = np.where(idx >= j2, v, -np.inf).max(axis=-1)
    stalled &= level <= _MAX_FLOOR * v.max(axis=-1)
    return np.where(stalled, level, 0.0)


def estimate_c(
    distances: Any,
    *,
    method: str = "max_ratio",
    start: int = 0,
    stop: int | None = None,
    floor: float | None = None,
    min_r2: float = 0.95,
    full_output: bool = False,
) -> float | CEstimate:
    """The empirical linear rate ``c`` of an unperturbed run (the thesis determines c
    "empirically", Figs 5.3, 5.5).

    Args:
      distances: ``[L]`` errors ``‖w⁽ᵏ⁾ − w*‖`` (or loss gaps) of an unperturbed run, or a
        :class:`~scarjax.Trace` with a ``distance``.
      method: ``'max_ratio'`` (default) – ``max_k d_{k+1}/d_k`` over the usable window:
        the smallest ``c`` for which Eq 5.3 (``‖f(w) − w*‖ ≤ c‖w − w*‖``) holds along the
        run, which is what Thm 5.3.1 assumes. It is conservative: a linearly convergent
        run's one-step ratio rises towards its asymptotic rate as the slow directions come
        to dominate, so the maximum is at or above the rate the run settles to, and a
        bound computed with it is not too small. ``'fit'`` – ``exp`` of the least-squares
        slope of ``log d_k`` against ``k``: the *typical* rate over the window, which a
        fast transient (error starting in fast directions, e.g. ridge regression or MLR
        from ``w⁽⁰⁾ = 0``) pulls below the asymptotic one — on ridge regression by
        gradient descent its ``1 − c`` was 14–19 % too large, and bounds computed with it
        are exceeded. The empirical estimate reflects only the directions the run
        explores: a slow direction hardly present in ``w⁽⁰⁾ − w*`` may not show within the
        window (use :func:`local_contraction` or an exact rate when available).
      start, stop: the window of iterations used.
      floor: ignore iterations once the error is below ``floor`` (default: the larger of
        1e3 × the float32 resolution of the first error and 10 × the level at which the
        run stalls if it does, :func:`scarjax.rework.noise_floor`), where rounding makes
        the ratios noise.
      min_r2: minimum R² of the log-linear fit for ``'fit'``. ``'max_ratio'`` instead
        requires the local rate to have settled (``settle ≥ 0.85``, see
        :class:`CEstimate`): a transient lowers R² without making the run sublinear, while
        a run whose contraction keeps slowing (a power law, or a slow direction that has
        not yet taken over) has no ``c`` this window can show.
      full_output: return a :class:`CEstimate` (``c``, its range ``low``–``high``,
        ``method``, ``n_points``, ``r2``, ``settle``, ``floor``) instead of a float.

    Raises:
      NotLinearlyConvergentError: if the errors do not decrease geometrically (rate
        >= 1, fewer than 3 usable points, a poor log-linear fit for ``'fit'``, a local
        rate still slowing for ``'max_ratio'``).
    """
    d = getattr(distances, "distance", distances)
    if d is None:
        raise ValueError("distances: the trace has no distance (the algorithm has no optimum)")
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 1:
        raise ValueError(f"distances must be 1-D, got shape {d.shape}")
    if np.any(np.isnan(d)) or np.any(d < 0):
        raise ValueError("distances must be non-negative and not NaN")
    if method not in ("fit", "max_ratio"):
        raise ValueError(f"method must be 'fit' or 'max_ratio', got {method!r}")
    for name, v in (("start", start), ("stop", stop)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
            raise TypeError(f"{name} must be an int, got {v!r}")
    if start is None or not 0 <= start < d.shape[0]:
        raise ValueError(f"start must be in [0, {d.shape[0] - 1}], got {start!r}")
    if not (isinstance(min_r2, (int, float, np.floating)) and 0 <= min_r2 <= 1):
        raise ValueError(f"min_r2 must be a number in [0, 1], got {min_r2!r}")
    if not isinstance(full_output, (bool, np.bool_)):
        raise TypeError(f"full_output must be a bool, got {full_output!r}")
    d = d[start:stop]
    if floor is None:
        eps32 = float(np.finfo(np.float32).eps)
        floor = max(1e3 * eps32 * float(d[0]) if d.size else 0.0, 10.0 * float(plateau(d)) if d.size else 0.0)
    elif not (np.isscalar(floor) and np.isfinite(floor) and floor >= 0):
        raise ValueError(f"floor must be a finite number >= 0, got {floor!r}")
    usable = np.flatnonzero(d > floor)
    # Only the leading run of usable points (before the floor is first reached).
    if usable.size and usable[0] == 0:
        breaks = np.flatnonzero(np.diff(usable) != 1)
        usable = usable[: breaks[0] + 1] if breaks.size else usable
    else:
        usable = usable[:0]
    if usable.size < 3:
        raise NotLinearlyConvergentError(
            f"only {usable.size} iterations above the floor {floor:.3g} (below it rounding "
            "dominates, or the run has stalled): cannot estimate c"
        )
    k = usable.astype(np.float64)
    y = np.log(d[usable])
    slope, intercept = np.polyfit(k, y, 1)
    resid = y - (slope * k + intercept)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else 0.0
    low = float(np.exp(slope))
    ratios = np.exp(np.diff(y))
    high = float(np.max(ratios))
    q = ratios.size // 4
    with np.errstate(divide="ignore", invalid="ignore"):
        settle = float(np.mean(1 - ratios[3 * q :]) / np.mean(1 - ratios[2 * q : 3 * q])) if q >= 2 else 1.0
    c = high if method == "max_ratio" else low
    if method == "fit" and r2 < min_r2 and low < 1:
        raise NotLinearlyConvergentError(
            f"log-distance is not linear in k (R² = {r2:.3f} < min_r2={min_r2}): the run "
            "does not converge linearly (Eq 5.3)"
        )
    if method == "max_ratio" and settle < _MIN_SETTLE and high < 1:
        raise NotLinearlyConvergentError(
            f"the one-step contraction kept slowing down to the end of the window (1 − ratio "
            f"over its last quarter is {settle:.2f}× that over the third; a power law gives "
            "0.71): the run converges sublinearly, or has not reached its asymptotic rate "
            "and c would be under-estimated; use a longer run or a later window (start=), "
            "or an exact rate (local_contraction)"
        )
    if not 0 < c < 1:
        hint = (
            " (the largest one-step ratio: the error grew somewhere in the window; "
            "choose start/stop past it, or method='fit' for the typical rate)"
            if method == "max_ratio" and 0 < low < 1
            else ""
        )
        raise NotLinearlyConvergentError(
            f"estimated rate c = {c:.6g} is not in (0, 1){hint}: the run does not converge "
            "linearly (Eq 5.3)"
        )
    if full_output:
        return CEstimate(c, low, high, method, int(usable.size), float(r2), settle, float(floor))
    return c


def local_contraction(algorithm: Any, key: Any = None) -> float:
    """The linear rate of the update map at the optimum: ``c = ‖∂f/∂w (w*)‖₂`` with
    ``f(w) = w + Δ(w)`` (thesis Eq 5.1, 5.3).

    Near ``w*``, ``f(y) − w* ≈ J (y − w*)``, so Eq 5.3/5.5 hold locally with ``c`` the
    largest singular value of the Jacobian ``J``. For gradient descent on a quadratic this
    is exactly ``maxᵢ |1 − ηλᵢ(A)|`` (tested); for MLR by full-batch GD it is
    ``maxᵢ |1 − ηλᵢ(∇²L(w*))|`` — the worst-case rate, which an empirical fit of an
    unperturbed run from ``w⁽⁰⁾`` can underestimate (its fast transient). For stochastic
    algorithms it is the Jacobian of one step drawn with ``key``. Requires
    ``algorithm.optimum``; the Jacobian is dense (``d × d``), so this is for models up to a
    few thousand parameters.
    """
    if getattr(algorithm, "optimum", None) is None:
        raise ValueError("algorithm has no optimum: local_contraction needs w*")
    key = jax.random.key(0) if key is None else key
    state = algorithm.init(key, algorithm.data)
    flat, unravel = ravel_pytree(algorithm.optimum)
    if flat.size > 20_000:
        raise ValueError(f"local_contraction builds a dense Jacobian; {flat.size} parameters is too many")

    def f(x):
        p = unravel(x)
        delta, _ = algorithm.update(p, state._replace(params=p), algorithm.data, key)
        return x + ravel_pytree(delta)[0]

    J = np.asarray(jax.jacfwd(f)(flat), np.float64)
    c = float(np.linalg.norm(J, 2))
    if not 0 < c < 1:
        raise NotLinearlyConvergentError(f"the update map is not a contraction at w*: ‖J‖₂ = {c:.6g}")
    return c
