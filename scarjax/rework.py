"""Measuring rework: iterations to ε-optimality, perturbed vs unperturbed (thesis Eq 5.4).

The thesis defines the rework cost ``π(δ, ε) = κ(y, ε) − κ(w, ε)`` as the difference in
iterations to reach ε-optimality between the perturbed sequence ``y`` and the unperturbed
``w`` (Eq 5.4). Measured on traces, ``κ`` is the iteration from which the criterion
(distance to ``w*`` or loss) stays below ε. The thesis sets ε "so that an unperturbed
trial converges in roughly N iterations" (Figs 5.3, 5.5): :func:`calibrate_eps` does that.
:func:`check_rework` measures rework and the Thm 5.3.1 bound it must respect together.

**Metric.** ``metric=None`` (the default everywhere) chooses ``'distance'`` (``‖y − w*‖``,
the theorem's criterion) when the trace records distances, i.e. the algorithm has a known
optimum, and ``'loss'`` otherwise (MF, LDA, CNN); the choice is logged at DEBUG level on
the ``scarjax.rework`` logger and reported by :func:`check_rework`. A plain array is the
criterion itself.

**Noise floor.** Traces are float32, and the matrix products that computed them had the
precision in effect when the run was made (:mod:`scarjax.numerics`: float32 on CPU, TF32
by default on a GPU, one-pass bfloat16 on a TPU; recorded as ``Trace.matmul_eps``). Near
the floor of the criterion (the distance stops shrinking at ~``eps · ‖w*‖``, ``eps`` the
coarser of float32's and the matrix products'; the loss stops resolving changes smaller
than ``eps · |loss|``) the time at which a run crosses ε is decided by rounding, and
measured rework is noise. :func:`calibrate_eps`, :func:`calibrate_near` and
:func:`check_rework` therefore refuse an ε within 10× of the floor (``ValueError``) and
warn within 100× (:class:`NoiseFloorWarning`), naming the floor (:func:`noise_floor`) and,
when reduced-precision matrix products set it, what to set for float32 ones
(``jax.default_matmul_precision('highest')``).
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any, NamedTuple

import numpy as np

from scarjax import bounds, numerics


__all__ = [
    "iterations_to",
    "rework_cost",
    "calibrate_eps",
    "calibrate_near",
    "criterion",
    "noise_floor",
    "check_rework",
    "ReworkCheck",
    "NoiseFloorWarning",
]

_METRICS = ("distance", "loss")
_log = logging.getLogger(__name__)

#: ε below this multiple of the noise floor is refused, below ``_WARN_FACTOR`` warned.
_REFUSE_FACTOR = 10.0
_WARN_FACTOR = 100.0


class NoiseFloorWarning(UserWarning):
    """ε is less than 100× above the noise floor of the criterion: the measured rework is
    partly rounding noise (see :func:`noise_floor`)."""


_FORMAT_OF_BITS = {23: "float32", 10: "TF32", 7: "bfloat16", 16: "bfloat16 (three passes)",
                   21: "TF32 (three passes)", 3: "float8"}


class _Precision(NamedTuple):
    """The arithmetic a criterion was computed in: the machine epsilon of the run's matrix
    products (``None``: unknown, float32 assumed) and ``‖w*‖`` per trial (or ``None``)."""

    matmul_eps: float | None
    optimum_norm: np.ndarray | None
    recorded: bool  # from a Trace (else: the precision in effect here, a guess)


def _precision(trace: Any) -> _Precision:
    """The precision a criterion was computed in: a Trace's record (``matmul_eps``,
    ``optimum_norm``); for a plain array, the precision in effect here
    (:func:`scarjax.numerics.matmul_precision`), the best guess for a run made here."""
    if _is_trace(trace):
        me = getattr(trace, "matmul_eps", None)
        on = getattr(trace, "optimum_norm", None)
        eps = None if me is None else float(np.max(np.asarray(me, np.float64)))
        norm = None if on is None else np.asarray(on, np.float64)
        return _Precision(eps, norm, True)
    return _Precision(numerics.matmul_precision().eps, None, False)


def _effective_eps(res: float, prec: _Precision) -> float:
    """The coarser of the stored dtype's and the matrix products' machine epsilon."""
    return max(res, prec.matmul_eps or 0.0)


def _format_name(eps: float) -> str:
    bits = int(round(-math.log2(eps))) if eps > 0 else 0
    return _FORMAT_OF_BITS.get(bits, f"{bits}-bit-mantissa")


def _default_floor(v: np.ndarray, res: float, metric: str, prec: _Precision, scale: Any = None) -> np.ndarray:
    """:func:`noise_floor` on checked values (see there)."""
    e = _effective_eps(res, prec)
    if metric == "loss":
        return e * np.abs(np.nanmin(v, axis=-1))
    floor = bounds.plateau(v)
    if prec.optimum_norm is not None:
        floor = np.maximum(floor, e * prec.optimum_norm)
    if scale is not None:
        s = np.asarray(scale, np.float64)
        if np.any(~np.isfinite(s)) or np.any(s < 0):
            raise ValueError(f"scale must be finite and >= 0, got {scale!r}")
        floor = np.maximum(floor, e * s)
    return floor


# --------------------------------------------------------------------------------------
# The criterion.


def _is_trace(x: Any) -> bool:
    return hasattr(x, "loss") and hasattr(x, "distance")


def _resolve_metric(metric: Any, *traces: Any) -> str:
    """``metric`` validated, or the automatic choice for ``metric=None``."""
    if metric is not None:
        if not isinstance(metric, str) or metric not in _METRICS:
            raise ValueError(f"metric must be None or one of {_METRICS}, got {metric!r}")
        return metric
    known = [t for t in traces if _is_trace(t)]
    if not known:
        return "distance"  # plain arrays: the criterion itself, no reference level
    chosen = "distance" if all(t.distance is not None for t in known) else "loss"
    _log.debug("metric=None -> %r (the trace %s distances to an optimum)", chosen, "records" if chosen == "distance" else "has no")
    return chosen


def _values(trace: Any, metric: str, name: str) -> tuple[np.ndarray, float]:
    """The criterion as float64, and the resolution (machine eps) of its stored dtype."""
    if _is_trace(trace):
        raw = getattr(trace, metric)
        if raw is None:
            raise ValueError(
                f"{name}: metric={metric!r} is not available: the algorithm has no known "
                "optimum; use metric='loss' (or metric=None) or give the Algorithm an optimum"
            )
    else:
        raw = trace
    try:
        arr = np.asarray(raw)
    except Exception as e:  # noqa: BLE001 – report the argument, not numpy's internals
        raise TypeError(f"{name} must be a Trace or an array of criterion values, got {type(trace).__name__}") from e
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a Trace or a numeric array, got dtype {arr.dtype}")
    res = float(np.finfo(arr.dtype).eps) if np.issubdtype(arr.dtype, np.floating) else float(np.finfo(np.float32).eps)
    return arr.astype(np.float64), res


def criterion(trace: Any, metric: str | None = None) -> np.ndarray:
    """The per-iteration criterion of a trace: ``trace.distance`` or ``trace.loss`` (or a
    plain array, returned as is, in float64).

    ``metric=None`` picks ``'distance'`` when the trace records distances (the algorithm
    has an optimum), else ``'loss'``.
    """
    return _values(trace, _resolve_metric(metric, trace), "trace")[0]


def iterations_to(values: Any, eps: Any) -> np.ndarray:
    """The iteration from which the criterion stays below ``eps``: the smallest ``k`` with
    ``values[..., m] < eps`` for every ``m >= k`` (``inf`` if the last value is not below).

    This is the measured counterpart of the thesis's ``κ(y, ε)`` ("m > κ implies
    E‖y⁽ᵐ⁾ − w*‖ < ε", Sec 5.3.1); for a monotone run it is the first hitting time, and a
    perturbation that strikes after a first hit correctly counts. Broadcasts over leading
    (trial) axes; ``eps`` may be a scalar or broadcast against the leading axes.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 0:
        raise ValueError("values must have an iteration axis")
    if np.any(np.isnan(v)):
        raise ValueError("values contain NaN: the run diverged; cannot measure iterations")
    e = np.asarray(eps, dtype=np.float64)
    if np.any(~np.isfinite(e)) or np.any(e <= 0):
        raise ValueError(f"eps must be finite and > 0, got {eps!r}")
    above = v >= e[..., None]
    L = v.shape[-1]
    last_above = L - 1 - np.argmax(above[..., ::-1], axis=-1)
    k = np.where(above.any(axis=-1), last_above + 1, 0).astype(np.float64)
    return np.where(above[..., -1], np.inf, k)


def rework_cost(trace: Any, baseline_trace: Any, eps: Any, *, metric: str | None = None) -> np.ndarray:
    """Measured rework cost (Eq 5.4): ``iterations_to(trace) − iterations_to(baseline)``.

    Args:
      trace: the perturbed run (a :class:`~scarjax.Trace`, possibly with a trial axis, or
        an array of criterion values).
      baseline_trace: the unperturbed run (same key, so minibatches match), with or
        without the same trial axis.
      eps: the ε of ε-optimality (see :func:`calibrate_eps`).
      metric: ``'distance'`` (‖y − w*‖, the theorem's criterion), ``'loss'``, or ``None``
        (default): ``'distance'`` when the traces record distances, else ``'loss'``.

    Returns:
      Rework in iterations (float; negative when the perturbation helped; ``inf`` when
      the perturbed run never reaches ε within its length).

    Raises:
      ValueError: if the baseline never reaches ε (ε mis-calibrated or run too short).

    To compare with Thm 5.3.1, use :func:`check_rework`, which pairs this measurement
    with the form of the bound that applies to it.
    """
    m = _resolve_metric(metric, trace, baseline_trace)
    b, _ = _values(baseline_trace, m, "baseline_trace")
    v, _ = _values(trace, m, "trace")
    for name, x in (("baseline_trace", b), ("trace", v)):
        if np.any(np.isnan(x)):
            raise ValueError(f"{name} contains NaN: the run diverged; cannot measure iterations")
    base = iterations_to(b, eps)
    if np.any(~np.isfinite(base)):
        e = np.broadcast_to(np.asarray(eps, np.float64), b.shape[:-1])
        if np.any(np.any(b < e[..., None], axis=-1) & ~np.isfinite(base)):
            raise ValueError(
                f"baseline_trace reaches eps={eps!r} and then grows back above it: the unperturbed run "
                "diverges after reaching ε (not linearly convergent over the run; "
                "scarjax.testing.check_linear_convergence shows where), so rework is undefined"
            )
        raise ValueError(
            f"baseline_trace never reaches eps={eps!r}: calibrate eps on the baseline "
            "(calibrate_eps) or run longer"
        )
    return iterations_to(v, eps) - base


# --------------------------------------------------------------------------------------
# The noise floor.


def noise_floor(baseline_trace: Any, metric: str | None = None, *, scale: Any = None) -> np.ndarray:
    """The rounding noise floor of a run's criterion, per trial.

    ``eps`` below is the coarser of the machine epsilon of the trace's dtype (float32) and
    of the matrix products the run was computed with (``Trace.matmul_eps``, recorded when
    the run was made: ``2⁻²³`` on CPU or under ``jax.default_matmul_precision('highest')``,
    ``2⁻¹⁰`` for a GPU's default TF32, ``2⁻⁷`` for a TPU's default bfloat16; see
    :func:`scarjax.numerics.matmul_precision`). For a plain array it is the precision in
    effect where this is called.

    * ``'distance'`` (and a plain array with ``metric=None``): the level at which the
      baseline's distance stalls (its measured plateau: float32 iterates cannot get
      closer to ``w*`` than ~``eps · ‖w*‖``, and slowly contracting gradient descent
      stalls higher, ~``eps · ‖w*‖/(1 − c)``, when its steps round away), and at least
      ``eps · ‖w*‖`` when the trace records ``‖w*‖`` (``Trace.optimum_norm``: every run of an
      algorithm with an optimum) and ``eps · scale`` when ``scale`` (e.g. the parameters'
      norm) is given. ``0`` for an array that is still converging at its end, or levels
      off above 1e-3 of its largest value (not a rounding floor), and no ``scale``.
    * ``'loss'``: the resolution of the loss, ``eps · |lowest loss|``: a loss level ε is
      resolved only if ``ε − lowest loss`` is well above it (the loss stops resolving its
      own decrease long before the parameters do).
    """
    m = _resolve_metric(metric, baseline_trace)
    v, res = _values(baseline_trace, m, "baseline_trace")
    if v.ndim == 0:
        raise ValueError("baseline_trace must have an iteration axis")
    return _default_floor(v, res, m, _precision(baseline_trace), scale)


def _guard_noise(eps: np.ndarray, v: np.ndarray, res: float, metric: str, floor: Any, caller: str,
                 prec: _Precision = _Precision(None, None, False)) -> None:
    """Refuse ε within 10× of the noise floor, warn within 100× (see the module doc)."""
    if floor is None:
        floor = _default_floor(v, res, metric, prec)
    else:
        floor = np.asarray(floor, np.float64)
        if np.any(~np.isfinite(floor)) or np.any(floor < 0):
            raise ValueError(f"floor must be finite and >= 0 (0 disables the check), got {floor!r}")
    lowest = v.min(axis=-1)
    headroom = eps - lowest if metric == "loss" else eps
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(floor > 0, headroom / np.where(floor > 0, floor, 1.0), np.inf)
    ratio, floor, headroom, lowest = np.broadcast_arrays(ratio, floor, headroom, lowest)
    i = np.unravel_index(np.argmin(ratio), ratio.shape) if ratio.ndim else ()
    worst = float(ratio[i])
    if worst >= _WARN_FACTOR:
        return
    where = f" (trial {i[0] if len(i) == 1 else i})" if ratio.ndim and ratio.size > 1 else ""
    e = _effective_eps(res, prec)
    reduced = e > res
    fmt = _format_name(e) if reduced else "float32"
    made = "when the run was made" if prec.recorded else "here"
    if metric == "loss":
        what = (
            f"eps={float(np.broadcast_to(eps, ratio.shape)[i]):.7g} is only {float(headroom[i]):.3g} above the "
            f"baseline's lowest loss {float(lowest[i]):.7g}{where}: {worst:.3g}× the {fmt} noise floor "
            f"of the loss there ({float(floor[i]):.3g} = {'eps' if reduced else 'eps32'} × |loss|)"
        )
    else:
        what = (
            f"eps={float(np.broadcast_to(eps, ratio.shape)[i]):.3g} is {worst:.3g}× the {fmt} noise floor of "
            f"the baseline's {metric}{where} ({float(floor[i]):.3g}: where it stops converging, at least "
            f"eps × ‖w*‖ with eps = {e:.3g})"
        )
    if reduced:
        what += (
            f"; the run's float32 matrix products were {fmt} (eps {e:.3g}, the precision in effect {made}; "
            "a GPU computes float32 products in TF32 and a TPU in bfloat16 by default)"
        )
        advice = (
            f"{numerics.HIGHEST_ADVICE} and rerun (the floor is then float32's), or calibrate at an earlier "
            "iteration; pass floor=0 to override"
        )
    else:
        advice = (
            "calibrate at an earlier iteration (or run in float64); pass floor=0 to override"
        )
    if worst < _REFUSE_FACTOR:
        raise ValueError(f"{caller}: {what}; below {_REFUSE_FACTOR:g}× the measured rework is rounding noise: {advice}")
    warnings.warn(
        f"{caller}: {what}; below {_WARN_FACTOR:g}× the measured rework is partly rounding noise: {advice}",
        NoiseFloorWarning,
        stacklevel=3,
    )


# --------------------------------------------------------------------------------------
# Calibrating ε.


def _check_iterations(iterations: Any, L: int) -> int:
    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)):
        raise TypeError(f"iterations must be an int, got {iterations!r}")
    if not 1 <= iterations < L:
        raise ValueError(f"iterations must be in [1, {L - 1}], got {iterations}")
    return int(iterations)


def calibrate_eps(baseline_trace: Any, iterations: int, *, metric: str | None = None, floor: Any = None) -> np.ndarray:
    """ε such that the unperturbed run reaches ε (for good) at exactly ``iterations``.

    ε is the geometric mean of the criterion at ``iterations − 1`` and ``iterations``
    (for a trial axis, per trial).

    Args:
      baseline_trace: the unperturbed run (a Trace, possibly with a trial axis, or an
        array of criterion values; for an array holding a loss pass ``metric='loss'`` so
        the loss's noise floor is checked).
      iterations: the iteration ``N`` at which the baseline should converge.
      metric: ``None`` (default): ``'distance'`` when the trace records distances, else
        ``'loss'``.
      floor: the noise floor of the criterion (default :func:`noise_floor`; ``0``
        disables the check).

    Raises:
      ValueError: if the criterion at ``iterations`` is not below all earlier values (the
        run is not converging at that point), or ε is within 10× of the noise floor
        (:func:`noise_floor`: of the precision the run was made in, recorded in the
        trace; for a loss: ``ε − lowest loss`` within 10× of ``eps · |loss|``). When
        TF32/bfloat16 matrix products (a GPU's/TPU's default) set the floor, the message
        says what to set for float32 ones (``jax.default_matmul_precision('highest')``).

    Warns:
      NoiseFloorWarning: ε within 100× of the noise floor.
    """
    m = _resolve_metric(metric, baseline_trace)
    v, res = _values(baseline_trace, m, "baseline_trace")
    if v.ndim == 0:
        raise ValueError("baseline_trace must have an iteration axis")
    if np.any(np.isnan(v)):
        raise ValueError("baseline_trace contains NaN: the run diverged; lower the step size")
    iterations = _check_iterations(iterations, v.shape[-1])
    prev_min = v[..., :iterations].min(axis=-1)
    cur = v[..., iterations]
    if np.any(cur >= prev_min) or np.any(cur <= 0):
        raise ValueError(
            f"the baseline criterion at iteration {iterations} is not a new minimum (or is 0): "
            "choose an iteration where the run is still converging"
        )
    eps = np.sqrt(prev_min * cur)
    _guard_noise(eps, v, res, m, floor, "calibrate_eps", _precision(baseline_trace))
    return eps


def calibrate_near(loss: np.ndarray, iterations: int, *, floor: Any = None) -> np.ndarray:
    """Per-trial ε such that the baseline reaches ε for good (the κ of
    :func:`scarjax.rework.iterations_to`) at the first possible iteration ``>=
    iterations``. The thesis sets ε "so that an unperturbed trial converges in roughly N
    iterations"; with minibatch noise the loss need not drop below all later values at
    exactly ``N``, so we take the first ``k >= N`` where the suffix maximum
    ``S[k] = max(loss[k:])`` drops (``loss[k−1] > S[k]``) and ε = √(loss[k−1]·S[k]).
    ``loss``: ``[trials, steps + 1]`` (or ``[steps + 1]``).

    Like :func:`calibrate_eps`, refuses an ε whose headroom above the lowest loss is
    within 10× of the resolution of the loss (``eps · |loss|``, ``eps`` of the precision the
    run was made in, as in :func:`noise_floor`; ``floor``
    overrides it, ``0`` disables the check) and warns within 100×.
    """
    v, res = _values(loss, "loss", "loss")
    if v.ndim == 0:
        raise ValueError("loss must have an iteration axis")
    if np.any(~np.isfinite(v)):
        raise ValueError("the baseline loss is not finite (the run diverged): lower the step size")
    iterations = _check_iterations(iterations, v.shape[-1])
    suffix_max = np.maximum.accumulate(v[..., ::-1], axis=-1)[..., ::-1]
    drop = np.zeros_like(v, bool)
    drop[..., 1:] = v[..., :-1] > suffix_max[..., 1:]
    drop[..., :iterations] = False
    if not np.all(drop.any(-1)):
        raise ValueError(
            f"the baseline loss does not settle below a new level at or after iteration "
            f"{iterations}: choose a smaller converge_at or run longer"
        )
    k = np.argmax(drop, axis=-1)
    hi = np.take_along_axis(v, (k - 1)[..., None], -1)[..., 0]
    lo = np.take_along_axis(suffix_max, k[..., None], -1)[..., 0]
    if np.any(lo <= 0):
        raise ValueError("the baseline loss reaches 0; cannot calibrate a positive eps")
    eps = np.sqrt(hi * lo)
    _guard_noise(eps, v, res, "loss", floor, "calibrate_near", _precision(loss))
    return eps


# --------------------------------------------------------------------------------------
# Rework and its bound, measured consistently.


class ReworkCheck(NamedTuple):
    """Measured rework and the Thm 5.3.1 bound that applies to it (:func:`check_rework`).

    ``[...]`` below: the trace's leading trial axes, ``()`` for one run.

    Attributes:
      rework: ``[...]`` measured rework (Eq 5.4) in iterations; ``inf`` where the
        perturbed run never re-reaches ε within the trace, or diverged (NaN): censored.
      bound: ``[...]`` the bound it is checked against: ``thm_bound + baseline_slack``.
      held: ``[...]`` bool: ``rework <= bound + 1`` (the +1: hitting times are integers,
        ``κ(y) ≤ ⌊·⌋ + 1``). A censored trial counts as **not** held.
      n_censored: number of trials that never re-converged.
      start: ``[...]`` the iteration ``s`` of the first perturbation (``-1``: none; its
        bound is 0).
      eps: the ε used (scalar or per trial).
      c: the rate used.
      metric: the criterion rework was measured on (always ``'distance'``: Thm 5.3.1 is a
        statement about ``‖y − w*‖``).
      thm_bound: ``[...]`` Thm 5.3.1 restarted at ``y⁽ˢ⁾ = w⁽ˢ⁾``
        (:func:`scarjax.bounds.trace_rework_bound` with ``start='auto'``).
      baseline_slack: ``[...]`` ≥ 0: iterations by which the measured baseline reached ε
        sooner than the theorem's ``κ(w)`` from ``w⁽ˢ⁾``,
        ``s + log(d_s/ε)/log(1/c) − κ_measured(w)``, clipped at 0.
    """

    rework: np.ndarray
    bound: np.ndarray
    held: np.ndarray
    n_censored: int
    start: np.ndarray
    eps: np.ndarray
    c: float
    metric: str
    thm_bound: np.ndarray
    baseline_slack: np.ndarray

    @property
    def n_held(self) -> int:
        return int(np.sum(self.held))

    @property
    def n_trials(self) -> int:
        return int(np.size(self.held))

    def summary(self) -> str:
        """One line: ``held in H of N trials (K did not re-converge)``."""
        return (
            f"rework <= Thm 5.3.1 bound + 1 in {self.n_held} of {self.n_trials} trials "
            f"({self.n_censored} did not re-converge; c = {self.c:.6g}, metric = {self.metric})"
        )


def check_rework(
    trace: Any,
    baseline_trace: Any,
    c: float,
    *,
    eps: Any = None,
    converge_at: int | None = None,
    metric: str | None = None,
    floor: Any = None,
) -> ReworkCheck:
    """Measure rework (Eq 5.4) and the Thm 5.3.1 bound it must respect, consistently.

    Args:
      trace: the perturbed run(s): a :class:`~scarjax.Trace` with distances (an algorithm
        with an optimum), possibly with a leading trial axis.
      baseline_trace: the unperturbed run with the same key(s) — one run (shared by all
        trials) or one per trial — as a Trace or an array of distances.
      c: the linear rate (Eq 5.3/5.5), e.g. exact for a QP, or
        :func:`scarjax.bounds.estimate_c` (its conservative default) on the baseline.
      eps: ε of ε-optimality; or
      converge_at: calibrate ε so the baseline converges at this iteration
        (:func:`calibrate_eps`). Give exactly one.
      metric: ``None`` or ``'distance'`` (Thm 5.3.1 bounds rework in ``‖y − w*‖``; for a
        loss use :func:`rework_cost` with ``metric='loss'``).
      floor: the distance's noise floor (default :func:`noise_floor`, of the precision
        the run was made in; ``0`` disables the check that ε is not within 10× of it).

    The bound. Per trial, with ``s`` the first perturbed iteration, the theorem applied to
    the run restarted at ``y⁽ˢ⁾ = w⁽ˢ⁾`` (the two runs coincide until then; checked) gives
    ``κ(y) ≤ s + log((d_s + Δ_s)/ε)/log(1/c)`` (Eq B.8–B.9, Lemma B.2.1), and ``thm_bound =
    log(1 + Δ_s/d_s)/log(1/c)`` (Eq 5.6) is that minus the theorem's ``κ(w)``. Measured
    rework subtracts the *measured* ``κ(w)`` instead, which is smaller when the baseline
    beats its own guarantee from ``w⁽ˢ⁾`` (a fast transient still under way at ``s``); the
    difference is ``baseline_slack``, and ``bound = thm_bound + baseline_slack`` bounds the
    measured rework whenever Eq 5.3/5.5 hold with this ``c``. ``baseline_slack`` is 0 when
    the baseline contracts no faster than ``c`` from ``w⁽ˢ⁾`` — then ``bound`` is exactly
    the restarted Eq 5.6. A trial not ``held`` therefore means ``c`` is too small for the
    run (Eq 5.3/5.5 fail), or ε is at the noise floor. A trial that diverged (NaN
    distances or norms) is censored: rework and bound ``inf``, not held.

    Pairing. Before ``s`` the two runs must agree (same keys), up to the rounding
    difference between two compilations of the loop (XLA fuses the perturbed and the
    baseline program differently): with float32 arithmetic, within 1e-3 relative or below
    1e3 × float32's eps × ``d₀``; with reduced-precision matrix products (``Trace.matmul_eps``
    above float32's: TF32 on a GPU, bfloat16 on a TPU) also within one ``eps`` of the
    iterate's scale, ``eps · (‖w*‖ + d_k)`` (each run is within the unit roundoff of that
    scale of a common trajectory). ``trace`` and ``baseline_trace`` made with different
    matrix-product precisions are refused.

    Returns:
      a :class:`ReworkCheck`.
    """
    if not _is_trace(trace) or not hasattr(trace, "perturbation_norms"):
        raise TypeError(f"trace must be a scarjax Trace (it carries the perturbation norms), got {type(trace).__name__}")
    if metric not in (None, "distance"):
        if metric == "loss":
            raise ValueError(
                "metric='loss': Thm 5.3.1 bounds rework measured in ‖y − w*‖; measure loss "
                "rework with rework_cost(..., metric='loss') (it has no bound to check)"
            )
        raise ValueError(f"metric must be None or 'distance', got {metric!r}")
    if trace.distance is None:
        raise ValueError(
            "trace has no distances (the algorithm has no known optimum): Thm 5.3.1 needs "
            "‖y − w*‖; give the Algorithm an optimum, or measure loss rework with rework_cost"
        )
    m = "distance"
    c_arr = bounds._check_c(c)
    if c_arr.ndim:
        raise ValueError(f"c must be a scalar, got shape {c_arr.shape}")
    c = float(c_arr)
    dist, res = _values(trace, m, "trace")
    dist = np.where(np.isnan(dist), np.inf, dist)  # a diverged trial never re-converges
    base, _ = _values(baseline_trace, m, "baseline_trace")
    if base.shape[-1:] != dist.shape[-1:] or base.ndim not in (1, dist.ndim) or (base.ndim == dist.ndim and base.shape != dist.shape):
        raise ValueError(
            f"baseline_trace has shape {base.shape}; the trace's distances have shape "
            f"{dist.shape}: give one baseline run of the same length or one per trial"
        )
    if np.any(np.isnan(base)):
        raise ValueError("baseline_trace contains NaN: the run diverged")
    prec_t = _precision(trace)
    prec = _precision(baseline_trace) if _is_trace(baseline_trace) else prec_t
    if _is_trace(baseline_trace) and None not in (prec.matmul_eps, prec_t.matmul_eps) and prec.matmul_eps != prec_t.matmul_eps:
        raise ValueError(
            f"trace was run with {_format_name(prec_t.matmul_eps)} matrix products (eps {prec_t.matmul_eps:.3g}) "
            f"and baseline_trace with {_format_name(prec.matmul_eps)} (eps {prec.matmul_eps:.3g}): paired runs "
            f"need the same precision; {numerics.HIGHEST_ADVICE} for both"
        )
    if prec.optimum_norm is None and prec_t.optimum_norm is not None:
        prec = prec._replace(optimum_norm=prec_t.optimum_norm)
    if prec.matmul_eps is None:
        prec = prec._replace(matmul_eps=prec_t.matmul_eps)
    if (eps is None) == (converge_at is None):
        raise ValueError("give exactly one of eps and converge_at")
    if converge_at is not None:
        if isinstance(converge_at, bool) or not isinstance(converge_at, (int, np.integer)):
            raise TypeError(f"converge_at must be an int, got {converge_at!r}")
        if not 1 <= converge_at < base.shape[-1]:
            raise ValueError(f"converge_at must be in [1, {base.shape[-1] - 1}], got {converge_at}")
        eps_arr = calibrate_eps(base, int(converge_at), metric=m, floor=0.0)
    else:
        try:
            eps_arr = np.asarray(eps, np.float64)
        except (TypeError, ValueError) as e:
            raise TypeError(f"eps must be a number or an array of numbers, got {eps!r}") from e
        if np.any(~np.isfinite(eps_arr)) or np.any(eps_arr <= 0):
            raise ValueError(f"eps must be finite and > 0, got {eps!r}")
        if eps_arr.ndim and eps_arr.shape != dist.shape[:-1]:
            raise ValueError(f"eps must be a scalar or one per trial {dist.shape[:-1]}, got shape {eps_arr.shape}")
    _guard_noise(eps_arr, base, res, m, floor, "check_rework", prec)

    norms = bounds._trace_norms(trace)
    norms = np.where(np.isnan(norms), np.inf, norms)  # a diverged trial: infinite bound
    if np.any(norms < 0) or norms.shape != dist.shape:
        raise ValueError(f"trace: perturbation norms of shape {norms.shape} must be >= 0, one per iteration {dist.shape}")
    perturbed = (norms > 0).any(axis=-1)
    s = np.asarray(np.argmax(norms > 0, axis=-1))
    # The premise of the restart: y⁽ᵏ⁾ = w⁽ᵏ⁾ for k <= s (paired runs, same keys).
    idx = np.arange(dist.shape[-1])
    before = idx <= np.where(perturbed, s, -1)[..., None]
    b = np.broadcast_to(base, dist.shape)
    e_mm = prec.matmul_eps or 0.0
    with np.errstate(invalid="ignore"):
        top = np.maximum(np.abs(b), np.abs(dist))
        gap = np.abs(dist - b) / np.maximum(top, 1e-30)
        bad = before & (gap > 1e-3) & (top > 1e3 * res * np.abs(b[..., :1]))
        if e_mm > res:
            # Two compilations of a run with eps-rounded matrix products: each within the
            # unit roundoff (eps/2) of the iterate's scale ‖w*‖ + d_k of a common run.
            w_norm = 0.0 if prec.optimum_norm is None else np.asarray(prec.optimum_norm)[..., None]
            bad &= np.abs(dist - b) > e_mm * (w_norm + top)
    if np.any(bad):
        k = int(np.argwhere(bad)[0][-1])
        note = (
            f" by more than the rounding of the {_format_name(e_mm)} matrix products they were made with"
            if e_mm > res else ""
        )
        raise ValueError(
            f"trace and baseline_trace differ at iteration {k}, before the first "
            f"perturbation{note}: they must be paired runs (the same key for trial and baseline)"
        )

    rework = rework_cost(dist, base, eps_arr, metric=m)
    thm = np.asarray(bounds._trace_bound(norms, dist, None, c, T=None, start="auto", expectation=False), np.float64)
    kappa_w = np.broadcast_to(iterations_to(base, eps_arr), rework.shape)
    d_s = np.take_along_axis(dist, s[..., None], axis=-1)[..., 0]
    log_inv_c = math.log(1.0 / c)
    e_b = np.broadcast_to(eps_arr, rework.shape)
    with np.errstate(divide="ignore"):
        guaranteed_w = s + np.log(d_s / e_b) / log_inv_c
    slack = np.where(perturbed, np.maximum(guaranteed_w - kappa_w, 0.0), 0.0)
    bound = thm + slack
    held = np.isfinite(rework) & (rework <= bound + 1.0)
    return ReworkCheck(
        rework=rework,
        bound=bound,
        held=held,
        n_censored=int(np.sum(~np.isfinite(rework))),
        start=np.where(perturbed, s, -1),
        eps=eps_arr,
        c=c,
        metric=m,
        thm_bound=thm,
        baseline_slack=slack,
    )
